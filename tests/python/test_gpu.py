"""GPU tests: CuPy and PyTorch CUDA arrays (each skipped when not importable), NumPy with
execution="cuda". Every dtype x every chain valid for it against the float64 reference of
mmref.chain_reference, CPU/GPU parity, result types and devices, streams, the planner with
execute(out=), autotune, out-of-memory. Marked gpu: skipped (see conftest.py) when
fusemath.cuda_device_count() == 0. Sized to finish in well under two minutes on an H200.

Tolerances: float64 elementwise ~1e-12 relative to the error scale, float32 ~1e-5,
float32 with compute="tf32" 5e-3 and float16 / bfloat16 1e-2, the last two relative to
the norm of the reference; bias gradients elementwise against their error scale.
"""
import numpy as np
import pytest

import fusemath
import gpu_libs
from mmref import (
    assert_norm_close,
    assert_within,
    chain_reference,
    eps_of,
    gelu_grad_limits,
    unpack_relu_mask,
)

pytestmark = pytest.mark.gpu


# ---------------------------------------------------------------------------
# The array libraries, behind one small interface
# ---------------------------------------------------------------------------
class _CuPy(gpu_libs.CuPyLib):
    def dev(self, x, dtype=None):
        """Device copy of a host array (dtype: a NumPy dtype; "bf16" is not a CuPy dtype)."""
        x = np.asarray(x)
        return self.m.asarray(x if dtype is None else x.astype(dtype))

    def sum(self, x):
        return x.sum()


class _Torch(gpu_libs.TorchLib):
    def dev(self, x, dtype=None):
        t = self.m
        x = np.ascontiguousarray(x)
        if dtype == "bf16":
            return t.from_numpy(x.astype(np.float32)).to(device="cuda", dtype=t.bfloat16)
        if dtype is not None:
            x = x.astype(dtype)
        return t.from_numpy(x).to("cuda")

    def host(self, x):
        if x.dtype == self.m.bfloat16:
            x = x.float()
        return x.cpu().numpy()

    def empty(self, shape, dtype):
        t = self.m
        tdt = t.bfloat16 if dtype == "bf16" else getattr(t, np.dtype(dtype).name)
        return t.empty(shape, dtype=tdt, device="cuda")

    def is_array(self, x):
        return isinstance(x, self.m.Tensor)

    def sum(self, x):
        return x.sum()


def _get(name):
    return gpu_libs.get(_CuPy if name == "cupy" else _Torch)


@pytest.fixture(params=["cupy", "torch"])
def gpu(request):
    return _get(request.param)


# dtype key -> (storage dtype for the library, compute option, reference precision key)
DTYPES = {
    "f16": (np.float16, None),
    "bf16": ("bf16", None),
    "f32": (np.float32, None),
    "tf32": (np.float32, "tf32"),
    "f64": (np.float64, None),
    "c64": (np.complex64, None),
    "c128": (np.complex128, None),
}
LOW = ("f16", "bf16", "tf32")


def _eps_key(key):
    return {"f16": np.float16, "bf16": "bf16", "tf32": "tf32"}.get(key, DTYPES[key][0])


def _check(got, ref, err, key, k, what):
    if key in ("f16", "bf16"):
        assert_norm_close(got, ref, 1e-2, what)
    elif key == "tf32":
        assert_norm_close(got, ref, 5e-3, what)
    else:
        assert_within(got, ref, err, DTYPES[key][0], k, what)


def _check_bgrad(got, ref, err, key, k, what):
    eps_key = _eps_key(key)
    if key in LOW:  # elementwise against the error scale, with the precision of the data
        tol = 8.0 * (k + 4) * eps_of(eps_key) * np.asarray(err) + 1e-30
        bad = ~(np.abs(np.asarray(got, np.float64) - ref) <= tol)
        assert not bad.any(), f"{what}: {int(bad.sum())} elements off"
    else:
        assert_within(got, ref, err, eps_key, k, what)


def _scale_dtype(key):
    return np.float64 if key == "f64" else np.float32


def _options(key):
    return {"compute": "tf32"} if DTYPES[key][1] else None


