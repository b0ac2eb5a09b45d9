"""DLPack's C exchange API (python/src/fmpy_dlpack.c): arrays of a library that publishes
__dlpack_c_exchange_api__ are read, allocated and asked for their stream through that
C table, with the same results and errors as the Python path. On the CPU through
fakexapi (the table written with ctypes over NumPy memory); on a GPU the PyTorch tests in
test_gpu.py run through the same code (torch >= 2.10 has the table)."""
import numpy as np
import pytest

import fakelib
import fakexapi
import fusemath
from fusemath import _fusemath as _C


@pytest.fixture(scope="module")
def xlib():
    return fakexapi.install()


@pytest.fixture(autouse=True)
def reset_stats():
    for k in fakexapi.STATS:
        fakexapi.STATS[k] = 0
    fakexapi.CONFIG.update(limit=None, transposed_alloc=False, fail=None)
    fakelib.LIMIT[0] = None
    yield
    fakelib.LIMIT[0] = None


X = fakexapi.tensor


def test_the_table_is_found_only_where_published(xlib):
    assert _C.lib_uses_dlpack_c_api(xlib.index)
    assert not _C.lib_uses_dlpack_c_api(fakelib.install().index)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_stateless_matmul_reads_and_allocates_through_the_table(xlib, rng, dtype):
    a = rng.standard_normal((37, 19)).astype(dtype)
    b = rng.standard_normal((19, 23)).astype(dtype)
    bias = rng.standard_normal(23).astype(dtype)
    ta, tb, tbias = X(a), X(b), X(bias)
    d = fusemath.matmul(ta, tb, bias=tbias, epilogue="relu")
    assert isinstance(d, fakexapi.XTensor)
    ref = np.maximum(a.astype(np.float64) @ b + bias, 0)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(d.numpy(), ref, rtol=tol, atol=tol * np.abs(ref).max())
    assert fakexapi.STATS["read"] == 3 and fakexapi.STATS["alloc"] == 1 and fakexapi.STATS["to_py"] == 1
    assert ta.calls == tb.calls == tbias.calls == 0, "the Python attribute path was not used"


def test_strided_views_and_byte_offsets(xlib, rng):
    """Transposed (strides given) and sliced (another base) operands; every DLTensor the
    fake reports carries byte_offset 64 from a base 64 bytes lower."""
    base = rng.standard_normal((30, 40))
    a = base[3:20:2, 5:36:3]  # 9 x 11, strided
    b = rng.standard_normal((25, 11)).T  # 11 x 25, transposed
    d = fusemath.matmul(X(a), X(b))
    np.testing.assert_allclose(d.numpy(), a @ b, rtol=1e-12, atol=1e-12)
    assert fakexapi.STATS["read"] == 2


def test_out_and_aux_outputs(xlib, rng):
    a = rng.standard_normal((16, 8))
    b = rng.standard_normal((8, 12))
    bias = rng.standard_normal(12)
    d, aux = fusemath.matmul(X(a), X(b), bias=X(bias), epilogue="RELU_AUX_BIAS")
    pre = a @ b + bias
    np.testing.assert_allclose(d.numpy(), np.maximum(pre, 0), rtol=1e-12, atol=1e-12)
    assert isinstance(aux["relu_aux"], fakexapi.XTensor)
    bits = np.unpackbits(aux["relu_aux"].numpy(), axis=1, bitorder="little")[:, :12]
    np.testing.assert_array_equal(bits, (pre > 0).astype(np.uint8))
    assert fakexapi.STATS["alloc"] == 2
    out = X(np.empty((16, 12)))
    r = fusemath.matmul(X(a), X(b), out=out)
    assert r is out
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-12, atol=1e-12)


def test_complex_takes_the_python_path_and_its_checks(xlib, rng):
    """DLPack does not carry PyTorch's lazy conj/neg bits: complex operands are read the
    slow way, which refuses a conjugate-bit view."""
    a = (rng.standard_normal((6, 5)) + 1j * rng.standard_normal((6, 5))).astype(np.complex128)
    b = (rng.standard_normal((5, 4)) + 1j * rng.standard_normal((5, 4))).astype(np.complex128)
    ta = X(a)
    d = fusemath.matmul(ta, X(b))
    np.testing.assert_allclose(d.numpy(), a @ b, rtol=1e-12, atol=1e-12)
    assert ta.calls > 0
    ta.conj_bit = True
    with pytest.raises(ValueError, match="conjugate bit"):
        fusemath.matmul(ta, X(b))


