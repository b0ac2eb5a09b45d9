"""GPU dense solvers (cuSOLVER, backends/cuda/cusolver_dense.c): fusemath.linalg on CuPy and PyTorch
CUDA arrays.

1. every function GPU-enabled in the backend returns the caller's array type on the caller's device,
   checked against numpy.linalg / scipy-style identities in float64 / complex128 on the host copy
   (residual ratios such as ||a x - b|| / (n ||a|| ||x|| eps) below 30, and values equal to
   numpy.linalg's within a few hundred eps times n on well-conditioned matrices);
2. errors: a singular / indefinite matrix raises fusemath.LinAlgError (a numpy.linalg.LinAlgError)
   with the CPU's message; check_finite refuses NaN with ValueError; a NaN gives the CPU's outcome;
3. Solver on the GPU (factor once, many right-hand sides, transpose, det), 8 threads sharing one;
4. lstsq (cusolver_lstsq.c) against numpy.linalg.lstsq entry by entry: x, residuals, rank, s.

Marked gpu: skipped when fusemath.cuda_device_count() == 0; each library is skipped when it is not
importable or sees no GPU.
"""
import re
import threading

import numpy as np
import pytest

import fusemath
import fusemath.linalg as fl
import gpu_libs

pytestmark = pytest.mark.gpu

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


class _CuPy(gpu_libs.CuPyLib):
    def dev(self, a):
        return self.m.asarray(np.ascontiguousarray(a))

    def is_array(self, x):
        return isinstance(x, self.m.ndarray)


class _Torch(gpu_libs.TorchLib):
    def dev(self, a):
        return self.m.from_numpy(np.ascontiguousarray(a)).to("cuda")

    def host(self, x):
        return x.detach().resolve_conj().cpu().numpy()

    def is_array(self, x):
        return isinstance(x, self.m.Tensor) and x.is_cuda


@pytest.fixture(params=["cupy", "torch"])
def gpu(request):
    return gpu_libs.get(_CuPy if request.param == "cupy" else _Torch)


def eps(dt):
    return np.finfo(np.dtype(dt)).eps


def rand(rng, shape, dt):
    x = rng.standard_normal(shape)
    if np.dtype(dt).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dt)


def spd(rng, n, dt, batch=()):
    m = rand(rng, batch + (n, n), np.complex128 if np.dtype(dt).kind == "c" else np.float64)
    a = m @ np.conj(np.swapaxes(m, -1, -2)) + n * np.eye(n)
    return a.astype(dt)


def well(rng, n, dt, batch=()):
    """A random matrix with cond about 10: the identity times n plus noise."""
    return (rand(rng, batch + (n, n), dt) + 3 * np.sqrt(n) * np.eye(n)).astype(dt)


def n1(x):
    x = np.asarray(x, np.complex128)
    return np.abs(x).sum(axis=-2).max(initial=0.0) if x.ndim >= 2 else np.abs(x).sum()


def check_type(gpu, x, like):
    assert gpu.is_array(x), f"result is {type(x)}, expected the caller's {type(like)}"
    assert gpu.device_of(x) == gpu.device_of(like), "result on another device"


def host(gpu, x):
    return np.asarray(gpu.host(x)).astype(np.complex128)