# chain -> (activation, inputs it needs, key of the second result)
REAL_CHAINS = {
    "identity": (None, (), None),
    "bias": (None, ("bias",), None),
    "relu": ("relu", ("c",), None),
    "bias+gelu": ("gelu", ("bias",), None),
    "sigmoid": ("sigmoid", (), None),
    "bias+tanh": ("tanh", ("bias",), None),
    "silu": ("silu", (), None),
    "clamp": ("clamp", ("clamp",), None),
    "RELU_AUX_BIAS": ("relu", ("bias",), "relu_aux"),
    "GELU_AUX": ("gelu", ("c",), "gelu_aux"),
    "sigmoid_aux_bias": ("sigmoid", ("bias",), "sigmoid_aux"),
    "tanh_aux": ("tanh", (), "tanh_aux"),
    "silu_aux": ("silu", (), "silu_aux"),
    "clamp_aux": ("clamp", ("clamp",), "clamp_aux"),
    "scale": (None, ("scale",), None),
    "scale+bias+relu": ("relu", ("scale", "bias", "c"), None),
    "scale+gelu+aux": ("gelu", ("scale",), "gelu_aux"),
    "DRELU": (None, ("relu_aux", "c"), None),
    "DRELU_BGRAD": (None, ("relu_aux",), "drelu_bgrad"),
    "DGELU": (None, ("gelu_aux",), None),
    "DGELU_BGRAD": (None, ("gelu_aux",), "dgelu_bgrad"),
    "BGRADA": (None, (), "bgrada"),
    "BGRADB": (None, (), "bgradb"),
}
COMPLEX_CHAINS = ("identity", "bias", "BGRADA", "BGRADB")
CASES = [(key, chain) for key in DTYPES for chain in (COMPLEX_CHAINS if key.startswith("c") else REAL_CHAINS)]


def _rand(rng, shape, key):
    x = rng.standard_normal(shape)
    if key.startswith("c"):
        x = x + 1j * rng.standard_normal(shape)
    return x


def test_gpu_is_detected():
    # Marked gpu: runs only where a GPU is visible, and then the library must see it too.
    assert fusemath.cuda_device_count() >= 1
    assert any(b.device == "cuda" and b.available for b in fusemath.backends()), fusemath.backends()


# ---------------------------------------------------------------------------
# Every dtype x every chain
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("key,chain", CASES, ids=[f"{k}-{c}" for k, c in CASES])
def test_chain(gpu, rng, key, chain):
    if key == "bf16" and gpu.name != "torch":
        pytest.skip("bfloat16 arrays are PyTorch's")
    dt = DTYPES[key][0]
    act, needs, out_key = REAL_CHAINS[chain]
    batch, m, k, n = (2,), 48, 40, 136  # n > 128: relu mask rows of 32 bytes
    a_d = gpu.dev(_rand(rng, batch + (m, k), key), dt)
    b_d = gpu.swap(gpu.dev(_rand(rng, (n, k), key), dt))  # a transposed view
    A, B = gpu.host(a_d), gpu.host(b_d)  # the values the GPU sees (rounded)
    kwargs, refkw = {"alpha": 0.5}, {"alpha": 0.5}
    if "c" in needs:
        c_d = gpu.dev(_rand(rng, (m, n), key), dt)
        kwargs["beta"] = refkw["beta"] = -1.5
        ref_c = gpu.host(c_d)
    else:
        c_d = ref_c = None
    inputs = {}
    if "bias" in needs:
        bias_d = gpu.dev(_rand(rng, (n,), key), dt)
        inputs["bias"] = bias_d
        refkw["bias"] = gpu.host(bias_d)
    if "scale" in needs:
        scale_d = gpu.dev(rng.uniform(0.5, 2.0, n), _scale_dtype(key))
        inputs["scale"] = scale_d
        refkw["scale"] = gpu.host(scale_d)
    if "clamp" in needs:
        kwargs["clamp"] = refkw["clamp"] = (-0.5, 0.75)
    if "relu_aux" in needs or "gelu_aux" in needs:  # the forward pass, on the GPU too
        x_d = gpu.dev(_rand(rng, batch + (m, 9), key), dt)
        w_d = gpu.dev(_rand(rng, (9, n), key), dt)
        fwd = "relu_aux" if "relu_aux" in needs else "gelu_aux"
        _, aux = fusemath.matmul(x_d, w_d, epilogue=fwd, options=_options(key))
        inputs[fwd] = aux[fwd]
        if fwd == "relu_aux":
            refkw["drelu_mask"] = unpack_relu_mask(gpu.host(aux[fwd]), n)
        else:
            refkw["dgelu_x"] = gpu.host(aux[fwd])
    if out_key and "bgrad" in out_key.lower():
        refkw["bgrad"] = "bgrad" if out_key.endswith("_bgrad") else out_key
    result = fusemath.matmul(a_d, b_d, c_d, epilogue=chain, epilog_inputs=inputs or None,
                             options=_options(key), **kwargs)
    ref = chain_reference(A, B, ref_c, act=act, **refkw)
    if out_key:
        d, extra = result
        assert list(extra) == [out_key]
        x = extra[out_key]
        assert gpu.is_array(x) and gpu.device_of(x) == gpu.device_of(a_d)
        xh = gpu.host(x)
        if out_key == "relu_aux":
            pre = ref["pre"]
            sure = np.abs(pre) > 8 * (k + 4) * eps_of(_eps_key(key)) * ref["d_err"]
            np.testing.assert_array_equal(unpack_relu_mask(xh, n)[sure], (pre > 0)[sure])
        elif out_key.endswith("_aux"):
            _check(xh, ref["pre"], ref["d_err"], key, k, out_key)
        else:
            assert xh.shape == ref["bgrad"].shape
            _check_bgrad(xh, ref["bgrad"], ref["bgrad_err"], key, k + m, out_key)
    else:
        d = result
    assert gpu.is_array(d) and gpu.device_of(d) == gpu.device_of(a_d)
    assert d.dtype == a_d.dtype and tuple(d.shape) == batch + (m, n)
    _check(gpu.host(d), ref["d"], ref["d_err"], key, k, chain)


