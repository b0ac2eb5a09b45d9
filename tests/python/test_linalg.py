"""fusemath.linalg against numpy.linalg / scipy.linalg in float64 on the same inputs, LAPACK's residual
ratios (below 30) on random, positive definite, graded (ill-conditioned), diagonal and banded matrices
at n in {0, 1, 2, 3, 5, 10, 50, 257}, 2-D and batched, every dtype; singular and indefinite matrices
(LinAlgError naming the entry, a subclass of numpy.linalg.LinAlgError); every bad argument; the Solver
(kinds, transpose, det, reset_operand, describe, free) with 8 threads sharing one."""
import threading

import numpy as np
import pytest
import scipy.linalg as sl

import fusemath
import fusemath.linalg as fl

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
SIZES = [0, 1, 2, 3, 5, 10, 50, 257]
KINDS = ["random", "spd", "graded", "diagonal", "banded"]


def eps(dt):
    return np.finfo(np.dtype(dt)).eps


def make(rng, kind, n, dt, batch=()):
    shape = batch + (n, n)
    a = rng.standard_normal(shape)
    if np.dtype(dt).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    if kind == "spd":
        a = a @ np.conj(np.swapaxes(a, -1, -2)) + n * np.eye(n)
    elif kind == "graded":
        cond = 1e12 if np.dtype(dt) in (np.float64, np.complex128) else 1e6
        a = a * cond ** (-np.arange(n) / max(n - 1, 1))
    elif kind == "diagonal":
        a = a * np.eye(n)
    elif kind == "banded":
        i = np.arange(n)
        a = a * (np.abs(i[:, None] - i[None, :]) <= 2)
    return a.astype(dt)


def n1(x):
    """1-norm of each matrix (max column sum), in float64."""
    x = np.asarray(x, dtype=np.complex128)
    return np.abs(x).sum(axis=-2).max(axis=-1, initial=0.0) if x.size else np.zeros(x.shape[:-2])


def solve_ratio(a, x, b):
    n = a.shape[-1]
    r = a.astype(np.complex128) @ x.astype(np.complex128) - b
    den = n * n1(a) * n1(x) * eps(a.dtype)
    return np.max(np.where(den > 0, n1(r) / np.where(den > 0, den, 1), n1(r)), initial=0.0)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", SIZES)
def test_solve_residuals(rng, dt, kind, n):
    for batch in ((), (2, 3)) if n <= 50 else ((),):
        a = make(rng, kind, n, dt, batch)
        b = rng.standard_normal(batch + (n, 4)).astype(dt)
        x = fl.solve(a, b)
        assert x.shape == b.shape and x.dtype == np.dtype(dt)
        assert solve_ratio(a, x, b) < 30
        if np.dtype(dt) == np.float64 and kind in ("random", "spd"):
            np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("n", [1, 2, 5, 10, 50])
def test_factorization_residuals(rng, dt, n):
    e = eps(dt)
    a = make(rng, "spd", n, dt, (2,))
    na = n1(a)
    l = fl.cholesky(a)
    assert np.all(n1(l @ np.conj(np.swapaxes(l, -1, -2)) - a) / (n * na * e) < 30)
    assert np.all(np.triu(l, 1) == 0)
    u = fl.cholesky(a, upper=True)
    tol = 1e3 * e * np.abs(l).max()  # U = L^H up to rounding (the two factor different triangles)
    np.testing.assert_allclose(u, np.conj(np.swapaxes(l, -1, -2)), rtol=0, atol=tol)
    ai = fl.inv(a)
    assert np.all(n1(a @ ai - np.eye(n)) / (n * na * n1(ai) * e) < 30)
    w, v = fl.eigh(a)
    assert np.all(n1(a @ v - v * w[..., None, :]) / (n * na * e) < 30)
    assert np.all(np.diff(w, axis=-1) >= 0) and w.dtype == np.finfo(np.dtype(dt)).dtype
    m = rng.standard_normal((2, n + 3, n)).astype(dt)
    q, r = fl.qr(m)
    assert np.all(n1(q @ r - m) / (n * n1(m) * e) < 30)
    assert np.all(n1(np.conj(np.swapaxes(q, -1, -2)) @ q - np.eye(n)) / (n * e) < 30)
    U, S, Vh = fl.svd(m, full_matrices=False)
    assert np.all(n1((U * S[..., None, :]) @ Vh - m) / (n * n1(m) * e) < 30)
    np.testing.assert_allclose(fl.svdvals(m), S, rtol=1e-3 if e > 1e-10 else 1e-12)