def test_unsupported_dtype_is_still_explained(xlib):
    t = fakexapi.XTensor(np.zeros((3, 3), np.int16))
    with pytest.raises(TypeError, match="dtype"):
        fusemath.matmul(t, t)


def test_allocator_out_of_memory(xlib, rng):
    """A failed table allocation is retried through the library's Python allocation, whose
    own out-of-memory error becomes fusemath.OutOfMemoryError (the table cannot tell: PyTorch
    reports every allocator failure as kind "MemoryError")."""
    a = rng.standard_normal((64, 8))
    fakexapi.CONFIG["limit"] = 1000
    fakelib.LIMIT[0] = 1000
    with pytest.raises(fusemath.OutOfMemoryError, match="cannot allocate d of shape \\(64, 64\\)") as info:
        fusemath.matmul(X(a), X(a.T.copy()))
    assert isinstance(info.value, MemoryError) and "fake: tried to allocate 4096 elements" in str(info.value)
    assert fakexapi.STATS["alloc_failed"] == 1
    fakexapi.CONFIG["limit"] = None
    fakelib.LIMIT[0] = None
    d = fusemath.matmul(X(a), X(a.T.copy()))  # and the library is usable afterwards
    np.testing.assert_allclose(d.numpy(), a @ a.T, rtol=1e-12, atol=1e-12)
    assert fakexapi.STATS["alloc"] == 1


def test_allocator_failure_that_is_not_out_of_memory(xlib, rng):
    """PyTorch's allocator calls SetError(ctx, "MemoryError", e.what()) for any exception: a
    failure of the table is not taken for an out-of-memory error; the Python allocation decides."""
    fakexapi.CONFIG["fail"] = ("MemoryError", "CUDA error: an illegal memory access was encountered")
    a = rng.standard_normal((6, 4))
    d = fusemath.matmul(X(a), X(a.T.copy()))
    np.testing.assert_allclose(d.numpy(), a @ a.T, rtol=1e-12, atol=1e-12)
    assert isinstance(d, fakexapi.XTensor) and fakexapi.STATS["alloc_failed"] == 1


def test_current_stream_through_the_table(xlib):
    assert _C.current_stream(xlib.index, 3) == fakexapi.STREAM_BASE + 3
    assert fakexapi.STATS["stream"] == 1
    assert _C.current_stream(xlib.index, -1) == 0  # host: not asked


def test_zero_d_and_zero_size(xlib, rng):
    a, b = rng.standard_normal(5), rng.standard_normal(5)
    d = fusemath.matmul(X(a), X(b))  # 0-d result
    assert isinstance(d, fakexapi.XTensor) and d.numpy().shape == ()
    np.testing.assert_allclose(d.numpy(), a @ b, rtol=1e-12)
    z = fusemath.matmul(X(np.zeros((0, 5))), X(np.ones((5, 3))))
    assert z.numpy().shape == (0, 3)
    assert fakexapi.STATS["read"] == 4 and fakexapi.STATS["alloc"] == 2 and fakexapi.STATS["to_py"] == 2


def test_a_read_the_table_refuses_takes_the_python_path(xlib, rng):
    """dltensor_from_py_object_no_sync failing (-1, Python error set): the error is cleared and
    the Python path reads the tensor."""
    def refuse(obj, out):
        fakexapi.STATS["read"] += 1
        return -1

    fn = fakexapi.DLTENSOR_FROM_PY(refuse)
    fakexapi._API.dltensor_from_py_object_no_sync = fn
    try:
        a = rng.standard_normal((4, 3))
        ta = X(a)
        d = fusemath.matmul(ta, X(a.T.copy()))
        np.testing.assert_allclose(d.numpy(), a @ a.T, rtol=1e-12, atol=1e-12)
        assert fakexapi.STATS["read"] == 2 and ta.calls > 0
    finally:
        fakexapi._API.dltensor_from_py_object_no_sync = fakexapi.READ
        del fn


