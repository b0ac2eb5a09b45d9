"""fusemath.random on the GPU (device="cuda"): CuPy results by default, like= a torch tensor gives
torch, out= fills CuPy / torch arrays in place on the current stream, device strings, portable mode
bit-identical to the CPU generator for every method and dtype (odd positions and sizes, calls in a
row), curand mode on the GPU against the CPU's curand mode (uniform / raw bit for bit; normals within
the bound test_rng_cuda_gpu measures), and bad devices / outs. Marked gpu: skipped without a GPU;
each array library skipped where it is not importable."""
import numpy as np
import pytest

import fusemath
import fusemath.random as fr
import gpu_libs

pytestmark = pytest.mark.gpu

METHODS = [  # (name, args, dtypes)
    ("random", (), ("float64", "float32")),
    ("uniform", (-2.5, 3.25), ("float64", "float32")),
    ("standard_normal", (), ("float64", "float32")),
    ("normal", (0.25, 1.5), ("float64", "float32")),
    ("lognormal", (0.25, 0.5), ("float64", "float32")),
    ("standard_exponential", (), ("float64", "float32")),
    ("exponential", (2.0,), ("float64", "float32")),
    ("random_raw", (), ("uint32",)),
]


def cupy():
    return gpu_libs.get(gpu_libs.CuPyLib).m


def torch():
    return gpu_libs.get(gpu_libs.TorchLib).m


def draw(g, name, args, size, dtype, **kw):
    f = getattr(g, name)
    if name == "random_raw":
        return f(size, **kw)
    if name in ("random", "standard_normal", "standard_exponential"):
        return f(size, dtype=dtype, **kw)
    return f(*args, size=size, dtype=dtype, **kw)


def assert_same_bits(want, got, what):
    """want, got: NumPy arrays; fails with the first differing index, both values and the ulp gap."""
    assert want.shape == got.shape and want.dtype == got.dtype, (what, want.shape, got.shape, want.dtype, got.dtype)
    iv = np.dtype(f"u{want.dtype.itemsize}")
    wb, gb = want.reshape(-1).view(iv), got.reshape(-1).view(iv)
    bad = np.flatnonzero(wb != gb)
    if bad.size:
        i = int(bad[0])
        si = np.dtype(f"i{want.dtype.itemsize}")
        a, b = wb[i:i + 1].view(si).astype(object)[0], gb[i:i + 1].view(si).astype(object)[0]
        ulp = abs(a - b) if want.dtype.kind == "f" and (a >= 0) == (b >= 0) else "sign differs"
        pytest.fail(f"{what}: {bad.size} of {want.size} values differ; first at {i}: want "
                    f"{want.reshape(-1)[i]!r} got {got.reshape(-1)[i]!r} ({ulp} ulp)")


@pytest.mark.parametrize("name,args,dtypes", METHODS)
def test_portable_cupy_matches_cpu(name, args, dtypes):
    cp = cupy()
    for dtype in dtypes:
        for seed, skip, sizes in ((1, 0, [(3,), 1000, (7, 131)]), (2**64 - 1, 5, [1, 2, 4099]), (7, 3, [65537])):
            gc, gg = fr.default_rng(seed), fr.default_rng(seed, device="cuda")
            gc.advance(skip), gg.advance(skip)
            for size in sizes:  # calls in a row: the positions follow
                want = draw(gc, name, args, size, dtype)
                got = draw(gg, name, args, size, dtype)
                assert isinstance(got, cp.ndarray) and got.device.id == 0, type(got)
                assert_same_bits(np.asarray(want), cp.asnumpy(got), f"{name} {dtype} seed {seed} size {size}")
            assert gc.state["position"] == gg.state["position"]


def test_scalar_draw_is_a_0d_array():
    cp = cupy()
    g, c = fr.default_rng(5, device="cuda"), fr.default_rng(5)
    x = g.standard_normal()
    assert isinstance(x, cp.ndarray) and x.shape == ()
    assert float(x) == c.standard_normal()


def test_torch_like_and_out():
    t = torch()
    like = t.zeros(1, device="cuda")
    g, c = fr.default_rng(11, device="cuda"), fr.default_rng(11)
    x = g.normal(1.0, 2.0, size=(5, 9), dtype="float32", like=like)
    assert isinstance(x, t.Tensor) and x.is_cuda and x.dtype == t.float32 and tuple(x.shape) == (5, 9)
    assert_same_bits(c.normal(1.0, 2.0, size=(5, 9), dtype="float32"), x.cpu().numpy(), "torch like=")
    out = t.empty((1001,), dtype=t.float64, device="cuda")
    r = g.random(out=out)
    assert r is out
    assert_same_bits(c.random(1001), out.cpu().numpy(), "torch out=")


def test_cupy_out_in_place_on_the_current_stream():
    cp = cupy()
    g, c = fr.default_rng(3, device="cuda:0"), fr.default_rng(3)
    s = cp.cuda.Stream(non_blocking=True)
    out = cp.empty((64, 1000), dtype=cp.float32)
    with s:
        r = g.standard_exponential(dtype="float32", out=out)
        host = cp.asnumpy(out, stream=s)
        s.synchronize()
    assert r is out
    assert_same_bits(c.standard_exponential(size=(64, 1000), dtype="float32"), host, "cupy out= on a stream")