def test_against_numpy_scipy_f64(rng):
    a = rng.standard_normal((6, 6))
    spd = a @ a.T + 6 * np.eye(6)
    b = rng.standard_normal((6, 2))
    close = lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-10, atol=1e-12)  # noqa: E731
    close(fl.solve(a, b[:, 0]), np.linalg.solve(a, b[:, 0]))
    close(fl.solve(a, b, refine="fp16"), np.linalg.solve(a, b))  # the cpu's plain solve whatever refine says
    close(fl.inv(a), np.linalg.inv(a))
    close(fl.det(a), np.linalg.det(a))
    assert isinstance(fl.det(a), np.float64)
    s1, s2 = fl.slogdet(a), np.linalg.slogdet(a)
    assert s1.sign == s2.sign
    close(s1.logabsdet, s2.logabsdet)
    close(fl.cholesky(spd), np.linalg.cholesky(spd))
    close(fl.eigvalsh(spd, UPLO="U"), np.linalg.eigvalsh(spd, UPLO="U"))
    m = rng.standard_normal((7, 4))
    for mode in ("reduced", "complete"):
        q1, r1 = fl.qr(m, mode)
        q2, r2 = np.linalg.qr(m, mode)
        close(q1, q2), close(r1, r2)
    close(fl.qr(m, "r"), np.linalg.qr(m, "r"))
    for full in (True, False):
        U1, S1, V1 = fl.svd(m, full_matrices=full)
        U2, S2, V2 = np.linalg.svd(m, full_matrices=full)
        assert U1.shape == U2.shape and V1.shape == V2.shape
        close(S1, S2)
    close(fl.svd(m, compute_uv=False), np.linalg.svd(m, compute_uv=False))
    for bb in (rng.standard_normal(7), rng.standard_normal((7, 3))):
        r1, r2 = fl.lstsq(m, bb), np.linalg.lstsq(m, bb)
        close(r1[0], r2[0]), close(r1[1], r2[1]), close(r1[3], r2[3])
        assert r1[2] == r2[2] and type(r1[2]) is type(r2[2])  # numpy.int32, as NumPy's (not a Python int)
    assert fl.lstsq(m.T, rng.standard_normal(4))[1].shape == (0,)  # underdetermined: no residuals
    assert fl.matrix_rank(m) == np.linalg.matrix_rank(m) == 4
    low = m[:, :2] @ rng.standard_normal((2, 5))
    assert fl.matrix_rank(low) == np.linalg.matrix_rank(low) == 2
    lu1, piv1 = fl.lu_factor(a)
    lu2, piv2 = sl.lu_factor(a)
    close(lu1, lu2)
    assert piv1.dtype == piv2.dtype and np.array_equal(piv1, piv2)
    for trans in (0, 1, 2):
        close(fl.lu_solve((lu1, piv1), b, trans=trans), sl.lu_solve((lu2, piv2), b, trans=trans))
    for lower in (True, False):
        c = fl.cho_factor(spd, lower=lower)
        close(fl.cho_solve(c, b), sl.cho_solve(sl.cho_factor(spd, lower=lower), b))
        t = np.tril(a) + 6 * np.eye(6) if lower else np.triu(a) + 6 * np.eye(6)
        for trans in (0, 1, "C"):
            for unit in (False, True):
                close(fl.solve_triangular(t, b, trans=trans, lower=lower, unit_diagonal=unit),
                      sl.solve_triangular(t, b, trans=trans, lower=lower, unit_diagonal=unit))