# ---------------------------------------------------------------------------
# CPU / GPU parity
# ---------------------------------------------------------------------------
PARITY = {
    "identity": {},
    "RELU_AUX_BIAS": {"act": "relu", "bias": True},
    "GELU_AUX": {"act": "gelu"},
    "silu": {"act": "silu"},
    "BGRADB": {"bgrad": "bgradb"},
    "DRELU_BGRAD": {"drelu": True, "bgrad": "bgrad"},
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
@pytest.mark.parametrize("chain", list(PARITY))
def test_cpu_gpu_parity(gpu, rng, dtype, chain):
    """The same call on NumPy data (CPU backend) and on GPU data: both within the dtype's
    tolerance of the reference, relu masks bit-identical wherever |pre-activation| is not tiny."""
    if np.dtype(dtype).kind == "c" and chain not in COMPLEX_CHAINS:
        pytest.skip("not a complex chain")
    key = {np.float32: "f32", np.float64: "f64", np.complex64: "c64"}[dtype]
    spec = PARITY[chain]
    m, k, n = 33, 20, 150
    a = _rand(rng, (3, m, k), key).astype(dtype)
    b = _rand(rng, (k, n), key).astype(dtype)
    kwargs, dkw, refkw = {}, {}, {"act": spec.get("act"), "bgrad": spec.get("bgrad")}
    if spec.get("bias"):
        bias = _rand(rng, (n,), key).astype(dtype)
        kwargs["bias"], dkw["bias"], refkw["bias"] = bias, gpu.dev(bias), bias
    if spec.get("drelu"):
        mask = fusemath.matmul(_rand(rng, (3, m, 5), key).astype(dtype), _rand(rng, (5, n), key).astype(dtype),
                               epilogue="relu_aux")[1]["relu_aux"]
        kwargs["epilog_inputs"], dkw["epilog_inputs"] = {"relu_aux": mask}, {"relu_aux": gpu.dev(mask)}
        refkw["drelu_mask"] = unpack_relu_mask(mask, n)
    host = fusemath.matmul(a, b, epilogue=chain, **kwargs)
    dev = fusemath.matmul(gpu.dev(a), gpu.dev(b), epilogue=chain, **dkw)
    ref = chain_reference(a, b, **refkw)
    if isinstance(host, tuple):
        (hd, hx), (dd, dx) = host, dev
        assert list(hx) == list(dx)
        name = next(iter(hx))
        hv, dv = hx[name], gpu.host(dx[name])
        if name == "relu_aux":
            sure = np.abs(ref["pre"]) > 8 * (k + 4) * eps_of(dtype) * ref["d_err"]
            np.testing.assert_array_equal(unpack_relu_mask(dv, n)[sure], unpack_relu_mask(hv, n)[sure])
            np.testing.assert_array_equal(unpack_relu_mask(hv, n)[sure], (ref["pre"] > 0)[sure])
        elif name.endswith("_aux"):
            for got in (hv, dv):
                assert_within(got, ref["pre"], ref["d_err"], dtype, k, name)
        else:
            for got in (hv, dv):
                assert_within(got, ref["bgrad"], ref["bgrad_err"], dtype, k + m, name)
    else:
        hd, dd = host, dev
    for got in (hd, gpu.host(dd)):
        assert_within(got, ref["d"], ref["d_err"], dtype, k, "d")


# ---------------------------------------------------------------------------
# Streams, asynchrony, execution="cuda" on NumPy data
# ---------------------------------------------------------------------------
def _big_pair(gpu, rng, n=6144):
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    want = float(np.dot(a.sum(axis=0, dtype=np.float64), b.sum(axis=1, dtype=np.float64)))
    scale = float(np.dot(np.abs(a).sum(axis=0, dtype=np.float64), np.abs(b).sum(axis=1, dtype=np.float64)))
    return a, b, want, scale


# CuPy 14 deprecates ExternalStream, which wraps a caller's stream for our allocations:
# that warning must not reach users
@pytest.mark.filterwarnings("error:ExternalStream:DeprecationWarning")
@pytest.mark.parametrize("how", ["object", "int", "current", "planned"])
def test_stream_ordering(gpu, rng, how):
    """A large product on a non-default stream, then a read on that stream, with no
    synchronization in between: the read must see the finished product."""
    a, b, want, scale = _big_pair(gpu, rng)
    s = gpu.new_stream()
    with gpu.on(s):
        a_d, b_d = gpu.dev(a), gpu.dev(b)
    before = gpu.current_handle()
    if how == "current":
        with gpu.on(s):
            d = fusemath.matmul(a_d, b_d)
            total = gpu.sum(d)
    else:
        if how == "planned":
            mm = fusemath.Matmul(a_d, b_d)
            mm.plan()
            d = mm.execute(stream=s)
            d = mm.execute(stream=s)  # the cached stream resolution
        else:
            d = fusemath.matmul(a_d, b_d, stream=s if how == "object" else gpu.handle(s))
        assert gpu.current_handle() == before, "fusemath restored the current stream"
        with gpu.on(s):
            total = gpu.sum(d)
    s.synchronize()
    assert abs(float(total) - want) <= 1e-4 * scale, (float(total), want)


def test_current_stream_is_the_default(gpu, rng):
    a = rng.standard_normal((256, 64), dtype=np.float32)
    b = rng.standard_normal((64, 128), dtype=np.float32)
    s = gpu.new_stream()
    with gpu.on(s):
        a_d, b_d = gpu.dev(a), gpu.dev(b)
        mm = fusemath.Matmul(a_d, b_d)
        mm.plan("relu")
        d1 = mm.execute()
        d2 = fusemath.matmul(a_d, b_d, epilogue="relu")
        out = gpu.empty((256, 128), np.float32)
        assert mm.execute(out=out) is out
    s.synchronize()
    ref = np.maximum(a.astype(np.float64) @ b, 0)
    for d in (d1, d2, out):
        np.testing.assert_allclose(gpu.host(d), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.complex128])