def test_a_layout_not_asked_for_is_given_back(xlib, rng):
    """An allocator that hands out a column-major array: the tensor is released through its
    deleter and the result comes from the library's Python allocation instead."""
    fakexapi.CONFIG["transposed_alloc"] = True
    a = rng.standard_normal((7, 5))
    b = rng.standard_normal((5, 9))
    d = fusemath.matmul(X(a), X(b))
    np.testing.assert_allclose(d.numpy(), a @ b, rtol=1e-12, atol=1e-12)
    assert d.numpy().flags.c_contiguous
    assert fakexapi.STATS["alloc"] == 1 and fakexapi.STATS["freed"] == 1 and fakexapi.STATS["to_py"] == 0


def test_planned_matmul_and_fft(xlib, rng):
    a = rng.standard_normal((12, 7)).astype(np.float32)
    b = rng.standard_normal((7, 10)).astype(np.float32)
    mm = fusemath.Matmul(X(a), X(b))
    mm.plan("relu")
    before = fakexapi.STATS["alloc"]
    for _ in range(3):
        d = mm.execute()
        assert isinstance(d, fakexapi.XTensor)
        np.testing.assert_allclose(d.numpy(), np.maximum(a.astype(np.float64) @ b, 0), rtol=1e-5, atol=1e-5)
    assert fakexapi.STATS["alloc"] - before == 3, "each execute() allocates through the table"
    before = fakexapi.STATS["alloc"]
    x = rng.standard_normal((4, 32))
    y = fusemath.fft.rfft(X(x))
    assert isinstance(y, fakexapi.XTensor)
    assert fakexapi.STATS["alloc"] - before == 1, "the complex FFT output comes from the table"
    np.testing.assert_allclose(y.numpy(), np.fft.rfft(x), rtol=1e-12, atol=1e-12)


def test_negative_bit_of_a_real_tensor_is_refused(xlib):
    """DLPack does not carry PyTorch's negative bit (z.conj().imag has it): the table's
    reading of such a tensor would be the un-negated memory, so the bit is asked for."""
    r = X(np.ones((3, 3)))
    r.neg_bit = True
    with pytest.raises(ValueError, match="negative bit"):
        fusemath.matmul(r, X(np.ones((3, 3))))


def test_subclasses_that_override_the_protocol_take_the_attribute_path(xlib, rng):
    """A subclass with its own __torch_function__ may give data_ptr()/stride() another
    meaning: it is read through them, not through the table; a plain subclass uses the table."""

    class Plain(fakexapi.XTensor):
        pass

    class Overriding(fakexapi.XTensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return NotImplemented

    a = rng.standard_normal((5, 4))
    b = rng.standard_normal((4, 3))
    for cls, via_table in ((Plain, True), (Overriding, False)):
        for k in fakexapi.STATS:
            fakexapi.STATS[k] = 0
        ta = cls(a)
        d = fusemath.matmul(ta, X(b))
        np.testing.assert_allclose(d.numpy(), a @ b, rtol=1e-12, atol=1e-12)
        assert (ta.calls == 0) == via_table, cls


@pytest.mark.parametrize("which", ["xapi", "python"])
def test_planned_out_changed_in_place_is_validated_again(xlib, rng, which):
    """Matmul.execute(out=) remembers an out it validated. torch can change a tensor's shape
    and strides in place at the same address (out.t_(), resize_(), as_strided_()): such an out
    must be refused as a fresh one would be, not written as if it were the planned layout
    (before: the cached path compared the address only and wrote (a @ b) into a transposed
    out). The exchange table's read (xapi) and the attribute path (python) alike."""
    mod = fakexapi if which == "xapi" else fakelib
    if which == "python":
        fakelib.install()
    a = rng.standard_normal((4, 4)).astype(np.float32)
    b = rng.standard_normal((4, 4)).astype(np.float32)
    ref = a.astype(np.float64) @ b
    with fusemath.Matmul(mod.tensor(a), mod.tensor(b)) as m:
        m.plan()
        out = mod.tensor(np.zeros((4, 4), np.float32))
        m.execute(out=out)
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-5)
        out._a = out._a.T  # what out.t_() does: same address, strides (1, 4)
        with pytest.raises(fusemath.InvalidArgumentError, match="C-contiguous"):
            m.execute(out=out)
        out._a = out._a.T.reshape(-1)[:4].reshape(2, 2)  # out.resize_(2, 2): same address, smaller
        with pytest.raises(fusemath.ShapeError, match=r"out has shape \(2, 2\), expected \(4, 4\)"):
            m.execute(out=out)
        out._a = np.zeros((4, 4), np.float32)  # re-pointed to new memory of the planned layout: fine
        m.execute(out=out)
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-5)