SIZES = [0, 1, 2, 3, 5, 10, 50, 257]


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_solve_inv_det(gpu, dt, n):
    rng = np.random.default_rng(n)
    for batch in [(), (3,)] if n <= 50 else [()]:
        a, b = well(rng, n, dt, batch), rand(rng, batch + (n, 4), dt)
        da, db = gpu.dev(a), gpu.dev(b)
        x = fl.solve(da, db)
        check_type(gpu, x, da)
        A, X, B = a.astype(np.complex128), host(gpu, x), b.astype(np.complex128)
        for i in np.ndindex(batch):
            r = n1(A[i] @ X[i] - B[i]) / max(1, n * n1(A[i]) * n1(X[i]) * eps(dt))
            assert r < 30, f"solve {np.dtype(dt)} n={n} entry {i}: residual ratio {r}"
        inv = fl.inv(da)
        check_type(gpu, inv, da)
        V = host(gpu, inv)
        for i in np.ndindex(batch):
            r = n1(A[i] @ V[i] - np.eye(n)) / max(1, n * n1(A[i]) * n1(V[i]) * eps(dt))
            assert r < 30, f"inv {np.dtype(dt)} n={n} entry {i}: ratio {r}"
        want = np.linalg.slogdet(A)
        s, l = fl.slogdet(da)
        np.testing.assert_allclose(host(gpu, l).real, want.logabsdet, rtol=100 * n * eps(dt), atol=100 * n * eps(dt))
        np.testing.assert_allclose(host(gpu, s), want.sign, atol=100 * max(n, 1) * eps(dt))
        d, want_d = fl.det(da), np.linalg.det(A)
        if np.all(np.abs(want_d) < np.finfo(dt).max / 1e3):  # float32's det of n = 50 overflows, as NumPy's
            np.testing.assert_allclose(host(gpu, d), want_d, rtol=100 * max(n, 1) * eps(dt))


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_cholesky_eigh(gpu, dt, n):
    rng = np.random.default_rng(100 + n)
    a = spd(rng, n, dt, (2,))
    da = gpu.dev(a)
    A = a.astype(np.complex128)
    for upper in (False, True):
        c = fl.cholesky(da, upper=upper)
        check_type(gpu, c, da)
        C = host(gpu, c)
        CC = np.conj(np.swapaxes(C, -1, -2)) @ C if upper else C @ np.conj(np.swapaxes(C, -1, -2))
        for i in range(2):
            r = n1(CC[i] - A[i]) / max(1, n * n1(A[i]) * eps(dt))
            assert r < 30, f"cholesky upper={upper} {np.dtype(dt)} n={n}: ratio {r}"
        assert np.all((np.triu(C, 1) if not upper else np.tril(C, -1)) == 0)
    h = a - 1.5 * n * np.eye(n, dtype=dt)  # indefinite
    w, v = fl.eigh(gpu.dev(h))
    check_type(gpu, w, da)
    W, V, H = host(gpu, w).real, host(gpu, v), h.astype(np.complex128)
    np.testing.assert_allclose(W, np.linalg.eigvalsh(H), atol=30 * max(n, 1) * eps(dt) * max(1, n1(H[0])))
    for i in range(2):
        r = n1(H[i] @ V[i] - V[i] * W[i]) / max(1, n * n1(H[i]) * eps(dt))
        o = n1(np.conj(V[i].T) @ V[i] - np.eye(n)) / max(1, n * eps(dt))
        assert r < 30 and o < 30, f"eigh {np.dtype(dt)} n={n}: residual ratio {r}, orthogonality ratio {o}"
    np.testing.assert_allclose(host(gpu, fl.eigvalsh(gpu.dev(h))).real, W, atol=30 * max(n, 1) * eps(dt) * n1(H[0]))


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("shape", [(0, 0), (1, 1), (5, 3), (3, 5), (50, 20), (20, 50), (257, 257)])
def test_qr_svd(gpu, dt, shape):
    rng = np.random.default_rng(sum(shape))
    m, n = shape
    a = rand(rng, (2, m, n), dt)
    da = gpu.dev(a)
    A = a.astype(np.complex128)
    big = max(m, n, 1)
    for mode in ("reduced", "complete"):
        q, r = fl.qr(da, mode=mode)
        check_type(gpu, q, da)
        Q, R = host(gpu, q), host(gpu, r)
        for i in range(2):
            r1 = n1(Q[i] @ R[i] - A[i]) / max(1, big * n1(A[i]) * eps(dt))
            r2 = n1(np.conj(Q[i].T) @ Q[i] - np.eye(Q.shape[-1])) / (big * eps(dt))
            assert r1 < 30 and r2 < 30, f"qr {mode} {np.dtype(dt)} {shape}: ratios {r1}, {r2}"
    for full in (False, True):
        u, s, vh = fl.svd(da, full_matrices=full)
        check_type(gpu, u, da)
        U, S, VH = host(gpu, u), host(gpu, s).real, host(gpu, vh)
        np.testing.assert_allclose(S, np.linalg.svd(A, compute_uv=False), atol=30 * big * eps(dt) * max(1, n1(A[0])))
        k = min(m, n)
        for i in range(2):
            r = n1((U[i][:, :k] * S[i]) @ VH[i][:k] - A[i]) / max(1, big * n1(A[i]) * eps(dt))
            assert r < 30, f"svd full={full} {np.dtype(dt)} {shape}: ratio {r}"
    np.testing.assert_allclose(host(gpu, fl.svdvals(da)).real, np.linalg.svd(A, compute_uv=False),
                               atol=30 * big * eps(dt) * max(1, n1(A[0])))


@pytest.mark.parametrize("dt", DTYPES)
def test_scipy_style(gpu, dt):
    rng = np.random.default_rng(7)
    n = 40
    a, b = well(rng, n, dt), rand(rng, (n, 3), dt)
    da, db = gpu.dev(a), gpu.dev(b)
    A, B = a.astype(np.complex128), b.astype(np.complex128)
    lu, piv = fl.lu_factor(da)
    check_type(gpu, lu, da)
    for trans in (0, 1, 2):
        X = host(gpu, fl.lu_solve((lu, piv), db, trans=trans))
        op = A if trans == 0 else A.T if trans == 1 else np.conj(A.T)
        assert n1(op @ X - B) / (n * n1(A) * n1(X) * eps(dt)) < 30, f"lu_solve trans={trans}"
    s = spd(rng, n, dt)
    for lower in (False, True):
        c = fl.cho_factor(gpu.dev(s), lower=lower)
        X = host(gpu, fl.cho_solve(c, db))
        assert n1(s.astype(np.complex128) @ X - B) / (n * n1(s) * n1(X) * eps(dt)) < 30, f"cho_solve lower={lower}"
        t = np.tril(a) if lower else np.triu(a)
        X = host(gpu, fl.solve_triangular(gpu.dev(t), db, lower=lower))
        assert n1(t.astype(np.complex128) @ X - B) / (n * n1(t) * n1(X) * eps(dt)) < 30, "solve_triangular"


