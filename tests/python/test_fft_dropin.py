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


# ---------------------------------------------------------------------------
# out= overlapping the input: the right answer, through a temporary where the core says so
# ---------------------------------------------------------------------------
def overlap_cases(rng, dtype):
    """(name, call(module) -> result, the memory call() writes into): each out= shares memory with
    the input (or a chain's array) in another way; the reference is computed first, on copies."""
    cd = np.result_type(dtype, np.complex64)
    rd = np.finfo(cd).dtype
    cases = []
    x = crand(rng, (8, 6), cd)
    cases.append(("same", x, lambda m, a: m.fft(a, out=a)))
    cases.append(("same axis 0", x, lambda m, a: m.fft(a, axis=0, out=a)))
    cases.append(("transposed", crand(rng, (6, 6), cd), lambda m, a: m.fft2(a, out=a.T)))
    cases.append(("shifted", crand(rng, (9,), cd), lambda m, a: m.fft(a[:8], out=a[1:])))
    cases.append(("reversed", crand(rng, (8,), cd), lambda m, a: m.fft(a, out=a[::-1])))
    cases.append(("interleaved", crand(rng, (16,), cd), lambda m, a: m.ifft(a[::2], out=a[1::2])))
    cases.append(("4 axes same", crand(rng, (2, 3, 4, 5), cd), lambda m, a: m.fftn(a, out=a)))
    cases.append(("epilog array is out", crand(rng, (4, 8), cd),
                  lambda m, a: m.fft(a[1:], out=a[:3], epilog={"multiply": a[0]}) if m is ff
                  else np.fft.fft(a[1:]) * a[0]))
    r = rng.standard_normal(2 * 9).astype(rd)
    cases.append(("rfft into its input", r, lambda m, a: m.rfft(a[:16], out=a.view(cd))))
    cases.append(("rfft2 into its input", rng.standard_normal((4, 10)).astype(rd),
                  lambda m, a: m.rfft2(a[:, :8], out=a.view(cd))))
    c = crand(rng, (5,), cd)
    cases.append(("irfft into its input", c, lambda m, a: m.irfft(a, 8, out=a.view(rd)[:8])))
    cases.append(("irfft reversed", c, lambda m, a: m.irfft(a, 8, out=a.view(rd)[9::-1][:8])))
    return cases


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_out_overlapping_the_input_matches_numpy(rng, dtype):
    tol = 1e-5 if dtype == np.complex64 else 1e-12
    for name, data, call in overlap_cases(rng, dtype):
        a = data.copy()
        want = call(np.fft, data.copy())  # numpy's own answer (it copies where it overlaps)
        got = call(ff, a)
        assert np.shares_memory(got, a) and got.dtype == want.dtype, name  # written where out= asked
        np.testing.assert_allclose(got, want, atol=tol * max(1, np.abs(want).max()), err_msg=name)


def test_planned_execute_into_an_overlapping_out(rng):
    buf = crand(rng, (9,))
    x = buf[:8]
    want = np.fft.fft(x)
    with ff.FFT(x) as f:
        f.plan(effort="estimate")
        got = f.execute(out=buf[1:])
    assert got.base is buf or np.shares_memory(got, buf)
    np.testing.assert_allclose(buf[1:], want, atol=1e-12)


def test_out_overlapping_itself_stays_an_error(rng):
    x = crand(rng, (8,))
    out = np.lib.stride_tricks.as_strided(np.empty(8, complex), (8,), (0,))
    with pytest.raises(fusemath.AliasError, match="out overlaps itself"):
        ff.fft(x, out=out)


# ---------------------------------------------------------------------------
# long double: computed in long double (libfftw3l), as numpy.fft computes it (pocketfft)
# ---------------------------------------------------------------------------
LD, CLD = np.dtype(np.longdouble), np.dtype(np.clongdouble)
EPS_LD = float(np.finfo(np.longdouble).eps)


def ld_close(got, want, ulps=16):
    """Within a few long-double epsilons of numpy's long-double result (double precision would be
    ~2**11 times further off on x86)."""
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    err = float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1))
    assert err <= ulps * EPS_LD, err / EPS_LD


def ld_data(rng, shape):
    # more digits than a double holds: a float64 computation cannot reach long-double accuracy
    r = rng.standard_normal(shape).astype(LD)
    r += rng.standard_normal(shape).astype(LD) * np.longdouble(2.0**-60)
    i = rng.standard_normal(shape).astype(LD)
    return r, (r + 1j * i).astype(CLD)