def test_execution_cuda_on_numpy(rng, dtype):
    if not any(b.device == "cuda" and b.available for b in fusemath.backends()):
        pytest.skip("no cuda matmul backend")
    key = {np.float16: "f16", np.float32: "f32", np.float64: "f64", np.complex128: "c128"}[dtype]
    a = _rand(rng, (3, 65, 33), key).astype(dtype)
    b = _rand(rng, (33, 47), key).astype(dtype)
    c = _rand(rng, (65, 47), key).astype(dtype)
    d = fusemath.matmul(a, b, c, alpha=0.5, beta=2.0, execution="cuda")
    assert isinstance(d, np.ndarray) and d.dtype == np.dtype(dtype)
    ref = chain_reference(a, b, c, alpha=0.5, beta=2.0)
    _check(d, ref["d"], ref["d_err"], key, 33, "d")
    if np.dtype(dtype).kind == "f":
        bias = _rand(rng, (47,), key).astype(dtype)
        d, aux = fusemath.matmul(a, b, bias=bias, epilogue="RELU_AUX_BIAS", execution="cuda")
        ref = chain_reference(a, b, bias=bias, act="relu")
        _check(d, ref["d"], ref["d_err"], key, 33, "d")
        with fusemath.Matmul(a, b, options={"execution": "cuda"}) as mm:
            mm.plan(epilogue="gelu", bias=bias)
            assert "cuda" in mm.describe()
            ref = chain_reference(a, b, bias=bias, act="gelu")
            for _ in range(2):
                _check(mm.execute(), ref["d"], ref["d_err"], key, 33, "planned")