def test_broadcast_and_promotion(rng):
    a = rng.standard_normal((2, 1, 4, 4))
    b = rng.standard_normal((3, 4, 2))
    np.testing.assert_allclose(fl.solve(a, b), np.linalg.solve(a, b), rtol=1e-10)
    ai = np.array([[2, 1], [1, 3]])
    assert fl.solve(ai, [1, 2]).dtype == np.float64
    np.testing.assert_allclose(fl.inv(ai), np.linalg.inv(ai))
    x = fl.solve(np.eye(2, dtype=np.float32), np.ones(2, dtype=np.float64))
    assert x.dtype == np.linalg.solve(np.eye(2, dtype=np.float32), np.ones(2)).dtype
    assert fl.det(np.zeros((0, 0))) == 1.0
    assert fl.eigh(np.zeros((2, 0, 0))).eigenvalues.shape == (2, 0)
    u, s, vh = fl.svd(np.zeros((0, 3)))
    assert u.shape == (0, 0) and np.array_equal(vh, np.eye(3))


def test_tall_and_wide_matrices(rng):
    """A 50000 x 3 matrix is 150000 elements, far inside LAPACK's 32-bit indices: lstsq, qr and svd of it
    (and svd of its transpose) run and match NumPy; only an array past 2^31 elements is TooLargeError."""
    a = rng.standard_normal((50000, 3))
    b = rng.standard_normal(50000)
    close = lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-9, atol=1e-9)  # noqa: E731
    r1, r2 = fl.lstsq(a, b), np.linalg.lstsq(a, b)
    close(r1[0], r2[0]), close(r1[1], r2[1]), close(r1[3], r2[3])
    q, r = fl.qr(a)
    close(np.abs(r), np.abs(np.linalg.qr(a)[1]))
    close(q @ r, a)
    for m in (a, a.T):
        u, s, vh = fl.svd(m, full_matrices=False)
        close(s, np.linalg.svd(m, compute_uv=False))
        close((u * s[None, :]) @ vh, m)
    with pytest.raises(fusemath.TooLargeError, match="32-bit"):
        fl.svd(a)  # full_matrices: U is 50000 x 50000, 2.5e9 elements


def test_singular_and_indefinite():
    a = np.stack([np.eye(3), np.diag([1.0, 0.0, 1.0]), np.eye(3)])
    with pytest.raises(fusemath.LinAlgError, match=r"a\[1\] is singular: U\[1, 1\]"):
        fl.solve(a, np.ones((3, 3, 1)))
    with pytest.raises(np.linalg.LinAlgError):  # NumPy's class catches it
        fl.inv(a)
    assert fl.det(a[1]) == 0.0 and fl.slogdet(a[1]) == (0.0, -np.inf)
    with pytest.raises(fusemath.LinAlgError, match="leading minor of order 2"):
        fl.cholesky(np.diag([1.0, -1.0, 1.0]))
    with pytest.raises(fusemath.LinAlgError, match="diagonal entry 1 is zero"):
        fl.solve_triangular(np.diag([1.0, 0.0]), np.ones(2))
    from scipy.linalg import LinAlgWarning
    with pytest.warns(LinAlgWarning, match="Diagonal number 2 is exactly zero"):
        fl.lu_factor(a[1])


def test_lstsq_rank_types(rng):
    """rank is numpy.linalg.lstsq's type: a numpy.int32 scalar for one system (full rank, rank-deficient,
    underdetermined, float32 and complex), and for a batch (which NumPy refuses) an int32 array of the
    batch shape holding each matrix's NumPy rank."""
    low = rng.standard_normal((6, 2)) @ rng.standard_normal((2, 4))
    for a in (rng.standard_normal((6, 4)), low, rng.standard_normal((3, 5)), low.astype(np.float32),
              low + 1j * rng.standard_normal((6, 4))):
        want = np.linalg.lstsq(a, np.ones(a.shape[0], a.dtype))
        got = fl.lstsq(a, np.ones(a.shape[0], a.dtype))
        assert type(got[2]) is type(want[2]) and got[2] == want[2], (a.shape, a.dtype, got[2], want[2])
        assert got[1].shape == want[1].shape and got[1].dtype == want[1].dtype
    a = np.stack([rng.standard_normal((6, 4)), low, low[:, :1] @ np.ones((1, 4))])
    rank = fl.lstsq(a, np.ones((3, 6, 2)))[2]
    assert isinstance(rank, np.ndarray) and rank.dtype == np.int32 and rank.shape == (3,)
    assert rank.tolist() == [int(np.linalg.lstsq(m, np.ones(6))[2]) for m in a] == [4, 2, 1]


