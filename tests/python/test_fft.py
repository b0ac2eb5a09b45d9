"""fusemath.fft against numpy.fft: every function, norm, many sizes, axes, n / s, out=,
dtypes, fused prolog / epilog, the FFT planner, and the errors.

Tests that need an FFT backend skip (with the reason) when planning reports none."""
import math
import re
import os
import subprocess
import sys

import numpy as np
import pytest

import fusemath
import fusemath.fft as ff

# numpy 2 deprecates s= without axes= (the reference calls of the N-D cases); fusemath keeps
# numpy's current meaning (the last len(s) axes)
pytestmark = pytest.mark.filterwarnings("ignore:`axes` should not be `None`:DeprecationWarning")

NORMS = [None, "backward", "ortho", "forward"]
SIZES = [1, 2, 3, 7, 16, 17, 97, 360, 1009, 4096]


def _has_backend():
    try:
        ff.fft(np.ones(4, np.complex128))
        return True, ""
    except fusemath.NotSupportedError as exc:
        return False, str(exc)


_OK, _WHY = _has_backend()
needs_backend = pytest.mark.skipif(not _OK, reason=f"no CPU FFT backend: {_WHY}")


def tol(dtype, n):
    """Relative tolerance scaled by log n."""
    eps = 1e-12 if np.dtype(dtype) in (np.float64, np.complex128) else 1e-5
    return eps * max(1.0, math.log2(max(n, 2)))


def close(got, want, dtype, n):
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    scale = max(np.abs(want).max(initial=0.0), 1.0)
    err = np.abs(got - want).max(initial=0.0)
    assert err <= tol(dtype, n) * scale * 4, f"max error {err} (scale {scale}, n {n})"


def crand(rng, shape, dtype=np.complex128):
    x = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def rrand(rng, shape, dtype=np.float64):
    return rng.standard_normal(shape).astype(dtype)


# ---------------------------------------------------------------------------
# module layout
# ---------------------------------------------------------------------------
def test_module_is_module():
    import types

    assert isinstance(fusemath.fft, types.ModuleType)
    assert fusemath.fft is ff
    for name in ("fft", "ifft", "fft2", "ifft2", "fftn", "ifftn", "rfft", "irfft", "rfft2", "irfft2", "rfftn",
                 "irfftn", "FFT"):
        assert callable(getattr(ff, name))
    assert "fft" in fusemath.__all__


# ---------------------------------------------------------------------------
# 1-D
# ---------------------------------------------------------------------------
@needs_backend
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("norm", NORMS)
def test_fft_ifft_sizes(rng, n, norm):
    x = crand(rng, (n,))
    close(ff.fft(x, norm=norm), np.fft.fft(x, norm=norm), np.complex128, n)
    close(ff.ifft(x, norm=norm), np.fft.ifft(x, norm=norm), np.complex128, n)


@needs_backend
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("norm", NORMS)
def test_rfft_irfft_sizes(rng, n, norm):
    x = rrand(rng, (n,))
    close(ff.rfft(x, norm=norm), np.fft.rfft(x, norm=norm), np.complex128, n)
    if n >= 2:
        y = crand(rng, (n,))
        close(ff.irfft(y, norm=norm), np.fft.irfft(y, norm=norm), np.float64, n)
    y = crand(rng, (n // 2 + 1,))
    close(ff.irfft(y, n=n, norm=norm), np.fft.irfft(y, n=n, norm=norm), np.float64, n)


@needs_backend
@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
@pytest.mark.parametrize("n", [7, 16, 97, 1009])
def test_single_precision(rng, dtype, n):
    x = (crand(rng, (3, n), dtype) if np.dtype(dtype).kind == "c" else rrand(rng, (3, n), dtype))
    got = ff.fft(x)
    assert got.dtype == np.complex64
    close(got, np.fft.fft(x.astype(np.complex128)), np.complex64, n)
    if np.dtype(dtype).kind == "f":
        got = ff.rfft(x)
        assert got.dtype == np.complex64
        close(got, np.fft.rfft(x.astype(np.float64)), np.complex64, n)
        back = ff.irfft(got, n=n)
        assert back.dtype == np.float32
        close(back, x, np.float32, n)
    else:
        got = ff.ifft(x)
        assert got.dtype == np.complex64
        close(got, np.fft.ifft(x.astype(np.complex128)), np.complex64, n)


@needs_backend
@pytest.mark.parametrize("dtype,want", [(np.float64, np.complex128), (np.int32, np.complex128),
                                        (np.int64, np.complex128), (np.bool_, np.complex128),
                                        (np.float16, np.complex64)])
def test_real_input_promotes(rng, dtype, want):
    x = (rng.standard_normal(12) * 4).astype(dtype)
    got = ff.fft(x)
    assert got.dtype == want
    assert np.fft.fft(x).dtype == want  # numpy 2 agrees
    close(got, np.fft.fft(x), want, 12)


@needs_backend
def test_list_input(rng):
    close(ff.fft([1.0, 2.0, 3.0]), np.fft.fft([1.0, 2.0, 3.0]), np.complex128, 3)


@needs_backend
@pytest.mark.parametrize("n", [1, 5, 8, 13, 20])
@pytest.mark.parametrize("func", ["fft", "ifft", "rfft"])
def test_n_pad_crop(rng, func, n):
    x = rrand(rng, (4, 10)) if func == "rfft" else crand(rng, (4, 10))
    for axis in (-1, 0, 1):
        close(getattr(ff, func)(x, n=n, axis=axis), getattr(np.fft, func)(x, n=n, axis=axis), np.complex128, n)


@needs_backend
@pytest.mark.parametrize("n", [1, 2, 5, 8, 13, 20])
def test_irfft_n(rng, n):
    y = crand(rng, (3, 6))
    for axis in (-1, 0):
        close(ff.irfft(y, n=n, axis=axis), np.fft.irfft(y, n=n, axis=axis), np.float64, n)


@needs_backend
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2, -3])
def test_axis_3d(rng, axis):
    x = crand(rng, (5, 6, 7))
    close(ff.fft(x, axis=axis), np.fft.fft(x, axis=axis), np.complex128, 7)
    r = rrand(rng, (5, 6, 7))
    close(ff.rfft(r, axis=axis), np.fft.rfft(r, axis=axis), np.complex128, 7)
    close(ff.irfft(x, axis=axis), np.fft.irfft(x, axis=axis), np.float64, 12)


@needs_backend
def test_non_contiguous_views(rng):
    base = crand(rng, (12, 20))
    for x in (base[::2, ::3], base.T, base[:, 1:17], base[::-1], base.T[::2]):
        close(ff.fft(x), np.fft.fft(x), np.complex128, 20)
        close(ff.fft(x, axis=0), np.fft.fft(x, axis=0), np.complex128, 20)
        close(ff.fft2(x), np.fft.fft2(x), np.complex128, 20)
    r = rrand(rng, (12, 20))
    for x in (r[::2, ::3], r.T, r[:, ::-1]):
        close(ff.rfft(x), np.fft.rfft(x), np.complex128, 20)
        close(ff.rfft2(x), np.fft.rfft2(x), np.complex128, 20)


@needs_backend
def test_broadcast_input(rng):
    x = np.broadcast_to(crand(rng, (1, 16)), (4, 16))
    close(ff.fft(x), np.fft.fft(x), np.complex128, 16)


@needs_backend
def test_empty_batch():
    x = np.zeros((0, 8), np.complex128)
    assert ff.fft(x).shape == np.fft.fft(x).shape
    assert ff.rfft(np.zeros((0, 8))).shape == (0, 5)


# ---------------------------------------------------------------------------
# 2-D / N-D
# ---------------------------------------------------------------------------
ND_CASES = [
    ((6, 8), None, None),
    ((6, 8), None, (0, 1)),
    ((6, 8), None, (1, 0)),
    ((5, 6, 7), None, None),
    ((5, 6, 7), None, (0, 2)),
    ((5, 6, 7), None, (-1, -3)),
    ((5, 6, 7), (4, 9), None),
    ((5, 6, 7), (3, 4, 10), None),
    ((5, 6, 7), (8, 3), (0, 2)),
    ((3, 4, 5, 6), None, None),          # 4 axes: two fused calls
    ((2, 3, 4, 5, 6), None, (0, 1, 3, 4)),
    ((2, 3, 4, 5, 6), (3, 2, 4, 5, 6), None),
]


@needs_backend
@pytest.mark.parametrize("shape,s,axes", ND_CASES)
@pytest.mark.parametrize("norm", NORMS)
def test_fftn(rng, shape, s, axes, norm):
    x = crand(rng, shape)
    n = int(np.prod(shape))
    close(ff.fftn(x, s=s, axes=axes, norm=norm), np.fft.fftn(x, s=s, axes=axes, norm=norm), np.complex128, n)
    close(ff.ifftn(x, s=s, axes=axes, norm=norm), np.fft.ifftn(x, s=s, axes=axes, norm=norm), np.complex128, n)


@needs_backend
@pytest.mark.parametrize("shape,s,axes", ND_CASES)
@pytest.mark.parametrize("norm", NORMS)
def test_rfftn_irfftn(rng, shape, s, axes, norm):
    x = rrand(rng, shape)
    n = int(np.prod(shape))
    close(ff.rfftn(x, s=s, axes=axes, norm=norm), np.fft.rfftn(x, s=s, axes=axes, norm=norm), np.complex128, n)
    y = crand(rng, shape)
    close(ff.irfftn(y, s=s, axes=axes, norm=norm), np.fft.irfftn(y, s=s, axes=axes, norm=norm), np.float64, n)


@needs_backend
@pytest.mark.parametrize("s", [None, (4, 6), (9, 11), (1, 1)])
@pytest.mark.parametrize("axes", [(-2, -1), (0, 2), (2, 0)])
@pytest.mark.parametrize("norm", NORMS)
def test_2d_functions(rng, s, axes, norm):
    x = crand(rng, (5, 6, 7))
    r = rrand(rng, (5, 6, 7))
    for name, a, dt in (("fft2", x, np.complex128), ("ifft2", x, np.complex128), ("rfft2", r, np.complex128),
                        ("irfft2", x, np.float64)):
        close(getattr(ff, name)(a, s=s, axes=axes, norm=norm), getattr(np.fft, name)(a, s=s, axes=axes, norm=norm),
              dt, 42)


@needs_backend
def test_fftn_empty_axes(rng):
    x = rrand(rng, (3, 4))
    got = ff.fftn(x, axes=())
    np.testing.assert_array_equal(got, np.fft.fftn(x, axes=()))
    assert got is not x


@needs_backend
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_roundtrips(rng, dtype):
    x = rrand(rng, (4, 6, 9), dtype)
    close(ff.irfftn(ff.rfftn(x), s=x.shape), x, dtype, 216)
    close(ff.ifftn(ff.fftn(x)).real, x, dtype, 216)
    close(ff.irfft(ff.rfft(x, n=9), n=9), x, dtype, 9)


