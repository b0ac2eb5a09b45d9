"""fusemath.fft as a drop-in for numpy.fft (NumPy 2): repeated axes, the deprecated s / axes
combinations' warnings, numpy's error wording, out= overlapping the input, long double. Every
result is compared with numpy.fft on the same input."""
import re
import warnings

import numpy as np
import pytest

import fusemath
import fusemath.fft as ff


def crand(rng, shape, dtype=np.complex128):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def close(got, want, tol=1e-12):
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape, got.dtype, want.dtype)
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    assert np.max(np.abs(got - want), initial=0) <= tol * scale


# ---------------------------------------------------------------------------
# repeated axes: transformed again, as numpy 2 does
# ---------------------------------------------------------------------------
REPEATS = [((0, 0), None), ((1, 1), None), ((0, 1, 0), None), ((1, 0, 1, 1), None), ((-1, 1), None),
           ((0, 0), (4, 6)), ((0, 0), (6, 4)), ((1, 0, 1), (5, 3, 8)), ((0, 1, 1), (3, -1, 4)),
           ((2, 0, 2), (4, 5, 6))]


@pytest.mark.parametrize("axes,s", REPEATS)
@pytest.mark.parametrize("name", ["fftn", "ifftn", "rfftn", "irfftn"])
def test_repeated_axes_match_numpy(rng, name, axes, s):
    shape = (5, 6, 4)
    x = rng.standard_normal(shape) if name == "rfftn" else crand(rng, shape)
    ours, theirs = getattr(ff, name), getattr(np.fft, name)
    for norm in (None, "ortho", "forward"):
        close(ours(x, s=s, axes=axes, norm=norm), theirs(x, s=s, axes=axes, norm=norm))


def test_repeated_axes_out_and_chains(rng):
    x = crand(rng, (6, 8))
    want = np.fft.fftn(x, axes=(0, 1, 0))
    out = np.empty_like(want)
    assert ff.fftn(x, axes=(0, 1, 0), out=out) is out
    close(out, want)
    # the prolog in the first transform, the epilog after the last
    w = rng.standard_normal(8)
    close(ff.fftn(x, axes=(1, 1), prolog={"multiply": w}, epilog={"scale": 3.0}),
          3.0 * np.fft.fftn(x * w, axes=(1, 1)))
    close(ff.fft2(x, axes=(1, -1)), np.fft.fft2(x, axes=(1, -1)))


# ---------------------------------------------------------------------------
# numpy 2's DeprecationWarnings, the same conditions and words
# ---------------------------------------------------------------------------
def warned(func, *args, **kw):
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        res = func(*args, **kw)
    return res, [(w.category, str(w.message)) for w in got]


@pytest.mark.parametrize("name", ["fftn", "ifftn", "rfftn", "irfftn", "fft2", "rfft2"])
@pytest.mark.parametrize("s,axes", [((4, 6), None), ((None, 6), (0, 1)), ((4, None), None), ((-1, 5), None),
                                    ((4, 6), (0, 1)), (None, None), ((3,), None)])
def test_deprecation_warnings_match_numpy(rng, name, s, axes):
    x = rng.standard_normal((5, 6)) if name.startswith("rfft") else crand(rng, (5, 6))
    want, want_w = warned(getattr(np.fft, name), x, s=s, axes=axes)
    got, got_w = warned(getattr(ff, name), x, s=s, axes=axes)
    assert got_w == want_w
    close(got, want)


def test_deprecation_warning_points_at_the_caller(rng):
    with pytest.warns(DeprecationWarning, match="`axes` should not be `None`") as rec:
        ff.fftn(crand(rng, (4, 4)), s=(4, 4))
    assert rec[0].filename == __file__


# ---------------------------------------------------------------------------
# error messages begin with numpy's own words
# ---------------------------------------------------------------------------
BAD = [
    ("fft", lambda m, x: m.fft(x, n=0)), ("fft", lambda m, x: m.fft(x, n=-1)),
    ("fftn", lambda m, x: m.fftn(x, s=(0, 4), axes=(0, 1))), ("fftn", lambda m, x: m.fftn(x, s=(-2,), axes=(0,))),
    ("irfft", lambda m, x: m.irfft(x[:, :1])), ("fft", lambda m, x: m.fft(x[:, :0])),
    ("fft", lambda m, x: m.fft(x, norm="unitary")), ("fftn", lambda m, x: m.fftn(x, s=(4, 4, 4), axes=(0, 1))),
    ("fftn", lambda m, x: m.fftn(x, s=(2,), axes=(3,))), ("irfftn", lambda m, x: m.irfftn(x, s=(4, 0), axes=(0, 1))),
    ("rfftn", lambda m, x: m.rfftn(x.real, s=(2,), axes=(-3,))),
]


@pytest.mark.parametrize("case", range(len(BAD)))
def test_errors_begin_with_numpys_words(rng, case):
    name, call = BAD[case]
    x = crand(rng, (4, 6))
    with pytest.raises(Exception) as theirs:
        call(np.fft, x)
    with pytest.raises(type(theirs.value)) as ours:
        call(ff, x)
    assert str(ours.value).startswith(str(theirs.value) + " ("), (str(ours.value), str(theirs.value))
    assert "fusemath.fft." + name in str(ours.value)  # and fusemath's detail


def test_axis_errors_are_numpys_axiserror(rng):
    x = crand(rng, (4, 6))
    for call in (lambda m: m.fft(x, axis=2), lambda m: m.fftn(x, axes=(0, -3)), lambda m: m.fft(np.array(1j))):
        with pytest.raises(IndexError):  # numpy raises IndexError here
            call(np.fft)
        with pytest.raises(np.exceptions.AxisError, match=r"^axis -?\d is out of bounds for array of dimension \d "):
            call(ff)


def test_wrong_out_shape_begins_with_numpys_words(rng):
    x = crand(rng, (4, 6))
    with pytest.raises(ValueError, match=re.escape("output array has wrong shape.")):
        np.fft.fft(x, out=np.empty((4, 5), complex))
    with pytest.raises(fusemath.ShapeError, match=r"^output array has wrong shape\. \(fusemath\.fft\.fft: out has"):
        ff.fft(x, out=np.empty((4, 5), complex))


def test_zero_d_fftn_is_a_copy_as_numpy():
    x = np.array(2.5)
    got = ff.fftn(x)
    np.testing.assert_array_equal(got, np.fft.fftn(x))
    assert got.shape == () and not np.shares_memory(got, x)