def test_lstsq_no_right_hand_side(rng):
    """b with no columns: x (n, 0) and residuals (0,), but s and rank still NumPy's (gelsd runs on one zero
    column; LAPACK's xLALSD refuses nrhs = 0), for tall, wide, rank-deficient and complex a."""
    low = rng.standard_normal((6, 2)) @ rng.standard_normal((2, 4))
    for a in (rng.standard_normal((6, 4)), rng.standard_normal((3, 5)), low, low + 1j * low):
        want = np.linalg.lstsq(a, np.zeros((a.shape[0], 0), a.dtype))
        got = fl.lstsq(a, np.zeros((a.shape[0], 0), a.dtype))
        assert got[0].shape == want[0].shape and got[1].shape == want[1].shape
        assert got[2] == want[2], (a.shape, got[2], want[2])
        np.testing.assert_allclose(got[3], want[3], rtol=1e-12, atol=1e-12 * want[3][0])


def test_check_finite():
    bad = np.array([[1.0, np.nan], [0.0, 1.0]])
    with pytest.raises(ValueError, match="a contains infs or NaNs"):
        fl.lu_factor(bad)
    with pytest.raises(ValueError, match="b contains infs or NaNs"):
        fl.solve_triangular(np.eye(2), [np.inf, 1.0])
    fl.lu_factor(bad, check_finite=False)  # the result follows LAPACK
    assert np.isnan(fl.solve(bad, np.ones(2))).any()  # numpy.linalg's names do not check, as NumPy's


def test_one_large_matrix_copies_on_threads(rng, restore_threads):
    """Matrices past 64 MiB are gathered, checked, zeroed and scattered in column ranges on the library's
    threads: cholesky (the contiguous copies, the zeroed triangle) and lu_factor (the transposing tile
    copies both ways) against projections of a (O(n^2): a product of the whole would cost more than the
    factorizations), and a NaN in the last column is still found."""
    fusemath.set_num_threads(2)  # no more than the CI machine's cores (3 made OpenBLAS's LAPACK 100x slower)
    n = 4099  # 64.1 MiB in f32, just past the threshold; odd, so the two ranges differ
    g = rng.standard_normal((n, n)).astype(np.float32)
    spd = np.eye(n, dtype=np.float32) * (2 * np.sqrt(n)) + (g + g.T) * np.float32(0.25)  # dominant diagonal
    v = rng.standard_normal((n, 2))
    sd, gd = spd.astype(np.float64), g.astype(np.float64)

    def close(x, y):
        return np.abs(x - y).max() <= 1e-4 * np.abs(y).max()
    l = fl.cholesky(spd)
    assert not np.triu(l, 1).any(), "the upper triangle is not zero"
    ld = l.astype(np.float64)
    assert close(ld @ (ld.T @ v), sd @ v)
    u = fl.cholesky(spd, upper=True)
    assert not np.tril(u, -1).any() and close(u, l.T)  # (the other triangle: other rounding)
    lu, piv = fl.lu_factor(g)
    lo = np.tril(lu.astype(np.float64), -1) + np.eye(n)
    up = np.triu(lu.astype(np.float64))
    pg = gd.copy()
    for i, p in enumerate(piv):  # LAPACK's row interchanges, in order
        pg[[i, p]] = pg[[p, i]]
    assert close(lo @ (up @ v), pg @ v)
    bad = spd.copy()
    bad[n - 1, n - 1] = np.nan
    with pytest.raises(ValueError, match="a contains infs or NaNs"):
        fl.cho_factor(bad)