def test_execution_cuda_large_transfers(rng):
    """Operands past 4 MiB take the pinned, chunked copy path (8 MiB chunks): several chunks,
    a partial last one, in and out, against the float64 reference; then again (buffers reused)."""
    if not any(b.device == "cuda" and b.available for b in fusemath.backends()):
        pytest.skip("no cuda matmul backend")
    a = rng.standard_normal((2500, 1100)).astype(np.float32)  # 11 MB
    b = rng.standard_normal((1100, 2100)).astype(np.float32)  # 9.2 MB
    bias = rng.standard_normal(2100).astype(np.float32)
    ref = chain_reference(a, b, bias=bias, act="relu")
    for _ in range(2):
        d = fusemath.matmul(a, b, bias=bias, epilogue="relu", execution="cuda")  # d: 21 MB back
        _check(d, ref["d"], ref["d_err"], "f32", 1100, "d")
    c = rng.standard_normal((2500, 2100)).astype(np.float32)
    out = c.copy()
    fusemath.matmul(a, b, out, beta=1.0, out=out, execution="cuda")  # in place: d = c goes in and out
    ref = chain_reference(a, b, c, beta=1.0)
    _check(out, ref["d"], ref["d_err"], "f32", 1100, "in place")


def test_mixed_devices(gpu, rng):
    a = rng.standard_normal((8, 4)).astype(np.float32)
    b = rng.standard_normal((4, 5)).astype(np.float32)
    with pytest.raises(fusemath.DeviceError, match="(?=.*a )(?=.*b )"):
        fusemath.matmul(gpu.dev(a), b)
    d = fusemath.matmul(gpu.dev(a), b, execution="cuda")  # the library moves b
    assert gpu.is_array(d)
    np.testing.assert_allclose(gpu.host(d), a @ b, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------
# Planner, out=, autotune
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["f16", "bf16", "f32", "f64"])
def test_planner_execute_out(gpu, rng, key):
    if key == "bf16" and gpu.name != "torch":
        pytest.skip("bfloat16 arrays are PyTorch's")
    dt = DTYPES[key][0]
    a_d = gpu.dev(rng.standard_normal((4, 64, 32)), dt)
    b_d = gpu.dev(rng.standard_normal((32, 96)), dt)
    bias_d = gpu.dev(rng.standard_normal(96), dt)
    A, B, bias = gpu.host(a_d), gpu.host(b_d), gpu.host(bias_d)
    ref = chain_reference(A, B, bias=bias, act="relu")
    with fusemath.Matmul(a_d, b_d) as mm:
        mm.plan(epilog="RELU_BIAS", epilog_inputs={"bias": bias_d})
        assert mm.backend == "cublaslt" and "cuda" in mm.describe()
        d1, d2 = mm.execute(), mm.execute()
        assert gpu.is_array(d1) and d1.dtype == a_d.dtype and d1 is not d2
        out = gpu.empty((4, 64, 96), dt)
        for _ in range(3):
            assert mm.execute(out=out) is out
        for d in (d1, d2, out):
            _check(gpu.host(d), ref["d"], ref["d_err"], key, 32, "planned")
        with pytest.raises(fusemath.ShapeError):
            mm.execute(out=gpu.empty((64, 96), dt))
        with pytest.raises(ValueError, match="library"):
            mm.execute(out=np.empty((4, 64, 96), np.float32))
        a2 = gpu.dev(rng.standard_normal((4, 64, 32)), dt)
        mm.reset_operands(a=a2)
        ref2 = chain_reference(gpu.host(a2), B, bias=bias, act="relu")
        _check(gpu.host(mm.execute(out=out)), ref2["d"], ref2["d_err"], key, 32, "after reset")


def test_planner_backward_on_gpu(gpu, rng):
    m, k, n = 96, 24, 200
    x, w = gpu.dev(rng.standard_normal((m, k)), np.float32), gpu.dev(rng.standard_normal((k, n)), np.float32)
    fwd = fusemath.Matmul(x, w)
    h, aux = fwd.plan("RELU_AUX").execute()
    g, w2t = gpu.dev(rng.standard_normal((m, 16)), np.float32), gpu.dev(rng.standard_normal((16, n)), np.float32)
    bw = fusemath.Matmul(g, w2t)
    bw.plan(epilog="DRELU_BGRAD", epilog_inputs={"relu_aux": aux["relu_aux"]})
    out = gpu.empty((m, n), np.float32)
    d, extra = bw.execute(out=out)
    assert d is out and gpu.is_array(extra["drelu_bgrad"])
    ref = chain_reference(gpu.host(g), gpu.host(w2t), drelu_mask=unpack_relu_mask(gpu.host(aux["relu_aux"]), n),
                          bgrad="bgrad")
    assert_within(gpu.host(out), ref["d"], ref["d_err"], np.float32, 16)
    assert_within(gpu.host(extra["drelu_bgrad"]), ref["bgrad"], ref["bgrad_err"], np.float32, 16 + m)


