"""The paths fusemath takes for array-library objects (PyTorch / CuPy / GPU arrays), on the
CPU: through a torch-like library backed by NumPy memory (fakelib), the one-call stateless
path (_fusemath.array_matmul) against the NumPy path, the Runner with out= and streams,
__cuda_array_interface__ parsing, allocation failures mapped to MemoryError, and
reference counting."""
import gc
import sys

import numpy as np
import pytest

import fakelib
import fusemath
from mmref import call_matmul, chain_reference, assert_within, make, unpack_relu_mask

C = fusemath._fusemath
NUMPY = fusemath._arrays.NUMPY


@pytest.fixture(scope="module")
def lib():
    return fakelib.install()


T = fakelib.tensor
N = fakelib.numpy


# ---------------------------------------------------------------------------
# Reading tensors
# ---------------------------------------------------------------------------
def test_tensor_info_of_torch_like_tensors(lib):
    base = np.arange(60, dtype=np.float32).reshape(6, 10)
    for view in (base, base.T, base[1::2, ::-3], base[::-1]):
        t = T(view)
        addr, device, name, shape, strides = C.tensor_info(t)
        assert addr == view.__array_interface__["data"][0]
        assert device == (1, 0) and name == "f32" and shape == view.shape
        assert strides == tuple(s // 4 for s in view.strides)
        assert C.data_ptr(t) == addr
    with pytest.raises(TypeError, match="unsupported dtype faketorch.int16"):
        C.tensor_info(T(np.zeros(3, np.int16)))
    z = T(np.zeros((2, 2), np.complex64))
    z.conj_bit = True
    with pytest.raises(ValueError, match="resolve_conj"):
        C.tensor_info(z)
    # torch's z.conj().imag: a real tensor with the negative bit, whose memory is -value
    r = T(np.ones((2, 2), np.float32))
    r.neg_bit = True
    with pytest.raises(ValueError, match="resolve_neg"):
        C.tensor_info(r)
    with pytest.raises(ValueError, match="resolve_neg"):
        fusemath.matmul(r, T(np.ones((2, 2), np.float32)))
    bf = fakelib.Tensor(np.zeros((2, 3), np.uint16), fakelib.bfloat16)
    assert C.tensor_info(bf)[2] == "bf16"


def test_cuda_array_interface_objects_are_read(rng):
    host = make(rng, (5, 4), np.float64)

    class CAI:  # a host buffer described as a CUDA array: the library resolves the device
        def __init__(self, x, readonly=False):
            self._x = x
            self.__cuda_array_interface__ = {
                "shape": x.shape, "typestr": x.dtype.str, "data": (x.__array_interface__["data"][0], readonly),
                "strides": None if x.flags.c_contiguous else x.strides, "version": 3,
            }

    info = C.tensor_info(CAI(host.T))
    assert info[0] == host.ctypes.data and info[1] == (0, 0) and info[2:] == ("f64", (4, 5), (1, 4))
    with pytest.raises(ValueError, match="read-only"):
        C.tensor_info(CAI(host, readonly=True), True)
    b = make(rng, (4, 3), np.float64)
    d = np.empty((5, 3))
    call_matmul(CAI(host), b, d=d)  # no GPU here: the pointer classifies as host memory
    np.testing.assert_allclose(d, host @ b, rtol=1e-12)
    bad = CAI(host)
    bad.__cuda_array_interface__ = dict(bad.__cuda_array_interface__, typestr="<i3")
    with pytest.raises(TypeError, match="typestr '<i3'"):
        C.tensor_info(bad)


def test_cuda_array_interface_entries_dropped_while_read_are_still_the_ones_read():
    """Reading a shape entry runs the caller's __index__; if that drops 'strides' from the
    dict, the extension must still read the strides it was given (it holds the entries),
    not freed memory (before: strides (1000, 2000) came from a tuple reusing the freed one)."""
    buf = np.zeros(64, np.float32)
    reused = []

    class Dim:
        def __init__(self, n, owner):
            self.n, self.owner = n, owner

        def __index__(self):
            d = self.owner.__cuda_array_interface__
            if "strides" in d:
                del d["strides"]
                reused.append(tuple([4 * 1000, 4 * 2000]))
            return self.n

    class CAI:
        pass

    o = CAI()
    o.__cuda_array_interface__ = {"shape": (4, Dim(4, o)), "typestr": "<f4", "data": (buf.ctypes.data, False),
                                  "strides": tuple([16, 4]), "version": 3}
    assert C.tensor_info(o)[2:] == ("f32", (4, 4), (4, 1))
    assert reused, "the __index__ hook did not run: the test tests nothing"


# ---------------------------------------------------------------------------
# Stateless matmul on library tensors
# ---------------------------------------------------------------------------
CHAINS = [
    ("identity", {}), ("relu", {}), ("bias+gelu", {"bias": True}), ("RELU_AUX_BIAS", {"bias": True}),
    ("GELU_AUX", {}), ("sigmoid_aux", {}), ("silu", {}), ("clamp_aux", {"clamp": (-0.5, 0.5)}),
    ("scale+bias+tanh", {"bias": True, "scale": True}), ("BGRADA", {}), ("BGRADB", {}),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("chain,extra", CHAINS)
@pytest.mark.parametrize("shapes", [((2, 9, 5), (5, 20)), ((5,), (3, 5, 20)), ((9, 5), (5,))])
def test_stateless_tensors_match_numpy_path(lib, rng, dtype, chain, extra, shapes):
    sa, sb = shapes
    n = 1 if len(sb) == 1 else sb[-1]
    a = make(rng, sa, dtype)
    b = make(rng, sb, dtype, "F" if len(sb) == 2 else "C")
    kwargs = {"epilogue": chain}
    if extra.get("bias"):
        kwargs["bias"] = make(rng, (n,), dtype)
    if extra.get("scale"):
        kwargs["epilog_inputs"] = {"scale": make(rng, (n,), np.float64 if dtype == np.float64 else np.float32)}
    if "clamp" in extra:
        kwargs["clamp"] = extra["clamp"]
    want = fusemath.matmul(a, b, alpha=0.75, **kwargs)
    tkw = dict(kwargs)
    if "bias" in tkw:
        tkw["bias"] = T(tkw["bias"])
    if "epilog_inputs" in tkw:
        tkw["epilog_inputs"] = {k: T(v) for k, v in tkw["epilog_inputs"].items()}
    got = fusemath.matmul(T(a), T(b), alpha=0.75, **tkw)
    if isinstance(want, tuple):
        (dw, xw), (dg, xg) = want, got
        assert list(xw) == list(xg)
        key = next(iter(xw))
        assert isinstance(xg[key], fakelib.Tensor)
        np.testing.assert_array_equal(N(xg[key]), xw[key])
    else:
        dw, dg = want, got
    assert isinstance(dg, fakelib.Tensor), "a library's tensors give that library's results"
    assert dg.dtype is (fakelib.float32 if dtype == np.float32 else fakelib.float64)
    np.testing.assert_array_equal(N(dg), np.asarray(dw))


def test_stateless_backward_chains_and_c(lib, rng):
    m, k, n = 11, 6, 40
    x, w = make(rng, (2, m, k), np.float32), make(rng, (k, n), np.float32)
    h, aux = fusemath.matmul(T(x), T(w), epilogue="relu_aux")
    mask = aux["relu_aux"]
    assert isinstance(mask, fakelib.Tensor) and mask.dtype is fakelib.uint8 and mask.shape == (2, m, 16)
    g, w2t, c = make(rng, (2, m, 5), np.float32), make(rng, (5, n), np.float32), make(rng, (n,), np.float32)
    d, extra = fusemath.matmul(T(g), T(w2t), T(c), beta=2.0, epilog="DRELU_BGRAD", epilog_inputs={"relu_aux": mask})
    ref = chain_reference(g, w2t, c, beta=2.0, drelu_mask=unpack_relu_mask(N(mask), n), bgrad="bgrad")
    assert_within(N(d), ref["d"], ref["d_err"], np.float32, 5)
    assert_within(N(extra["drelu_bgrad"]), ref["bgrad"], ref["bgrad_err"], np.float32, 5 + m)
    # a mixed call: host NumPy operands next to host library tensors are one device
    d2 = fusemath.matmul(T(g), w2t, c, beta=2.0, epilog="DRELU", epilog_inputs={"relu_aux": N(mask)})
    assert isinstance(d2, fakelib.Tensor)
    np.testing.assert_array_equal(N(d2), N(d))
    with pytest.raises(ValueError, match="relu_aux has shape"):
        fusemath.matmul(T(g), T(w2t), epilog="DRELU", epilog_inputs={"relu_aux": mask[0]})
    with pytest.raises(ValueError, match="relu_aux"):
        fusemath.matmul(T(g), T(w2t), epilog="DRELU")


def test_stateless_out_and_errors(lib, rng):
    a, b = make(rng, (6, 4), np.float64), make(rng, (4, 3), np.float64)
    out = T(np.zeros((6, 3)))
    assert fusemath.matmul(T(a), T(b), out=out) is out
    np.testing.assert_allclose(N(out), a @ b, rtol=1e-12)
    with pytest.raises(fusemath.ShapeError, match=r"out has shape \(3, 6\), expected \(6, 3\)"):
        fusemath.matmul(T(a), T(b), out=T(np.zeros((3, 6))))
    with pytest.raises(fusemath.DtypeError, match="out has dtype f32"):  # TypeError, as in NumPy
        fusemath.matmul(T(a), T(b), out=T(np.zeros((6, 3), np.float32)))
    with pytest.raises(fusemath.AliasError, match="overlaps"):
        sq = T(np.ones((4, 4)))
        fusemath.matmul(sq, T(np.eye(4)), out=sq)
    with pytest.raises(fusemath.ShapeError, match="K = 4"):
        fusemath.matmul(T(a), T(a))
    with pytest.raises(TypeError, match="dtype mismatch|dtype"):
        fusemath.matmul(T(a), T(b.astype(np.float32)))
    with pytest.raises(fusemath.ShapeError, match="0-d"):
        fusemath.matmul(T(np.float64(1.0)), T(b))
    with pytest.raises(fusemath.ShapeError, match="c has shape"):
        fusemath.matmul(T(a), T(b), T(np.ones((2, 6, 3))))
    with pytest.raises(ValueError, match="beta"):
        fusemath.matmul(T(a), T(b), beta=2.0)
    with pytest.raises(TypeError, match="stream"):
        fusemath.matmul(T(a), T(b), stream="s")
    # streams are accepted in every spelling (host work ignores them)
    for s in (0, 7, types_stream(ptr=5), types_stream(cuda_stream=6), ProtoStream(9)):
        np.testing.assert_allclose(N(fusemath.matmul(T(a), T(b), stream=s)), a @ b, rtol=1e-12)


def types_stream(**attrs):
    import types

    return types.SimpleNamespace(**attrs)


class ProtoStream:
    def __init__(self, handle):
        self.handle_ = handle

    def __cuda_stream__(self):
        return (0, self.handle_)


def test_allocation_failure_is_a_memory_error(lib, rng):
    a, b = make(rng, (64, 8), np.float32), make(rng, (8, 64), np.float32)
    fakelib.LIMIT[0] = 1000
    try:
        with pytest.raises(MemoryError) as info:
            fusemath.matmul(T(a), T(b))
        assert isinstance(info.value, fusemath.OutOfMemoryError)
        assert "cannot allocate d of shape (64, 64)" in str(info.value) and "fake" in str(info.value)
        with pytest.raises(fusemath.OutOfMemoryError):
            fusemath.Matmul(T(a), T(b)).plan()
        mm = fusemath.Matmul(T(a[:10]), T(b[:, :10]))  # fits
        mm.plan("relu")
        fakelib.LIMIT[0] = 10
        with pytest.raises(fusemath.OutOfMemoryError, match="cannot allocate d"):
            mm.execute()
    finally:
        fakelib.LIMIT[0] = None
    np.testing.assert_allclose(N(fusemath.matmul(T(a), T(b))), a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(N(mm.execute()), np.maximum(a[:10] @ b[:, :10], 0), rtol=1e-5, atol=1e-5)


def test_array_matmul_with_numpy_results_matches_python_path(rng):
    """_fusemath.call (the one C front of every array library) with NumPy results against fusemath.matmul."""
    a, b = make(rng, (3, 1, 7, 5), np.float64), make(rng, (2, 5, 9), np.float64, "T")
    c, bias = make(rng, (7, 9), np.float64), make(rng, (2, 9), np.float64)

    def call(a, b, c=None, bias=None, scale=None, aux=None, out=None, alpha=1.0, beta=0.0, epi=0, clamp=None):
        return C.call(C.OP_MATMUL, C.CALL_RUN, NUMPY.index, (a, b, c, bias, out, aux, None, scale, None, None),
                      (alpha, beta, epi, 0, 0, 0, 0, 0, 0, clamp, None, 0, 0))

    epi = C.epilogue_parse("bias+gelu+aux")
    d, aux = call(a, b, c, bias, alpha=0.5, beta=2.0, epi=epi)
    d2, aux2 = fusemath.matmul(a, b, c, alpha=0.5, beta=2.0, bias=bias, epilogue="GELU_AUX_BIAS")
    np.testing.assert_array_equal(d, d2)
    np.testing.assert_array_equal(aux["gelu_aux"], aux2["gelu_aux"])
    # 1-D promotion, c broadcast to the result, out=
    v = make(rng, (5,), np.float64)
    out = np.empty((2, 9))
    assert call(v, b, c[0], out=out, beta=1.0) is out
    np.testing.assert_array_equal(out, fusemath.matmul(v, b, c[0]))
    np.testing.assert_array_equal(call(a, v), fusemath.matmul(a, v))
    s = call(v, v)
    assert s.shape == () and s == fusemath.matmul(v, v)  # a NumPy scalar, as numpy.matmul gives
    with pytest.raises(ValueError, match="index of a registered"):
        C.call(C.OP_MATMUL, C.CALL_RUN, 99, (a, b) + (None,) * 8, (1.0, 0.0) + (0,) * 7 + (None, None, 0, 0))
    with pytest.raises(TypeError, match="5 to 8 arguments"):
        C.call(C.OP_MATMUL, C.CALL_RUN, NUMPY.index)


# ---------------------------------------------------------------------------
# The planner on library tensors
# ---------------------------------------------------------------------------
def test_planner_on_tensors(lib, rng):
    a, b = make(rng, (2, 16, 8), np.float32), make(rng, (8, 24), np.float32)
    bias = make(rng, (24,), np.float32)
    ta, tb, tbias = T(a), T(b), T(bias)
    mm = fusemath.Matmul(ta, tb)
    assert mm.dtype is fakelib.float32
    mm.plan(epilog="RELU_AUX_BIAS", epilog_inputs={"bias": tbias})
    d, aux = mm.execute()
    assert isinstance(d, fakelib.Tensor) and isinstance(aux["relu_aux"], fakelib.Tensor)
    want, want_aux = fusemath.matmul(a, b, bias=bias, epilogue="RELU_AUX_BIAS")
    np.testing.assert_array_equal(N(d), want)
    np.testing.assert_array_equal(N(aux["relu_aux"]), want_aux["relu_aux"])
    # out=: no allocation for d, validated once per object
    out = T(np.empty((2, 16, 24), np.float32))
    before = fakelib.ALLOCATIONS[0]
    for _ in range(3):
        d2, aux2 = mm.execute(out=out)
        assert d2 is out
    assert fakelib.ALLOCATIONS[0] - before == 3, "only the aux results are allocated"
    np.testing.assert_array_equal(N(out), want)
    mm.plan("relu", tbias)
    calls = out.calls
    for _ in range(5):
        assert mm.execute(out=out) is out
    assert out.calls - calls == 5, "one data_ptr() per call (validation itself reads it once)"
    with pytest.raises(ValueError, match="library"):
        mm.execute(out=np.empty((2, 16, 24), np.float32))
    with pytest.raises(fusemath.ShapeError, match="out has shape"):
        mm.execute(out=T(np.empty((16, 24), np.float32)))
    with pytest.raises(ValueError, match="C-contiguous"):
        mm.execute(out=fakelib.Tensor(np.empty((2, 24, 16), np.float32).transpose(0, 2, 1)))
    # streams: cached per object, every spelling
    s = types_stream(cuda_stream=0)
    for _ in range(2):
        np.testing.assert_array_equal(N(mm.execute(stream=s)), np.maximum(want, 0))
    # reset_operands keeps library, device and layout
    a2 = make(rng, (2, 16, 8), np.float32)
    mm.reset_operands(a=T(a2))
    np.testing.assert_allclose(N(mm.execute()), np.maximum(a2 @ b + bias, 0), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="strides"):
        mm.reset_operands(a=fakelib.Tensor(np.asfortranarray(a2)))
    with pytest.raises(fusemath.DeviceError, match="plan was made for a Tensor"):
        mm.reset_operands(a=a2)
    mm.autotune(iterations=1)
    np.testing.assert_allclose(N(mm.execute()), np.maximum(a2 @ b + bias, 0), rtol=1e-5, atol=1e-5)
    mm.free()


def test_planner_on_tensors_one_d_and_backward(lib, rng):
    v = make(rng, (7,), np.float64)
    b = make(rng, (3, 7, 20), np.float64)
    mm = fusemath.Matmul(T(v), T(b))
    d, aux = mm.plan("relu_aux").execute()
    assert d.shape == (3, 20) and aux["relu_aux"].shape == (3, 16)
    g, w2t = make(rng, (5,), np.float64), make(rng, (3, 5, 20), np.float64)
    bw = fusemath.Matmul(T(g), T(w2t))
    bw.plan(epilog="DRELU_BGRAD", epilog_inputs={"relu_aux": aux["relu_aux"]})
    d, extra = bw.execute()
    want, want_extra = fusemath.matmul(g, w2t, epilog="DRELU_BGRAD", epilog_inputs={"relu_aux": N(aux["relu_aux"])})
    np.testing.assert_array_equal(N(d), want)
    np.testing.assert_array_equal(N(extra["drelu_bgrad"]), want_extra["drelu_bgrad"])
    # a 0-d result of a library stays a 0-d tensor
    s = fusemath.Matmul(T(v), T(v)).execute()
    assert isinstance(s, fakelib.Tensor) and s.shape == ()


# ---------------------------------------------------------------------------
# Reference counting
# ---------------------------------------------------------------------------
def test_no_reference_leaks_on_library_paths(lib, rng):
    a, b = T(make(rng, (8, 8), np.float32)), T(make(rng, (8, 8), np.float32))
    bias = T(make(rng, (8,), np.float32))
    out = T(np.empty((8, 8), np.float32))
    mm = fusemath.Matmul(a, b)
    mm.plan("bias+relu+aux", bias)
    s = types_stream(ptr=0)

    def calls():
        fusemath.matmul(a, b, bias=bias, epilogue="relu_aux", stream=s)
        fusemath.matmul(a, b, out=out)
        mm.execute(stream=s)
        mm.execute(out=out)
        for bad in (lambda: fusemath.matmul(a, a[0:3]), lambda: mm.execute(out=b[0:3])):
            try:  # (not pytest.raises: its bookkeeping keeps the last frame alive)
                bad()
            except fusemath.ShapeError:
                pass
            else:
                raise AssertionError("no ShapeError")

    calls()  # the runner caches the last stream object (and the last out='s identity)
    gc.collect()
    objs = (a, b, bias, out, s)
    before = [sys.getrefcount(x) for x in objs]
    for _ in range(100):
        calls()
    gc.collect()
    assert [sys.getrefcount(x) for x in objs] == before
    del mm
    gc.collect()
    after = [sys.getrefcount(x) for x in objs]
    assert all(x < y for x, y in zip(after[:3], before[:3])), "the Matmul's references to the operands go"
    assert after[3] == before[3], "the runner keeps no reference to an out= (it remembers its identity only)"
    assert after[4] == before[4] - 1, "the runner's stream cache is released"