@pytest.mark.parametrize("dt", DTYPES)
def test_blocked_triangular_solves(gpu, dt):
    """n >= 1024 with few right-hand sides: the triangular solves of solve, lu_solve (every trans),
    cho_solve (both triangles) and solve_triangular (every trans, unit or not) run blocked: a launch per
    64-row tile (cusolver_trsm.c); n = 1100 leaves a short last tile, k = 7 a partial warp group."""
    rng = np.random.default_rng(1100)
    n = 1100
    a = well(rng, n, dt)
    A = a.astype(np.complex128)
    da = gpu.dev(a)
    lu, piv = fl.lu_factor(da)

    def ratio(op, x, b):
        return n1(op @ x - b) / (n * n1(op) * n1(x) * eps(dt))
    for k in (1, 7, 128):
        b = rand(rng, (n, k), dt)
        B, db = b.astype(np.complex128), gpu.dev(b)
        assert ratio(A, host(gpu, fl.solve(da, db)), B) < 30, f"solve k={k}"
        for trans in (0, 1, 2):
            op = A if trans == 0 else A.T if trans == 1 else np.conj(A.T)
            assert ratio(op, host(gpu, fl.lu_solve((lu, piv), db, trans=trans)), B) < 30, f"lu_solve trans={trans} k={k}"
    b = rand(rng, (n, 5), dt)
    B, db = b.astype(np.complex128), gpu.dev(b)
    x1 = host(gpu, fl.solve(da, gpu.dev(b[:, 0])))  # a vector b: one right-hand side, its axis dropped
    assert x1.shape == (n,) and ratio(A, x1[:, None], B[:, :1]) < 30, "solve of a vector"
    s = spd(rng, n, dt)
    for lower in (False, True):
        X = host(gpu, fl.cho_solve(fl.cho_factor(gpu.dev(s), lower=lower), db))
        assert ratio(s.astype(np.complex128), X, B) < 30, f"cho_solve lower={lower}"
    for lower in (False, True):
        for unit in (False, True):
            # unit: the strict triangle scaled down, else I + a random triangle is ill-conditioned past float32
            t = (a / (3 * np.sqrt(n))).astype(dt) if unit else a
            t = np.tril(t) if lower else np.triu(t)
            T = t.astype(np.complex128)
            if unit:
                np.fill_diagonal(T, 1)
            for trans in (0, 1, 2):
                op = T if trans == 0 else T.T if trans == 1 else np.conj(T.T)
                X = host(gpu, fl.solve_triangular(gpu.dev(t), db, trans=trans, lower=lower, unit_diagonal=unit))
                assert ratio(op, X, B) < 30, f"solve_triangular lower={lower} unit={unit} trans={trans}"
    bad = gpu.dev(np.where(np.arange(n) == 700, n + 5, np.arange(1, n + 1)).astype(np.int64))
    with pytest.raises(ValueError, match="pivot 1106 at position 700") as gpu_err:
        fl.lu_solve((lu, bad), db)
    with pytest.raises(ValueError) as cpu_err:
        lu_h, _ = fl.lu_factor(a)
        fl.lu_solve((lu_h, np.asarray(gpu.host(bad))), b)
    assert str(gpu_err.value) == str(cpu_err.value), "the bad pivot's message differs from the CPU's"