@pytest.mark.parametrize("path", ["kernel", "cublaslt"])
@pytest.mark.parametrize("dtype,xs", [(np.float32, [1e19, 2e19, -2e19, 3e38, 9.5, -9.5]),
                                      (np.float64, [1e154, 2e154, -2e154, 1e300, 9.5, -9.5])])
def test_dgelu_at_huge_activation_inputs_on_gpu(gpu, dtype, xs, path):
    """The GPU twin of test_epilogues.py's test: gelu'(x) is 1 for x >> 0 and 0 for x << 0;
    where x*x overflows the dtype the formula gives 0 * inf = NaN. NaN stays NaN.
    path "kernel": 9 columns, a gelu aux row stride cuBLASLt refuses (not a multiple of 8), so
    fusemath's own elementwise kernel runs after the product (f64 takes it at any layout).
    path "cublaslt": 8 columns, cuBLASLt's fused DGELU_BGRAD for f32. That kernel returns NaN
    for an f32 input of 3e38 (measured on the H200, cuBLASLt 13.0; inputs up to 2e19 are
    right), a limitation of cuBLASLt's kernel documented in docs/api.md, so the value is
    left out there."""
    xs = list(xs)
    if path == "kernel":  # 8 values + NaN: 9 columns; +-inf give the limits too
        xs += [np.inf, -np.inf]
    else:  # 7 values + NaN: 8 columns
        xs = [x for x in xs if not (dtype == np.float32 and x > 1e38)]
        xs += [0.3, 1.0][: 7 - len(xs)]
    xs = np.array(xs, np.float64)
    host_aux = np.array([np.append(xs, np.nan)] * 2)
    assert host_aux.shape[1] == (9 if path == "kernel" else 8)
    aux = gpu.dev(host_aux, dtype)
    a, b = gpu.dev(np.ones((2, 1)), dtype), gpu.dev(np.ones((1, host_aux.shape[1])), dtype)
    mm = fusemath.Matmul(a, b)
    mm.plan(epilog="dgelu+bgrad", epilog_inputs={"gelu_aux": aux})
    fused_in_cublaslt = "passes=1" in mm.describe()
    assert fused_in_cublaslt == (path == "cublaslt" and dtype == np.float32), mm.describe()
    d, extra = mm.execute()
    want = gelu_grad_limits(xs)
    tol = 1e-5 if dtype == np.float32 else 1e-13
    got, bgrad = gpu.host(d), gpu.host(extra["dgelu_bgrad"])
    for row in got:
        np.testing.assert_allclose(row[:-1], want, rtol=tol, atol=tol)
        assert np.isnan(row[-1])
    np.testing.assert_allclose(bgrad[:-1], 2 * want, rtol=tol, atol=tol)
    assert np.isnan(bgrad[-1])


@pytest.mark.parametrize("key", ["f32", "tf32", "f16"])
def test_autotune_on_gpu(gpu, rng, key):
    dt = DTYPES[key][0]
    a_d = gpu.dev(rng.standard_normal((256, 128)), dt)
    b_d = gpu.dev(rng.standard_normal((128, 192)), dt)
    bias_d = gpu.dev(rng.standard_normal(192), dt)
    mm = fusemath.Matmul(a_d, b_d, options=_options(key))
    mm.plan("bias+gelu", bias_d)
    assert mm.autotune(iterations=2) is mm
    text = mm.describe()
    assert "cuda" in text and "algo=" in text and ("(tf32)" in text) == (key == "tf32")
    ref = chain_reference(gpu.host(a_d), gpu.host(b_d), bias=gpu.host(bias_d), act="gelu")
    _check(gpu.host(mm.execute()), ref["d"], ref["d_err"], key, 128, "autotuned")


# ---------------------------------------------------------------------------
# Out of memory
# ---------------------------------------------------------------------------
def test_out_of_memory_then_a_normal_call(gpu, rng):
    big = 1 << 20  # d would be 2**40 float32 elements: 4 TiB
    a_d = gpu.dev(np.ones((big, 4), np.float32))
    b_d = gpu.dev(np.ones((4, big), np.float32))
    with pytest.raises(MemoryError) as info:
        fusemath.matmul(a_d, b_d)
    assert isinstance(info.value, fusemath.OutOfMemoryError) and "cannot allocate d" in str(info.value)
    with pytest.raises(MemoryError):
        fusemath.Matmul(a_d, b_d).plan()  # the planning template of d
    del a_d, b_d
    a = rng.standard_normal((64, 32)).astype(np.float32)
    b = rng.standard_normal((32, 16)).astype(np.float32)
    d = fusemath.matmul(gpu.dev(a), gpu.dev(b), epilogue="relu")
    np.testing.assert_allclose(gpu.host(d), np.maximum(a.astype(np.float64) @ b, 0), rtol=1e-5, atol=1e-5)


