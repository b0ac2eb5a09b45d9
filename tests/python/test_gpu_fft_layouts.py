"""GPU FFT layout sweeps: any layout NumPy accepts works on the GPU too (through a staged device
copy where cuFFT cannot take it, in the C backend): every axis choice of 2-D and 3-D arrays,
contiguous, transposed, strided and (CuPy) reversed views, c2c, r2c and c2r, against numpy.fft
on the host copy (float64 / complex128). Marked gpu: skipped without a GPU (conftest.py)."""
import itertools

import numpy as np
import pytest

import fusemath.fft as ff
from test_gpu_fft import PRECS, assert_close, call_unmodified, full_half_spectrum, gpu  # noqa: F401 (fixture)

pytestmark = [pytest.mark.gpu]

SHAPES = [(6, 10), (4, 6, 8), (8, 128, 2)]


def axis_choices(nd):
    singles = [(a,) for a in range(nd)]
    pairs = list(itertools.permutations(range(nd), 2))
    return singles + pairs + ([tuple(range(nd)), (2, 0, 1)] if nd == 3 else [])


def permuted(gpu, x, order):
    return x.permute(*order) if gpu.name == "torch" else x.transpose(order)


def views(gpu, h):
    """(name, device view, its host values) of host array h laid out in several ways on the device;
    every view's values are h's, so one reference serves them all."""
    nd = h.ndim
    order = tuple(reversed(range(nd)))  # a transposed layout: the device array is h.T, viewed back
    transposed = permuted(gpu, gpu.dev(np.ascontiguousarray(h.transpose(order))), order)
    out = [("contiguous", gpu.dev(h)), ("transposed", transposed)]
    big = np.zeros((2 * h.shape[0],) + h.shape[1:], h.dtype)
    big[::2] = h
    out.append(("strided rows", gpu.dev(big)[::2]))
    wide = np.zeros(h.shape[:-1] + (2 * h.shape[-1],), h.dtype)
    wide[..., 1::2] = h
    out.append(("strided innermost", gpu.dev(wide)[..., 1::2]))
    if gpu.name == "cupy":  # (torch has no negative strides)
        out.append(("reversed", gpu.dev(np.ascontiguousarray(h[::-1]))[::-1]))
    return out


def check_views(gpu, func, ref, h, axes, dtype, prec, npts, what, **kw):
    want = ref(h.astype(np.complex128 if np.iscomplexobj(h) else np.float64), axes=axes, **kw)
    for name, v in views(gpu, h):
        assert np.array_equal(gpu.host(v), h)
        y = call_unmodified(gpu, func, v, axes=axes, **kw)
        assert gpu.npdtype(y) == np.dtype(dtype), f"{what} {name}: dtype {gpu.npdtype(y)}"
        assert_close(gpu.host(y), want, prec, npts, f"{what} axes={axes} of a {name} view")


@pytest.mark.parametrize("prec", list(PRECS))
@pytest.mark.parametrize("shape", SHAPES)
def test_every_axis_and_layout_matches_numpy(gpu, rng, prec, shape):
    rdt, cdt = PRECS[prec]
    for axes in axis_choices(len(shape)):
        npts = int(np.prod([shape[a] for a in axes]))
        c = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(cdt)
        check_views(gpu, ff.fftn, np.fft.fftn, c, axes, cdt, prec, npts, "fftn")
        check_views(gpu, ff.ifftn, np.fft.ifftn, c, axes, cdt, prec, npts, "ifftn", norm="ortho")
        r = rng.standard_normal(shape).astype(rdt)
        check_views(gpu, ff.rfftn, np.fft.rfftn, r, axes, cdt, prec, npts, "rfftn")
        if shape[axes[-1]] >= 2:
            hs = full_half_spectrum(rng, shape, axes, cdt)
            check_views(gpu, ff.irfftn, np.fft.irfftn, hs, axes, rdt, prec, npts, "irfftn")


def test_rfftn_of_an_interleaved_batch_is_staged_and_described(gpu, rng):
    """The issue's case: rfftn of a contiguous (8, 128, 2) float32 array over axis 1 (cuFFT cannot
    take the batch axis of stride 1 between its real rows): right, and describe() says how."""
    h = rng.standard_normal((8, 128, 2)).astype(np.float32)
    x = gpu.dev(h)
    want = np.fft.rfftn(h.astype(np.float64), axes=(1,))
    assert_close(gpu.host(ff.rfftn(x, axes=(1,))), want, "single", 128)
    with ff.FFT(x, axes=(1,)) as f:
        f.plan(effort="estimate")
        assert "staged copy" in f.describe(), f.describe()
        assert_close(gpu.host(f.execute()), np.fft.rfft(h.astype(np.float64), axis=1), "single", 128)


@pytest.mark.parametrize("prec", list(PRECS))
def test_out_overlapping_the_input_on_the_gpu(gpu, rng, prec):
    """out= sharing memory with x in another layout: numpy's answer (a temporary, then a copy on
    the array library's current stream)."""
    rdt, cdt = PRECS[prec]
    h = (rng.standard_normal(9) + 1j * rng.standard_normal(9)).astype(cdt)
    base = gpu.dev(h)
    ff.fft(base[:8], out=base[1:])
    assert_close(gpu.host(base)[1:], np.fft.fft(h[:8].astype(np.complex128)), prec, 8, "fft into x shifted by one")
    sq = (rng.standard_normal((6, 6)) + 1j * rng.standard_normal((6, 6))).astype(cdt)
    x = gpu.dev(sq)
    y = ff.fft2(x, out=permuted(gpu, x, (1, 0)))
    assert_close(gpu.host(y), np.fft.fft2(sq.astype(np.complex128)), prec, 36, "fft2 into x transposed")