def test_pivot_sequences(gpu):
    """lu_solve at n >= 1024 composes the row interchanges into one permutation on the device (fm_sv_perm:
    32 swaps at a time in parallel where every pivot is at or below its row, as getrf's are, one by one
    where not); given pivot sequences that stress both - one row taken again and again (long chains), each
    row swapped with the next (a chain through the whole chunk), random rows below, random rows anywhere
    (LAPACK's laswp still swaps in order) - give the CPU's (LAPACK getrs) answer."""
    rng = np.random.default_rng(4242)
    n = 1100
    a = well(rng, n, np.float64)
    lu, _ = fl.lu_factor(a)
    b = rand(rng, (n, 3), np.float64)
    rows = np.arange(n)
    cases = {"last row": np.full(n, n - 1), "next row": np.minimum(rows + 1, n - 1),
             "below": np.array([rng.integers(i, n) for i in rows]), "anywhere": rng.integers(0, n, n),
             "near": np.minimum(rows + rng.integers(0, 3, n), n - 1)}
    for name, piv in cases.items():
        piv = piv.astype(np.int32)
        x_cpu = fl.lu_solve((lu, piv), b)
        x = host(gpu, fl.lu_solve((gpu.dev(lu), gpu.dev(piv)), gpu.dev(b)))
        assert np.abs(x - x_cpu).max() <= 1e-9 * np.abs(x_cpu).max(), f"pivots {name}: GPU differs from LAPACK"


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("n", [1, 7, 16, 17, 32])
def test_batched_cholesky_warp(gpu, dt, n):
    """cholesky of a batch of n <= 32 (16 for complex128) runs a warp per entry (fm_sv_chol32; describe-free:
    the residual and the zero triangle say it is right): both triangles against L L^H = a; an entry whose
    leading minor of order 3 (or 1) is not positive definite, or holds a NaN, gives the CPU's (LAPACK's)
    message, naming the lowest failing entry."""
    rng = np.random.default_rng(100 + n)
    count = 300
    s = spd(rng, n, dt, (count,))
    S = s.astype(np.complex128)
    for upper in (False, True):
        f = host(gpu, fl.cholesky(gpu.dev(s), upper=upper)).astype(np.complex128)
        tri = np.triu(np.ones((n, n), bool), 1) if not upper else np.tril(np.ones((n, n), bool), -1)
        assert not f[:, tri].any(), f"upper={upper}: the other triangle is not zero"
        prod = f @ np.conj(np.swapaxes(f, 1, 2)) if not upper else np.conj(np.swapaxes(f, 1, 2)) @ f
        r = max(n1(prod[i] - S[i]) / (n * n1(S[i]) * eps(dt)) for i in range(count))
        assert r < 30, f"upper={upper}: residual ratio {r}"
    bad = s.copy()
    k = min(3, n) - 1
    bad[250, k, k] = -abs(bad[250, k, k]) * 10  # minor k + 1 fails first
    bad[40, 0, 0] = np.nan if n > 1 else -1.0
    for upper in (False, True):
        with pytest.raises(fusemath.LinAlgError) as cpu_err:
            fl.cholesky(bad, upper=upper)
        with pytest.raises(fusemath.LinAlgError, match=r"a\[40\]") as gpu_err:
            fl.cholesky(gpu.dev(bad), upper=upper)
        assert str(gpu_err.value) == str(cpu_err.value), f"upper={upper}: the GPU's message differs"
    one = s.copy()
    one[7, k, k] = -1.0
    with pytest.raises(fusemath.LinAlgError) as cpu_err:
        fl.cholesky(one)
    with pytest.raises(fusemath.LinAlgError, match=r"a\[7\]") as gpu_err:
        fl.cholesky(gpu.dev(one))
    assert str(gpu_err.value) == str(cpu_err.value), "the failing minor's order differs from LAPACK's"


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("n", [1, 5, 16, 17, 32])
def test_batched_lu_warp(gpu, dt, n):
    """getrf of a batch of n <= 32 (16 for complex128) runs a warp per entry (fm_sv_lu32, the solves after it
    cuBLAS's getrsBatched): lu_factor's P L U = a entry by entry with its pivots applied as LAPACK's, solve
    (1, 2, 8, 9 right-hand sides) and inv residuals, det and slogdet
    against the CPU's, and an exactly singular entry (a zero column: the zero pivot) reported with the
    CPU's message, the lowest failing entry named."""
    rng = np.random.default_rng(200 + n)
    count = 300
    a = rand(rng, (count, n, n), dt)
    A = a.astype(np.complex128)
    lu, piv = fl.lu_factor(gpu.dev(a))
    LU, P = host(gpu, lu), np.asarray(gpu.host(piv)).astype(np.int64)
    e = eps(dt)
    for i in (0, 1, 150, count - 1):
        L, U = np.tril(LU[i], -1) + np.eye(n), np.triu(LU[i])
        pa = A[i].copy()
        for j, p in enumerate(P[i]):  # LAPACK's order: row j swapped with row p (0-based, SciPy's)
            pa[[j, p]] = pa[[p, j]]
        assert n1(L @ U - pa) / (n * n1(A[i]) * e) < 30, f"entry {i}: P L U != a"
    for k in (1, 2, 8, 9):
        b = rand(rng, (count, n, k), dt)
        x = host(gpu, fl.solve(gpu.dev(a), gpu.dev(b)))
        for i in range(0, count, 37):
            assert n1(A[i] @ x[i] - b[i]) / (n * n1(A[i]) * n1(x[i]) * e) < 300, f"solve k={k} entry {i}"
    xi = host(gpu, fl.inv(gpu.dev(a)))
    for i in range(0, count, 37):
        assert n1(A[i] @ xi[i] - np.eye(n)) / (n * n1(A[i]) * n1(xi[i]) * e) < 300, f"inv entry {i}"
    tol = 2000 * e * n  # GPU and CPU round their LUs differently: the difference grows with a's condition
    np.testing.assert_allclose(host(gpu, fl.det(gpu.dev(a))), fl.det(a), rtol=tol)
    sg, ld = (host(gpu, t) for t in fl.slogdet(gpu.dev(a)))
    sg_cpu, ld_cpu = fl.slogdet(a)
    np.testing.assert_allclose(ld.real, ld_cpu, rtol=0, atol=tol)
    np.testing.assert_allclose(sg, sg_cpu, rtol=0, atol=tol)
    sing = a.copy()
    sing[260, :, n // 2] = 0
    sing[90, :, n - 1] = 0
    for k in (1, 9):
        b = rand(rng, (count, n, k), dt)
        with pytest.raises(fusemath.LinAlgError) as cpu_err:
            fl.solve(sing, b)
        with pytest.raises(fusemath.LinAlgError, match=r"a\[90\]") as gpu_err:
            fl.solve(gpu.dev(sing), gpu.dev(b))
        assert str(gpu_err.value) == str(cpu_err.value), f"k={k}: the singular entry's message differs from the CPU's"


@pytest.mark.parametrize("dt", [np.complex64, np.float32])
def test_batched_lu_warp_extremes(gpu, dt):
    """fm_sv_lu32 at the edges of the range: entries near 1e20 and 1e-20 (complex64's |b|^2 would over- and
    underflow: the division is Smith's), and NaNs with check_finite=False (the pivot search keeps
    i?amax's order: a pivot is never above its row, whatever the NaNs)."""
    rng = np.random.default_rng(77)
    count, n = 64, 8
    for scale in (1e20, 1e-20):
        a = (rand(rng, (count, n, n), dt) * np.float32(scale)).astype(dt)
        A = a.astype(np.complex128)
        lu, piv = fl.lu_factor(gpu.dev(a))
        LU, P = host(gpu, lu), np.asarray(gpu.host(piv)).astype(np.int64)
        for i in (0, count - 1):
            L, U = np.tril(LU[i], -1) + np.eye(n), np.triu(LU[i])
            pa = A[i].copy()
            for j, p in enumerate(P[i]):
                pa[[j, p]] = pa[[p, j]]
            assert np.isfinite(LU[i]).all() and n1(L @ U - pa) / (n * n1(A[i]) * eps(dt)) < 30, f"scale {scale}"
    a = rand(rng, (count, n, n), dt)
    a[3, 0, 0] = np.nan
    a[5, :, 2] = np.nan
    a[9, 4, 4] = np.nan
    _, piv = fl.lu_factor(gpu.dev(a), check_finite=False)
    P = np.asarray(gpu.host(piv)).astype(np.int64)
    assert ((P >= np.arange(n)) & (P < n)).all(), f"a pivot above its row: {P[[3, 5, 9]]}"


def test_batch_on_streams(gpu):
    """A batch of mid-sized matrices (129 <= n <= 1024) runs its per-entry routines on 16 streams at
    once (cusolver_lanes.c): 20 entries wrap around the lanes; every entry checked, and a failing entry
    is still the lowest one reported, with the CPU's words."""
    rng = np.random.default_rng(20)
    n, count = 200, 20
    a, s = well(rng, n, np.float64, (count,)), spd(rng, n, np.float64, (count,))
    b = rand(rng, (count, n, 3), np.float64)
    x = host(gpu, fl.solve(gpu.dev(a), gpu.dev(b))).real
    l = host(gpu, fl.cholesky(gpu.dev(s))).real
    w, v = fl.eigh(gpu.dev(s))
    W, V = host(gpu, w).real, host(gpu, v).real
    q, r = (host(gpu, t).real for t in fl.qr(gpu.dev(a)))
    sv = host(gpu, fl.svd(gpu.dev(a), compute_uv=False)).real
    e = eps(np.float64)
    for i in range(count):
        assert n1(a[i] @ x[i] - b[i]) / (n * n1(a[i]) * n1(x[i]) * e) < 30, f"solve entry {i}"
        assert n1(l[i] @ l[i].T - s[i]) / (n * n1(s[i]) * e) < 30, f"cholesky entry {i}"
        assert n1(s[i] @ V[i] - V[i] * W[i]) / (n * n1(s[i]) * e) < 30, f"eigh entry {i}"
        assert n1(q[i] @ r[i] - a[i]) / (n * n1(a[i]) * e) < 30, f"qr entry {i}"
        np.testing.assert_allclose(sv[i], np.linalg.svd(a[i], compute_uv=False), rtol=1e-10, atol=1e-10 * n)
    bad = s.copy()
    bad[13, 5, 5], bad[17, 1, 1] = -1e6, -1e6
    with pytest.raises(fusemath.LinAlgError) as cpu_err:
        fl.cholesky(bad)
    with pytest.raises(fusemath.LinAlgError, match=r"a\[13\]") as gpu_err:
        fl.cholesky(gpu.dev(bad))
    assert str(gpu_err.value) == str(cpu_err.value)
    sing = a.copy()
    sing[9, :, 4] = 0
    with pytest.raises(fusemath.LinAlgError, match=r"a\[9\]"):
        fl.solve(gpu.dev(sing), gpu.dev(b))


def test_errors_match_cpu(gpu):
    rng = np.random.default_rng(3)
    a = spd(rng, 6, np.float64, (3,))
    a[1, 2, 2] = -50.0
    with pytest.raises(fusemath.LinAlgError) as cpu_err:
        fl.cholesky(a)
    with pytest.raises(np.linalg.LinAlgError) as gpu_err:
        fl.cholesky(gpu.dev(a))
    assert str(gpu_err.value) == str(cpu_err.value), "the GPU's message differs from the CPU's"
    s = well(rng, 6, np.float64, (2,))
    s[1, 3] = 0
    with pytest.raises(fusemath.LinAlgError, match=r"a\[1\]"):
        fl.solve(gpu.dev(s), gpu.dev(np.ones((2, 6, 1))))
    nan = spd(rng, 4, np.float64)
    nan[1, 1] = np.nan
    with pytest.raises(ValueError, match="infs or NaNs"):
        fl.cho_factor(gpu.dev(nan))
    # a NaN without check_finite: the CPU's outcome (an error, or NaN in the result)
    try:
        want = ("ok", np.isnan(fl.cholesky(nan)).any())
    except fusemath.LinAlgError as exc:
        want = ("error", str(exc))
    try:
        got = ("ok", np.isnan(host(gpu, fl.cholesky(gpu.dev(nan)))).any())
    except fusemath.LinAlgError as exc:
        got = ("error", str(exc))
    assert got == want, f"cholesky of a NaN matrix: gpu {got}, cpu {want}"


def test_batch_over_32k(gpu):
    rng = np.random.default_rng(11)
    a = spd(rng, 2, np.float64, (40000,))
    w, v = fl.eigh(gpu.dev(a))
    W, V = host(gpu, w).real, host(gpu, v)
    r = np.abs(np.einsum("bij,bjk->bik", a, V) - V * W[:, None, :]).max()
    assert r < 1e-12 * np.abs(a).max() * 30, f"eigh of 40000 2x2: max residual {r}"
    b = rand(rng, (40000, 2, 1), np.float64)
    x = host(gpu, fl.solve(gpu.dev(a), gpu.dev(b))).real
    assert np.abs(np.einsum("bij,bjk->bik", a, x) - b).max() < 1e-12 * 30 * np.abs(a).max() * max(1, np.abs(x).max())


@pytest.mark.parametrize("kind", ["lu", "cholesky", "auto"])
def test_solver_gpu(gpu, kind):
    rng = np.random.default_rng(5)
    n = 100
    a = spd(rng, n, np.float64)
    da = gpu.dev(a)
    with fl.Solver(da, kind=kind) as s:
        s.factor()
        for _ in range(3):
            b = rand(rng, (n, 2), np.float64)
            x = s.solve(gpu.dev(b))
            check_type(gpu, x, da)
            X = host(gpu, x).real
            assert n1(a @ X - b) / (n * n1(a) * n1(X) * eps(np.float64)) < 30
            X = host(gpu, s.solve(gpu.dev(b), transpose=True)).real
            assert n1(a.T @ X - b) / (n * n1(a) * n1(X) * eps(np.float64)) < 30
        if kind == "lu":
            np.testing.assert_allclose(complex(host(gpu, s.det())), np.linalg.det(a), rtol=1e-10)


def test_solver_threads(gpu):
    rng = np.random.default_rng(9)
    n = 64
    a = spd(rng, n, np.float64)
    bs = [rand(rng, (n, 3), np.float64) for _ in range(8)]
    s = fl.Solver(gpu.dev(a), kind="lu").factor()
    out, errs = [None] * 8, []

    def work(i):
        try:
            for _ in range(10):
                out[i] = host(gpu, s.solve(gpu.dev(bs[i]))).real
        except Exception as exc:  # reported below
            errs.append(exc)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errs, errs
    for i in range(8):
        assert n1(a @ out[i] - bs[i]) / (n * n1(a) * n1(out[i]) * eps(np.float64)) < 30, f"thread {i}"
    s.free()


def lowrank(rng, shape, r, dt):
    """(m, n) matrices of rank r: a product of random m x r and r x n factors (rounded to dt)."""
    wide = np.complex128 if np.dtype(dt).kind == "c" else np.float64
    return (rand(rng, (shape[0], r), wide) @ rand(rng, (r, shape[1]), wide)).astype(dt)


def check_lstsq(gpu, a, b, rcond=None, what=""):
    """fl.lstsq on the GPU against numpy.linalg.lstsq in float64 / complex128 on the host copies, entry by
    entry (NumPy takes no batch): rank exactly, s, x and the residuals within 30 max(m, n) eps times the
    effective condition number (with its square times the relative residual for x and the residuals: the
    least-squares perturbation bound)."""
    dt = a.dtype
    da, db = gpu.dev(a), gpu.dev(b)
    kw = {} if rcond is None else {"rcond": rcond}
    x, res, rank, s = fl.lstsq(da, db, **kw)
    for r in (x, res, s, rank):
        check_type(gpu, r, da)
    m, n = a.shape[-2:]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2] if b.ndim >= 2 else ())
    vec = b.ndim == 1
    A = np.broadcast_to(a.astype(np.complex128 if dt.kind == "c" else np.float64), batch + (m, n))
    B = np.broadcast_to(b.astype(A.dtype), batch + b.shape[-(1 if vec else 2):])
    X, RES, S = gpu.host(x), gpu.host(res), gpu.host(s)
    R = np.asarray(gpu.host(rank))
    assert R.dtype == np.int32 and R.shape == batch, f"{what}: rank {R.dtype} {R.shape}"
    assert X.dtype == dt and S.dtype == np.finfo(dt).dtype and RES.dtype == S.dtype, what
    k = b.shape[-1] if not vec else 1
    assert X.shape == batch + ((n,) if vec else (n, k)), f"{what}: x shape {X.shape}"
    e = 30 * max(m, n, 1) * eps(dt)
    for i in np.ndindex(batch):
        wx, wres, wrank, ws = np.linalg.lstsq(A[i], B[i], rcond=rcond)
        assert int(R[i]) == wrank, f"{what} entry {i}: rank {int(R[i])}, numpy {wrank}"
        smax = ws[0] if ws.size else 0.0
        np.testing.assert_allclose(S[i], ws, rtol=0, atol=e * smax + 1e-300, err_msg=f"{what} entry {i}: s")
        cond = smax / ws[wrank - 1] if wrank else 1.0
        xn, rn = np.linalg.norm(wx), np.linalg.norm(A[i] @ wx - B[i])
        tol = e * cond * (1 + cond * rn / max(smax * xn, 1e-300))  # least squares' perturbation bound
        np.testing.assert_allclose(X[i], wx, rtol=0, atol=tol * max(1.0, np.abs(wx).max(initial=0)),
                                   err_msg=f"{what} entry {i}: x")
        full = wrank == n and m > n
        if batch == ():  # NumPy's shapes: residuals only for a full-rank overdetermined system
            assert RES.shape == wres.shape, f"{what}: residuals shape {RES.shape}, numpy {wres.shape}"
            if not full:
                continue
        want = wres if full else np.zeros(k)  # a batch's slot: 0 where NumPy has none
        np.testing.assert_allclose(np.atleast_1d(RES[i]), np.atleast_1d(want), rtol=0,
                                   atol=tol * max(1.0, (np.abs(B[i]) ** 2).sum(axis=0).max(initial=0)),
                                   err_msg=f"{what} entry {i}: residuals")