def test_one_d_and_zero_d_results(gpu, rng):
    v = rng.standard_normal(40).astype(np.float32)
    m = rng.standard_normal((3, 40, 7)).astype(np.float32)
    d = fusemath.matmul(gpu.dev(v), gpu.dev(m))
    assert gpu.is_array(d) and tuple(d.shape) == (3, 7)
    np.testing.assert_allclose(gpu.host(d), v.astype(np.float64) @ m, rtol=1e-4, atol=1e-4)
    s = fusemath.matmul(gpu.dev(v), gpu.dev(v))
    assert gpu.is_array(s) and tuple(s.shape) == ()
    np.testing.assert_allclose(gpu.host(s), v.astype(np.float64) @ v, rtol=1e-4)


@pytest.mark.parametrize("key", ["f32", "f64", "c64", "c128"])
def test_alpha_zero_and_empty_k_on_gpu(gpu, key):
    """alpha = 0 as BLAS defines it, as on the CPU: D = act(beta * c + bias) without reading a and
    b (an inf there must not turn into NaN = inf * 0); and k = 0, an empty sum: the same D."""
    dt = DTYPES[key][0]
    a = np.ones((3, 4), dt)
    b = np.ones((4, 5), dt)
    b[1, 2] = np.inf
    c = np.full((3, 5), 2.0, dt)
    bias = np.arange(5).astype(dt) - 3.0
    act = "relu" if key in ("f32", "f64") else None  # complex types take no activation
    want = 0.5 * c + bias
    if act:
        want = np.maximum(want, 0)
    got = fusemath.matmul(gpu.dev(a), gpu.dev(b), gpu.dev(c), alpha=0.0, beta=0.5, bias=gpu.dev(bias), epilogue=act)
    np.testing.assert_array_equal(gpu.host(got), want)
    np.testing.assert_array_equal(gpu.host(fusemath.matmul(gpu.dev(a), gpu.dev(b), alpha=0.0)), np.zeros((3, 5), dt))
    empty_a, empty_b = np.ones((3, 0), dt), np.ones((0, 5), dt)
    got = fusemath.matmul(gpu.dev(empty_a), gpu.dev(empty_b), gpu.dev(c), beta=0.5, bias=gpu.dev(bias), epilogue=act)
    np.testing.assert_array_equal(gpu.host(got), want)
    if key in ("f32", "f64"):  # a scale vector multiplies the (zero) product: 0 * inf is NaN, as on the CPU
        scale = np.array([np.inf, 1.0, -1.0, 2.0, 0.5], dt)
        cpu = fusemath.matmul(a, b, alpha=0.0, bias=bias, epilog_inputs={"scale": scale})
        got = fusemath.matmul(gpu.dev(a), gpu.dev(b), alpha=0.0, bias=gpu.dev(bias), epilog_inputs={"scale": gpu.dev(scale)})
        np.testing.assert_array_equal(gpu.host(got), cpu)
        assert np.isnan(cpu[:, 0]).all()
    with fusemath.Matmul(gpu.dev(empty_a), gpu.dev(empty_b)) as mm:
        mm.plan(epilogue="bias+relu" if act else "bias", bias=gpu.dev(bias))
        assert "no_product" in mm.describe() and "passes=1" in mm.describe(), mm.describe()
        mm.autotune()  # one candidate: nothing to choose, and no failure
        want0 = np.maximum(bias, 0) if act else bias
        np.testing.assert_array_equal(gpu.host(mm.execute()), np.broadcast_to(want0, (3, 5)))


# ---------------------------------------------------------------------------
# fp8 (PyTorch float8 tensors, sm_89+)
# ---------------------------------------------------------------------------
def _torch_fp8():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("PyTorch without CUDA or float8")
    if torch.cuda.get_device_capability(0) < (8, 9):
        pytest.skip("fp8 needs compute capability 8.9+")
    return torch