@pytest.mark.parametrize("kind", ["lu", "cholesky", "qr", "auto"])
@pytest.mark.filterwarnings("error")
def test_solver_check_finite_b(rng, kind):
    """Solver(check_finite=True) refuses a NaN / Inf in solve's b for every kind (qr's went unchecked),
    in both directions, naming b; without it the result follows LAPACK (NaN out)."""
    a = make(rng, "spd", 6, np.float64)
    b = rng.standard_normal((6, 2))
    for bad in (np.nan, np.inf):
        bb = b.copy()
        bb[3, 1] = bad
        s = fl.Solver(a, kind=kind, check_finite=True).factor()
        for transpose in (False, True):
            with pytest.raises(ValueError, match="b contains infs or NaNs") as info:
                s.solve(bb, transpose=transpose)
            assert str(info.value).startswith("fusemath.linalg.Solver.solve")
            with pytest.raises(ValueError, match="b contains infs or NaNs"):
                s.solve(bb[:, 1], transpose=transpose)
        np.testing.assert_allclose(s.solve(b), np.linalg.solve(a, b), rtol=1e-9)  # finite b: solved
        x = fl.Solver(a, kind=kind).factor().solve(bb)
        assert np.isnan(x[:, 1]).any() and np.isfinite(x[:, 0]).all()


@pytest.mark.parametrize("call, exc, text", [
    (lambda: fl.solve(np.zeros((3, 4)), np.zeros(3)), fusemath.ShapeError, "a has shape (3, 4), expected square"),
    (lambda: fl.inv(np.float64(2.0)), fusemath.ShapeError, "a is 0-dimensional"),
    (lambda: fl.solve(np.eye(3), np.ones(4)), fusemath.ShapeError, "b has shape (4, 1), expected 3 rows"),
    (lambda: fl.solve(np.ones((2, 3, 3)), np.ones((3, 3, 1))), fusemath.ShapeError, "does not broadcast"),
    (lambda: fl.inv(np.eye(2, dtype=np.float16)), fusemath.NotSupportedError, "float16"),
    (lambda: fl.qr(np.eye(2), mode="raw"), ValueError, "mode = 'raw'"),
    (lambda: fl.eigh(np.eye(2), UPLO="X"), ValueError, "UPLO = 'X'"),
    (lambda: fl.lu_solve(fl.lu_factor(np.eye(2)), np.ones(2), trans=5), ValueError, "trans = 5"),
    (lambda: fl.lu_solve((np.eye(2), np.array([0, 7])), np.ones(2)), ValueError, "pivot 8 at position 1"),
    (lambda: fl.Solver(np.eye(2), kind="svd"), fusemath.InvalidArgumentError, "kind = 'svd'"),
    (lambda: fl.solve(np.eye(2), np.ones(2), refine="fp8"), ValueError, "refine = 'fp8'"),
])
def test_bad_arguments(call, exc, text):
    with pytest.raises(exc) as info:
        call()
    assert text in str(info.value)
    assert str(info.value).startswith("fusemath.linalg.")


def test_out_of_place_outputs_are_checked():
    # a given out (Solver.reset_operand's buffers) of another shape is the library's ShapeError
    s = fl.Solver(np.eye(3) * 2, kind="lu")
    s.factor()
    with pytest.raises(fusemath.ShapeError, match="factor has shape"):
        s.reset_operand(np.eye(4))


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("kind", ["lu", "cholesky", "qr", "auto"])
def test_solver(rng, dt, kind):
    a = make(rng, "spd", 20, dt)
    b = rng.standard_normal((20, 3)).astype(dt)
    with fl.Solver(a, kind=kind) as s:
        assert "not factored" in s.describe()
        s.factor()
        assert solve_ratio(a, s.solve(b), b) < 30
        assert solve_ratio(a.T, s.solve(b, transpose=True), b) < 30
        assert s.solve(b[:, 0]).shape == (20,)
        rtol = 1e-3 if eps(dt) > 1e-10 else 1e-9
        np.testing.assert_allclose(s.det(), np.linalg.det(a.astype(np.complex128)).real
                                   if np.dtype(dt).kind == "f" else np.linalg.det(a.astype(np.complex128)), rtol=rtol)
        if kind == "auto":
            assert "cholesky (the operand is positive definite)" in s.describe()
        a2 = make(rng, "spd", 20, dt)
        s.reset_operand(a2)
        assert solve_ratio(a2, s.solve(b), b) < 30
    with pytest.raises(fusemath.InvalidStateError, match="freed"):
        s.solve(b)