LSTSQ_SHAPES = [(6, 4), (4, 6), (5, 5), (50, 20), (20, 50), (1, 1), (3, 1), (1, 3), (3000, 5)]


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("shape", LSTSQ_SHAPES)
def test_lstsq(gpu, dt, shape):
    """lstsq on cuSOLVER (cusolver_lstsq.c): numpy.linalg.lstsq's x, residuals, rank and s, for a vector b,
    a matrix b, a batch (3 entries, on the lanes) and b broadcast over a's batch."""
    rng = np.random.default_rng(sum(shape))
    m, n = shape
    a = rand(rng, shape, dt)
    check_lstsq(gpu, a, rand(rng, (m,), dt), what=f"{shape} {np.dtype(dt)} vector b")
    check_lstsq(gpu, a, rand(rng, (m, 3), dt), what=f"{shape} {np.dtype(dt)}")
    if m * n <= 1000:
        check_lstsq(gpu, rand(rng, (3,) + shape, dt), rand(rng, (3, m, 2), dt),
                    what=f"{shape} {np.dtype(dt)} batch")
        check_lstsq(gpu, rand(rng, (2, 1) + shape, dt), rand(rng, (3, m, 2), dt),
                    what=f"{shape} {np.dtype(dt)} broadcast")


@pytest.mark.parametrize("dt", DTYPES)
def test_lstsq_rank_deficient(gpu, dt):
    """Rank-deficient a (products of rank 2 and 1; a zero matrix): numpy's rank, minimum-norm x and no
    residuals, with rcond given (float32's rounding leaves its products full rank at the default) and,
    for float64 / complex128, the default; rcond outside (0, 1) is machine precision, as in LAPACK."""
    rng = np.random.default_rng(5)
    single = np.finfo(dt).bits == 32
    rc = 1e-4 if single else 1e-10
    for shape, r in [((8, 5), 2), ((5, 8), 2), ((6, 6), 1), ((40, 12), 3)]:
        a = lowrank(rng, shape, r, dt)
        b = rand(rng, (shape[0], 2), dt)
        check_lstsq(gpu, a, b, rcond=rc, what=f"rank {r} {shape} {np.dtype(dt)}")
        if not single:
            check_lstsq(gpu, a, b, what=f"rank {r} {shape} {np.dtype(dt)} default rcond")
        check_lstsq(gpu, np.stack([a, rand(rng, shape, dt), 0 * a]), b, rcond=rc, what=f"rank {r} batch")
    a = rand(rng, (6, 3), dt) * np.array([1, 1e-3, 1e-6]).astype(dt)
    for rcond in (1e-2, 1e-4 if not single else 1e-5, 0.0, -1.0, 1.0, 2.0):
        check_lstsq(gpu, a, rand(rng, (6, 1), dt), rcond=rcond, what=f"graded {np.dtype(dt)} rcond={rcond}")