def test_describe_names_the_gpu():
    g = fr.default_rng(5, device="cuda")
    g.normal(0.0, 2.0, size=1000, dtype=np.float32)
    assert g.describe().startswith("rng cuda/rngkernel normal f32") and "device=0" in g.describe(), g.describe()


def test_device_strings():
    cp = cupy()
    assert fr.default_rng(1, device="cuda").device == "cuda:0"
    assert fr.Generator(1, device="cuda:0").device == "cuda:0"
    assert fr.default_rng(1).device == "cpu"
    for bad in ("gpu", "cuda:", "cuda:-1", "cuda:01", "CUDA", "cuda:x"):
        with pytest.raises(ValueError, match="expected 'cpu', 'cuda', 'cuda:N'"):
            fr.default_rng(1, device=bad)
    with pytest.raises(TypeError, match="device must be a string"):
        fr.default_rng(1, device=0)
    n = cp.cuda.runtime.getDeviceCount()
    g = fr.default_rng(1, device=f"cuda:{n}")  # a device that does not exist: a clear error at the draw
    with pytest.raises(fusemath.FusemathError, match=f"cuda:{n}"):
        g.random(4)


def test_spawn_and_pickle_keep_the_device():
    import pickle

    cp = cupy()
    g = fr.default_rng(9, device="cuda")
    kids = g.spawn(2)
    assert all(k.device == "cuda:0" for k in kids)
    h = pickle.loads(pickle.dumps(g))
    assert h.device == "cuda:0"
    a, b = g.random(100), h.random(100)
    assert_same_bits(cp.asnumpy(a), cp.asnumpy(b), "pickled generator")
    c = fr.default_rng(kids[0].state["seed"])
    assert_same_bits(c.random(10), cp.asnumpy(kids[0].random(10)), "spawned child")


def test_out_on_another_device_is_an_error():
    cp = cupy()
    g = fr.default_rng(1, device="cuda")
    with pytest.raises(fusemath.DeviceError, match="out is on cpu but the generator is on cuda:0"):
        g.random(out=np.empty(4))
    with pytest.raises(fusemath.DeviceError, match="out is on cuda:0 but the generator is on cpu"):
        fr.default_rng(1).random(out=cp.empty(4))
    pos = g.state["position"]
    assert pos == 0  # nothing drawn by the failed calls
    with pytest.raises(TypeError, match="like must be a CuPy array or torch tensor"):
        g.random(3, like=np.empty(1))
    with pytest.raises(fusemath.DeviceError, match="like is a CuPy array but the generator is on cpu"):
        fr.default_rng(1).random(3, like=cp.empty(1))


def test_out_shape_and_dtype_errors_on_the_gpu():
    cp = cupy()
    g = fr.default_rng(1, device="cuda")
    with pytest.raises(fusemath.ShapeError):
        g.random(size=5, out=cp.empty(4))
    with pytest.raises(fusemath.DtypeError):
        g.random(out=cp.empty(4, dtype=cp.int32))
    assert g.state["position"] == 0


def test_curand_mode_on_the_gpu():
    cp = cupy()
    for seed, skip in ((42, 0), (7, 3)):
        gc, gg = fr.default_rng(seed, mode="curand"), fr.default_rng(seed, device="cuda", mode="curand")
        gc.advance(skip), gg.advance(skip)
        # uniforms and raw words: libcurand's device output equals the host generator's bit for bit,
        # also after a run of float64 calls
        for what, f, kw in (("random f32", "random", {"dtype": "float32"}), ("random f64", "random", {}),
                            ("random f64 again", "random", {}), ("raw", "random_raw", {}),
                            ("random f32 after the run", "random", {"dtype": "float32"})):
            want, got = getattr(gc, f)(300001, **kw), getattr(gg, f)(300001, **kw)
            assert_same_bits(want, cp.asnumpy(got), f"curand {what} seed {seed}")
        # normals (odd sizes too): CUDA's __sincosf / logf / sincospi on the device, glibc on the host
        gc, gg = fr.default_rng(seed, mode="curand"), fr.default_rng(seed, device="cuda", mode="curand")
        gc.advance(skip), gg.advance(skip)
        want, got = gc.standard_normal(100001, dtype="float32"), cp.asnumpy(gg.standard_normal(100001, dtype="float32"))
        assert np.max(np.abs(want - got) / np.maximum(1, np.abs(want))) <= 1e-5
        want, got = gc.lognormal(0, 0.5, 100001), cp.asnumpy(gg.lognormal(0, 0.5, 100001))
        assert np.max(np.abs(want - got) / np.maximum(1, np.abs(want))) <= 1e-13
        assert gc.state == gg.state
    with pytest.raises(fusemath.NotSupportedError, match=r"\(0, 1\] only"):
        fr.default_rng(1, device="cuda", mode="curand").uniform(1, 2, 10)