def test_solver_auto_falls_back_to_lu(rng):
    a = rng.standard_normal((8, 8))
    s = fl.Solver(a).factor()
    assert "lu (cholesky failed:" in s.describe()
    b = rng.standard_normal(8)
    np.testing.assert_allclose(s.solve(b), np.linalg.solve(a, b), rtol=1e-9)
    np.testing.assert_allclose(s.det(), np.linalg.det(a), rtol=1e-10)
    with pytest.raises(fusemath.LinAlgError, match="singular"):
        fl.Solver(np.zeros((3, 3)), kind="lu").factor()


@pytest.mark.parametrize("kind", ["lu", "cholesky", "auto"])
def test_solver_failed_reset_leaves_no_stale_factor(rng, kind):
    """reset_operand to a matrix the kind cannot factor raises; the buffers it was refactoring into
    hold a partial factor then, which a later solve must not use: it refactors and raises again."""
    a = make(rng, "spd", 6, np.float64)
    b = rng.standard_normal((6, 2))
    s = fl.Solver(a, kind=kind).factor()
    np.testing.assert_allclose(s.solve(b), np.linalg.solve(a, b), rtol=1e-9)
    bad = np.zeros((6, 6)) if kind != "cholesky" else -a  # singular (lu, auto), not positive definite
    for _ in range(2):
        with pytest.raises(fusemath.LinAlgError):
            s.reset_operand(bad) if _ == 0 else s.solve(b)
    assert "not factored" in s.describe()
    s.reset_operand(a)  # a good operand again: right answers
    np.testing.assert_allclose(s.solve(b), np.linalg.solve(a, b), rtol=1e-9)


@pytest.mark.parametrize("kind", ["lu", "cholesky", "qr"])
def test_solver_batched_vector_rhs(rng, kind):
    """A batch of matrices and one vector b: x[i] solves a[i] x = b (numpy.linalg.solve's rule), for
    every kind and both directions."""
    a = make(rng, "spd", 5, np.float64, (3,)) + 0.5 * rng.standard_normal((3, 5, 5)) * (kind != "cholesky")
    b = rng.standard_normal(5)
    s = fl.Solver(a, kind=kind).factor()
    np.testing.assert_allclose(s.solve(b), np.linalg.solve(a, b), rtol=1e-9)
    if kind != "cholesky":  # cholesky's transpose is the conjugate's, tested in test_solver
        np.testing.assert_allclose(s.solve(b, transpose=True), np.linalg.solve(np.swapaxes(a, -1, -2), b),
                                   rtol=1e-9)


def test_solver_threads(rng):
    a = make(rng, "random", 64, np.float64)
    s = fl.Solver(a, kind="lu").factor()
    bs = [rng.standard_normal((64, 2)) for _ in range(8)]
    worst = [np.inf] * 8

    def run(i):
        r = 0.0
        for _ in range(20):
            r = max(r, solve_ratio(a, s.solve(bs[i]), bs[i]))
        worst[i] = r

    ts = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert max(worst) < 30


@pytest.mark.gpu
def test_gpu_operands_right_answer_or_clear_error(rng):
    """Until backends/cuda/cusolver_dense.c exists, CUDA operands are a NotSupportedError naming the
    operation; once it does, the answer must be right (and of the caller's library)."""
    cp = pytest.importorskip("cupy")
    a = rng.standard_normal((3, 40, 40))
    b = rng.standard_normal((3, 40, 2))
    try:
        x = fl.solve(cp.asarray(a), cp.asarray(b))
    except fusemath.NotSupportedError as exc:
        assert "solve" in str(exc)
        return
    assert isinstance(x, cp.ndarray)
    np.testing.assert_allclose(cp.asnumpy(x), np.linalg.solve(a, b), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("fn", ["svd", "eigh", "lstsq"])
def test_nonfinite_input_to_iterative_routines_is_no_convergence(fn):
    """An inf or NaN in a never reaches LAPACK's SVD / eigenvalue iterations (which need not end on
    one: the fuzzer's zgelsd ran for minutes): LinAlgError, as NumPy reports it."""
    a = np.eye(5)
    a[1, 3] = a[3, 1] = np.nan
    call = {"svd": lambda: fl.svd(a), "eigh": lambda: fl.eigh(a), "lstsq": lambda: fl.lstsq(a, np.ones(5))}[fn]
    with pytest.raises(fusemath.LinAlgError, match="did not converge"):
        call()