@pytest.mark.parametrize("dt", DTYPES)
def test_lstsq_empty(gpu, dt):
    """Empty shapes as NumPy's: m = 0 (x = 0), n = 0 (every row of b a residual), no right-hand side (s and
    rank still numpy's), an empty batch."""
    rng = np.random.default_rng(6)
    for shape, k in [((0, 3), 2), ((3, 0), 2), ((0, 0), 1), ((5, 3), 0), ((3, 5), 0)]:
        check_lstsq(gpu, rand(rng, shape, dt), rand(rng, (shape[0], k), dt), what=f"{shape} k={k}")
    x, res, rank, s = fl.lstsq(gpu.dev(rand(rng, (0, 4, 3), dt)), gpu.dev(rand(rng, (0, 4, 2), dt)))
    assert tuple(x.shape) == (0, 3, 2) and tuple(res.shape) == (0, 2) and tuple(rank.shape) == (0,)
    assert tuple(s.shape) == (0, 3)


def test_lstsq_errors_match_cpu(gpu):
    """A NaN or inf in a: the CPU's LinAlgError, word for word (that entry did not converge, info 1),
    naming the batch entry; lanes of 20 entries around it still right."""
    rng = np.random.default_rng(7)
    a = rand(rng, (20, 6, 4), np.float64)
    b = rand(rng, (20, 6, 2), np.float64)
    check_lstsq(gpu, a, b, what="20 entries")
    for bad in (np.nan, np.inf):
        a2 = a.copy()
        a2[13, 2, 1] = bad
        with pytest.raises(fusemath.LinAlgError) as cpu_err:
            fl.lstsq(a2, b)
        with pytest.raises(np.linalg.LinAlgError) as gpu_err:
            fl.lstsq(gpu.dev(a2), gpu.dev(b))
        assert str(gpu_err.value) == str(cpu_err.value), "the GPU's message differs from the CPU's"
        assert "a[13]" in str(gpu_err.value)