@pytest.mark.parametrize("fa,fb", [("float8_e4m3fn", "float8_e4m3fn"), ("float8_e5m2", "float8_e4m3fn")])
@pytest.mark.parametrize("chain", ["identity", "bias+relu"])
def test_fp8_against_decoded_reference(rng, fa, fb, chain):
    torch = _torch_fp8()
    M, N, K = 64, 128, 96
    a = torch.tensor(rng.standard_normal((M, K)), dtype=torch.float32, device="cuda").to(getattr(torch, fa))
    w = torch.tensor(rng.standard_normal((N, K)), dtype=torch.float32, device="cuda").to(getattr(torch, fb))
    bias = torch.tensor(rng.standard_normal(N), dtype=torch.bfloat16, device="cuda")
    kw = {"bias": bias, "epilogue": "relu"} if chain == "bias+relu" else {}
    d = fusemath.matmul(a, w.T, quantization_scales={"a": 0.5, "b": 4.0}, **kw)
    assert d.dtype == torch.bfloat16 and d.shape == (M, N) and d.device == a.device
    # the reference sees exactly the fp8 values the GPU read, in float64
    ref = 2.0 * (a.double().cpu().numpy() @ w.double().cpu().numpy().T)
    if chain == "bias+relu":
        ref = np.maximum(ref + bias.double().cpu().numpy(), 0)
    assert_norm_close(d.double().cpu().numpy(), ref, 1e-2)
    # float32 output through out=, scales as device tensors
    out = torch.empty((M, N), dtype=torch.float32, device="cuda")
    sa = torch.full((1,), 0.5, dtype=torch.float32, device="cuda")
    sb = torch.full((1,), 4.0, dtype=torch.float32, device="cuda")
    kw32 = {"bias": bias.float(), "epilogue": "relu"} if chain == "bias+relu" else {}  # bias has D's dtype
    assert fusemath.matmul(a, w.T, out=out, quantization_scales={"a": sa, "b": sb}, **kw32) is out
    torch.cuda.synchronize()
    # Hopper's fp8 tensor cores accumulate with fewer bits than f32: 1e-4 relative was
    # measured on the H200 for K = 96. PyTorch's own fp8 GEMM must not be much better.
    assert_norm_close(out.double().cpu().numpy(), ref, 1e-3)
    scaled_mm = getattr(torch, "_scaled_mm", None)
    if scaled_mm is not None and chain == "identity":
        try:
            theirs = scaled_mm(a, w.T, scale_a=sa.reshape(()), scale_b=sb.reshape(()), out_dtype=torch.float32)
        except (RuntimeError, TypeError):
            theirs = None
        if theirs is not None:
            err = lambda x: np.linalg.norm(x.double().cpu().numpy() - ref) / np.linalg.norm(ref)
            assert err(out) <= 2 * err(theirs) + 1e-6, (err(out), err(theirs))


def test_fp8_errors(rng):
    torch = _torch_fp8()
    a = torch.zeros((32, 32), dtype=torch.float8_e4m3fn, device="cuda")
    w = torch.zeros((32, 32), dtype=torch.float8_e4m3fn, device="cuda")
    with pytest.raises(fusemath.NotSupportedError, match="column-major"):
        fusemath.matmul(a, w)  # row-major b: cuBLASLt's fp8 kernels want x @ w.T
    with pytest.raises(ValueError, match="'d'"):
        fusemath.matmul(a, w.T, quantization_scales={"d": 1.0})
    with pytest.raises(ValueError, match="a_scale"):
        bad = torch.ones(2, dtype=torch.float32, device="cuda")
        fusemath.matmul(a, w.T, quantization_scales={"a": bad})
    with pytest.raises((TypeError, ValueError), match="e5m2|fp8"):
        fusemath.matmul(a.to(torch.float8_e5m2), w.T.to(torch.float8_e5m2))


def test_one_plan_from_many_threads_and_streams(rng):
    """A planned GPU matmul executed from 4 threads at once, each on its own stream with its
    own output: the per-thread descriptors and per-stream workspaces must keep them apart."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch without CUDA")
    import threading

    a = torch.tensor(rng.standard_normal((512, 384)), dtype=torch.float32, device="cuda")
    b = torch.tensor(rng.standard_normal((384, 640)), dtype=torch.float32, device="cuda")
    bias = torch.tensor(rng.standard_normal(640), dtype=torch.float32, device="cuda")
    mm = fusemath.Matmul(a, b)
    mm.plan(epilogue="relu", bias=bias)
    ref = chain_reference(a.double().cpu().numpy(), b.double().cpu().numpy(), bias=bias.double().cpu().numpy(),
                          act="relu")
    outs = [[torch.empty((512, 640), device="cuda") for _ in range(10)] for _ in range(4)]
    torch.cuda.synchronize()  # the operands were written on the default stream
    errors = []

    def work(t):
        try:
            s = torch.cuda.Stream()
            for d in outs[t]:
                mm.execute(out=d, stream=s)
            s.synchronize()
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    for row in outs:
        for d in row:
            _check(d.cpu().numpy(), ref["d"], ref["d_err"], "f32", 384, "threaded")