def libfftw3l_missing():
    try:
        ff.fft(np.ones(2, CLD))
    except fusemath.NotSupportedError as exc:
        assert "libfftw3l" in str(exc)  # the build without it says what is missing
        return True
    return False


@pytest.mark.skipif(np.finfo(np.longdouble).eps == np.finfo(np.float64).eps, reason="long double is double here")
def test_long_double_matches_numpy(rng):
    if libfftw3l_missing():
        return  # (checked: the error names libfftw3l)
    r, c = ld_data(rng, (6, 10))
    funcs = ["fft", "ifft", "fft2", "ifft2", "fftn", "ifftn", "irfft", "irfft2", "irfftn", "hfft"]
    for name in funcs + ["rfft", "rfft2", "rfftn", "ihfft"]:
        x = r if name in ("rfft", "rfft2", "rfftn", "ihfft") else c
        for norm in (None, "ortho", "forward"):
            ld_close(getattr(ff, name)(x, norm=norm), getattr(np.fft, name)(x, norm=norm))
    # layouts: reversed, strided, transposed; n / s padding and cropping; repeated and 4 axes
    for v in (c[::-1, ::2], c.T, c[1:, 3:]):
        ld_close(ff.fftn(v), np.fft.fftn(v))
        ld_close(ff.irfftn(v, s=(7, 9), axes=(1, 0)), np.fft.irfftn(v, s=(7, 9), axes=(1, 0)))
    ld_close(ff.rfft(r.T, n=13, axis=0), np.fft.rfft(r.T, n=13, axis=0))
    ld_close(ff.fftn(c, axes=(0, 1, 0)), np.fft.fftn(c, axes=(0, 1, 0)))
    r4, c4 = ld_data(rng, (3, 4, 2, 5))
    ld_close(ff.fftn(c4), np.fft.fftn(c4))
    ld_close(ff.rfftn(r4), np.fft.rfftn(r4))


@pytest.mark.skipif(np.finfo(np.longdouble).eps == np.finfo(np.float64).eps, reason="long double is double here")
def test_long_double_out_chains_planner_and_errors(rng):
    if libfftw3l_missing():
        return
    r, c = ld_data(rng, (4, 8))
    out = np.empty_like(c)
    assert ff.fft(c, out=out) is out
    ld_close(out, np.fft.fft(c))
    a = c.copy()
    ff.fft(a, out=a)  # in place
    ld_close(a, np.fft.fft(c))
    b = c.copy()
    ff.fft(b[:, :7], out=b[:, 1:])  # overlapping: a temporary
    ld_close(b[:, 1:], np.fft.fft(c[:, :7]))
    ld_close(ff.fft(c, prolog={"scale": 2.0, "conj": True}, epilog={"conj": True}),
             np.conj(np.fft.fft(np.conj(c * 2))))
    with ff.FFT(c) as f:
        f.plan(effort="estimate")
        assert "fftw-ld" in f.describe()
        ld_close(f.execute(), np.fft.fftn(c, axes=(0, 1)))
        ld_close(f.execute(direction="inverse"), np.fft.ifftn(c, axes=(0, 1)))
    with pytest.raises(fusemath.NotSupportedError, match="long-double.*scale and conj"):
        ff.fft(c, prolog={"multiply": np.ones(8, LD)})
    # integer and float64 input still give complex128, as numpy's
    assert ff.fft(np.arange(4)).dtype == np.complex128 and np.fft.fft(np.arange(4)).dtype == np.complex128


# ---------------------------------------------------------------------------
# fftshift / ifftshift edge cases, as numpy's
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("axes", [None, 0, -1, (1, 1), [0, -1, 0], [], True, np.int64(1), 5, -3, 1.0, (0.5,)])
@pytest.mark.parametrize("name", ["fftshift", "ifftshift"])
def test_fftshift_axes_edge_cases_match_numpy(rng, name, axes):
    x = rng.standard_normal((3, 4))
    try:
        want = getattr(np.fft, name)(x, axes=axes)
    except Exception as exc:  # the same class of error (AxisError is numpy's IndexError too)
        with pytest.raises(type(exc) if not isinstance(exc, IndexError) else IndexError):
            getattr(ff, name)(x, axes=axes)
        return
    got = getattr(ff, name)(x, axes=axes)
    np.testing.assert_array_equal(got, want)
    assert not np.shares_memory(got, x)
