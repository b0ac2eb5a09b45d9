"""GPU FFT (cuFFT) tests: fusemath.fft on CuPy and PyTorch CUDA arrays.

1. every function against numpy.fft (float64 / complex128 on the host copy): sizes with large
   prime factors, every norm, axes, n / s padding and cropping, both precisions, batches,
   non-contiguous views, out=, the input left untouched;
2. self-verification on the GPU (FFTW style): linearity, impulse response, time / frequency shift;
3. fused prolog / epilog chains against the unfused computation done with the array library;
4. raw CUDA C callbacks ("source" / "name" / "data" in the chain dicts) and their errors;
5. streams (stream=, the current stream, two threads with their own plans and streams);
6. argument errors on GPU data (the same classes as the CPU tests of test_fft.py);
7. placement: NumPy input with execution="cuda", describe() of a planner on GPU data.

Marked gpu: skipped (see conftest.py) when fusemath.cuda_device_count() == 0; each library is
skipped when it is not importable or sees no GPU. Sized for well under a minute on an H200.

Tolerances: ||got - want|| <= tol * ||want|| with tol = 1e-5 * log2(n) in single precision and
1e-12 * log2(n) in double (n: the number of points of the transform).

complex-to-real inputs are always valid half spectra (the slices at index 0 and, for an even
output length, n / 2 along the halved axis are Hermitian along the other transformed axes,
after fusemath's cropping / padding): cuFFT's C2R is undefined on anything else, so the
tests never depend on how imaginary parts there are treated.
"""
import math
import threading

import numpy as np
import pytest

import fusemath
import fusemath.fft as ff
import gpu_libs

pytestmark = [
    pytest.mark.gpu,
    # numpy 2 deprecates s= without axes= (reference calls); fusemath keeps the current meaning
    pytest.mark.filterwarnings("ignore:`axes` should not be `None`:DeprecationWarning"),
]

NORMS = [None, "backward", "ortho", "forward"]
SIZES = [1, 2, 7, 64, 97, 210, 1000, 1021, 4096]
PRECS = {"single": (np.dtype(np.float32), np.dtype(np.complex64)),
         "double": (np.dtype(np.float64), np.dtype(np.complex128))}
C128 = np.complex128


# ---------------------------------------------------------------------------
# The array libraries, behind one small interface
# ---------------------------------------------------------------------------
class _CuPy(gpu_libs.CuPyLib):
    def dev(self, a):
        """A C-contiguous device copy of a host array (same dtype)."""
        return self.m.asarray(np.ascontiguousarray(a))

    def npdtype(self, x):
        return np.dtype(x.dtype)

    def zeros(self, shape, dtype):
        return self.m.zeros(shape, dtype)

    def fortran(self, x):
        return self.m.asfortranarray(x)

    def conj(self, x):
        return self.m.conj(x)

    def fill(self, x, v):
        x.fill(v)

    def lib_fft(self, name, x, n=None, axis=-1, norm=None):
        return getattr(self.m.fft, name)(x, n=n, axis=axis, norm=norm)

    def lib_fft2(self, name, x, s=None, axes=(-2, -1), norm=None):
        return getattr(self.m.fft, name)(x, s=s, axes=axes, norm=norm)


class _Torch(gpu_libs.TorchLib):
    def dev(self, a):
        return self.m.from_numpy(np.ascontiguousarray(a)).to("cuda")

    def host(self, x):
        return x.detach().resolve_conj().cpu().numpy()

    def is_array(self, x):
        return isinstance(x, self.m.Tensor) and x.is_cuda

    def npdtype(self, x):
        return np.dtype(str(x.dtype).rsplit(".", 1)[-1])

    def _tdt(self, dtype):
        return getattr(self.m, np.dtype(dtype).name)

    def empty(self, shape, dtype):
        return self.m.empty(shape, dtype=self._tdt(dtype), device="cuda")

    def zeros(self, shape, dtype):
        return self.m.zeros(shape, dtype=self._tdt(dtype), device="cuda")

    def fortran(self, x):
        return x.transpose(-1, -2).contiguous().transpose(-1, -2)

    def conj(self, x):
        return self.m.conj(x).resolve_conj()

    def fill(self, x, v):
        x.fill_(v)

    def lib_fft(self, name, x, n=None, axis=-1, norm=None):
        return getattr(self.m.fft, name)(x, n=n, dim=axis, norm=norm)

    def lib_fft2(self, name, x, s=None, axes=(-2, -1), norm=None):
        return getattr(self.m.fft, name)(x, s=s, dim=axes, norm=norm)


def _lib_class(name):
    return _CuPy if name == "cupy" else _Torch


def _load(name):
    return gpu_libs.load(_lib_class(name))


def _get(name):
    return gpu_libs.get(_lib_class(name))


@pytest.fixture(params=["cupy", "torch"])
def gpu(request):
    return _get(request.param)


# ---------------------------------------------------------------------------
# Data and checks
# ---------------------------------------------------------------------------
def crand(rng, shape, dtype=C128):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def rrand(rng, shape, dtype=np.float64):
    return rng.standard_normal(shape).astype(dtype)


def _norm_axes(ndim, s, axes, default=None):
    """numpy's axes: given ones, else the last len(s), else default, else all (normalised)."""
    if axes is None:
        if s is not None:
            axes = range(ndim - len(s), ndim)
        elif default is not None:
            axes = default
        else:
            axes = range(ndim)
    return [a % ndim for a in axes]