# ---------------------------------------------------------------------------
# out=
# ---------------------------------------------------------------------------
@needs_backend
def test_out(rng):
    x = crand(rng, (4, 16))
    out = np.empty((4, 16), np.complex128)
    r = ff.fft(x, out=out)
    assert r is out
    close(out, np.fft.fft(x), np.complex128, 16)
    rr = rrand(rng, (4, 16))
    out = np.empty((4, 9), np.complex128)
    assert ff.rfft(rr, out=out) is out
    close(out, np.fft.rfft(rr), np.complex128, 16)
    out = np.empty((4, 16), np.float64)
    assert ff.irfft(np.fft.rfft(rr), n=16, out=out) is out
    close(out, rr, np.float64, 16)
    # a strided out
    big = np.zeros((4, 32), np.complex128)
    r = ff.fft(x, out=big[:, ::2])
    close(big[:, ::2], np.fft.fft(x), np.complex128, 16)
    assert np.all(big[:, 1::2] == 0)
    # 4 axes with out
    x4 = crand(rng, (2, 3, 4, 5))
    out = np.empty(x4.shape, np.complex128)
    assert ff.fftn(x4, out=out) is out
    close(out, np.fft.fftn(x4), np.complex128, 120)


@needs_backend
def test_out_in_place(rng):
    x = crand(rng, (3, 16))
    want = np.fft.fft(x)
    got = ff.fft(x, out=x)
    assert got is x
    close(x, want, np.complex128, 16)


def test_out_errors(rng):
    x = crand(rng, (4, 16))
    with pytest.raises(ValueError, match="out has shape"):
        ff.fft(x, out=np.empty((4, 15), np.complex128))
    # an out= of another dtype casts as numpy.fft's does (same_kind), or is numpy's refusal
    o64 = np.empty((4, 16), np.complex64)
    assert ff.fft(x, out=o64) is o64
    np.testing.assert_allclose(o64, np.fft.fft(x), rtol=1e-6, atol=1e-5)
    o32 = np.empty((4, 16), np.float32)
    assert ff.irfft(np.fft.rfft(x.real), n=16, out=o32) is o32
    np.testing.assert_allclose(o32, x.real, rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="Cannot cast ufunc 'fft' output from dtype\\('complex128'\\) to "
                       "dtype\\('float64'\\)"):
        ff.rfft(x.real, out=np.empty((4, 9), np.float64))
    with pytest.raises(TypeError, match="Cannot cast ufunc 'fft' output"):
        ff.fft(x, out=np.empty((4, 16), np.int64))
    ro = np.empty((4, 16), np.complex128)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        ff.fft(x, out=ro)
    with pytest.raises(TypeError, match="out must be"):
        ff.fft(x, out=[0] * 16)


# ---------------------------------------------------------------------------
# prolog / epilog
# ---------------------------------------------------------------------------
@needs_backend
@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
def test_prolog_epilog_c2c(rng, dtype):
    n = 64
    x = crand(rng, (3, n), dtype)
    rdt = np.float32 if dtype == np.complex64 else np.float64
    w = np.hanning(n).astype(rdt)
    filt = crand(rng, (n,), dtype)
    got = ff.fft(x, prolog={"multiply": w, "scale": 0.5}, epilog={"multiply": filt, "scale": 2 - 1j, "conj": True})
    x128 = x.astype(np.complex128)
    want = np.conj(np.fft.fft(x128 * w * 0.5) * filt.astype(np.complex128) * (2 - 1j))
    close(got, want, dtype, n)
    got = ff.ifft(x, norm="ortho", prolog={"conj": True, "scale": 1j}, epilog={"multiply": w})
    want = np.fft.ifft(np.conj(x128 * 1j), norm="ortho") * w
    close(got, want, dtype, n)