def test_lstsq_one_system(gpu):
    """One system's rank: a 0-d int32 array of the caller's library; its residuals trimmed as NumPy's."""
    x, res, rank, s = fl.lstsq(gpu.dev(np.eye(4)[:, :2]), gpu.dev(np.ones(4)))
    assert tuple(rank.shape) == () and int(rank) == 2 and tuple(res.shape) == (1,)
    np.testing.assert_allclose(gpu.host(res), [2.0], atol=1e-12)
    x, res, rank, s = fl.lstsq(gpu.dev(np.ones((4, 2))), gpu.dev(np.ones(4)))
    assert int(rank) == 1 and tuple(res.shape) == (0,)  # rank-deficient: no residuals, as NumPy's
    np.testing.assert_allclose(gpu.host(x), [0.5, 0.5], atol=1e-12)  # the minimum-norm solution


def test_out_of_memory(gpu):
    """A workspace past the GPU (a broadcast a gathered once per entry of a large b): MemoryError naming
    the workspace, and the context still solves."""
    n = 4096
    a = gpu.dev(np.eye(n)[None])
    b = gpu.dev(np.ones((2400, n, 1)))
    with pytest.raises(MemoryError, match="workspace"):
        fl.solve(a, b)
    x = fl.solve(gpu.dev(np.eye(3) * 2), gpu.dev(np.ones((3, 1))))
    np.testing.assert_allclose(host(gpu, x).real, 0.5)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("refine", ["auto", "off", "fp32", "tf32", "bf16", "fp16"])
def test_solve_refine(gpu, dt, refine):
    """Iterative refinement (cusolverDnIRSXgesv, falling back to the plain solve): as accurate as the
    plain solve, whatever the lower precision."""
    rng = np.random.default_rng(21)
    n = 300
    a, b = well(rng, n, dt), rand(rng, (n, 3), dt)
    x = fl.solve(gpu.dev(a), gpu.dev(b), refine=refine)
    X = host(gpu, x)
    r = n1(a.astype(np.complex128) @ X - b) / (n * n1(a) * n1(X) * eps(dt))
    assert r < 30, f"solve refine={refine} {np.dtype(dt)}: residual ratio {r}"