def half_spectrum(rng, shape, axes, n_last, dtype):
    """A random complex array of `shape` that is a valid c2r input for output length n_last along
    axes[-1] after numpy's cropping / padding to n_last // 2 + 1 there: the slices at index 0 and
    (n_last even) n_last // 2 along axes[-1] are zero except a real value at index 0 of the other
    transformed axes (Hermitian whatever the cropping / padding of those axes)."""
    y = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    nd = len(shape)
    axes = [a % nd for a in axes]
    a = axes[-1]
    ks = [0]
    if n_last % 2 == 0 and 0 < n_last // 2 < shape[a]:
        ks.append(n_last // 2)
    for k in ks:
        idx = [slice(None)] * nd
        idx[a] = k
        keep = list(idx)
        for o in axes[:-1]:
            keep[o] = 0
        origin = y[tuple(keep)].real.copy()
        y[tuple(idx)] = 0
        y[tuple(keep)] = origin
    return y.astype(dtype)


def full_half_spectrum(rng, shape, axes, dtype):
    """The rfftn (over axes; the last halved) of a random real array: a valid c2r input of `shape`
    for the default output length 2 * (shape[axes[-1]] - 1) - DC / Nyquist slices included."""
    nd = len(shape)
    axes = [a % nd for a in axes]
    out_shape = list(shape)
    out_shape[axes[-1]] = 2 * (shape[axes[-1]] - 1)
    y = np.fft.rfftn(rng.standard_normal(out_shape), axes=axes)
    assert y.shape == tuple(shape)
    return y.astype(dtype)


def tol(prec, n):
    base = 1e-5 if prec == "single" else 1e-12
    return base * max(1.0, math.log2(max(int(n), 2)))


def assert_close(got, want, prec, n, what=""):
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    scale = float(np.linalg.norm(want.astype(C128).ravel()))
    err = float(np.linalg.norm((got.astype(C128) - want.astype(C128)).ravel()))
    bound = tol(prec, n) * max(scale, 1e-300)
    assert err <= bound, (f"{what}: relative error {err / max(scale, 1e-300):.3e} > {tol(prec, n):.1e} "
                          f"(n={n}, {prec}, |want|={scale:.3e})")


def check(gpu, y, x, dtype, want, prec, n, what=""):
    """y: a result of gpu's library on x's device, of dtype, close to want (host, float64)."""
    assert gpu.is_array(y), f"{what}: result is a {type(y).__name__}, not a {gpu.name} array"
    assert gpu.device_of(y) == gpu.device_of(x), f"{what}: result on another device"
    assert gpu.npdtype(y) == np.dtype(dtype), f"{what}: dtype {gpu.npdtype(y)}, expected {np.dtype(dtype)}"
    assert_close(gpu.host(y), want, prec, n, what)


def call_unmodified(gpu, func, x, *args, **kwargs):
    """func(x, ...) and check that x (out-of-place) is left as it was."""
    before = gpu.host(x).copy()
    y = func(x, *args, **kwargs)
    after = gpu.host(x)
    assert np.array_equal(after, before), f"{getattr(func, '__name__', func)} modified its input"
    return y


def _ref_input(a, prec):
    """The host copy of the GPU input in float64 / complex128 (what numpy's reference sees)."""
    return a.astype(C128 if np.iscomplexobj(a) else np.float64)


# ---------------------------------------------------------------------------
# 1. Against numpy.fft
# ---------------------------------------------------------------------------
def test_gpu_is_detected():
    assert fusemath.cuda_device_count() >= 1


@pytest.mark.parametrize("prec", list(PRECS))
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("n", SIZES)
def test_c2c_sizes(gpu, rng, n, norm, prec):
    rdt, cdt = PRECS[prec]
    x = crand(rng, (3, n), cdt)
    x_d = gpu.dev(x)
    for name in ("fft", "ifft"):
        y = call_unmodified(gpu, getattr(ff, name), x_d, norm=norm)
        check(gpu, y, x_d, cdt, getattr(np.fft, name)(x.astype(C128), norm=norm), prec, n, name)
    # real input is promoted (float32 -> complex64, float64 -> complex128)
    r = rrand(rng, (2, n), rdt)
    r_d = gpu.dev(r)
    y = call_unmodified(gpu, ff.fft, r_d, norm=norm)
    check(gpu, y, r_d, cdt, np.fft.fft(r.astype(np.float64), norm=norm), prec, n, "fft of real input")


@pytest.mark.parametrize("prec", list(PRECS))
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("n", SIZES)
def test_r2c_c2r_sizes(gpu, rng, n, norm, prec):
    rdt, cdt = PRECS[prec]
    x = rrand(rng, (3, n), rdt)
    x_d = gpu.dev(x)
    y = call_unmodified(gpu, ff.rfft, x_d, norm=norm)
    check(gpu, y, x_d, cdt, np.fft.rfft(x.astype(np.float64), norm=norm), prec, n, "rfft")
    # irfft with an explicit n (odd n: no Nyquist bin)
    h = half_spectrum(rng, (3, n // 2 + 1), [-1], n, cdt)
    h_d = gpu.dev(h)
    y = call_unmodified(gpu, ff.irfft, h_d, n=n, norm=norm)  # cuFFT's C2R overwrites its input
    check(gpu, y, h_d, rdt, np.fft.irfft(h.astype(C128), n=n, norm=norm), prec, n, "irfft n")
    if n >= 2:  # the default output length 2 * (m - 1)
        m = n // 2 + 1
        h2 = full_half_spectrum(rng, (3, m), [-1], cdt)
        h2_d = gpu.dev(h2)
        y = call_unmodified(gpu, ff.irfft, h2_d, norm=norm)
        check(gpu, y, h2_d, rdt, np.fft.irfft(h2.astype(C128), norm=norm), prec, 2 * (m - 1), "irfft default n")


@pytest.mark.parametrize("prec", list(PRECS))
@pytest.mark.parametrize("axis", [-1, 0])
@pytest.mark.parametrize("n", [1, 5, 8, 13, 20])
@pytest.mark.parametrize("func", ["fft", "ifft", "rfft", "irfft"])
def test_n_pad_crop(gpu, rng, func, n, axis, prec):
    rdt, cdt = PRECS[prec]
    shape = (4, 10)
    if func == "rfft":
        x = rrand(rng, shape, rdt)
    elif func == "irfft":
        x = half_spectrum(rng, shape, [axis], n, cdt)
    else:
        x = crand(rng, shape, cdt)
    x_d = gpu.dev(x)
    y = call_unmodified(gpu, getattr(ff, func), x_d, n=n, axis=axis)
    want = getattr(np.fft, func)(_ref_input(x, prec), n=n, axis=axis)
    check(gpu, y, x_d, rdt if func == "irfft" else cdt, want, prec, n, f"{func}(n={n}, axis={axis})")


ND_CASES = [
    ((6, 8), None, None),
    ((6, 8), None, (1, 0)),
    ((5, 6, 7), None, None),
    ((5, 6, 7), None, (0, 2)),
    ((5, 6, 7), None, (-1, -3)),
    ((5, 6, 7), (4, 9), None),           # crop one axis, pad the other
    ((5, 6, 7), (8, 3), (0, 2)),
    ((5, 6, 7), (3, 4, 10), None),
    ((3, 4, 5, 6), None, None),          # 4 axes: two cuFFT calls
    ((2, 3, 4, 5, 6), None, (0, 1, 3, 4)),
    ((4, 30, 17), None, (1, 2)),         # batched 2-D, a prime extent
]
ND_IDS = [f"{'x'.join(map(str, sh))}-s{s}-axes{a}".replace(" ", "") for sh, s, a in ND_CASES]


def _n_points(shape, s, axes_n, kind_c2r=False):
    if s is not None:
        return int(np.prod(s))
    lens = [shape[a] for a in axes_n]
    if kind_c2r:
        lens[-1] = 2 * (lens[-1] - 1)
    return int(np.prod(lens))


@pytest.mark.parametrize("prec", list(PRECS))
@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
@pytest.mark.parametrize("shape,s,axes", ND_CASES, ids=ND_IDS)
def test_nd(gpu, rng, shape, s, axes, norm, prec):
    rdt, cdt = PRECS[prec]
    axes_n = _norm_axes(len(shape), s, axes)
    n = _n_points(shape, s, axes_n)
    x = crand(rng, shape, cdt)
    x_d = gpu.dev(x)
    for name in ("fftn", "ifftn"):
        y = call_unmodified(gpu, getattr(ff, name), x_d, s=s, axes=axes, norm=norm)
        check(gpu, y, x_d, cdt, getattr(np.fft, name)(x.astype(C128), s=s, axes=axes, norm=norm), prec, n, name)
    r = rrand(rng, shape, rdt)
    r_d = gpu.dev(r)
    y = call_unmodified(gpu, ff.rfftn, r_d, s=s, axes=axes, norm=norm)
    check(gpu, y, r_d, cdt, np.fft.rfftn(r.astype(np.float64), s=s, axes=axes, norm=norm), prec, n, "rfftn")
    if s is None:
        h = full_half_spectrum(rng, shape, axes_n, cdt)
    else:
        h = half_spectrum(rng, shape, axes_n, s[-1], cdt)
    h_d = gpu.dev(h)
    y = call_unmodified(gpu, ff.irfftn, h_d, s=s, axes=axes, norm=norm)
    check(gpu, y, h_d, rdt, np.fft.irfftn(h.astype(C128), s=s, axes=axes, norm=norm), prec,
          _n_points(shape, s, axes_n, True), "irfftn")


@pytest.mark.parametrize("prec", list(PRECS))
@pytest.mark.parametrize("norm", ["backward", "forward"])
@pytest.mark.parametrize("axes", [(-2, -1), (0, 2), (2, 0)])
@pytest.mark.parametrize("s", [None, (4, 6), (9, 11)])
def test_2d_functions(gpu, rng, s, axes, norm, prec):
    rdt, cdt = PRECS[prec]
    shape = (5, 6, 7)
    axes_n = _norm_axes(3, s, axes)
    n = _n_points(shape, s, axes_n)
    x = crand(rng, shape, cdt)
    r = rrand(rng, shape, rdt)
    h = full_half_spectrum(rng, shape, axes_n, cdt) if s is None else half_spectrum(rng, shape, axes_n, s[-1], cdt)
    for name, a, odt, npts in (("fft2", x, cdt, n), ("ifft2", x, cdt, n), ("rfft2", r, cdt, n),
                               ("irfft2", h, rdt, _n_points(shape, s, axes_n, True))):
        a_d = gpu.dev(a)
        y = call_unmodified(gpu, getattr(ff, name), a_d, s=s, axes=axes, norm=norm)
        want = getattr(np.fft, name)(_ref_input(a, prec), s=s, axes=axes, norm=norm)
        check(gpu, y, a_d, odt, want, prec, npts, name)


@pytest.mark.parametrize("prec", list(PRECS))
def test_non_contiguous_views(gpu, rng, prec):
    rdt, cdt = PRECS[prec]
    base = gpu.dev(crand(rng, (12, 40), cdt))
    views = {"transposed": gpu.swap(base), "strided": base[::2, ::3], "column slice": base[:, 1:17],
             "transposed strided": gpu.swap(base)[::2]}
    if gpu.name == "cupy":
        views["reversed"] = base[::-1]
    for what, v in views.items():
        h = gpu.host(v).astype(C128)
        for name, kw, want in (("fft", {}, np.fft.fft(h)), ("fft", {"axis": 0}, np.fft.fft(h, axis=0)),
                               ("ifft", {"n": 24}, np.fft.ifft(h, n=24)), ("fft2", {}, np.fft.fft2(h)),
                               ("fftn", {"axes": (1, 0)}, np.fft.fftn(h, axes=(1, 0)))):
            y = call_unmodified(gpu, getattr(ff, name), v, **kw)
            check(gpu, y, v, cdt, want, prec, h.size, f"{name}{kw} of a {what} view")
    rbase = gpu.dev(rrand(rng, (12, 40), rdt))
    for what, v in {"transposed": gpu.swap(rbase), "strided": rbase[::3, 1::2], "column slice": rbase[:, 3:30]}.items():
        h = gpu.host(v).astype(np.float64)
        for name, kw, want in (("rfft", {}, np.fft.rfft(h)), ("rfft", {"axis": 0}, np.fft.rfft(h, axis=0)),
                               ("rfft2", {}, np.fft.rfft2(h))):
            y = call_unmodified(gpu, getattr(ff, name), v, **kw)
            check(gpu, y, v, cdt, want, prec, h.size, f"{name}{kw} of a {what} view")
    # c2r of views: a transposed view of valid half spectra (halved axis 0), a batch-strided one
    hs = gpu.dev(half_spectrum(rng, (6, 9), [-1], 16, cdt))
    for what, v, axis in (("transposed", gpu.swap(hs), 0), ("strided", hs[::2], -1)):
        h = gpu.host(v).astype(C128)
        y = call_unmodified(gpu, ff.irfft, v, n=16, axis=axis)
        check(gpu, y, v, rdt, np.fft.irfft(h, n=16, axis=axis), prec, 16, f"irfft of a {what} view")


@pytest.mark.parametrize("prec", list(PRECS))
def test_hfft_ihfft(gpu, rng, prec):
    """hfft / ihfft: a c2r with a conj prolog and an r2c with a conj epilog, against numpy.fft."""
    rdt, cdt = PRECS[prec]
    a = gpu.dev(crand(rng, (3, 9), cdt))
    x = gpu.dev(rrand(rng, (16, 3), rdt))
    for norm in (None, "ortho", "forward"):
        h = gpu.host(a).astype(C128)
        y = call_unmodified(gpu, ff.hfft, a, 16, norm=norm)
        check(gpu, y, a, rdt, np.fft.hfft(h, 16, norm=norm), prec, 16, f"hfft norm={norm}")
        hx = gpu.host(x).astype(np.float64)
        y = call_unmodified(gpu, ff.ihfft, x, axis=0, norm=norm)
        check(gpu, y, x, cdt, np.fft.ihfft(hx, axis=0, norm=norm), prec, 16, f"ihfft norm={norm}")


def test_helpers_keep_the_array_library(gpu, rng):
    """fftshift / ifftshift on the array's own library and device; fftfreq / rfftfreq with
    like= an array of it, against numpy.fft's."""
    h = rng.standard_normal((5, 8))
    x = gpu.dev(h)
    for func, ref in ((ff.fftshift, np.fft.fftshift), (ff.ifftshift, np.fft.ifftshift)):
        for axes in (None, 0, (1,), (1, 0)):
            y = func(x, axes)
            assert gpu.is_array(y) and gpu.device_of(y) == gpu.device_of(x), f"{func.__name__} {axes}"
            np.testing.assert_array_equal(gpu.host(y), ref(h, axes))
    for func, ref in ((ff.fftfreq, np.fft.fftfreq), (ff.rfftfreq, np.fft.rfftfreq)):
        f = func(9, 0.5, like=x)
        assert gpu.is_array(f) and gpu.device_of(f) == gpu.device_of(x), func.__name__
        np.testing.assert_array_equal(gpu.host(f), ref(9, 0.5))


@pytest.mark.parametrize("prec", list(PRECS))
def test_out(gpu, rng, prec):
    rdt, cdt = PRECS[prec]
    x = crand(rng, (4, 48), cdt)
    x_d = gpu.dev(x)
    out = gpu.empty((4, 48), cdt)
    assert ff.fft(x_d, out=out) is out
    check(gpu, out, x_d, cdt, np.fft.fft(x.astype(C128)), prec, 48, "fft out=")
    assert ff.ifft(x_d, norm="ortho", out=out) is out
    check(gpu, out, x_d, cdt, np.fft.ifft(x.astype(C128), norm="ortho"), prec, 48, "ifft out=")
    r = rrand(rng, (4, 48), rdt)
    r_d = gpu.dev(r)
    out = gpu.empty((4, 25), cdt)
    assert ff.rfft(r_d, out=out) is out
    check(gpu, out, r_d, cdt, np.fft.rfft(r.astype(np.float64)), prec, 48, "rfft out=")
    h = half_spectrum(rng, (4, 25), [-1], 48, cdt)
    h_d = gpu.dev(h)
    out = gpu.empty((4, 48), rdt)
    assert ff.irfft(h_d, n=48, out=out) is out
    check(gpu, out, h_d, rdt, np.fft.irfft(h.astype(C128), n=48), prec, 48, "irfft out=")
    x4 = crand(rng, (2, 3, 4, 5), cdt)
    x4_d = gpu.dev(x4)
    out = gpu.empty(x4.shape, cdt)
    assert ff.fftn(x4_d, out=out) is out
    check(gpu, out, x4_d, cdt, np.fft.fftn(x4.astype(C128)), prec, 120, "fftn 4 axes out=")
    r3 = rrand(rng, (3, 8, 10), rdt)
    r3_d = gpu.dev(r3)
    out = gpu.empty((3, 8, 6), cdt)
    assert ff.rfft2(r3_d, out=out) is out
    check(gpu, out, r3_d, cdt, np.fft.rfft2(r3.astype(np.float64)), prec, 80, "rfft2 out=")


def test_out_strided(gpu, rng):
    x = crand(rng, (4, 16), np.complex64)
    x_d = gpu.dev(x)
    big = gpu.zeros((4, 32), np.complex64)
    view = big[:, ::2]
    y = ff.fft(x_d, out=view)
    hb = gpu.host(big)
    assert_close(hb[:, ::2], np.fft.fft(x.astype(C128)), "single", 16, "strided out")
    assert np.all(hb[:, 1::2] == 0), "the strided out's gaps were written"
    assert_close(gpu.host(y), np.fft.fft(x.astype(C128)), "single", 16, "strided out (returned)")


def test_moderately_large(gpu, rng):
    x = crand(rng, (2048, 2048), np.complex64)
    x_d = gpu.dev(x)
    check(gpu, ff.fft2(x_d), x_d, np.complex64, np.fft.fft2(x.astype(C128)), "single", 2048 * 2048, "fft2 2048^2")
    r = rrand(rng, (8, 3 * 5 * 7 * 11 * 13), np.float64)  # 15015: small prime factors only
    r_d = gpu.dev(r)
    check(gpu, ff.rfft(r_d), r_d, C128, np.fft.rfft(r), "double", 15015, "rfft 15015")


# ---------------------------------------------------------------------------
# 2. Self-verification on the GPU (no reference FFT)
# ---------------------------------------------------------------------------
SV_SIZES = [7, 64, 97, 210, 1021, 4096]


@pytest.mark.parametrize("prec", list(PRECS))
@pytest.mark.parametrize("n", SV_SIZES)
def test_selfcheck_linearity(gpu, rng, n, prec):
    rdt, cdt = PRECS[prec]
    x_d = gpu.dev(crand(rng, (3, n), cdt))
    y_d = gpu.dev(crand(rng, (3, n), cdt))
    a, b = complex(*rng.standard_normal(2)), complex(*rng.standard_normal(2))
    z_d = x_d * a + y_d * b  # in the library (rounded to the data's precision)
    for name in ("fft", "ifft"):
        f = getattr(ff, name)
        got = gpu.host(f(z_d)).astype(C128)
        want = a * gpu.host(f(x_d)).astype(C128) + b * gpu.host(f(y_d)).astype(C128)
        assert_close(got, want, prec, n, f"{name} linearity")
    # rfft with real coefficients
    xr, yr = gpu.dev(rrand(rng, (3, n), rdt)), gpu.dev(rrand(rng, (3, n), rdt))
    a, b = float(rng.standard_normal()), float(rng.standard_normal())
    got = gpu.host(ff.rfft(xr * a + yr * b)).astype(C128)
    want = a * gpu.host(ff.rfft(xr)).astype(C128) + b * gpu.host(ff.rfft(yr)).astype(C128)
    assert_close(got, want, prec, n, "rfft linearity")


@pytest.mark.parametrize("prec", list(PRECS))
@pytest.mark.parametrize("n", SV_SIZES)
def test_selfcheck_impulse(gpu, rng, n, prec):
    rdt, cdt = PRECS[prec]
    ks = sorted({0, 1, n // 2, n - 1})
    x = np.zeros((len(ks), n), cdt)
    for i, k in enumerate(ks):
        x[i, k] = 1
    j = np.arange(n)
    phase = np.array([(j * k) % n for k in ks], np.float64) / n  # exact: j * k mod n
    fwd = np.exp(-2j * np.pi * phase)
    x_d = gpu.dev(x)
    check(gpu, ff.fft(x_d), x_d, cdt, fwd, prec, n, "fft of deltas")
    check(gpu, ff.ifft(x_d), x_d, cdt, np.conj(fwd) / n, prec, n, "ifft of deltas")
    xr_d = gpu.dev(x.real.astype(rdt))
    check(gpu, ff.rfft(xr_d), xr_d, cdt, fwd[:, : n // 2 + 1], prec, n, "rfft of deltas")


@pytest.mark.parametrize("prec", list(PRECS))
@pytest.mark.parametrize("n", SV_SIZES)
def test_selfcheck_shifts(gpu, rng, n, prec):
    rdt, cdt = PRECS[prec]
    x = crand(rng, (2, n), cdt)
    j = np.arange(n)
    X = gpu.host(ff.fft(gpu.dev(x))).astype(C128)
    for s in sorted({1, n // 3, n - 1}):
        # time shift <-> phase ramp
        Xs = gpu.host(ff.fft(gpu.dev(np.roll(x, s, axis=-1)))).astype(C128)
        assert_close(Xs, X * np.exp(-2j * np.pi * ((j * s) % n) / n), prec, n, f"time shift {s}")
        # frequency shift <-> modulation
        mod = np.exp(2j * np.pi * ((j * s) % n) / n)
        Xm = gpu.host(ff.fft(gpu.dev((x.astype(C128) * mod).astype(cdt)))).astype(C128)
        assert_close(Xm, np.roll(X, s, axis=-1), prec, n, f"frequency shift {s}")


@pytest.mark.parametrize("prec", list(PRECS))
def test_selfcheck_2d(gpu, rng, prec):
    rdt, cdt = PRECS[prec]
    shape = (12, 35)
    x = crand(rng, shape, cdt)
    X = gpu.host(ff.fft2(gpu.dev(x))).astype(C128)
    s0, s1 = 5, 11
    Xs = gpu.host(ff.fft2(gpu.dev(np.roll(x, (s0, s1), axis=(0, 1))))).astype(C128)
    ramp = np.exp(-2j * np.pi * (np.arange(12)[:, None] * s0 / 12 + np.arange(35)[None, :] * s1 / 35))
    assert_close(Xs, X * ramp, prec, 420, "2-D time shift")
    x_d, y_d = gpu.dev(x), gpu.dev(crand(rng, shape, cdt))
    a, b = 0.7 - 1.3j, -0.4 + 0.2j
    got = gpu.host(ff.fft2(x_d * a + y_d * b)).astype(C128)
    want = a * X + b * gpu.host(ff.fft2(y_d)).astype(C128)
    assert_close(got, want, prec, 420, "2-D linearity")


# ---------------------------------------------------------------------------
# 3. Fused chains against the unfused computation in the array library
# ---------------------------------------------------------------------------
CHAIN_CASES = [("single", None), ("single", "ortho"), ("single", "forward"), ("double", "ortho")]


@pytest.mark.parametrize("prec,norm", CHAIN_CASES)
def test_chain_c2c(gpu, rng, prec, norm):
    rdt, cdt = PRECS[prec]
    n = 96
    x_d = gpu.dev(crand(rng, (3, n), cdt))
    keep = gpu.host(x_d).copy()
    w_real = gpu.dev(np.hanning(n).astype(rdt))        # a 1-D window against a batched 2-D input
    w_cplx = gpu.dev(crand(rng, (n,), cdt))
    filt = gpu.dev(crand(rng, (n,), cdt))
    # real window in the prolog, complex filter and complex scale in the epilog
    got = ff.fft(x_d, norm=norm, prolog={"multiply": w_real}, epilog={"multiply": filt, "scale": 2 - 1j})
    want = gpu.lib_fft("fft", x_d * w_real, norm=norm) * filt * (2 - 1j)
    check(gpu, got, x_d, cdt, gpu.host(want), prec, n, "fft: prolog real window, epilog filter + scale")
    # complex window + scale + conj in the prolog, complex scale in the epilog, inverse
    got = ff.ifft(x_d, norm=norm, prolog={"multiply": w_cplx, "scale": 0.5, "conj": True},
                  epilog={"scale": 0.3 + 0.4j})
    want = gpu.lib_fft("ifft", gpu.conj(x_d * 0.5 * w_cplx), norm=norm) * (0.3 + 0.4j)
    check(gpu, got, x_d, cdt, gpu.host(want), prec, n, "ifft: prolog complex window + scale + conj, epilog scale")
    # epilog multiply + scale + conj
    got = ff.fft(x_d, norm=norm, prolog={"scale": 1j}, epilog={"multiply": w_real, "scale": 1.5, "conj": True})
    want = gpu.conj(gpu.lib_fft("fft", x_d * 1j, norm=norm) * 1.5 * w_real)
    check(gpu, got, x_d, cdt, gpu.host(want), prec, n, "fft: prolog complex scale, epilog window + scale + conj")
    assert np.array_equal(gpu.host(x_d), keep), "a fused transform modified its input"


@pytest.mark.parametrize("prec,norm", CHAIN_CASES)
def test_chain_r2c(gpu, rng, prec, norm):
    rdt, cdt = PRECS[prec]
    n = 100
    x_d = gpu.dev(rrand(rng, (3, n), rdt))
    w = gpu.dev(np.hamming(n).astype(rdt))
    filt = gpu.dev(crand(rng, (n // 2 + 1,), cdt))
    got = ff.rfft(x_d, norm=norm, prolog={"multiply": w, "scale": 0.5},
                  epilog={"multiply": filt, "conj": True, "scale": 3.0})
    want = gpu.conj(gpu.lib_fft("rfft", x_d * w * 0.5, norm=norm) * filt * 3.0)
    check(gpu, got, x_d, cdt, gpu.host(want), prec, n, "rfft: prolog window + scale, epilog filter + conj + scale")
    # epilog scale only
    got = ff.rfft(x_d, norm=norm, epilog={"scale": -0.75})
    want = gpu.lib_fft("rfft", x_d, norm=norm) * -0.75
    check(gpu, got, x_d, cdt, gpu.host(want), prec, n, "rfft: epilog scale")


@pytest.mark.parametrize("prec,norm", CHAIN_CASES)
def test_chain_c2r(gpu, rng, prec, norm):
    rdt, cdt = PRECS[prec]
    n = 100
    m = n // 2 + 1
    y = half_spectrum(rng, (3, m), [-1], n, cdt)
    y_d = gpu.dev(y)
    keep = y.copy()
    ramp = np.exp(-2j * np.pi * np.arange(m) / n)
    ramp[0], ramp[-1] = 1.0, -1.0  # real at DC and Nyquist: the product stays a valid half spectrum
    ramp_d = gpu.dev(ramp.astype(cdt))
    w_d = gpu.dev(np.hanning(n).astype(rdt))
    got = ff.irfft(y_d, n=n, norm=norm, prolog={"multiply": ramp_d, "scale": 2.0, "conj": True},
                   epilog={"multiply": w_d, "scale": 0.25})
    want = gpu.lib_fft("irfft", gpu.conj(y_d * 2.0 * ramp_d), n=n, norm=norm) * w_d * 0.25
    check(gpu, got, y_d, rdt, gpu.host(want), prec, n, "irfft: prolog ramp + scale + conj, epilog window + scale")
    assert np.array_equal(gpu.host(y_d), keep), "irfft modified its input"
    # a real prolog window (DC / Nyquist stay real) and an epilog scale
    wh_d = gpu.dev(np.linspace(0.5, 1.5, m).astype(rdt))
    got = ff.irfft(y_d, n=n, norm=norm, prolog={"multiply": wh_d}, epilog={"scale": 3.0})
    want = gpu.lib_fft("irfft", y_d * wh_d, n=n, norm=norm) * 3.0
    check(gpu, got, y_d, rdt, gpu.host(want), prec, n, "irfft: prolog real window, epilog scale")


def test_chain_broadcast_nd(gpu, rng):
    cdt = np.complex128
    x = crand(rng, (4, 6, 8))
    x_d = gpu.dev(x)
    col, e = rrand(rng, (6, 1)), rrand(rng, (4, 1, 1))
    got = ff.fft2(x_d, prolog={"multiply": gpu.dev(col)}, epilog={"multiply": gpu.dev(e)})
    check(gpu, got, x_d, cdt, np.fft.fft2(x * col) * e, "double", 48, "fft2 with broadcast chains")
    # with n padding the prolog multiplies the padded input
    w = rrand(rng, (10,))
    got = ff.fft(x_d, n=10, prolog={"multiply": gpu.dev(w)})
    check(gpu, got, x_d, cdt, np.fft.fft(np.pad(x, [(0, 0), (0, 0), (0, 2)]) * w), "double", 10, "fft n=10 prolog")
    # 4 axes: the prolog goes with the first cuFFT call, the epilog with the last
    x4 = crand(rng, (2, 3, 4, 5))
    x4_d = gpu.dev(x4)
    w4, e4 = rrand(rng, (2, 3, 4, 5)), crand(rng, (3, 1, 5))
    got = ff.fftn(x4_d, prolog={"multiply": gpu.dev(w4), "conj": True}, epilog={"multiply": gpu.dev(e4), "scale": 2.0})
    check(gpu, got, x4_d, cdt, np.fft.fftn(np.conj(x4 * w4)) * e4 * 2.0, "double", 120, "fftn 4 axes chains")


@pytest.mark.parametrize("prec", list(PRECS))
def test_planner_chains(gpu, rng, prec):
    rdt, cdt = PRECS[prec]
    n = 80
    x1, x2 = crand(rng, (5, n), cdt), crand(rng, (5, n), cdt)
    x1_d, x2_d = gpu.dev(x1), gpu.dev(x2)
    w = np.hanning(n).astype(rdt)
    w_d = gpu.dev(w)
    filt = crand(rng, (n,), cdt)
    filt_d = gpu.dev(filt)

    def want(x, wv, inverse=False):
        f = np.fft.ifft if inverse else np.fft.fft
        return np.conj(f(x.astype(C128) * wv.astype(np.float64)) * filt.astype(C128) * 2.0)

    with ff.FFT(x1_d, axes=[-1]) as f:
        assert f.kind == "c2c" and f.result_shape == (5, n)
        f.plan(prolog={"multiply": w_d}, epilog={"multiply": filt_d, "scale": 2.0, "conj": True})
        assert f.describe().startswith("fft cuda/cufft"), f.describe()
        for i in range(3):
            check(gpu, f.execute(), x1_d, cdt, want(x1, w), prec, n, f"planned execute #{i}")
        check(gpu, f.execute(direction="inverse"), x1_d, cdt, want(x1, w, True), prec, n, "planned inverse")
        f.reset_operand(x2_d)
        check(gpu, f.execute(), x2_d, cdt, want(x2, w), prec, n, "after reset_operand")
        out = gpu.empty((5, n), cdt)
        assert f.execute(out=out) is out
        check(gpu, out, x2_d, cdt, want(x2, w), prec, n, "execute(out=)")
        # the chain arrays are read at each execute
        gpu.fill(w_d, 2.0)
        check(gpu, f.execute(), x2_d, cdt, want(x2, np.full(n, 2.0)), prec, n, "window changed in place")
        # another layout of the same shape (re-plans)
        x3_d = gpu.fortran(gpu.dev(x1))
        f.reset_operand(x3_d)
        check(gpu, f.execute(), x3_d, cdt, want(x1, np.full(n, 2.0)), prec, n, "F-order operand")
    with pytest.raises(fusemath.InvalidStateError):
        f.execute()
    # r2c and c2r planners with chains
    r = rrand(rng, (5, 18), rdt)
    r_d = gpu.dev(r)
    wr = np.hanning(18).astype(rdt)
    g = ff.FFT(r_d, axes=-1)
    assert g.kind == "r2c" and g.result_shape == (5, 10)
    g.plan(prolog={"multiply": gpu.dev(wr)}, epilog={"scale": 2.0}, effort="estimate")
    assert g.describe().startswith("fft cuda/cufft"), g.describe()
    for _ in range(2):
        check(gpu, g.execute(), r_d, cdt, 2 * np.fft.rfft(r.astype(np.float64) * wr), prec, 18, "planned r2c")
    r2 = rrand(rng, (5, 18), rdt)
    g.reset_operand(gpu.dev(r2))
    check(gpu, g.execute(), r_d, cdt, 2 * np.fft.rfft(r2.astype(np.float64) * wr), prec, 18, "r2c after reset")
    g.free()
    y = half_spectrum(rng, (5, 10), [-1], 18, cdt)
    y_d = gpu.dev(y)
    h = ff.FFT(y_d, axes=-1, kind="c2r", n=18)
    assert h.result_shape == (5, 18)
    h.plan(epilog={"multiply": gpu.dev(wr), "scale": 0.5}, norm="ortho")
    for _ in range(2):
        check(gpu, h.execute(), y_d, rdt, np.fft.irfft(y.astype(C128), n=18, norm="ortho") * wr * 0.5, prec, 18,
              "planned c2r")
    assert np.array_equal(gpu.host(y_d), y), "the c2r planner modified its operand"
    h.free()


# ---------------------------------------------------------------------------
# 4. Raw CUDA C callbacks
# ---------------------------------------------------------------------------
SRC_PHASE_F = r"""
__device__ float2 phase_f(float2 v, unsigned long long offset, const void *data)
{
    float a = 0.01f * (float)offset;
    float c = cosf(a), s = sinf(a);
    float2 r;
    r.x = v.x * c - v.y * s;
    r.y = v.x * s + v.y * c;
    return r;
}
"""

SRC_ADD_DATA = r"""
__device__ float2 add_data(float2 v, unsigned long long offset, const void *data)
{
    const float *d = (const float *)data;
    v.x += d[offset];
    return v;
}
"""

SRC_TWICE_PLUS_W = r"""
__device__ float2 twice_plus_w(float2 v, unsigned long long offset, const void *data)
{
    const float2 *w = (const float2 *)data;
    float2 r;
    r.x = 2.0f * v.x + w[offset].x;
    r.y = 2.0f * v.y + w[offset].y;
    return r;
}
"""

SRC_TWIDDLE_D = r"""
__device__ double2 twiddle_d(double2 v, unsigned long long offset, const void *data)
{
    double a = -0.003 * (double)offset;
    double c = cos(a), s = sin(a);
    double2 r;
    r.x = v.x * c - v.y * s;
    r.y = v.x * s + v.y * c;
    return r;
}
"""

SRC_PHASE_D = r"""
__device__ double2 phase_d(double2 v, unsigned long long offset, const void *data)
{
    double a = 0.01 * (double)offset;
    double c = cos(a), s = sin(a);
    double2 r;
    r.x = v.x * c - v.y * s;
    r.y = v.x * s + v.y * c;
    return r;
}
"""


def _src_real(t):
    return f"""
__device__ {t} ramp_{t}({t} v, unsigned long long offset, const void *data)
{{
    return v * ({t})(1.0 + 0.001 * (double)offset);
}}

__device__ {t} half_plus_mod3_{t}({t} v, unsigned long long offset, const void *data)
{{
    return v * ({t})0.5 + ({t})(offset % 3ULL);
}}
"""


def _flat(shape):
    return np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)


@pytest.mark.parametrize("extra", ["plain", "scale+conj"])
def test_callback_prolog_phase(gpu, rng, extra):
    shape = (4, 128)
    x = crand(rng, shape, np.complex64)
    x_d = gpu.dev(x)
    chain = {"source": SRC_PHASE_F, "name": "phase_f"}
    v = x.astype(C128)
    if extra == "scale+conj":  # the raw function runs after scale / conj of the same chain
        chain.update({"scale": 2.0, "conj": True})
        v = np.conj(2.0 * v)
    phase = np.exp(1j * 0.01 * _flat(shape))
    y = call_unmodified(gpu, ff.fft, x_d, prolog=chain)
    check(gpu, y, x_d, np.complex64, np.fft.fft(v * phase), "single", 128, f"prolog phase callback ({extra})")
    # the same against the unfused computation in the array library
    unfused = gpu.lib_fft("fft", gpu.dev((v * phase).astype(np.complex64)))
    assert_close(gpu.host(y), gpu.host(unfused).astype(C128), "single", 128, "against the library's fft")


def test_callback_epilog_reads_data(gpu, rng):
    shape = (4, 128)
    x = crand(rng, shape, np.complex64)
    d = rrand(rng, shape, np.float32)
    x_d, d_d = gpu.dev(x), gpu.dev(d)
    chain = {"source": SRC_ADD_DATA, "name": "add_data", "data": d_d}
    y = ff.fft(x_d, epilog=chain)
    check(gpu, y, x_d, np.complex64, np.fft.fft(x.astype(C128)) + d, "single", 128, "epilog fft(x) + data")
    # after the norm and the chain's scale; into out=
    out = gpu.empty(shape, np.complex64)
    chain2 = dict(chain, scale=0.5)
    assert ff.fft(x_d, norm="ortho", out=out, epilog=chain2) is out
    check(gpu, out, x_d, np.complex64, 0.5 * np.fft.fft(x.astype(C128), norm="ortho") + d, "single", 128,
          "epilog 0.5 * ortho fft(x) + data, out=")
    assert np.array_equal(gpu.host(d_d), d), "the data array was modified"


def test_callback_after_multiply_gets_its_pointer(gpu, rng):
    """With "multiply", data is the multiplied array: raw(scale * x * w) = 2 * (0.5 * x * w) + w."""
    shape = (4, 128)
    x = crand(rng, shape, np.complex64)
    w = crand(rng, shape, np.complex64)
    x_d, w_d = gpu.dev(x), gpu.dev(w)
    y = ff.fft(x_d, prolog={"multiply": w_d, "scale": 0.5, "source": SRC_TWICE_PLUS_W, "name": "twice_plus_w"})
    xw, w128 = x.astype(C128), w.astype(C128)
    check(gpu, y, x_d, np.complex64, np.fft.fft(xw * w128 + w128), "single", 128, "prolog multiply then callback")


@pytest.mark.parametrize("prec", list(PRECS))
def test_callback_real(gpu, rng, prec):
    rdt, cdt = PRECS[prec]
    t = "float" if prec == "single" else "double"
    src = _src_real(t)
    n = 96
    shape = (3, n)
    x = rrand(rng, shape, rdt)
    x_d = gpu.dev(x)
    y = call_unmodified(gpu, ff.rfft, x_d, prolog={"source": src, "name": f"ramp_{t}"})
    want = np.fft.rfft(x.astype(np.float64) * (1.0 + 0.001 * _flat(shape)))
    check(gpu, y, x_d, cdt, want, prec, n, f"rfft prolog callback ({t})")
    h = half_spectrum(rng, (3, n // 2 + 1), [-1], n, cdt)
    h_d = gpu.dev(h)
    y = call_unmodified(gpu, ff.irfft, h_d, n=n, epilog={"source": src, "name": f"half_plus_mod3_{t}"})
    want = 0.5 * np.fft.irfft(h.astype(C128), n=n) + _flat(shape) % 3
    check(gpu, y, h_d, rdt, want, prec, n, f"irfft epilog callback ({t})")


def test_callback_complex128(gpu, rng):
    shape = (3, 210)
    x = crand(rng, shape, C128)
    x_d = gpu.dev(x)
    tw = np.exp(-0.003j * _flat(shape))
    y = ff.fft(x_d, epilog={"source": SRC_TWIDDLE_D, "name": "twiddle_d"})
    check(gpu, y, x_d, C128, np.fft.fft(x) * tw, "double", 210, "epilog double2 callback")
    y = ff.ifft(x_d, norm="forward", prolog={"source": SRC_PHASE_D, "name": "phase_d"},
                epilog={"source": SRC_TWIDDLE_D, "name": "twiddle_d"})
    want = np.fft.ifft(x * np.exp(0.01j * _flat(shape)), norm="forward") * tw
    check(gpu, y, x_d, C128, want, "double", 210, "prolog and epilog double2 callbacks")


@pytest.mark.parametrize("prec", list(PRECS))
@pytest.mark.parametrize("mode", ["auto", "kernel", "callback", "pass"])
def test_fused_kernel_and_cufft_agree(gpu, rng, mode, prec):
    """fft(x * w) * s through the fused kernel and through cuFFT (load callback, pass), against
    numpy: every radix plan, a transposed batch (the transform along axis 0), in place."""
    rdt, cdt = PRECS[prec]
    top = 4096 if cdt == np.complex64 else 2048
    for n in (2, 16, 32, 512, top):
        x = crand(rng, (n, 6), cdt)
        w = (0.5 + rng.random(n)).astype(rdt)
        x_d, w_d = gpu.dev(x), gpu.dev(w[:, None])
        want = np.fft.ifft(x.astype(C128) * w[:, None], axis=0) * 3.0
        with ff.FFT(x_d, axes=0) as f:
            f.plan(prolog={"multiply": w_d}, epilog={"scale": 3.0}, gpu_prolog=mode)
            check(gpu, f.execute(direction="inverse"), x_d, cdt, want, prec, n, f"{mode} n={n}")
            # a strided transform axis with the rows neighbours in memory: the kernel's lanes mode
            assert ("cuda/fftkernel" in f.describe()) == (mode in ("auto", "kernel")), (mode, f.describe())
            y_d = gpu.dev(np.zeros_like(x))
            f.execute(direction="inverse", out=y_d)
            check(gpu, y_d, x_d, cdt, want, prec, n, f"{mode} n={n} out=")
        # in place on a row-major batch
        xr = crand(rng, (3, n), cdt)
        xr_d = gpu.dev(xr)
        with ff.FFT(xr_d, axes=-1) as g:
            g.plan(prolog={"multiply": gpu.dev(w), "conj": True}, gpu_prolog=mode)
            assert ("cuda/fftkernel" in g.describe()) == (mode in ("auto", "kernel")), (mode, g.describe())
            g.execute(out=xr_d)
        check(gpu, xr_d, xr_d, cdt, np.fft.fft(np.conj(xr.astype(C128) * w)), prec, n, f"{mode} n={n} in place")


@pytest.mark.parametrize("n,rows,engine", [(128, 1024, "cuda/fftkernel"), (1024, 128, "callbacks=lto"),
                                             (4096, 32, "callbacks=lto"), (8192, 16, "steps="),
                                             (1024, 8, "cuda/fftkernel")])
def test_auto_complex128_rows(gpu, rng, n, rows, engine):
    """gpu_prolog="auto" on complex128 rows: cuFFT with a load callback for 256-4096 points on
    arrays beyond 2^16 elements (measured faster there), the fused kernel for short rows, the
    multi-step from 8192 points and on small arrays; the same answer whichever runs."""
    x = crand(rng, (rows, n), C128)
    w = 0.5 + rng.random(n)
    x_d = gpu.dev(x)
    with ff.FFT(x_d, axes=-1) as f:
        f.plan(prolog={"multiply": gpu.dev(w)}, epilog={"scale": 0.25})
        assert engine in f.describe(), f.describe()
        check(gpu, f.execute(), x_d, C128, np.fft.fft(x * w) * 0.25, "double", n, f.describe())


@pytest.mark.parametrize("mode", ["auto", "kernel"])
@pytest.mark.parametrize("prec", list(PRECS))
def test_fused_kernel_split_2d(gpu, rng, prec, mode):
    """Several axes with chains: one kernel pass per axis, in "auto" too where every axis is a
    power of two the kernel takes (2-D 4096^2 1.08x plain cuFFT, 3-D 512^3 1.08x); a 2-D c2c
    whose first axis is not (96) splits into the last axis through the kernel (prolog fused)
    and the first through cuFFT in place (epilog as its store callback); batched with such an
    axis stays with cuFFT. Against numpy, both directions."""
    rdt, cdt = PRECS[prec]
    split, passes, cufft = "fft split into [fft cuda/fftkernel", "fft cuda/fftkernel", "fft cuda/cufft"
    for shape, axes, auto_path in (((64, 256), (0, 1), passes), ((96, 256), (0, 1), split),
                                   ((8, 16, 32), (0, 1, 2), passes), ((5, 8, 128), (1, 2), passes),
                                   ((5, 12, 128), (1, 2), cufft)):
        x = crand(rng, shape, cdt)
        w = (0.5 + rng.random(shape[-1])).astype(rdt)
        filt = crand(rng, shape[-2:], cdt)
        x_d = gpu.dev(x)
        with ff.FFT(x_d, axes=axes) as f:
            chains = {"prolog": {"multiply": gpu.dev(w)}, "epilog": {"multiply": gpu.dev(filt), "conj": True}}
            if mode == "kernel" and auto_path != passes:  # an axis the kernel does not take
                with pytest.raises(fusemath.NotSupportedError, match="power of two"):
                    f.plan(gpu_prolog=mode, **chains)
                continue
            f.plan(gpu_prolog=mode, **chains)
            want_path = passes if mode == "kernel" else auto_path
            assert f.describe().startswith(want_path), f.describe()
            assert (f"axis-passes={len(axes)}" in f.describe()) == (want_path == passes), f.describe()
            npts = int(np.prod([shape[a] for a in axes]))
            want = np.conj(np.fft.fftn(x.astype(C128) * w, axes=axes) * filt)
            check(gpu, f.execute(), x_d, cdt, want, prec, npts, f"split {shape} forward")
            want = np.conj(np.fft.ifftn(x.astype(C128) * w, axes=axes) * filt)
            check(gpu, f.execute(direction="inverse"), x_d, cdt, want, prec, npts, f"split {shape} inverse")


def test_fused_kernel_split_without_epilog(gpu, rng):
    """One 2-D transform with a prolog only: the split's second step has no chain left and goes
    to cuFFT plain, forward and inverse (the backward norm lands in that step's epilog)."""
    x = crand(rng, (96, 256), np.complex64)  # 96: the first axis is cuFFT's
    w = (0.5 + rng.random(256)).astype(np.float32)
    x_d = gpu.dev(x)
    with ff.FFT(x_d, axes=(0, 1)) as f:
        f.plan(prolog={"multiply": gpu.dev(w), "scale": 2.0})
        assert f.describe().startswith("fft split into [fft cuda/fftkernel"), f.describe()
        check(gpu, f.execute(), x_d, np.complex64, np.fft.fft2(x.astype(C128) * w) * 2.0, "single", 96 * 256)
        check(gpu, f.execute(direction="inverse"), x_d, np.complex64, np.fft.ifft2(x.astype(C128) * w) * 2.0,
              "single", 96 * 256)


@pytest.mark.parametrize("prec", list(PRECS))
def test_fused_kernel_epilog_array(gpu, rng, prec):
    """The epilog's array multiplied inside the kernel (a complex filter over the transform, a real
    one per row), with a user prolog function; against numpy."""
    rdt, cdt = PRECS[prec]
    n = 512
    x = crand(rng, (7, n), cdt)
    filt, rowscale = crand(rng, (n,), cdt), (0.5 + rng.random((7, 1))).astype(rdt)
    x_d = gpu.dev(x)
    src, name = (SRC_PHASE_F, "phase_f") if cdt == np.complex64 else (SRC_PHASE_D, "phase_d")
    with ff.FFT(x_d, axes=-1) as f:
        f.plan(prolog={"source": src, "name": name}, epilog={"multiply": gpu.dev(filt)})
        assert f.describe().startswith("fft cuda/fftkernel"), f.describe()
        want = np.fft.fft(x.astype(C128) * np.exp(1j * 0.01 * _flat((7, n)))) * filt
        check(gpu, f.execute(), x_d, cdt, want, prec, n, "user prolog + epilog filter")
    with ff.FFT(x_d, axes=-1) as f:
        f.plan(epilog={"multiply": gpu.dev(rowscale), "conj": True})
        assert f.describe().startswith("fft cuda/fftkernel"), f.describe()
        check(gpu, f.execute(), x_d, cdt, np.conj(np.fft.fft(x.astype(C128)) * rowscale), prec, n, "row scale")


@pytest.mark.parametrize("shape,dtype,steps", [((3, 8192), np.complex64, "64x128"),
                                               ((2, 2 ** 20), np.complex64, "1024x1024"),
                                               ((1, 2 ** 22), np.complex64, "128x128x256"),
                                               ((2, 4096), np.complex128, "64x64"),
                                               ((2, 3, 2 ** 14), np.complex128, "128x128"),
                                               ((1, 2 ** 21), np.complex128, "128x128x128")])
def test_fused_kernel_four_step(gpu, rng, shape, dtype, steps):
    """Lengths beyond one block through the multi-step (gpu_prolog="kernel"; two or three kernels):
    a window on load, a filter and conj on store, both directions, in place too."""
    prec = "single" if dtype == np.complex64 else "double"
    n = shape[-1]
    x = crand(rng, shape, dtype)
    w = (0.5 + rng.random(n)).astype(np.float32 if dtype == np.complex64 else np.float64)
    filt = crand(rng, (n,), dtype)
    x_d = gpu.dev(x)
    with ff.FFT(x_d, axes=-1) as f:
        f.plan(prolog={"multiply": gpu.dev(w)}, epilog={"multiply": gpu.dev(filt), "conj": True}, gpu_prolog="kernel")
        assert f"steps={steps} " in f.describe(), f.describe()
        xw = x.astype(C128) * w
        check(gpu, f.execute(), x_d, dtype, np.conj(np.fft.fft(xw) * filt), prec, n, f"four-step {shape}")
        check(gpu, f.execute(direction="inverse"), x_d, dtype, np.conj(np.fft.ifft(xw) * filt), prec, n,
              f"four-step {shape} inverse")
        y_d = gpu.dev(x)
        f.reset_operand(y_d)
        f.execute(out=y_d)
        check(gpu, y_d, y_d, dtype, np.conj(np.fft.fft(xw) * filt), prec, n, f"four-step {shape} in place")
    with ff.FFT(x_d, axes=-1) as f:  # auto takes the multi-step too (measured faster than cuFFT + a pass)
        f.plan(prolog={"multiply": gpu.dev(w)})
        assert f"steps={steps} " in f.describe(), f.describe()
        check(gpu, f.execute(), x_d, dtype, np.fft.fft(x.astype(C128) * w), prec, n, f"auto {shape}")
    with ff.FFT(x_d, axes=-1) as f:
        f.plan(prolog={"multiply": gpu.dev(w)}, gpu_prolog="pass")
        assert f.describe().startswith("fft cuda/cufft"), f.describe()


def test_fused_kernel_refusals(gpu, rng):
    """gpu_prolog="kernel" where the kernel does not apply: a clear error, not another path."""
    x_d = gpu.dev(crand(rng, (2, 96), np.complex64))
    with ff.FFT(x_d, axes=-1) as f:
        with pytest.raises(fusemath.NotSupportedError, match="power of two"):
            f.plan(epilog={"conj": True}, gpu_prolog="kernel")
    x_d = gpu.dev(crand(rng, (8192, 2), np.complex64))  # beyond one block, and not contiguous rows
    with ff.FFT(x_d, axes=0) as f:
        with pytest.raises(fusemath.NotSupportedError, match="4096"):
            f.plan(epilog={"conj": True}, gpu_prolog="kernel")
        f.plan(epilog={"conj": True})  # auto: cuFFT with a store callback
        assert f.describe().startswith("fft cuda/cufft"), f.describe()
    # empty operands with the kernel forced: nothing to compute, an empty result (no launch)
    x_d = gpu.dev(np.zeros((0, 8, 16), np.complex64))
    with ff.FFT(x_d, axes=(1, 2)) as f:
        f.plan(prolog={"multiply": gpu.dev(np.ones(16, np.float32))}, gpu_prolog="kernel")
        y = f.execute()
        assert gpu.host(y).shape == (0, 8, 16)
    # no chain: cuFFT runs plain transforms even when asked for the kernel
    x_d = gpu.dev(crand(rng, (2, 64), np.complex64))
    with ff.FFT(x_d, axes=-1) as f:
        f.plan(gpu_prolog="kernel")
        assert f.describe().startswith("fft cuda/cufft"), f.describe()


def test_callback_in_planner(gpu, rng):
    shape = (4, 128)
    x1, x2 = crand(rng, shape, np.complex64), crand(rng, shape, np.complex64)
    x1_d, x2_d = gpu.dev(x1), gpu.dev(x2)
    phase = np.exp(1j * 0.01 * _flat(shape))
    with ff.FFT(x1_d, axes=-1) as f:
        f.plan(prolog={"source": SRC_PHASE_F, "name": "phase_f"})
        # a 1-D c2c power of two: the user's function runs inside the fused kernel
        assert f.describe().startswith("fft cuda/fftkernel"), f.describe()
        for _ in range(2):
            check(gpu, f.execute(), x1_d, np.complex64, np.fft.fft(x1.astype(C128) * phase), "single", 128,
                  "planned callback")
        f.reset_operand(x2_d)
        check(gpu, f.execute(), x2_d, np.complex64, np.fft.fft(x2.astype(C128) * phase), "single", 128,
              "planned callback after reset_operand")


def test_callback_errors(gpu, rng):
    x_d = gpu.dev(crand(rng, (2, 64), np.complex64))
    # a name the source does not define
    with pytest.raises(fusemath.InvalidArgumentError, match="not_in_source"):
        ff.fft(x_d, prolog={"source": SRC_PHASE_F, "name": "not_in_source"})
    with pytest.raises(ValueError, match="not_in_source"):
        ff.fft(x_d, epilog={"source": SRC_ADD_DATA, "name": "not_in_source", "data": gpu.dev(np.zeros((2, 64),
                                                                                                   np.float32))})
    # a source that does not compile: the compiler's log in the message
    bad = r"""
__device__ float2 broken(float2 v, unsigned long long offset, const void *data)
{
    return v * undefined_thing;
}
"""
    with pytest.raises((fusemath.BackendError, fusemath.InvalidArgumentError)) as info:
        ff.fft(x_d, prolog={"source": bad, "name": "broken"})
    assert isinstance(info.value, (RuntimeError, ValueError))
    assert "error" in str(info.value).lower(), str(info.value)
    # names that are not C identifiers
    for name in ("a-b", "1x", ""):
        with pytest.raises(ValueError):
            ff.fft(x_d, prolog={"source": SRC_PHASE_F, "name": name})
    # a normal call still works afterwards
    x = gpu.host(x_d)
    check(gpu, ff.fft(x_d), x_d, np.complex64, np.fft.fft(x.astype(C128)), "single", 64, "after callback errors")


def test_callback_on_numpy_data_is_refused(rng):
    x = crand(rng, (2, 64), np.complex64)
    with pytest.raises((TypeError, ValueError), match=r"(?i)gpu|cuda"):
        ff.fft(x, prolog={"source": SRC_PHASE_F, "name": "phase_f"})
    with pytest.raises((TypeError, ValueError), match=r"(?i)gpu|cuda"):
        ff.fft(x, epilog={"source": SRC_ADD_DATA, "name": "add_data", "data": np.zeros((2, 64), np.float32)})


# ---------------------------------------------------------------------------
# 5. Streams
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["object", "int", "current", "planner"])
def test_stream(gpu, rng, how):
    """A transform on a non-default stream, read after synchronizing that stream only."""
    x = crand(rng, (128, 16384), np.complex64)
    want = np.fft.fft(x.astype(C128))
    s = gpu.new_stream()
    with gpu.on(s):
        x_d = gpu.dev(x)
    before = gpu.current_handle()
    if how == "current":
        with gpu.on(s):
            y = ff.fft(x_d)
            y2 = ff.fft(x_d, epilog={"scale": 2.0})
    elif how == "planner":  # two planners, both alive until the stream is synchronized
        f1, f2 = ff.FFT(x_d, axes=-1), ff.FFT(x_d, axes=-1)
        f1.plan()
        f2.plan(epilog={"scale": 2.0})
        y = f1.execute(stream=s)
        y2 = f2.execute(stream=s)
    else:
        arg = s if how == "object" else gpu.handle(s)
        y = ff.fft(x_d, stream=arg)
        y2 = ff.fft(x_d, epilog={"scale": 2.0}, stream=arg)
    assert gpu.current_handle() == before, "fusemath changed the current stream"
    s.synchronize()
    check(gpu, y, x_d, np.complex64, want, "single", 16384, f"stream ({how})")
    check(gpu, y2, x_d, np.complex64, 2 * want, "single", 16384, f"stream with a chain ({how})")


def test_stream_c2r_and_out(gpu, rng):
    h = half_spectrum(rng, (64, 2049), [-1], 4096, np.complex64)
    s = gpu.new_stream()
    with gpu.on(s):
        h_d = gpu.dev(h)
        out = gpu.empty((64, 4096), np.float32)
    assert ff.irfft(h_d, n=4096, out=out, stream=s) is out
    s.synchronize()
    check(gpu, out, h_d, np.float32, np.fft.irfft(h.astype(C128), n=4096), "single", 4096, "irfft on a stream")
    assert np.array_equal(gpu.host(h_d), h), "irfft modified its input"


def test_two_threads_own_plans_own_streams(gpu, rng):
    n_threads, reps = 2, 8
    xs = [crand(rng, (32, 2048 + 7 * t), np.complex64) for t in range(n_threads)]  # different sizes too
    wants = [np.fft.fft(x.astype(C128)) for x in xs]
    xs_d = [gpu.dev(x) for x in xs]
    outs = [[gpu.empty(x.shape, np.complex64) for _ in range(reps)] for x in xs]
    gpu.synchronize()
    errors = []
    barrier = threading.Barrier(n_threads, timeout=120)

    def work(t):
        try:
            s = gpu.new_stream()
            with ff.FFT(xs_d[t], axes=-1) as f:
                f.plan(epilog={"scale": float(t + 1)}, effort="estimate")
                barrier.wait()
                for o in outs[t]:
                    assert f.execute(out=o, stream=s) is o
                s.synchronize()
        except Exception as exc:  # reported below
            errors.append((t, exc))
            barrier.abort()  # never leave the other thread waiting

    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    for t in range(n_threads):
        for i, o in enumerate(outs[t]):
            check(gpu, o, xs_d[t], np.complex64, (t + 1) * wants[t], "single", xs[t].shape[-1],
                  f"thread {t} execute {i}")


# ---------------------------------------------------------------------------
# 6. Errors on GPU data (the classes of the CPU tests)
# ---------------------------------------------------------------------------
def test_errors(gpu, rng):
    x_d = gpu.dev(crand(rng, (4, 8), np.complex64))
    r_d = gpu.dev(rrand(rng, (4, 8), np.float32))
    with pytest.raises(ValueError, match="^Invalid number"):
        ff.fft(x_d, n=0)
    with pytest.raises(ValueError, match="^Invalid number"):
        ff.fft(x_d, n=-3)
    with pytest.raises(ValueError, match=r"s\[1\]"):
        ff.fftn(x_d, s=(4, 0))
    with pytest.raises(TypeError, match="n must be an int"):
        ff.fft(x_d, n=2.5)
    with pytest.raises(ValueError, match="norm"):
        ff.fft(x_d, norm="unitary")
    with pytest.raises(np.exceptions.AxisError):
        ff.fft(x_d, axis=2)
    with pytest.raises(np.exceptions.AxisError):
        ff.fftn(x_d, axes=(0, -3))
    with pytest.raises(TypeError, match="real input"):
        ff.rfft(x_d)
    with pytest.raises(TypeError, match="real input"):
        ff.rfftn(x_d)
    with pytest.raises(ValueError, match="irfft needs"):
        ff.irfft(gpu.dev(np.ones((3, 1), np.complex64)))
    # an irfft output that does not fit
    with pytest.raises(ValueError, match="out has shape"):
        ff.irfft(x_d, n=16, out=gpu.empty((4, 15), np.float32))
    with pytest.raises(ValueError, match="out has shape"):
        ff.irfft(x_d, out=gpu.empty((4, 8), np.float32))  # default n = 14
    with pytest.raises(TypeError, match="out has dtype"):
        ff.irfft(x_d, n=14, out=gpu.empty((4, 14), np.float64))
    with pytest.raises(TypeError, match="out has dtype"):
        ff.fft(x_d, out=gpu.empty((4, 8), np.complex128))
    with pytest.raises(TypeError, match="out must be"):
        ff.fft(x_d, out=np.empty((4, 8), np.complex64))
    # chain arrays
    with pytest.raises(ValueError, match=r"prolog\['multiply'\] has extent"):
        ff.fft(x_d, prolog={"multiply": gpu.dev(np.ones(7, np.float32))})
    with pytest.raises(ValueError, match=r"epilog\['multiply'\] has extent"):
        ff.rfft(r_d, epilog={"multiply": gpu.dev(np.ones(8, np.complex64))})
    with pytest.raises(TypeError, match=r"prolog\['multiply'\] has dtype"):
        ff.fft(x_d, prolog={"multiply": gpu.dev(np.ones(8, np.float64))})
    with pytest.raises(TypeError, match=r"prolog\['multiply'\] has dtype"):
        ff.rfft(r_d, prolog={"multiply": gpu.dev(np.ones(8, np.complex64))})
    with pytest.raises(TypeError, match=r"epilog\['multiply'\] has dtype"):
        ff.irfft(x_d, epilog={"multiply": gpu.dev(np.ones(14, np.complex64))})
    with pytest.raises(ValueError, match=r"prolog\['scale'\].*complex"):
        ff.rfft(r_d, prolog={"scale": 1j})
    with pytest.raises(ValueError, match=r"epilog\['scale'\].*complex"):
        ff.irfft(x_d, epilog={"scale": 1j})
    # a NumPy multiply array with GPU data
    with pytest.raises((TypeError, fusemath.DeviceError), match=r"prolog\['multiply'\]"):
        ff.fft(x_d, prolog={"multiply": np.ones(8, np.float32)})
    with pytest.raises((TypeError, fusemath.DeviceError), match=r"epilog\['multiply'\]"):
        ff.fft(x_d, epilog={"multiply": np.ones(8, np.complex64)})
    # the planner
    f = ff.FFT(x_d)
    f.plan()
    with pytest.raises(TypeError, match="out must be"):
        f.execute(out=np.empty((4, 8), np.complex64))
    with pytest.raises(ValueError, match="shape"):
        f.reset_operand(gpu.dev(np.ones((4, 9), np.complex64)))
    with pytest.raises(TypeError, match="dtype"):
        f.reset_operand(gpu.dev(np.ones((4, 8), np.complex128)))
    with pytest.raises(ValueError, match="must be an array of"):
        f.reset_operand(np.ones((4, 8), np.complex64))
    f.free()
    with pytest.raises(fusemath.InvalidStateError):
        f.execute()


def test_errors_other_library(gpu, rng):
    other = _load("torch" if gpu.name == "cupy" else "cupy")
    if isinstance(other, Exception):
        pytest.skip(f"the other array library is unavailable: {other}")
    x_d = gpu.dev(crand(rng, (4, 8), np.complex64))
    w_other = other.dev(np.ones(8, np.float32))
    with pytest.raises((TypeError, fusemath.DeviceError), match=r"prolog\['multiply'\]"):
        ff.fft(x_d, prolog={"multiply": w_other})
    with pytest.raises((TypeError, fusemath.DeviceError), match=r"epilog\['multiply'\]"):
        ff.fft(x_d, epilog={"multiply": other.dev(np.ones(8, np.complex64))})
    with pytest.raises(TypeError, match="out must be"):
        ff.fft(x_d, out=other.empty((4, 8), np.complex64))


def test_device_mismatch_names_the_arguments(rng):
    """A chain array on another device than x: the core's two-slot device error comes back with the
    Python names of both (x, prolog['multiply']), never the core's slot names."""
    torch = pytest.importorskip("torch")
    x = torch.ones(4, 8, dtype=torch.complex64)  # cpu
    w = torch.ones(8, dtype=torch.float32, device="cuda")
    with pytest.raises(fusemath.DeviceError) as info:
        ff.fft(x, prolog={"multiply": w})
    text = str(info.value)
    assert "prolog['multiply']" in text and "prolog_array" not in text and " in is " not in text, text


# ---------------------------------------------------------------------------
# 7. Execution placement
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("prec", list(PRECS))
@pytest.mark.parametrize("func", ["fft", "ifft", "rfft", "irfft", "fft2", "rfftn", "irfftn"])
def test_numpy_input_execution_cuda(rng, func, prec):
    rdt, cdt = PRECS[prec]
    shape = (6, 40)
    if func.startswith("irfft"):
        x = full_half_spectrum(rng, (6, 21), [0, 1] if func == "irfftn" else [-1], cdt)
        odt, n = rdt, 40 * (6 if func == "irfftn" else 1)
    elif func.startswith("rfft"):
        x, odt, n = rrand(rng, shape, rdt), cdt, 240 if func == "rfftn" else 40
    else:
        x, odt, n = crand(rng, shape, cdt), cdt, 240 if func == "fft2" else 40
    keep = x.copy()
    got = getattr(ff, func)(x, execution="cuda")
    assert isinstance(got, np.ndarray) and got.dtype == odt, (type(got), getattr(got, "dtype", None))
    assert_close(got, getattr(np.fft, func)(_ref_input(x, prec)), prec, n, f"{func} execution='cuda'")
    assert np.array_equal(x, keep), "the NumPy input was modified"


def test_describe_on_gpu(gpu, rng):
    x_d = gpu.dev(crand(rng, (4, 32), np.complex64))
    with ff.FFT(x_d) as f:
        f.plan()
        text = f.describe()
        assert text.startswith("fft cuda/cufft"), text
        assert "fft cuda/cufft" in repr(f)
    r_d = gpu.dev(rrand(rng, (4, 32), np.float64))
    with ff.FFT(r_d, axes=(0, 1)) as g:
        g.plan(effort="estimate")
        assert g.describe().startswith("fft cuda/cufft"), g.describe()
        check(gpu, g.execute(), r_d, C128, np.fft.rfft2(gpu.host(r_d)), "double", 128, "r2c planner")


# ---------------------------------------------------------------------------
# 8. Half precision: PyTorch float16 / complex32 through cuFFT (CUDA_R_16F / CUDA_C_16F)
# ---------------------------------------------------------------------------
def _half_close(got, want, n, what):
    """max |got - want| <= 1.5e-3 * log2(n) * max |want| (half: an 11-bit mantissa)."""
    got, want = np.asarray(got).astype(C128), np.asarray(want).astype(C128)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    err, scale = float(np.abs(got - want).max()), float(np.abs(want).max())
    assert err <= 1.5e-3 * math.log2(n) * scale, f"{what}: relative error {err / scale:.3e} (n={n})"


@pytest.mark.parametrize("n", [256, 1024])
def test_half_rfft_irfft_torch(rng, n):
    torch = _get("torch").m
    x = rrand(rng, (8, n)).astype(np.float16)
    x_d = torch.from_numpy(x).to("cuda")
    y = ff.rfft(x_d)
    assert isinstance(y, torch.Tensor) and y.is_cuda and y.dtype == torch.complex32, y.dtype
    assert tuple(y.shape) == (8, n // 2 + 1)
    spec = y.to(torch.complex64).cpu().numpy()
    _half_close(spec, np.fft.rfft(x.astype(np.float64)), n, "rfft float16")
    z = ff.irfft(y, n=n)  # complex32 -> float16
    assert z.dtype == torch.float16 and tuple(z.shape) == (8, n)
    _half_close(z.float().cpu().numpy(), np.fft.irfft(spec.astype(C128), n=n), n, "irfft complex32")
    _half_close(z.float().cpu().numpy(), x.astype(np.float64), n, "float16 round trip")


def test_half_fft_complex32_torch(rng):
    torch = _get("torch").m
    n = 256
    x_d = torch.from_numpy(crand(rng, (8, n), np.complex64)).to("cuda").to(torch.complex32)
    xh = x_d.to(torch.complex64).cpu().numpy().astype(C128)  # the values half precision kept
    y = ff.fft(x_d)
    assert y.dtype == torch.complex32 and y.is_cuda
    _half_close(y.to(torch.complex64).cpu().numpy(), np.fft.fft(xh), n, "fft complex32")
    y = ff.ifft(x_d, norm="ortho")
    _half_close(y.to(torch.complex64).cpu().numpy(), np.fft.ifft(xh, norm="ortho"), n, "ifft complex32")
    # float16 into fft: complex32, as torch.fft.fft gives
    r = rrand(rng, (4, n)).astype(np.float16)
    y = ff.fft(torch.from_numpy(r).to("cuda"))
    assert y.dtype == torch.complex32
    _half_close(y.to(torch.complex64).cpu().numpy(), np.fft.fft(r.astype(np.float64)), n, "fft float16")
    # chains run as passes (cuFFT has no half callbacks), computing in float
    w = (0.5 + 0.5 * rng.random(n)).astype(np.float16)
    y = ff.fft(x_d, prolog={"multiply": torch.from_numpy(w).to("cuda"), "conj": True}, epilog={"scale": 0.5})
    want = np.fft.fft(np.conj(xh * w.astype(np.float64))) * 0.5
    _half_close(y.to(torch.complex64).cpu().numpy(), want, n, "fft complex32 with chains")
    with ff.FFT(x_d, axes=-1) as f:
        f.plan(epilog={"scale": 2.0}, effort="estimate")
        assert "c32 c2c" in f.describe() and "callbacks=passes" in f.describe(), f.describe()
        _half_close(f.execute().to(torch.complex64).cpu().numpy(), np.fft.fft(xh) * 2, n, "planner complex32")
    with ff.FFT(x_d) as f:  # default axes: both (a 2-D transform)
        f.plan(effort="estimate")
        _half_close(f.execute().to(torch.complex64).cpu().numpy(), np.fft.fft2(xh), 8 * n, "planner complex32 2-D")
    # cuFFT's half precision takes powers of two only
    with pytest.raises(fusemath.NotSupportedError, match="powers of two"):
        ff.fft(x_d, n=100)


def test_half_cupy_float16_promotes(rng):
    """CuPy has no complex32: float16 keeps NumPy 2's promotion (complex64), as cupy.fft does."""
    cp = _get("cupy").m
    x = rrand(rng, (4, 64)).astype(np.float16)
    y = ff.rfft(cp.asarray(x))
    assert y.dtype == np.complex64
    assert_close(cp.asnumpy(y), np.fft.rfft(x.astype(np.float64)), "single", 64, "cupy float16 rfft")
    with pytest.raises(TypeError, match="PyTorch"):
        ff.FFT(cp.asarray(x))