@needs_backend
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_prolog_epilog_r2c_c2r(rng, dtype):
    n = 100
    x = rrand(rng, (2, n), dtype)
    w = np.hamming(n).astype(dtype)
    cdt = np.complex64 if dtype == np.float32 else np.complex128
    ramp = np.exp(-2j * np.pi * np.arange(n // 2 + 1) / n).astype(cdt)
    got = ff.rfft(x, prolog={"multiply": w}, epilog={"multiply": ramp, "conj": True, "scale": 3.0})
    want = np.conj(np.fft.rfft(x.astype(np.float64) * w) * ramp * 3.0)
    close(got, want, dtype, n)
    y = np.fft.rfft(x.astype(np.float64)).astype(cdt)
    got = ff.irfft(y, n=n, prolog={"multiply": ramp, "scale": 2.0}, epilog={"multiply": w, "scale": 0.25})
    want = np.fft.irfft(y.astype(np.complex128) * ramp * 2.0, n=n) * w * 0.25
    close(got, want, dtype, n)


@needs_backend
def test_chain_broadcast_nd(rng):
    x = crand(rng, (4, 6, 8))
    col = rrand(rng, (6, 1))
    e = rrand(rng, (4, 1, 1))
    got = ff.fft2(x, prolog={"multiply": col}, epilog={"multiply": e})
    close(got, np.fft.fft2(x * col) * e, np.complex128, 48)
    # with s= padding the prolog multiplies the padded input
    w = rrand(rng, (10,))
    got = ff.fft(x, n=10, prolog={"multiply": w})
    close(got, np.fft.fft(np.pad(x, [(0, 0), (0, 0), (0, 2)]) * w), np.complex128, 10)
    # 4 axes: the prolog goes with the first call, the epilog with the last
    x4 = crand(rng, (2, 3, 4, 5))
    w4 = rrand(rng, (2, 3, 4, 5))
    e4 = crand(rng, (3, 1, 5))
    got = ff.fftn(x4, prolog={"multiply": w4, "conj": True}, epilog={"multiply": e4, "scale": 2.0})
    close(got, np.fft.fftn(np.conj(x4 * w4)) * e4 * 2.0, np.complex128, 120)
    r4 = rrand(rng, (2, 3, 4, 5))
    got = ff.irfftn(ff.rfftn(r4, prolog={"scale": 2.0}), s=r4.shape, epilog={"scale": 0.5})
    close(got, r4, np.float64, 120)


def test_chain_errors(rng):
    x = crand(rng, (3, 8))
    with pytest.raises(TypeError, match="prolog must be a dict"):
        ff.fft(x, prolog=2.0)
    with pytest.raises(ValueError, match="unknown keys"):
        ff.fft(x, epilog={"scal": 2.0})
    with pytest.raises(TypeError, match=r"prolog\['scale'\]"):
        ff.fft(x, prolog={"scale": "2"})
    with pytest.raises(TypeError, match=r"epilog\['conj'\]"):
        ff.fft(x, epilog={"conj": 1})
    with pytest.raises(ValueError, match=r"prolog\['multiply'\] has extent"):
        ff.fft(x, prolog={"multiply": np.ones(7)})
    with pytest.raises(ValueError, match=r"epilog\['multiply'\] has extent"):
        ff.rfft(x.real, epilog={"multiply": np.ones(8, np.complex128)})
    with pytest.raises(TypeError, match=r"prolog\['multiply'\] has dtype"):
        ff.fft(x, prolog={"multiply": np.ones(8, np.float32)})
    with pytest.raises(TypeError, match=r"prolog\['multiply'\] has dtype"):
        ff.rfft(x.real, prolog={"multiply": np.ones(8, np.complex128)})
    with pytest.raises(TypeError, match=r"epilog\['multiply'\] has dtype"):
        ff.irfft(x, epilog={"multiply": np.ones(14, np.complex128)})
    with pytest.raises(TypeError, match=r"prolog\['multiply'\] must be an array"):
        ff.fft(x, prolog={"multiply": [1.0] * 8})
    with pytest.raises(ValueError, match=r"prolog\['scale'\].*complex"):
        ff.rfft(x.real, prolog={"scale": 1j})
    with pytest.raises(ValueError, match=r"epilog\['scale'\].*complex"):
        ff.irfft(x, epilog={"scale": 1j})
    with pytest.raises(ValueError, match="not finite"):
        ff.fft(x, epilog={"scale": float("nan")})


# ---------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------
def test_errors(rng):
    x = crand(rng, (4, 8))
    r = x.real.copy()
    # numpy's own words first (code matching numpy.fft's messages keeps working), then the detail
    with pytest.raises(ValueError, match=r"^Invalid number of FFT data points \(0\) specified\. .*n = 0"):
        ff.fft(x, n=0)
    with pytest.raises(ValueError, match=r"^Invalid number of FFT data points \(-3\) specified\."):
        ff.fft(x, n=-3)
    with pytest.raises(ValueError, match=r"s\[1\]"):
        ff.fftn(x, s=(4, 0))
    with pytest.raises(TypeError, match="^'float' object cannot be interpreted as an integer .*n must be an int"):
        ff.fft(x, n=2.5)
    with pytest.raises(ValueError, match='^Invalid norm value unitary; should be "backward","ortho" or "forward"'):
        ff.fft(x, norm="unitary")
    with pytest.raises(np.exceptions.AxisError, match="^axis 2 is out of bounds for array of dimension 2 "):
        ff.fft(x, axis=2)
    with pytest.raises(IndexError):  # AxisError is an IndexError too, as numpy raises
        ff.fft(x, axis=-3)
    with pytest.raises(ValueError, match=r"^Shape and axes have different lengths\. "):
        ff.fftn(x, s=(4, 8), axes=(0,))
    with pytest.warns(DeprecationWarning), pytest.raises(np.exceptions.AxisError, match="only 2 dimensions"):
        ff.fftn(x, s=(1, 4, 8))
    with pytest.raises(TypeError, match="real input"):
        ff.rfft(x)
    with pytest.raises(TypeError):
        np.fft.rfft(x)  # numpy agrees
    with pytest.raises(TypeError, match="real input"):
        ff.rfftn(x)
    with pytest.raises(ValueError, match="irfft needs"):
        ff.irfft(np.ones(1, np.complex128))
    with pytest.raises(IndexError, match="^axis -1 is out of bounds for array of dimension 0"):
        ff.fft(np.complex128(1.0))  # numpy: IndexError (AxisError is one)
    with pytest.raises(TypeError, match="must be an array, not None"):
        ff.fft(None)
    with pytest.raises(TypeError):
        ff.fft(np.array(["a", "b"], dtype=object))
    with pytest.raises(TypeError, match="datetime64"):  # (long double is transformed: test_fft_dropin.py)
        ff.fft(np.zeros(4, "M8[s]"))
    with pytest.raises(ValueError, match="execution"):
        ff.fft(x, execution="tpu")
    assert ff.fft2(r, s=(4, 8)).shape == (4, 8)


# ---------------------------------------------------------------------------
# FFT planner
# ---------------------------------------------------------------------------
@needs_backend
def test_planner_c2c(rng):
    x = crand(rng, (4, 32))
    with ff.FFT(x, axes=[-1]) as f:
        assert f.kind == "c2c" and f.result_shape == (4, 32)
        f.plan()
        assert "fft" in f.describe()
        for _ in range(3):
            close(f.execute(), np.fft.fft(x, axis=-1), np.complex128, 32)
        close(f.execute(direction="inverse"), np.fft.ifft(x), np.complex128, 32)
        x2 = crand(rng, (4, 32))
        f.reset_operand(x2)
        close(f.execute(), np.fft.fft(x2), np.complex128, 32)
        # another layout of the same shape re-plans
        x3 = np.asfortranarray(crand(rng, (4, 32)))
        f.reset_operand(x3)
        close(f.execute("forward"), np.fft.fft(x3), np.complex128, 32)
        out = np.empty((4, 32), np.complex128)
        assert f.execute(out=out) is out
        close(out, np.fft.fft(x3), np.complex128, 32)
    with pytest.raises(fusemath.InvalidStateError):
        f.execute()


@needs_backend
@pytest.mark.parametrize("mode", ["auto", "kernel", "pass", "callback"])
def test_gpu_prolog_modes_on_the_cpu(rng, mode):
    """gpu_prolog places the chains on the GPU; on NumPy data every mode plans the CPU path and
    gives the same answer (one code for both devices)."""
    x = crand(rng, (3, 64))
    w = np.hanning(64)
    with ff.FFT(x, axes=-1) as f:
        f.plan(prolog={"multiply": w}, epilog={"scale": 0.5}, gpu_prolog=mode)
        assert f.describe().startswith("fft cpu/fftw"), f.describe()
        np.testing.assert_allclose(f.execute(), np.fft.fft(x * w) * 0.5, rtol=1e-12, atol=1e-12)


def test_planner_default_axes_and_norm(rng):
    x = crand(rng, (3, 4, 5, 6))
    f = ff.FFT(x)
    assert f.axes == (1, 2, 3)
    f.plan(norm="ortho")
    close(f.execute(), np.fft.fftn(x, axes=(1, 2, 3), norm="ortho"), np.complex128, 120)
    close(f.execute("inverse"), np.fft.ifftn(x, axes=(1, 2, 3), norm="ortho"), np.complex128, 120)
    f.free()
    f.free()  # idempotent


@needs_backend
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_planner_r2c_c2r(rng, dtype):
    x = rrand(rng, (5, 18), dtype)
    f = ff.FFT(x)
    assert f.kind == "r2c" and f.result_shape == (5, 10)
    w = np.hanning(18).astype(dtype)
    f.plan(prolog={"multiply": w}, epilog={"scale": 2.0})
    y = f.execute()
    close(y, 2 * np.fft.rfft2(x.astype(np.float64) * w), dtype, 90)
    with pytest.raises(ValueError, match="forward only"):
        f.execute(direction="inverse")
    yy = np.fft.rfft(x.astype(np.float64)).astype(np.complex64 if dtype == np.float32 else np.complex128)
    g = ff.FFT(yy, axes=-1, kind="c2r", n=18)
    assert g.result_shape == (5, 18)
    g.plan()
    close(g.execute(), x, dtype, 18)
    with pytest.raises(ValueError, match="inverse only"):
        g.execute("forward")
    g2 = ff.FFT(yy, axes=-1, kind="c2r", n=19)
    g2.plan()
    close(g2.execute(), np.fft.irfft(yy.astype(np.complex128), n=19), dtype, 19)


@needs_backend
def test_planner_chain_arrays_are_read_at_execute(rng):
    x = crand(rng, (16,))
    w = np.ones(16)
    f = ff.FFT(x)
    f.plan(prolog={"multiply": w})
    close(f.execute(), np.fft.fft(x), np.complex128, 16)
    w[:] = 2.0
    close(f.execute(), np.fft.fft(2 * x), np.complex128, 16)


def test_planner_errors(rng):
    x = crand(rng, (4, 8))
    with pytest.raises(ValueError, match="kind"):
        ff.FFT(x, kind="dct")
    with pytest.raises(TypeError, match="does not convert"):
        ff.FFT(x.real.astype(np.int64))
    with pytest.raises(TypeError, match="c2c"):
        ff.FFT(x, kind="r2c")
    with pytest.raises(ValueError, match="repeats"):
        ff.FFT(x, axes=(0, -2))
    with pytest.raises(np.exceptions.AxisError):
        ff.FFT(x, axes=(5,))
    with pytest.raises(ValueError, match="1 to 3"):
        ff.FFT(crand(rng, (2, 2, 2, 2)), axes=(0, 1, 2, 3))
    with pytest.raises(ValueError, match="is for kind"):
        ff.FFT(x, n=4)
    with pytest.raises(ValueError, match="needs 3 input points"):
        ff.FFT(x, kind="c2r", n=4)
    f = ff.FFT(x)
    with pytest.raises(fusemath.InvalidStateError, match="plan"):
        f.execute()
    with pytest.raises(ValueError, match="effort"):
        f.plan(effort="exhaustive")
    with pytest.raises(ValueError, match="norm"):
        f.plan(norm="unitary")
    with pytest.raises(ValueError, match="gpu_prolog"):
        f.plan(gpu_prolog="fused")
    with pytest.raises(ValueError, match="unknown keys"):
        f.plan(prolog={"window": 1})
    with pytest.raises(ValueError, match="direction"):
        f._direction("sideways")
    with pytest.raises(ValueError, match="shape"):
        f.reset_operand(crand(rng, (4, 9)))
    with pytest.raises(TypeError, match="dtype"):
        f.reset_operand(x.astype(np.complex64))
    f.free()
    for call in (f.plan, f.execute, f.describe, lambda: f.reset_operand(x), lambda: f.result_shape,
                 lambda: f.result_dtype, lambda: f.kind, lambda: f.axes):
        with pytest.raises(fusemath.InvalidStateError, match="freed"):
            call()
    assert "freed" in repr(f)


@needs_backend
def test_planner_plans_per_layout_are_bounded(rng):
    """Each new operand layout gets its own plan; resetting to ever new strides must not
    grow the planner without bound, and every result stays right."""
    f = ff.FFT(crand(rng, (6, 16)), axes=(1,))
    f.plan(effort="estimate")
    for extra in range(40):
        x = np.empty((6, 16 + extra), np.complex128)[:, :16]
        x[...] = crand(rng, (6, 16))
        f.reset_operand(x)
        np.testing.assert_allclose(f.execute(), np.fft.fft(x, axis=1), rtol=1e-12, atol=1e-12)
    assert fusemath.cache_size() <= 1024  # the plans live in the context's bounded cache
    assert f.describe().startswith("fft")


@needs_backend
def test_planner_effort_measure(rng):
    x = crand(rng, (8, 64))
    keep = x.copy()
    f = ff.FFT(x, axes=(1,))
    f.plan(effort="measure")
    np.testing.assert_array_equal(x, keep)  # planning does not touch the operand
    close(f.execute(), np.fft.fft(keep), np.complex128, 64)


@needs_backend
def test_low_level_plan(rng):
    x = crand(rng, (4, 16))
    out = np.empty_like(x)
    C = fusemath._fusemath
    p, specs = C.call(C.OP_FFT, C.CALL_PLAN, 0, (x, out, None, None),
                      (0, 0, (1,), 0, 0, 0, 0, 0, 0, None, 0, None, None, None, None, None, 0, 0))
    assert specs == ((C.FFT_OUT, (4, 16), "c128", None),)
    assert p.op == "fft"
    p.execute(fusemath._fusemath.data_ptr(x), fusemath._fusemath.data_ptr(out), None, None)
    close(out, np.fft.fft(x), np.complex128, 16)
    with pytest.raises(TypeError, match="4 addresses"):
        p.execute(1, 2)
    p.free()


# ---------------------------------------------------------------------------
# an array library (the torch-like stand-in of fakelib: host memory)
# ---------------------------------------------------------------------------
@needs_backend
def test_library_arrays(rng):
    import fakelib

    fakelib.install()
    x = crand(rng, (3, 16))
    t = fakelib.tensor(x)
    got = ff.fft(t)
    assert type(got) is type(t)
    close(np.asarray(got._a), np.fft.fft(x), np.complex128, 16)
    got = ff.ifft(t, n=8)  # cropping is a view
    close(np.asarray(got._a), np.fft.ifft(x, n=8), np.complex128, 8)


@needs_backend
def test_half_precision_on_the_cpu(rng):
    """f16 / c32 FFTs run on cuda only: complex32 host tensors are refused by name (FFTW has no
    half precision); float16 host arrays keep NumPy 2's promotion; the planner, which does not
    convert, refuses float16 arrays of libraries without complex32."""
    import fakelib

    fakelib.install()
    c32 = fakelib.Tensor(np.zeros((2, 16), np.uint32), fakelib.complex32)
    for func in (ff.fft, ff.ifft, ff.irfft):
        with pytest.raises(fusemath.NotSupportedError, match="cuda only"):
            func(c32)
    with pytest.raises(TypeError, match="real input"):
        ff.rfft(c32)
    x16 = rng.standard_normal((2, 16)).astype(np.float16)
    got = ff.rfft(x16)
    assert got.dtype == np.complex64
    close(got, np.fft.rfft(x16.astype(np.float64)), np.complex64, 16)
    with pytest.raises(TypeError, match="PyTorch"):
        ff.FFT(x16)


# ---------------------------------------------------------------------------
# GPU
# ---------------------------------------------------------------------------
@pytest.mark.gpu
def test_gpu_fft_cupy():
    cp = pytest.importorskip("cupy")
    x = cp.asarray(np.random.default_rng(0).standard_normal((4, 64)) + 0j)
    try:
        y = ff.fft(x)
    except (fusemath.NotSupportedError, fusemath.UnavailableError) as exc:
        pytest.skip(f"no GPU FFT backend: {exc}")
    assert isinstance(y, cp.ndarray)
    close(cp.asnumpy(y), np.fft.fft(cp.asnumpy(x)), np.complex128, 64)


@pytest.mark.gpu
def test_gpu_fft_torch():
    torch = pytest.importorskip("torch")
    x = torch.randn(4, 64, dtype=torch.complex64, device="cuda")
    try:
        y = ff.fft(x, epilog={"scale": 2.0})
    except (fusemath.NotSupportedError, fusemath.UnavailableError) as exc:
        pytest.skip(f"no GPU FFT backend: {exc}")
    assert isinstance(y, torch.Tensor) and y.is_cuda
    close(y.cpu().numpy(), 2 * np.fft.fft(x.cpu().numpy()), np.complex64, 64)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_single_multiaxis_chains_split_into_batched_steps(dtype):
    """A single 2-D/3-D transform with a chain runs as two batched steps (the chain inside
    them): c2c, r2c and c2r against numpy on the unfused computation."""
    rng = np.random.default_rng(11)
    rdt = np.float32 if dtype == np.complex64 else np.float64
    tol = 2e-5 if dtype == np.complex64 else 1e-11
    x = (rng.standard_normal((24, 20, 18)) + 1j * rng.standard_normal((24, 20, 18))).astype(dtype)
    w = rng.random((20, 18)).astype(rdt)
    v = (rng.random((24, 20, 18)) + 1j * rng.random((24, 20, 18))).astype(dtype)

    def close(got, ref):
        assert np.linalg.norm(got - ref) <= tol * np.linalg.norm(ref), np.linalg.norm(got - ref) / np.linalg.norm(ref)

    got = ff.fftn(x, prolog={"multiply": w}, epilog={"scale": 0.5, "conj": True})
    close(got, np.conj(np.fft.fftn(x * w) * 0.5))
    # the scale folds into the prolog: the second step is chain-free and runs in place directly
    close(ff.fftn(x, prolog={"multiply": w}, epilog={"scale": 0.5}, norm="ortho"),
          np.fft.fftn(x * w, norm="ortho") * 0.5)
    with ff.FFT(x, axes=(0, 1, 2)) as plan:
        plan.plan(prolog={"multiply": w}, epilog={"multiply": v}, effort="estimate")
        assert "split" in plan.describe()
        # 3-D on the cpu: 2-D slabs over the inner axes (prolog per slab), then the outer axis
        assert "axes=(1,2) forward prolog=multiply" in plan.describe(), plan.describe()
        close(plan.execute(), np.fft.fftn(x * w) * v)
    xr = rng.standard_normal((24, 20, 18)).astype(rdt)
    vh = v[..., :10]
    close(ff.rfftn(xr, prolog={"multiply": w}, epilog={"multiply": vh}), np.fft.rfftn(xr * w) * vh)
    spec = np.fft.rfftn(xr).astype(dtype)
    wr = rng.random((24, 20, 10)).astype(rdt)
    got = ff.irfftn(spec, s=(24, 20, 18), prolog={"multiply": wr}, epilog={"multiply": w, "scale": 2.0})
    close(got, np.fft.irfftn(spec * wr, s=(24, 20, 18)) * w * 2.0)


@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
def test_epilog_scale_folded_into_a_multiplying_prolog(norm):
    """An epilog that is only a scale (and the norm) is applied inside the prolog when the
    prolog multiplies anyway; with the prolog's conj the scale goes in conjugated."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((6, 40)) + 1j * rng.standard_normal((6, 40)))
    w = rng.random(40) + 1j * rng.random(40)
    s = 0.3 + 0.4j
    got = ff.fft(x, norm=norm, prolog={"multiply": w, "conj": True}, epilog={"scale": s})
    ref = np.fft.fft(np.conj(x * w), norm=norm) * s
    assert np.allclose(got, ref, rtol=1e-12, atol=1e-12)
    got = ff.ifft(x, norm=norm, prolog={"multiply": w}, epilog={"scale": s})
    assert np.allclose(got, np.fft.ifft(x * w, norm=norm) * s, rtol=1e-12, atol=1e-12)
    xr = rng.standard_normal((6, 40))
    got = ff.rfft(xr, norm=norm, prolog={"multiply": w.real}, epilog={"scale": 2.5})
    assert np.allclose(got, np.fft.rfft(xr * w.real, norm=norm) * 2.5, rtol=1e-12, atol=1e-12)
    got = ff.rfft(xr, norm=norm, prolog={"multiply": w.real}, epilog={"scale": s})  # complex: stays an epilog
    assert np.allclose(got, np.fft.rfft(xr * w.real, norm=norm) * s, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("chain", [False, True])
def test_few_big_transforms_run_one_at_a_time_on_all_threads(chain):
    """Fewer transforms than threads, each >= 64K points: one transform at a time with all
    the threads in FFTW (and the chain passes), out of place, in place and with a strided
    output; each against numpy."""
    rng = np.random.default_rng(21)
    x = (rng.standard_normal((3, 1 << 16)) + 1j * rng.standard_normal((3, 1 << 16))).astype(np.complex64)
    w = rng.random(1 << 16).astype(np.float32)
    kw = {"prolog": {"multiply": w}, "epilog": {"scale": 0.5}} if chain else {}
    ref = np.fft.fft(x * w) * 0.5 if chain else np.fft.fft(x)
    tol = 2e-5 * np.linalg.norm(ref)
    old = fusemath.get_num_threads()
    fusemath.set_num_threads(8)
    try:
        with ff.FFT(x, axes=(-1,)) as plan:
            plan.plan(effort="estimate", **kw)
            assert "threads=1 fftw_threads=8" in plan.describe(), plan.describe()
            assert "path=direct" not in plan.describe(), plan.describe()
            assert np.linalg.norm(plan.execute() - ref) <= tol
            wide = np.zeros((3, 2 << 16), np.complex64)
            assert np.linalg.norm(plan.execute(out=wide[:, ::2]) - ref) <= tol
            assert not wide[:, 1::2].any()
        xi = x.copy()
        with ff.FFT(xi, axes=(-1,)) as plan:
            plan.plan(effort="estimate", **kw)
            plan.execute(out=xi)
            assert np.linalg.norm(xi - ref) <= tol
    finally:
        fusemath.set_num_threads(old)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_outer_step_epilog_runs_across_the_columns(dtype):
    """The second step of a split 2-D/3-D transform applies its epilog point by point across
    the columns (unit-stride batch): an array that varies along them, one broadcast over them
    (folded into the scale), scale with conj; against numpy."""
    rng = np.random.default_rng(31)
    rdt = np.float32 if dtype == np.complex64 else np.float64
    tol = 3e-5 if dtype == np.complex64 else 1e-11

    def close(got, ref):
        assert np.linalg.norm(got - ref) <= tol * np.linalg.norm(ref), np.linalg.norm(got - ref) / np.linalg.norm(ref)

    x = (rng.standard_normal((40, 36)) + 1j * rng.standard_normal((40, 36))).astype(dtype)
    full = (rng.random((40, 36)) + 1j * rng.random((40, 36))).astype(dtype)
    col = rng.random((40, 1)).astype(rdt)
    with ff.FFT(x, axes=(0, 1)) as plan:
        plan.plan(epilog={"multiply": full}, effort="estimate")
        second = plan.describe().split("then")[1]
        assert "axes=(0)" in second and "epilog=multiply" in second, plan.describe()
        close(plan.execute(), np.fft.fft2(x) * full)
    close(ff.fft2(x, epilog={"multiply": col, "scale": 0.25 - 0.5j}), np.fft.fft2(x) * col * (0.25 - 0.5j))
    close(ff.ifft2(x, norm="ortho", epilog={"scale": 3.0, "conj": True}), np.conj(np.fft.ifft2(x, norm="ortho") * 3.0))
    x3 = (rng.standard_normal((12, 10, 8)) + 1j * rng.standard_normal((12, 10, 8))).astype(dtype)
    f3 = (rng.random((12, 10, 8)) + 1j * rng.random((12, 10, 8))).astype(dtype)
    close(ff.fftn(x3, epilog={"multiply": f3, "conj": True}), np.conj(np.fft.fftn(x3) * f3))
    close(ff.fftn(x3, epilog={"multiply": f3[:, :1, :1]}), np.fft.fftn(x3) * f3[:, :1, :1])


@pytest.mark.parametrize("inplace", [False, True])
def test_epilog_only_batched_rows_through_the_scratch(inplace):
    """An epilog alone on dense batched rows copies each chunk to the scratch first
    (path=scratch>out), out of place and in place (the chunk is gathered before FFTW writes
    out); against numpy."""
    rng = np.random.default_rng(41)
    x = (rng.standard_normal((64, 512)) + 1j * rng.standard_normal((64, 512))).astype(np.complex128)
    f = rng.random(512) + 1j * rng.random(512)
    ref = np.conj(np.fft.fft(x) * f * 2.0)
    src = x.copy()
    with ff.FFT(src, axes=(-1,)) as plan:
        plan.plan(epilog={"multiply": f, "scale": 2.0, "conj": True}, effort="estimate")
        assert "path=scratch>out" in plan.describe(), plan.describe()
        got = plan.execute(out=src) if inplace else plan.execute()
    assert np.allclose(got, ref, rtol=1e-12, atol=1e-10)
    if not inplace:
        assert np.array_equal(src, x)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize("threads", [1, 3])
def test_column_transforms_move_in_tiles(dtype, threads):
    """Transforms whose points are strided and whose batch axis has unit stride (fft(x,
    axis=0) of a C-ordered array; 2-D over the leading axes of a 3-D one) run as column
    chunks (path=columns): plain, with prolog / epilog arrays broadcast over the columns and
    varying along them, conj, r2c / c2r, in place, a chunk remainder; plain columns of up to
    256 points keep FFTW's own strided plan; against numpy."""
    rng = np.random.default_rng(51)
    rdt = np.float32 if dtype == np.complex64 else np.float64
    tol = 3e-5 if dtype == np.complex64 else 1e-11

    def close(got, ref):
        assert np.linalg.norm(got - ref) <= tol * np.linalg.norm(ref), np.linalg.norm(got - ref) / np.linalg.norm(ref)

    old = fusemath.get_num_threads()
    fusemath.set_num_threads(threads)
    try:
        x = (rng.standard_normal((256, 300)) + 1j * rng.standard_normal((256, 300))).astype(dtype)
        wcol = rng.random((256, 1)).astype(rdt)
        wfull = (rng.random((256, 300)) + 1j * rng.random((256, 300))).astype(dtype)
        with ff.FFT(x, axes=(0,)) as plan:  # plain short columns: FFTW's own strided plan
            plan.plan(effort="estimate")
            assert "path=direct" in plan.describe(), plan.describe()
        with ff.FFT(x, axes=(0,)) as plan:
            plan.plan(effort="estimate", epilog={"scale": 2.0})
            assert "path=columns" in plan.describe(), plan.describe()
            close(plan.execute(), np.fft.fft(x, axis=0) * 2.0)
            xi = x.copy()  # in place: FFTW on the caller's columns, the epilog across them
            plan.reset_operand(xi)
            plan.execute(out=xi)
            close(xi, np.fft.fft(x, axis=0) * 2.0)
        xl = (rng.standard_normal((2048, 40)) + 1j * rng.standard_normal((2048, 40))).astype(dtype)
        with ff.FFT(xl, axes=(0,)) as plan:  # plain long columns go through the scratch
            plan.plan(effort="estimate")
            assert "path=columns" in plan.describe(), plan.describe()
            close(plan.execute(), np.fft.fft(xl, axis=0))
        close(ff.fft(x, axis=0, prolog={"multiply": wcol}, epilog={"multiply": wfull, "conj": True}),
              np.conj(np.fft.fft(x * wcol, axis=0) * wfull))
        close(ff.ifft(x, axis=0, norm="ortho", prolog={"multiply": wfull, "scale": 0.5j}, epilog={"multiply": wcol}),
              np.fft.ifft(x * wfull * 0.5j, axis=0, norm="ortho") * wcol)
        xi = x.copy()
        ff.fft(xi, axis=0, out=xi, prolog={"multiply": wcol})
        close(xi, np.fft.fft(x * wcol, axis=0))
        xr = rng.standard_normal((256, 300)).astype(rdt)
        close(ff.rfft(xr, axis=0, prolog={"multiply": wcol}, epilog={"scale": 2.0}), np.fft.rfft(xr * wcol, axis=0) * 2.0)
        spec = np.fft.rfft(xr, axis=0).astype(dtype)
        close(ff.irfft(spec, n=256, axis=0, epilog={"multiply": wcol}), np.fft.irfft(spec, n=256, axis=0) * wcol)
        x3 = (rng.standard_normal((24, 20, 70)) + 1j * rng.standard_normal((24, 20, 70))).astype(dtype)
        w3 = rng.random((24, 20, 1)).astype(rdt)
        close(ff.fftn(x3, axes=(0, 1), prolog={"multiply": w3}), np.fft.fftn(x3 * w3, axes=(0, 1)))
    finally:
        fusemath.set_num_threads(old)


@pytest.mark.parametrize("threads", [1, 4])
def test_random_layouts_and_chains_against_numpy(threads):
    """Seeded random cases over the CPU paths (direct, chunked, columns, one at a time): 1-3
    dimensions, any one axis, c2c / r2c / c2r, a prolog array broadcast along random axes, an
    epilog scale with or without conj; each against numpy in the transform's precision."""
    rng = np.random.default_rng(7 + threads)
    old = fusemath.get_num_threads()
    fusemath.set_num_threads(threads)
    try:
        done = 0
        while done < 60:
            nd = int(rng.integers(1, 4))
            shape = tuple(int(s) for s in rng.choice([3, 8, 17, 64, 130, 256, 1100, 2100], size=nd))
            if np.prod(shape) > 300_000:
                continue
            axis = int(rng.integers(0, nd))
            dt = [np.complex64, np.complex128][int(rng.integers(0, 2))]
            rdt = np.float32 if dt == np.complex64 else np.float64
            tol = 2e-4 if dt == np.complex64 else 1e-9
            kind = ["c2c", "r2c", "c2r"][int(rng.integers(0, 3))]
            x = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
            keep = [d == axis or rng.random() < 0.5 for d in range(nd)]
            epi = {"scale": 0.5, "conj": bool(rng.random() < 0.3)} if rng.random() < 0.5 else None
            use_pro = rng.random() < 0.5
            if kind == "c2c":
                w = rng.random(tuple(s if k else 1 for s, k in zip(shape, keep))).astype(rdt)
                pro = {"multiply": w} if use_pro else None
                got = ff.fft(x, axis=axis, prolog=pro, epilog=epi)
                ref = np.fft.fft(x * (w if use_pro else 1), axis=axis)
            elif kind == "r2c":
                xr = x.real.copy()
                w = rng.random(tuple(s if k else 1 for s, k in zip(shape, keep))).astype(rdt)
                pro = {"multiply": w} if use_pro else None
                got = ff.rfft(xr, axis=axis, prolog=pro, epilog=epi)
                ref = np.fft.rfft(xr * (w if use_pro else 1), axis=axis)
            else:
                spec = np.fft.rfft(x.real, axis=axis).astype(dt)
                w = rng.random(tuple(s if k else 1 for s, k in zip(spec.shape, keep))).astype(rdt)
                pro = {"multiply": w} if use_pro else None
                got = ff.irfft(spec, n=shape[axis], axis=axis, prolog=pro, epilog=epi)
                ref = np.fft.irfft(spec * (w if use_pro else 1), n=shape[axis], axis=axis)
            if epi:
                ref = np.conj(ref * 0.5) if epi["conj"] else ref * 0.5
            err = np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)
            assert err < tol, (kind, shape, axis, dt, keep, use_pro, epi, err)
            done += 1
    finally:
        fusemath.set_num_threads(old)


def test_plain_calls_take_the_short_path_with_numpy_semantics():
    """fft/ifft/rfft/irfft (and the 2-D / n-D forms) of a NumPy array with no n / s, out or chain go straight to the C call:
    same results and dtypes as numpy over layouts (views, negative strides, Fortran order),
    axes and norms; the errors such calls can hit still come out as numpy's."""
    rng = np.random.default_rng(61)
    base = rng.standard_normal((12, 40)) + 1j * rng.standard_normal((12, 40))
    for cdt, rdt, tol in ((np.complex64, np.float32, 2e-5), (np.complex128, np.float64, 1e-12)):
        c = base.astype(cdt)
        r = base.real.astype(rdt)
        for view in (lambda v: v, lambda v: v[::-2, ::3], lambda v: np.asfortranarray(v), lambda v: v.T):
            for axis in (0, -1, np.int64(0)):
                for norm in (None, "ortho", "forward"):
                    cases = ((ff.fft, np.fft.fft, view(c)), (ff.ifft, np.fft.ifft, view(c)),
                             (ff.rfft, np.fft.rfft, view(r)), (ff.irfft, np.fft.irfft, view(c)))
                    for ours, ref, x in cases:
                        got, want = ours(x, axis=axis, norm=norm), ref(x, axis=axis, norm=norm)
                        assert got.shape == want.shape
                        assert got.dtype == (cdt if want.dtype.kind == "c" else rdt)
                        assert np.linalg.norm(got - want) <= tol * max(np.linalg.norm(want), 1.0)
    x3 = (rng.standard_normal((6, 10, 12)) + 1j * rng.standard_normal((6, 10, 12)))
    for cdt, rdt, tol in ((np.complex64, np.float32, 2e-5), (np.complex128, np.float64, 1e-12)):
        c, r = x3.astype(cdt), x3.real.astype(rdt)
        for view in (lambda v: v, lambda v: v[::-1, ::2], lambda v: v.transpose(2, 0, 1)):
            for axes in ((0, 1), (-1, 0), [2, 1, 0], None):
                cases = ((ff.fftn, np.fft.fftn, view(c)), (ff.ifftn, np.fft.ifftn, view(c)),
                         (ff.rfftn, np.fft.rfftn, view(r)), (ff.irfftn, np.fft.irfftn, view(c)))
                if axes is not None and len(axes) == 2:
                    cases += ((ff.fft2, np.fft.fft2, view(c)), (ff.irfft2, np.fft.irfft2, view(c)))
                for ours, ref, x in cases:
                    got, want = ours(x, axes=axes, norm="ortho"), ref(x, axes=axes, norm="ortho")
                    assert got.shape == want.shape and got.dtype == (cdt if want.dtype.kind == "c" else rdt)
                    assert np.linalg.norm(got - want) <= tol * max(np.linalg.norm(want), 1.0)
    with pytest.raises(np.exceptions.AxisError):
        ff.fft2(base[0])  # axes (-2, -1) of a 1-D array
    np.testing.assert_allclose(ff.fftn(base, axes=(0, 0)), np.fft.fftn(base, axes=(0, 0)), atol=1e-12)  # twice
    with pytest.raises(np.exceptions.AxisError):
        ff.fft(base, axis=2)
    with pytest.raises(ValueError, match="norm"):
        ff.fft(base, norm="sideways")
    with pytest.raises(ValueError):
        ff.irfft(base[:, :1])  # n = 2 (1 - 1) = 0 points


def _with_cpu_path(mode, body, *args):
    """Run body(*args), a function of this module, in a fresh process started with
    FUSEMATH_FFT_CPU_PATH=mode (None: unset): the library reads its environment once, when its
    context is created."""
    env = dict(os.environ)
    env.pop("FUSEMATH_FFT_CPU_PATH", None)
    if mode is not None:
        env["FUSEMATH_FFT_CPU_PATH"] = mode
    here = os.path.dirname(os.path.abspath(__file__))
    code = f"import sys; sys.path.insert(0, {here!r}); import test_fft; test_fft.{body}(*{args!r})"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{body}{args} with FUSEMATH_FFT_CPU_PATH={mode}:\n{r.stdout}\n{r.stderr}"


def _plain_rows_body(dtype, rows, mode, want):
    dtype = np.dtype(dtype).type
    rng = np.random.default_rng(77 + rows)
    rdt = np.float32 if dtype == np.complex64 else np.float64
    n = 384 if dtype == np.complex64 else 392
    if True:
        x = crand(rng, (rows, n), dtype)
        with ff.FFT(x, axes=(1,)) as plan:
            plan.plan(effort="estimate" if mode else "measure")
            assert want in plan.describe(), plan.describe()
            close(plan.execute(), np.fft.fft(x.astype(np.complex128), axis=1), dtype, n)
        xr = rrand(rng, (rows, n), rdt)
        with ff.FFT(xr, axes=(1,), kind="r2c") as plan:
            plan.plan(effort="estimate" if mode else "measure")
            assert want in plan.describe(), plan.describe()
            close(plan.execute(), np.fft.rfft(xr.astype(np.float64), axis=1), dtype, n)
        want2 = {"chunks": "fft split into", "direct": "path=direct", None: "timed"}[mode]
        x2 = crand(rng, (rows - 100, n // 4), dtype)  # one 2-D transform: FFTW's 2-D plan or the split
        with ff.FFT(x2, axes=(0, 1)) as plan:
            plan.plan(effort="estimate" if mode else "measure")
            assert want2 in plan.describe(), plan.describe()
            close(plan.execute(), np.fft.fft2(x2.astype(np.complex128)), dtype, x2.size)


def _bad_cpu_path(dtype):
    """A bad FUSEMATH_FFT_CPU_PATH is a ValueError naming the variable (a process of its own: this
    module's import already runs a transform)."""
    code = ("import numpy as np, fusemath.fft as ff\n"
            "try:\n"
            f"    ff.fft(np.ones((153, 384), np.{dtype}), axis=1)\n"
            "except ValueError as e:\n"
            "    assert 'FUSEMATH_FFT_CPU_PATH' in str(e), str(e)\n"
            "else:\n"
            "    raise SystemExit('no error for FUSEMATH_FFT_CPU_PATH=sideways')\n")
    env = dict(os.environ, FUSEMATH_FFT_CPU_PATH="sideways")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


@needs_backend
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_plain_rows_direct_or_chunks(dtype):
    """A plain batch of dense rows runs FFTW over the whole batch or in chunks through the
    scratch, a plain 2-D transform FFTW's 2-D plan or the split: planner objects (effort
    measure) time both and say so ("timed");
    FUSEMATH_FFT_CPU_PATH forces either; a bad value is a ValueError naming the variable."""
    name = np.dtype(dtype).name
    for rows, mode, want in ((150, "chunks", "path=scratch>out"), (151, "direct", "path=direct"), (152, None, ",timed")):
        _with_cpu_path(mode, "_plain_rows_body", name, rows, mode, want)
    _bad_cpu_path(name)


@needs_backend
def test_chunks_shared_evenly_over_the_threads():
    """The chunks are shared out statically, so their count is spread over a multiple of the
    threads where the batch allows (1025 columns on 8 threads: not 17 chunks of 64, one thread
    doing two), and the results stay right (against numpy)."""
    rng = np.random.default_rng(81)
    before = fusemath.get_num_threads()
    fusemath.set_num_threads(8)
    try:
        for shape, axes in (((96, 1025), (0,)), ((1025, 96), (1,)), ((1025, 256), (1,))):
            x = crand(rng, shape, np.complex64)
            w = (0.5 + rng.random(shape[axes[0]])).astype(np.float32)
            wb = w.reshape((-1, 1) if axes == (0,) else (1, -1))
            with ff.FFT(x, axes=axes) as f:
                f.plan(prolog={"multiply": wb}, effort="estimate")
                d = f.describe()
                chunks, threads = (int(d.split(k + "=")[1].split()[0]) for k in ("chunks", "threads"))
                assert threads > 1 and chunks % threads == 0, d
                close(f.execute(), np.fft.fft(x.astype(np.complex128) * wb, axis=axes[0]), np.complex64,
                      shape[axes[0]])
    finally:
        fusemath.set_num_threads(before)


@needs_backend
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_plain_rows_copied_into_out(dtype):
    """A plain c2c batch of rows may run copied into out chunk by chunk, FFTW in place there
    (copy>out; timed at effort measure against the scratch and FFTW's batch plan,
    FUSEMATH_FFT_CPU_PATH=inplace forces it): right out of place, in place (in == out), into a
    misaligned out (the scratch path then) and with the input left as it was."""
    _with_cpu_path("inplace", "_copied_into_out_body", np.dtype(dtype).name)


def _copied_into_out_body(dtype):
    dtype = np.dtype(dtype).type
    rng = np.random.default_rng(80)
    n = 256 if dtype == np.complex64 else 264
    x = crand(rng, (40, n), dtype)
    x0 = x.copy()
    want = np.fft.fft(x.astype(np.complex128), axis=1)
    with ff.FFT(x, axes=(1,)) as plan:
        plan.plan(effort="estimate")
        assert "path=copy>out" in plan.describe(), plan.describe()
        close(plan.execute(), want, dtype, n)
        np.testing.assert_array_equal(x, x0)
        close(plan.execute(direction="inverse"), np.fft.ifft(x.astype(np.complex128), axis=1), dtype, n)
        raw = np.zeros(x.nbytes + x.itemsize // 2, np.uint8)  # out off the element alignment
        odd = raw[x.itemsize // 2:].view(dtype).reshape(x.shape)
        close(plan.execute(out=odd), want, dtype, n)
    y = x.copy()
    with ff.FFT(y, axes=(1,)) as plan:
        plan.plan(effort="estimate")
        plan.execute(out=y)
        close(y, want, dtype, n)


@needs_backend
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_real_multi_axis_chains_single_or_split(dtype):
    """r2c / c2r over several axes with a chain (the spectral-solver pattern: rfftn(x) * f,
    irfftn(X * f)): FFTW's own N-D plan with the chain as passes, or the split; timed at effort
    measure, the N-D plan at estimate, FUSEMATH_FFT_CPU_PATH=chunks forces the split and =direct
    the N-D plan. Each against numpy in float64. c2r's norm rides the input copy as a prolog
    scale (no pass over the output)."""
    for k, (mode, effort, want) in enumerate(((None, "estimate", ",single"), (None, "measure", "timed|wisdom"),
                                              ("chunks", "estimate", "fft split into"),
                                              ("direct", "measure", ",single"))):
        _with_cpu_path(mode, "_real_multi_axis_body", np.dtype(dtype).name, k, mode, effort, want)


def _real_multi_axis_body(dtype, k, mode, effort, want):
    dtype = np.dtype(dtype).type
    rng = np.random.default_rng(78 + k)
    cdt = np.complex64 if dtype == np.float32 else np.complex128
    if True:
        shape = (48 + 2 * k, 40) if k % 2 else (12 + k, 10, 16)  # a new shape each time: plans are cached
        axes = tuple(range(len(shape)))
        half = shape[:-1] + (shape[-1] // 2 + 1,)
        x = rrand(rng, shape, dtype)
        f = rrand(rng, half, dtype)
        with ff.FFT(x, axes=axes, kind="r2c") as plan:
            plan.plan(epilog={"multiply": f}, effort=effort)
            assert any(w in plan.describe() for w in want.split("|")), plan.describe()
            close(plan.execute(), np.fft.rfftn(x.astype(np.float64), axes=axes) * f, cdt, x.size)
        X = np.fft.rfftn(rrand(rng, shape, np.float64), axes=axes).astype(cdt)
        with ff.FFT(X, axes=axes, kind="c2r", n=shape[-1]) as plan:
            plan.plan(prolog={"multiply": f}, effort=effort)
            assert any(w in plan.describe() for w in want.split("|")), plan.describe()
            got = plan.execute(direction="inverse")
            close(got, np.fft.irfftn(X.astype(np.complex128) * f, s=shape, axes=axes), cdt, x.size)
        with ff.FFT(X, axes=axes, kind="c2r", n=shape[-1]) as plan:
            plan.plan(effort=effort)  # the norm alone
            if mode != "chunks":
                assert "prolog=scale epilog=none" in plan.describe(), plan.describe()
            close(plan.execute(direction="inverse"), np.fft.irfftn(X.astype(np.complex128), s=shape, axes=axes),
                  cdt, x.size)


@needs_backend
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_scale_only_epilog_rides_the_prolog(dtype):
    """On the cpu an epilog that is only a scale (an inverse transform's norm, say) is applied
    as a prolog scale, during the input's gather (describe says so): the results stay those of
    the chain as written, with the prolog's conj and a complex scale, for c2c rows, columns, 2-D
    and batched 2-D, r2c and c2r; against numpy in float64."""
    rng = np.random.default_rng(79)
    rdt = np.float32 if dtype == np.complex64 else np.float64
    s = 0.75 - 1.5j
    for shape, axes in (((37, 64), (1,)), ((64, 21), (0,)), ((40, 48), (0, 1)), ((3, 16, 24), (1, 2))):
        x = crand(rng, shape, dtype)
        x64 = x.astype(np.complex128)
        with ff.FFT(x, axes=axes) as f:
            f.plan(prolog={"conj": True}, epilog={"scale": s})
            assert "epilog=scale" not in f.describe() and "prolog=scale" in f.describe(), f.describe()
            close(f.execute(), np.fft.fftn(np.conj(x64), axes=axes) * s, dtype, x.size)
            close(f.execute(direction="inverse"), np.fft.ifftn(np.conj(x64), axes=axes) * s, dtype, x.size)
        with ff.FFT(x, axes=axes) as f:  # the norm alone
            f.plan()
            close(f.execute(direction="inverse"), np.fft.ifftn(x64, axes=axes), dtype, x.size)
        xr = rrand(rng, shape, rdt)
        with ff.FFT(xr, axes=axes, kind="r2c") as f:
            f.plan(epilog={"scale": 2.5})  # real: rides the gather
            assert "epilog=scale" not in f.describe() and "prolog=scale" in f.describe(), f.describe()
            close(f.execute(), np.fft.rfftn(xr.astype(np.float64), axes=axes) * 2.5, dtype, x.size)
        with ff.FFT(xr, axes=axes, kind="r2c") as f:
            f.plan(epilog={"scale": s})  # complex: never on the real input
            d = f.describe()
            # an epilog, or, where timing chose the split (r2c rows, then c2c), the complex step's prolog
            steps = d.split("] then [")
            assert "epilog=scale" in d or (len(steps) == 2 and " r2c " in steps[0] and "prolog=none" in steps[0]
                                           and " c2c " in steps[1] and "prolog=scale" in steps[1]), d
            close(f.execute(), np.fft.rfftn(xr.astype(np.float64), axes=axes) * s, dtype, x.size)
        X = np.fft.rfftn(xr.astype(np.float64), axes=axes).astype(dtype)
        with ff.FFT(X, axes=axes, kind="c2r", n=shape[axes[-1]]) as f:
            f.plan(prolog={"conj": True}, epilog={"scale": 0.5})
            want = np.fft.irfftn(np.conj(X.astype(np.complex128)), s=[shape[a] for a in axes], axes=axes) * 0.5
            close(f.execute(direction="inverse"), want, dtype, x.size)


# ---------------------------------------------------------------------------
# numpy.fft's helpers
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(7,), (8,), (3, 5), (4, 6, 5), ()])
def test_fftshift_ifftshift_match_numpy(rng, shape):
    x = rng.standard_normal(shape)
    axes_choices = [None] + ([0, -1, (0,)] if shape else [()]) + ([[-1, 0]] if len(shape) >= 2 else [])
    if len(shape) == 3:
        axes_choices += [(2, 0), np.int64(1)]
    for axes in axes_choices:
        if not shape:  # numpy.fft.fftshift of a 0-d array raises ValueError from inside np.roll: so do we
            for ours, theirs in ((ff.fftshift, np.fft.fftshift), (ff.ifftshift, np.fft.ifftshift)):
                with pytest.raises(ValueError) as want:
                    theirs(x, axes)
                with pytest.raises(ValueError, match="^" + re.escape(str(want.value)) + " .*0-d"):
                    ours(x, axes)
            continue
        np.testing.assert_array_equal(ff.fftshift(x, axes), np.fft.fftshift(x, axes))
        np.testing.assert_array_equal(ff.ifftshift(x, axes), np.fft.ifftshift(x, axes))
        r = ff.fftshift(x, axes)
        assert r is not x and not np.shares_memory(r, x)  # a new array, even when nothing rolls
        # a property, not only numpy's word: ifftshift undoes fftshift, also for odd lengths
        np.testing.assert_array_equal(ff.ifftshift(ff.fftshift(x, axes), axes), x)
    assert type(ff.fftshift([1, 2, 3])) is np.ndarray  # lists are taken as numpy.fft takes them
    # the zero frequency lands at the centre: index n // 2 of fftshift(fftfreq(n))
    for n in (7, 8):
        assert ff.fftshift(ff.fftfreq(n))[n // 2] == 0.0


@pytest.mark.parametrize("n", [1, 2, 7, 8, 1000])
@pytest.mark.parametrize("d", [1.0, 0.1, -2.5])
def test_fftfreq_rfftfreq_match_numpy(n, d):
    f, rf = ff.fftfreq(n, d), ff.rfftfreq(n, d)
    np.testing.assert_allclose(f, np.fft.fftfreq(n, d), rtol=0, atol=0)
    np.testing.assert_allclose(rf, np.fft.rfftfreq(n, d), rtol=0, atol=0)
    assert f.dtype == np.float64 and rf.shape == (n // 2 + 1,)
    # the frequencies of a pure tone: fft of exp(2 pi i f0 t) peaks at f0
    t = np.arange(n) * d
    f0 = f[min(3, n - 1)]
    peak = np.argmax(np.abs(ff.fft(np.exp(2j * np.pi * f0 * t))))
    assert f[peak] == f0
    like = np.zeros(3, np.float32)
    assert type(ff.fftfreq(n, d, like=like)) is np.ndarray


def test_helpers_bad_input():
    x = np.zeros((3, 4))
    with pytest.raises(np.exceptions.AxisError, match="axes contains axis 2"):
        ff.fftshift(x, axes=2)
    # a repeated axis rolls twice, as numpy's
    y = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(ff.ifftshift(y, axes=(1, -1)), np.fft.ifftshift(y, axes=(1, -1)))
    with pytest.raises(TypeError, match="n must be an int, not bool"):
        ff.fftfreq(True)
    with pytest.raises(TypeError, match="d .* must be a real number, not str"):
        ff.fftfreq(4, "1")
    np.testing.assert_array_equal(ff.fftfreq(4, np.array([2.0])), np.fft.fftfreq(4, 2.0))
    np.testing.assert_array_equal(ff.rfftfreq(6, 0.5, "cpu"), np.fft.rfftfreq(6, 0.5, device="cpu"))
    with pytest.raises(ValueError, match="device 'cuda' is not supported"):
        ff.fftfreq(4, 1.0, "cuda")
    with pytest.raises(TypeError, match="axes must contain ints"):
        ff.fftshift(x, axes=(0.5,))
    with pytest.raises(TypeError, match="x must be an array"):
        ff.fftshift(None)
    with pytest.raises(ValueError, match=r"^Invalid number of FFT data points \(0\) specified\..*n = 0"):
        ff.fftfreq(0)
    with pytest.raises(ValueError, match=r"^n should be an integer \("):  # numpy's class and words
        ff.rfftfreq(2.5)
    with pytest.raises(ValueError) as want:
        np.fft.rfftfreq(2.5)
    assert str(want.value) == "n should be an integer"
    with pytest.raises(TypeError, match="d .* must be a real number"):
        ff.fftfreq(4, "a")
    with pytest.raises(ValueError, match="d .* is 0.0; expected a finite, nonzero number"):
        ff.rfftfreq(4, 0)
    with pytest.raises(ValueError, match="is inf"):
        ff.fftfreq(4, float("inf"))


@pytest.mark.parametrize("norm", [None, "backward", "ortho", "forward"])
@pytest.mark.parametrize("m, n", [(9, None), (9, 16), (9, 17), (9, 10), (5, 3), (33, 64)])
def test_hfft_ihfft_match_numpy(rng, norm, m, n):
    a = rng.standard_normal((3, m)) + 1j * rng.standard_normal((3, m))
    x = rng.standard_normal((m, 4))
    tol = 1e-12 * np.log2(max(m, n or 0, 2) + 1)
    got, want = ff.hfft(a, n, norm=norm), np.fft.hfft(a, n, norm=norm)
    assert got.dtype == np.float64 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * np.abs(want).max())
    got, want = ff.ihfft(x, n, axis=0, norm=norm), np.fft.ihfft(x, n, axis=0, norm=norm)
    assert got.dtype == np.complex128 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * np.abs(want).max())
    # the property behind them: hfft undoes ihfft for a real signal of length n
    r = rng.standard_normal(n or 2 * (m - 1))
    np.testing.assert_allclose(ff.hfft(ff.ihfft(r, norm=norm), len(r), norm=norm), r, rtol=0, atol=tol * 10)


def test_hfft_ihfft_single_precision_and_out(rng):
    a = (rng.standard_normal(17) + 1j * rng.standard_normal(17)).astype(np.complex64)
    out = np.empty(32, np.float32)
    got = ff.hfft(a, out=out)
    assert got is out
    np.testing.assert_allclose(out, np.fft.hfft(a.astype(np.complex128)), rtol=0, atol=1e-4 * 32)
    x = rng.standard_normal(32).astype(np.float32)
    y = ff.ihfft(x)
    assert y.dtype == np.complex64
    np.testing.assert_allclose(y, np.fft.ihfft(x.astype(np.float64)), rtol=0, atol=1e-6)
    b = a.copy()
    ff.hfft(b)
    np.testing.assert_array_equal(b, a)  # input untouched (the conjugation is fused, not in place)


def test_hfft_ihfft_bad_input():
    with pytest.raises(ValueError, match="norm"):
        ff.hfft(np.ones(4, complex), norm="sideways")
    with pytest.raises(ValueError, match="norm"):
        ff.ihfft(np.ones(4), norm="sideways")
    with pytest.raises(TypeError):
        ff.ihfft(np.ones(4, complex))  # rfft's rule: complex input is an error
    with pytest.raises(ValueError, match=r"^Invalid number of FFT data points \(0\) specified\."):
        ff.hfft(np.ones(4, complex), 0)


def test_empty_axes_and_huge_numbers_are_clear_errors():
    """axes=() transforms nothing: a plain c2c call returns a copy as numpy does, but a chain
    or out= would be skipped silently, and rfftn/irfftn have no axis to halve; numbers beyond
    float64 are ValueErrors naming them (not OverflowError)."""
    x = np.arange(12.0).reshape(3, 4) + 1j
    np.testing.assert_array_equal(ff.fftn(x, axes=()), x)
    for kw in ({"epilog": {"conj": True}}, {"prolog": {"scale": 2}}, {"out": np.zeros_like(x)}):
        with pytest.raises(ValueError, match="axes is empty"):
            ff.fftn(x, axes=(), **kw)
    for fn, a in ((ff.rfftn, x.real), (ff.irfftn, x)):
        with pytest.raises(ValueError, match="axes is empty"):
            fn(a, axes=())
        with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="axes is empty"):
            fn(a, s=[])  # numpy warns that s without axes is deprecated, then finds no axis
    with pytest.raises(ValueError, match=r"^Shape and axes have different lengths\."):
        ff.fftn(x, s=np.array([2, 2]), axes=())
    with pytest.raises(ValueError, match=r"prolog\['scale'\] is too large"):
        ff.fft(x, prolog={"scale": 2**1100})
    with pytest.raises(ValueError, match="d .* too large"):
        ff.fftfreq(4, d=10**400)


def test_argument_wording_found_by_fuzzing():
    x = np.ones((4, 4), complex)
    with pytest.raises(TypeError, match="axes must be an int or a sequence of ints, not bool"):
        ff.FFT(x, axes=True)
    with pytest.raises(TypeError, match="axes must contain ints, not bool"):
        ff.fftn(x, axes=(True,))
    np.testing.assert_allclose(ff.FFT(x, axes=np.int64(0)).plan().execute(), np.fft.fft(x, axis=0))
    with pytest.raises(TypeError, match="ihfft: .*takes real input"):
        ff.ihfft(x)


def test_big_endian_input_keeps_its_precision():
    """'>f4' is float32 data in another byte order: float32 results, as numpy.fft gives."""
    x = np.arange(16, dtype=">f4").reshape(2, 8)
    for fn, ref in ((ff.fft, np.fft.fft), (ff.rfft, np.fft.rfft)):
        got = fn(x)
        assert got.dtype == ref(x).dtype == np.complex64
        np.testing.assert_allclose(got, ref(x.astype(np.float64)), rtol=1e-5, atol=1e-4)
    z = (np.arange(8) + 1j).astype(">c16")
    np.testing.assert_allclose(ff.ifft(z), np.fft.ifft(z), rtol=1e-12, atol=1e-12)


def test_planner_sees_in_place_changes_of_a_copied_operand():
    """A big-endian or misaligned x is transformed from a native, aligned copy that follows x's
    content before every execute."""
    x = np.arange(8).astype(">c16")
    f = ff.FFT(x)
    f.plan(effort="estimate")
    np.testing.assert_allclose(f.execute(), np.fft.fft(x.astype(np.complex128)), atol=1e-12)
    x[...] = 0
    np.testing.assert_array_equal(f.execute(), np.zeros(8))
    raw = np.zeros(16 * 8 + 16, np.uint8)
    y = raw[1:1 + 128].view(np.complex128)
    assert not y.flags.aligned
    y[...] = 1
    f.reset_operand(y)
    np.testing.assert_allclose(f.execute(), np.fft.fft(np.ones(8)), atol=1e-12)
    y[...] = np.arange(8)
    np.testing.assert_allclose(f.execute(), np.fft.fft(np.arange(8.0)), atol=1e-12)


def test_zero_d_and_misaligned_chain_arrays():
    """A 0-d multiply array broadcasts like a one-element one; a misaligned one computes from an
    aligned copy (as x does), which a planner refreshes before every execute."""
    x = np.random.default_rng(5).random(8)
    np.testing.assert_allclose(ff.fft(x, prolog={"multiply": np.array(2.0)}), np.fft.fft(2 * x), atol=1e-12)
    np.testing.assert_allclose(ff.fft(x, epilog={"multiply": np.array(0.5)}), 0.5 * np.fft.fft(x), atol=1e-12)
    raw = np.zeros(8 * 8 + 8, np.uint8)
    w = raw[1:65].view(np.float64)
    assert not w.flags.aligned
    w[...] = 3.0
    np.testing.assert_allclose(ff.fft(x, prolog={"multiply": w}), np.fft.fft(3 * x), atol=1e-12)
    f = ff.FFT(x + 0j)
    f.plan(prolog={"multiply": w}, effort="estimate")
    w[...] = 4.0
    np.testing.assert_allclose(f.execute(), np.fft.fft(4 * x), atol=1e-12)


def test_too_many_points_or_dimensions_name_the_argument():
    x = np.ones(8)
    with pytest.raises(ValueError, match=r"fusemath.fft.fft: n = 10+ is too large"):
        ff.fft(x, n=10**30)
    with pytest.raises(ValueError, match=r"s\[1\] = 10+ is too large"):
        ff.fftn(np.ones((2, 2)), s=(2, 10**30))
    nine = np.ones((1,) * 8 + (4,)) + 0j
    with pytest.raises(fusemath.ShapeError, match="x has 9 dimensions; at most 8"):
        ff.fft(nine)
    with pytest.raises(fusemath.ShapeError, match="x has 9 dimensions; at most 8"):
        ff.FFT(nine)
    assert ff.fft(nine[0]).shape == nine[0].shape  # 8 dimensions are fine


def test_dlpack_failure_is_reported_and_conj_none_is_absent():
    class Broken:
        def __dlpack__(self, **kw):
            raise BufferError("no export here")

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(TypeError, match="its __dlpack__ failed: BufferError: no export here"):
        ff.fft(Broken())
    x = np.arange(4.0)
    np.testing.assert_allclose(ff.fft(x, prolog={"conj": None}), np.fft.fft(x), atol=1e-12)


def test_execute_keeps_its_operand_alive_against_a_concurrent_reset():
    """execute() holds this call's x while another thread's reset_operand() replaces it (the old
    array, held by the planner alone, was freed mid-transform: a crash or garbage)."""
    import threading
    import time

    shape = (64, 4096)
    f = ff.FFT(np.ones(shape, complex), axes=-1)
    f.plan(effort="estimate")
    ref = np.fft.fft(np.ones(shape, complex), axis=-1)
    stop = time.time() + 1.5
    wrong = [0, 0]

    def resetter():
        while time.time() < stop:
            f.reset_operand(np.ones(shape, complex))
            junk = np.full(shape, 1e300 + 0j)  # reuses the freed memory
            del junk

    def worker():
        o = np.empty(shape, complex)
        while time.time() < stop:
            f.execute(out=o)
            wrong[0] += 1
            wrong[1] += not np.allclose(o, ref)

    threads = [threading.Thread(target=resetter), threading.Thread(target=worker)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong[0] > 0 and wrong[1] == 0


def test_out_overlapping_itself_says_so():
    so = np.lib.stride_tricks.as_strided(np.zeros(200, complex), (8, 16), (16, 16))
    with pytest.raises(fusemath.AliasError, match="fft2: out overlaps itself"):
        ff.fft2(np.ones((8, 16), complex), out=so)


def test_freed_plan_says_so():
    """A plan freed under a caller (free(), or plan() in another thread) raises InvalidStateError
    whatever arguments it is given (an FFT plan's execute used to be checked against the matmul
    argument count first)."""
    f = ff.FFT(np.ones(8, complex))
    f.plan(effort="estimate")
    p = f._plan
    f.free()
    with pytest.raises(fusemath.InvalidStateError, match="freed"):
        p.execute(0, 0, None, None)


def test_replan_between_an_execute_capture_and_its_plan(monkeypatch):
    """plan() in another thread lands after an execute() captured its setup: that call runs on
    the setup it captured, and the plans of the new setup are built for the new chains only (a
    plan for the old, broadcast window was cached under the new chains and used only its first
    row from then on)."""
    import fusemath._fft_plan as fp

    m, n = 64, 32
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, n)) + 1j * rng.standard_normal((m, n))
    w_old, w_new = np.full((1, n), 2.0), rng.standard_normal((m, n))
    f = ff.FFT(x, axes=(1,))
    f.plan(prolog={"multiply": w_old}, effort="estimate")
    real_refresh = fp.refresh_copies  # called by execute() after it captured its setup
    fired = []

    def replan_once(*args, **kwargs):
        if not fired:
            fired.append(1)
            f.plan(prolog={"multiply": w_new}, effort="estimate")
        return real_refresh(*args, **kwargs)

    monkeypatch.setattr(fp, "refresh_copies", replan_once)
    first = f.execute(direction="inverse")  # captured the old setup; plans its own inverse
    monkeypatch.setattr(fp, "refresh_copies", real_refresh)
    np.testing.assert_allclose(first, np.fft.ifft(x * w_old, axis=1), atol=1e-12)
    np.testing.assert_allclose(f.execute(direction="inverse"), np.fft.ifft(x * w_new, axis=1), atol=1e-12)
    np.testing.assert_allclose(f.execute(), np.fft.fft(x * w_new, axis=1), atol=1e-12)


def test_planner_execute_from_threads_past_the_plan_limit():
    """execute() from 4 threads with out= arrays of 40 layouts (past the planner's 32 kept plans):
    the plan dict is changed under a lock and an evicted plan is dropped, not freed under another
    thread's execute (before: KeyError or 'the plan was freed' now and then; a review's repro)."""
    import sys
    import threading

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # makes the window the old code had easy to hit
    try:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((4, 16)) + 1j * rng.standard_normal((4, 16))
        ref = np.fft.fft(x, axis=-1)
        f = ff.FFT(x, axes=-1)
        f.plan(effort="estimate")
        errors, wrong = [], []

        def work():
            for _ in range(5):
                for k in range(1, 41):
                    out = np.zeros((4, 16 * k), complex)[:, ::k]  # a new out layout per k
                    try:
                        if not np.allclose(f.execute(out=out), ref):
                            wrong.append(k)
                    except Exception as exc:  # reported below
                        errors.append(repr(exc))

        ts = [threading.Thread(target=work) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert not errors and not wrong, (errors[:3], wrong[:3])


def test_structured_array_fields_as_operands():
    """A field of a structured array steps by a byte count that is no multiple of its element
    (packed: 12 bytes for an f8 after an i4) or is aligned but strided by 24 bytes: NumPy
    transforms them; so does fusemath, from a native copy (before: 'byte stride 12 ... is not a
    multiple of the item size' from the stateless path)."""
    rec = np.zeros(16, dtype=[("t", "i4"), ("v", "f8")])
    rec["v"] = np.arange(16.0) ** 1.5
    v = rec["v"]
    np.testing.assert_allclose(ff.rfft(v), np.fft.rfft(v), rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(ff.fft(v), np.fft.fft(v), rtol=1e-12, atol=1e-10)
    rec2 = np.zeros(16, dtype=[("z", "c16"), ("w", "f8")])
    rec2["z"] = np.arange(16) * (1 + 2j)
    z = rec2["z"]
    np.testing.assert_allclose(ff.fft(z, norm="ortho"), np.fft.fft(z, norm="ortho"), rtol=1e-12, atol=1e-10)
    m = np.zeros((4, 4), dtype=[("t", "i4"), ("v", "f8")])
    m["v"] = np.arange(16.0).reshape(4, 4)
    np.testing.assert_allclose(fusemath.matmul(m["v"], m["v"]), m["v"] @ m["v"], rtol=1e-12)


def test_planner_errors_name_the_planner_and_the_chain_arrays():
    """Errors from the C layer reach the FFT planner's caller with the planner's name first; an
    out= overlapping a chain's array is no error (a temporary)."""
    # out= overlapping a chain's array is computed through a temporary, as numpy would
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(8) + 1j * rng.standard_normal(8)).astype(np.complex64)
    want = np.fft.fft(x * x)
    f = fusemath.fft.FFT(x)
    f.plan(prolog={"multiply": x})
    assert f.execute(out=x) is x
    np.testing.assert_allclose(x, want, rtol=1e-5, atol=1e-5)
    e = x.copy()
    g = fusemath.fft.FFT(np.ones(8, np.complex64))
    g.plan(epilog={"multiply": e})
    want = np.fft.fft(np.ones(8)) * e
    g.execute(out=e)
    np.testing.assert_allclose(e, want, rtol=1e-5, atol=1e-5)
    w = x.copy()
    want = np.fft.fft(np.ones(8) * w)
    ff.fft(np.ones(8, np.complex64), out=w, prolog={"multiply": w})
    np.testing.assert_allclose(w, want, rtol=1e-5, atol=1e-5)
    z = fusemath.fft.FFT(np.zeros((0, 8), np.complex64), axes=0)
    with pytest.raises(fusemath.ShapeError, match=r"^fusemath\.fft\.FFT\.plan: .*length along axis 0 is 0"):
        z.plan()


def test_s_minus_one_keeps_the_extent_as_numpy_2():
    """s[i] = -1: the input's extent along that axis (NumPy 2), for c2c, r2c and c2r (irfftn's
    last axis too: the extent, as NumPy, not 2 * (m - 1)); n = -1 and s[i] = -2 stay errors."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 6))
    z = x + 1j * rng.standard_normal((4, 6))
    cases = [(ff.fftn, np.fft.fftn, z, (-1, 8)), (ff.rfftn, np.fft.rfftn, x, (-1, -1)),
             (ff.irfftn, np.fft.irfftn, z, (3, -1)), (ff.ifft2, np.fft.ifft2, z, (5, -1))]
    for ours, theirs, a, s in cases:
        got, want = ours(a, s=s, axes=(0, 1)), theirs(a, s=s, axes=(0, 1))
        assert got.shape == want.shape, (ours.__name__, got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match=r"\(-1\) specified\. .*n = -1"):
        ff.fft(z, n=-1)
    with pytest.raises(ValueError, match=r"\(-2\) specified\. .*s\[0\] = -2"):
        ff.fftn(z, s=(-2, 8), axes=(0, 1))


def test_fftn_over_four_axes_matches_numpy():
    """fftn / ifftn / rfftn / irfftn over 4 and more axes (core plans them as steps of at most 3
    axes: the prolog in the first, the epilog and the norm in the last) equal numpy.fft's."""
    rng = np.random.default_rng(25)
    x = rng.standard_normal((3, 4, 2, 5, 2))
    z = x + 1j * rng.standard_normal(x.shape)
    for axes in [(0, 1, 2, 3), (4, 0, 2, 1), None]:
        for norm in [None, "ortho", "forward"]:
            np.testing.assert_allclose(ff.fftn(z, axes=axes, norm=norm), np.fft.fftn(z, axes=axes, norm=norm),
                                       rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(ff.ifftn(z, axes=axes, norm=norm), np.fft.ifftn(z, axes=axes, norm=norm),
                                       rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(ff.rfftn(x, axes=axes, norm=norm), np.fft.rfftn(x, axes=axes, norm=norm),
                                       rtol=1e-12, atol=1e-12)
            h = np.fft.rfftn(x, axes=axes)
            np.testing.assert_allclose(ff.irfftn(h, s=None if axes is None else [x.shape[a] for a in axes],
                                                 axes=axes, norm=norm),
                                       np.fft.irfftn(h, s=None if axes is None else [x.shape[a] for a in axes],
                                                     axes=axes, norm=norm), rtol=1e-12, atol=1e-12)
    # single precision, and the chains around a 4-axis transform
    z32 = z[..., 0].astype(np.complex64)
    w = rng.standard_normal(z32.shape[-1]).astype(np.float32)
    got = ff.fftn(z32, prolog={"multiply": w}, epilog={"conj": True})
    np.testing.assert_allclose(got, np.conj(np.fft.fftn(z32 * w)), rtol=2e-5, atol=2e-5 * np.abs(got).max())


def test_empty_batch_checks_out():
    """An empty transform's out= is checked as a non-empty one's (by the core and call(): shape,
    dtype, writability and type, with the same messages); a right one comes back."""
    x = np.zeros((0, 8), np.complex64)
    with pytest.raises(ValueError, match="out has shape"):
        ff.fft(x, out=np.zeros((3, 3), np.complex64))
    with pytest.raises(TypeError, match="Cannot cast ufunc 'fft' output from dtype\\('complex64'\\) to dtype\\('float32'\\)"):
        ff.fft(x, out=np.zeros((0, 8), np.float32))  # numpy.fft's refusal (same_kind), as a non-empty one's
    with pytest.raises(ValueError, match="read-only"):
        ff.fft(x, out=np.broadcast_to(np.zeros(8, np.complex64), (0, 8)))
    with pytest.raises(TypeError, match="out must be"):
        ff.fft(x, out=[1, 2])
    out = np.zeros((0, 8), np.complex64)
    assert ff.fft(x, out=out) is out


def test_padding_past_memory_is_fusemaths_error():
    """s / n that zero-pad past what memory or a 64-bit size holds: fusemath's OutOfMemoryError /
    TooLargeError naming s / n, not NumPy's raw MemoryError or "array is too big"."""
    with pytest.raises(fusemath.TooLargeError, match=r"fftn: .*\(s / n\).*64-bit"):
        ff.fftn(np.ones((2, 2)), s=(2**40, 2**40))
    with pytest.raises(fusemath.OutOfMemoryError, match=r"rfft: .*zero-padded input.*\(s / n\)"):
        ff.rfft(np.ones(4), n=2**50)  # 8 PiB of float64: past any address space, never overcommitted