def test_eigh_25000(gpu):
    """eigh at n = 25000 (Xsyevd is reported to fail there): the eigenvalues are right (their sum is the
    trace, their squares' sum the Frobenius norm squared) or the call is a clear fusemath error."""
    n = 25000
    if gpu.name == "cupy":
        m = gpu.m.random.default_rng(1).standard_normal((n, n))
    else:
        m = gpu.m.randn(n, n, dtype=gpu.m.float64, device="cuda", generator=gpu.m.Generator("cuda").manual_seed(1))
    a = (m + m.T) / 2
    del m
    try:
        w = fl.eigvalsh(a)
    except fusemath.FusemathError as exc:  # a clear error is allowed; a crash or a wrong answer is not
        assert "eigh" in str(exc) or "solve" in str(exc), str(exc)
        return
    W = np.asarray(gpu.host(w), np.float64)
    tr = float(gpu.host(a.diagonal().sum()))
    fro2 = float(gpu.host((a * a).sum()))
    scale = np.abs(W).max() * n
    assert abs(W.sum() - tr) < 1e-9 * scale, f"sum of eigenvalues {W.sum()} vs trace {tr}"
    assert abs((W * W).sum() - fro2) < 1e-9 * fro2, f"sum of squares {(W * W).sum()} vs ||a||_F^2 {fro2}"
    assert np.all(np.diff(W) >= 0), "eigenvalues not ascending"


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.complex64])
@pytest.mark.parametrize("n", [64, 128, 512])
def test_eigh_batched(gpu, dt, n):
    """eigh of a batch past syevjBatched's n <= 32 (XsyevBatched, cusolver_batched.c's table) against
    numpy.linalg.eigh in float64: residual ||A V - V diag(w)|| / (n ||A|| eps) and orthogonality
    ||V^H V - I|| / (n eps) below 30 per entry, eigenvalues numpy's; a NaN entry fails naming its index
    with the CPU's words, the entries after it no matter."""
    rng = np.random.default_rng(600 + n)
    count = 4 if n == 512 else 12
    m = rand(rng, (count, n, n), dt)
    h = ((m + np.conj(np.swapaxes(m, -1, -2))) / 2).astype(dt)
    w, v = fl.eigh(gpu.dev(h))
    W, V, H = host(gpu, w).real, host(gpu, v), h.astype(np.complex128)
    want = np.linalg.eigvalsh(H)
    for i in range(count):
        r = n1(H[i] @ V[i] - V[i] * W[i]) / (n * n1(H[i]) * eps(dt))
        o = n1(np.conj(V[i].T) @ V[i] - np.eye(n)) / (n * eps(dt))
        assert r < 30 and o < 30, f"eigh {np.dtype(dt)} {count}x{n}^2 entry {i}: residual {r}, orthogonality {o}"
        np.testing.assert_allclose(W[i], want[i], atol=30 * n * eps(dt) * n1(H[i]))
    bad = h.copy()
    bad[count // 2, 1, 1] = np.nan
    with pytest.raises(fusemath.LinAlgError, match=rf"a\[{count // 2}\]") as gpu_err:
        fl.eigh(gpu.dev(bad))
    with pytest.raises(fusemath.LinAlgError) as cpu_err:
        fl.eigh(bad)
    assert str(gpu_err.value) == str(cpu_err.value), "the NaN entry's message differs from the CPU's"


@pytest.mark.parametrize("kind", ["lu", "cholesky"])
@pytest.mark.parametrize("dt", [np.float64, np.complex128])
def test_solver_solve_equals_fresh(gpu, kind, dt):
    """Solver.solve after factor() (the factor read in place, trusted: not re-checked, no synchronisation for
    its pivots) equals a fresh solve of the same system, at n >= 1024 where the triangular solves run blocked
    (a row-major factor read as its transpose), for a and a^T; check_finite still refuses a NaN in b."""
    rng = np.random.default_rng(1024)
    n, k = 1100, 16
    a = spd(rng, n, dt) if kind == "cholesky" else well(rng, n, dt)
    da, A = gpu.dev(a), a.astype(np.complex128)
    with fl.Solver(da, kind=kind, check_finite=True) as s:
        s.factor()
        for _ in range(2):  # a repeat solve reuses the plan
            b = rand(rng, (n, k), dt)
            db = gpu.dev(b)
            x, x0 = host(gpu, s.solve(db)), host(gpu, fl.solve(da, db, refine="off"))
            assert np.abs(x - x0).max() <= 1e-9 * np.abs(x0).max(), f"Solver.solve {kind} differs from a fresh solve"
            assert n1(A @ x - b) / (n * n1(A) * n1(x) * eps(dt)) < 30
            xt, xt0 = host(gpu, s.solve(db, transpose=True)), host(gpu, fl.solve(gpu.dev(a.T), db, refine="off"))
            assert np.abs(xt - xt0).max() <= 1e-9 * np.abs(xt0).max(), f"Solver.solve {kind} transpose differs"
        bad = b.copy()
        bad[3, 1] = np.nan
        with pytest.raises(ValueError, match="infs or NaNs"):
            s.solve(gpu.dev(bad))


@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("dt", [np.float64, np.complex128])
def test_solve_refine_large(gpu, dt, k):
    """Every refine choice at n = 4096 (auto is the plain solve: cusolver_refine.c; with 4 right-hand sides
    the explicit choices refine classically, cuSOLVER's GMRES taking one) gives a residual within 10x of the
    plain fp64 LU's (refine='off'), whatever precision the factorization ran in."""
    rng = np.random.default_rng(4096 + k)
    n = 4096
    a, b = well(rng, n, dt), rand(rng, (n, k), dt)
    A = a.astype(np.complex128)

    def res(x):
        return n1(A @ x.reshape(n, k) - b.reshape(n, k)) / (n1(A) * n1(x.reshape(n, k)))
    r_off = res(host(gpu, fl.solve(gpu.dev(a), gpu.dev(b), refine="off")))
    for refine in ("auto", "fp32", "tf32", "bf16", "fp16"):
        r = res(host(gpu, fl.solve(gpu.dev(a), gpu.dev(b), refine=refine)))
        assert r <= 10 * max(r_off, n * eps(dt) * 1e-3), f"refine={refine} {np.dtype(dt)}: residual {r} vs off {r_off}"


def test_solve_refine_auto_singular(gpu):
    """refine='auto' (the plain solve) on a singular matrix (a zero row): the same LinAlgError,
    word for word, as the plain fp64 solve (refine='off'), and the CPU's apart from the index of the
    zero pivot: the CPU factors the row-major array as it lies (A transposed, where the zero row is a
    zero column, so U[1234, 1234] is zero), the GPU factors A (the zero row is pivoted to the end)."""
    rng = np.random.default_rng(4097)
    n = 4096
    a, b = well(rng, n, np.float64), rand(rng, (n,), np.float64)
    a[1234, :] = 0
    errs = []
    for refine in ("off", "auto"):
        with pytest.raises(fusemath.LinAlgError) as e:
            fl.solve(gpu.dev(a), gpu.dev(b), refine=refine)
        errs.append(str(e.value))
    with pytest.raises(fusemath.LinAlgError) as e:
        fl.solve(a, b)
    assert errs[0] == errs[1], f"singular messages differ: {errs}"

    def shape_of(msg):
        return re.sub(r"\d+", "N", msg)
    assert shape_of(errs[0]) == shape_of(str(e.value)), f"{errs[0]} vs the CPU's {e.value}"
