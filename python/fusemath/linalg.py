"""fusemath.linalg: dense solvers with numpy.linalg's and scipy.linalg's names, on LAPACKE (CPU).

    >>> import numpy as np, fusemath.linalg as fl
    >>> a = np.random.rand(4, 100, 100); b = np.random.rand(4, 100, 3)
    >>> x = fl.solve(a, b)                          # numpy.linalg.solve, batched
    >>> with fl.Solver(a[0], kind="auto") as s:     # factor once, solve many
    ...     s.factor(); x0 = s.solve(b[0]); d = s.det()

numpy.linalg's functions (solve, inv, det, slogdet, cholesky, qr, eigh, eigvalsh, svd, svdvals, lstsq,
matrix_rank) keep its signatures, broadcasting of batch axes, dtype promotion (integers to float64) and
results; scipy.linalg's (lu_factor, lu_solve, cho_factor, cho_solve, solve_triangular) keep SciPy's,
``check_finite=True`` included. float32, float64, complex64 and complex128; float16 / bfloat16 are a
NotSupportedError. A singular or non-positive-definite matrix raises :class:`fusemath.LinAlgError`
(a subclass of ``numpy.linalg.LinAlgError``) naming the batch entry and the pivot or minor.

Every check is the library's (core/src/solve_problem.c): this module turns keywords into options.
NumPy arrays run on LAPACKE; CuPy / PyTorch CUDA arrays on cuSOLVER (backends/cuda/cusolver_dense.c), results of the
caller's type.
"""
import threading
import warnings
from collections import namedtuple
from typing import Any

import numpy as np

from . import _fusemath as _C
from ._arrays import NUMPY, lib_of
from ._options import _DEFAULT_OPTIONS, _resolve_execution

__all__ = ["solve", "inv", "det", "slogdet", "cholesky", "qr", "eigh", "eigvalsh", "svd", "svdvals", "lstsq",
           "matrix_rank", "lu_factor", "lu_solve", "cho_factor", "cho_solve", "solve_triangular", "Solver",
           "LinAlgError"]

LinAlgError = _C.LinAlgError
_call, _OP, _RUN = _C.call, _C.OP_SOLVE, _C.CALL_RUN
# the slots of a solve (fusemath.h FM_SOLVE_*), in the order call() takes them
_A, _B, _IPIV, _X, _FACTOR, _PIVOTS, _INFO, _W, _AUX, _RANK = range(10)

try:  # NumPy 2's result types, so code that reads .eigenvalues / .Q works unchanged
    from numpy.linalg._linalg import EighResult, QRResult, SlogdetResult, SVDResult
except ImportError:  # pragma: no cover (NumPy 1)
    EighResult = namedtuple("EighResult", "eigenvalues eigenvectors")
    QRResult = namedtuple("QRResult", "Q R")
    SlogdetResult = namedtuple("SlogdetResult", "sign logabsdet")
    SVDResult = namedtuple("SVDResult", "U S Vh")


def _array(x: Any):
    """(array, library index): arrays of a registered library as they are; anything else through
    numpy.asarray, integers and bools promoted to float64 as numpy.linalg does."""
    lib = lib_of(x)
    if lib is not None:
        return x, lib.index
    x = np.asarray(x)
    if x.dtype.kind in "biu":
        x = x.astype(np.float64)
    return x, NUMPY.index


def _pair(a: Any, b: Any):
    """a and b in one dtype (NumPy's promotion of the two), and the results' library."""
    a, li = _array(a)
    b, _ = _array(b)
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype != b.dtype and \
            a.dtype.kind in "fc" and b.dtype.kind in "fc":
        dt = np.result_type(a.dtype, b.dtype)
        a, b = a.astype(dt, copy=False), b.astype(dt, copy=False)
    return a, b, li


def _run(routine: int, where: str, li: int, a, b=None, ipiv=None, *, uplo=0, transpose=0, unit_diagonal=0,
         check=1, check_finite=0, qr_mode=0, full_matrices=0, values_only=0, rcond=-1.0, refine=0, outs=None,
         execution=None, trusted=0):
    """One call of the library's solve operation: the ten slots' results (None where not written)."""
    ops = [a, b, ipiv, None, None, None, None, None, None, None]
    for slot, arr in (outs or {}).items():
        ops[slot] = arr
    opts = (routine, uplo, transpose, unit_diagonal, check, check_finite, qr_mode, full_matrices, values_only,
            rcond, *_execution(execution, where), refine, trusted)
    return _call(_OP, _RUN, li, tuple(ops), opts, None, 3, where)


def _execution(execution: Any, where: str):
    """(execution code, device_id, num_threads) of None (where a lives), 'cpu', 'cuda', 'cuda:N', 'best'
    or an nvmath-style dict."""
    if execution is None:
        return 0, 0, 0
    return _resolve_execution(execution, _DEFAULT_OPTIONS, where)[:3]


def _to_host(x):
    """A CuPy / torch array's host copy (NumPy's as it is)."""
    return x.get() if hasattr(x, "get") and not isinstance(x, np.ndarray) else x.cpu() if hasattr(x, "cpu") else x


def _as_int(x, bits: int):
    """x as int32 / int64 in its own library (torch tensors have no astype)."""
    if hasattr(x, "astype"):
        return x.astype(np.int32 if bits == 32 else np.int64)
    return x.int() if bits == 32 else x.long()


def _scalar(r):
    """NumPy's 0-d results are scalars (det(a) of one matrix is a numpy.float64)."""
    return r[()] if isinstance(r, np.ndarray) and r.ndim == 0 else r


def _trans_arg(trans: Any, where: str) -> int:
    codes = {0: 0, 1: 1, 2: 2, "N": 0, "T": 1, "C": 2}
    try:
        return codes[trans]
    except (KeyError, TypeError):
        raise ValueError(f"{where}: trans = {trans!r}, expected 0, 1, 2, 'N', 'T' or 'C'") from None


def _uplo_arg(UPLO: Any, where: str) -> int:
    if UPLO not in ("L", "U"):
        raise ValueError(f"{where}: UPLO = {UPLO!r}, expected 'L' or 'U'")
    return 0 if UPLO == "L" else 1


# ---- numpy.linalg ----
_REFINE = {"auto": 0, "off": 1, "fp32": 2, "tf32": 3, "bf16": 4, "fp16": 5}


def solve(a, b, *, refine: str = "auto", execution=None):
    """numpy.linalg.solve: x with a @ x = b; b (..., M) as one vector only when 1-D, else (..., M, K).
    refine: iterative refinement from a lower-precision factorization on the GPU ("auto" | "off" | "fp32"
    | "tf32" | "bf16" | "fp16"); the CPU runs the plain float64 / float32 solve whatever it says.
    execution: None (where a lives), "cpu", "cuda", "cuda:N" or "best" (fusemath.calibrate); the
    result is of a's library and device whichever runs it."""
    where = "fusemath.linalg.solve"
    if refine not in _REFINE:
        raise ValueError(f"{where}: refine = {refine!r}, expected 'auto', 'off', 'fp32', 'tf32', 'bf16' or 'fp16'")
    a, b, li = _pair(a, b)
    return _run(_C.SOLVE_GESV, where, li, a, b, refine=_REFINE[refine], execution=execution)[_X]


def inv(a):
    """numpy.linalg.inv."""
    a, li = _array(a)
    return _run(_C.SOLVE_INV, "fusemath.linalg.inv", li, a)[_X]


def det(a):
    """numpy.linalg.det (0 for a singular matrix, no error)."""
    a, li = _array(a)
    return _scalar(_run(_C.SOLVE_DET, "fusemath.linalg.det", li, a)[_W])


def slogdet(a):
    """numpy.linalg.slogdet: (sign, logabsdet)."""
    a, li = _array(a)
    r = _run(_C.SOLVE_SLOGDET, "fusemath.linalg.slogdet", li, a)
    return SlogdetResult(_scalar(r[_AUX]), _scalar(r[_W]))


def cholesky(a, /, *, upper: bool = False):
    """numpy.linalg.cholesky: L (lower, the default) or U = L^H with a = L L^H."""
    a, li = _array(a)
    return _run(_C.SOLVE_POTRF, "fusemath.linalg.cholesky", li, a, uplo=1 if upper else 0)[_FACTOR]


def qr(a, mode: str = "reduced"):
    """numpy.linalg.qr: mode 'reduced' | 'complete' -> (Q, R); 'r' -> R."""
    where = "fusemath.linalg.qr"
    modes = {"reduced": 0, "complete": 1, "r": 2}
    if mode not in modes:
        raise ValueError(f"{where}: mode = {mode!r}, expected 'reduced', 'complete' or 'r' ('raw' is not "
                         "supported)")
    a, li = _array(a)
    r = _run(_C.SOLVE_GEQRF, where, li, a, qr_mode=modes[mode])
    return r[_FACTOR] if mode == "r" else QRResult(r[_X], r[_FACTOR])


def eigh(a, UPLO: str = "L"):
    """numpy.linalg.eigh: (eigenvalues ascending, eigenvectors as columns) from a's UPLO triangle."""
    where = "fusemath.linalg.eigh"
    a, li = _array(a)
    r = _run(_C.SOLVE_SYEVD, where, li, a, uplo=_uplo_arg(UPLO, where))
    return EighResult(r[_W], r[_X])


def eigvalsh(a, UPLO: str = "L"):
    """numpy.linalg.eigvalsh."""
    where = "fusemath.linalg.eigvalsh"
    a, li = _array(a)
    return _run(_C.SOLVE_SYEVD, where, li, a, uplo=_uplo_arg(UPLO, where), values_only=1)[_W]


def svd(a, full_matrices: bool = True, compute_uv: bool = True, hermitian: bool = False):
    """numpy.linalg.svd: (U, S, Vh), or S with compute_uv=False. hermitian is accepted (the general
    SVD runs: the same factors up to the signs of singular-vector pairs)."""
    a, li = _array(a)
    r = _run(_C.SOLVE_GESDD, "fusemath.linalg.svd", li, a, full_matrices=1 if full_matrices else 0,
             values_only=0 if compute_uv else 1)
    return SVDResult(r[_X], r[_W], r[_FACTOR]) if compute_uv else r[_W]


def svdvals(x, /):
    """numpy.linalg.svdvals."""
    x, li = _array(x)
    return _run(_C.SOLVE_GESDD, "fusemath.linalg.svdvals", li, x, values_only=1)[_W]


def lstsq(a, b, rcond=None):
    """numpy.linalg.lstsq: (x, residuals, rank, s); rcond None: float64's machine epsilon times max(M, N),
    as NumPy's (it computes in float64 whatever the input, so float32's rank is judged at float64's eps
    too). rank is NumPy's numpy.int32 (a batch, which NumPy refuses: an int32 array of the batch shape);
    on CuPy / PyTorch arrays an int32 array of the caller's library (0-d for one system), and one
    system's residuals are trimmed as NumPy's (its rank read on the host: the call has synchronised)."""
    where = "fusemath.linalg.lstsq"
    a, b, li = _pair(a, b)
    if rcond is None:
        shape = getattr(a, "shape", ())
        rcond = np.finfo(np.float64).eps * max(shape[-2:]) if len(shape) >= 2 else -1.0
    r = _run(_C.SOLVE_GELSD, where, li, a, b, rcond=float(rcond))
    x, res, rank, s = r[_X], r[_AUX], r[_RANK], r[_W]
    m, n = a.shape[-2], a.shape[-1]
    if isinstance(rank, np.ndarray):  # numpy.linalg.lstsq's type: its gufunc's LAPACK int ('i'), int32
        rank = rank.astype(np.int32)
        if rank.ndim == 0:  # one system: a numpy.int32 scalar, as NumPy's
            rank = rank[()]
            if rank < n or m <= n:  # NumPy: residuals only for a full-rank overdetermined system
                res = res[..., :0]
    elif rank is not None:
        rank = _as_int(rank, 32)
        if rank.ndim == 0 and (int(rank) < n or m <= n):
            res = res[..., :0]
    return x, res, rank, s


def matrix_rank(A, tol=None, hermitian: bool = False, *, rtol=None):
    """numpy.linalg.matrix_rank: singular values above tol (default S.max() * max(M, N) * eps)."""
    A, li = _array(A)
    if A.ndim < 2:
        return int(not (A == 0).all())
    S = svdvals(A)
    if tol is None:
        if rtol is None:
            rtol = max(A.shape[-2:]) * np.finfo(S.dtype).eps
        tol = S.max(axis=-1, keepdims=True) * np.asarray(rtol)[..., np.newaxis]
    else:
        tol = np.asarray(tol)[..., np.newaxis]
    return np.count_nonzero(S > tol, axis=-1)


# ---- scipy.linalg ----
def lu_factor(a, overwrite_a: bool = False, check_finite: bool = True):
    """scipy.linalg.lu_factor: (lu, piv) with SciPy's 0-based int32 pivots; a singular matrix warns
    (scipy.linalg.LinAlgWarning) as SciPy does."""
    a, li = _array(a)
    r = _run(_C.SOLVE_GETRF, "fusemath.linalg.lu_factor", li, a, check=0, check_finite=int(bool(check_finite)))
    info = np.asarray(_to_host(r[_INFO])).reshape(-1)
    bad = np.flatnonzero(info > 0)
    if bad.size:
        from scipy.linalg import LinAlgWarning
        warnings.warn(f"Diagonal number {int(info[bad[0]])} is exactly zero. Singular matrix.", LinAlgWarning,
                      stacklevel=2)
    return r[_FACTOR], _as_int(r[_PIVOTS] - 1, 32)


def lu_solve(lu_and_piv, b, trans=0, overwrite_b: bool = False, check_finite: bool = True):
    """scipy.linalg.lu_solve: trans 0 (a x = b), 1 (a^T x = b), 2 (a^H x = b)."""
    where = "fusemath.linalg.lu_solve"
    lu, piv = lu_and_piv
    lu, b, li = _pair(lu, b)
    ipiv = np.asarray(piv).astype(np.int64) + 1 if isinstance(piv, (np.ndarray, list, tuple)) else _as_int(piv, 64) + 1
    return _run(_C.SOLVE_GETRS, where, li, lu, b, ipiv, transpose=_trans_arg(trans, where),
                check_finite=int(bool(check_finite)))[_X]


def cho_factor(a, lower: bool = False, overwrite_a: bool = False, check_finite: bool = True):
    """scipy.linalg.cho_factor: (c, lower); c's other triangle is zero."""
    a, li = _array(a)
    c = _run(_C.SOLVE_POTRF, "fusemath.linalg.cho_factor", li, a, uplo=0 if lower else 1,
             check_finite=int(bool(check_finite)))[_FACTOR]
    return c, bool(lower)


def cho_solve(c_and_lower, b, overwrite_b: bool = False, check_finite: bool = True):
    """scipy.linalg.cho_solve."""
    c, lower = c_and_lower
    c, b, li = _pair(c, b)
    return _run(_C.SOLVE_POTRS, "fusemath.linalg.cho_solve", li, c, b, uplo=0 if lower else 1,
                check_finite=int(bool(check_finite)))[_X]


def solve_triangular(a, b, trans=0, lower: bool = False, unit_diagonal: bool = False, overwrite_b: bool = False,
                     check_finite: bool = True):
    """scipy.linalg.solve_triangular."""
    where = "fusemath.linalg.solve_triangular"
    a, b, li = _pair(a, b)
    return _run(_C.SOLVE_TRTRS, where, li, a, b, uplo=0 if lower else 1, transpose=_trans_arg(trans, where),
                unit_diagonal=int(bool(unit_diagonal)), check_finite=int(bool(check_finite)))[_X]


# ---- the planner object ----
_KINDS = ("lu", "cholesky", "qr", "auto")


def _is_complex(x) -> bool:
    """Whether x's dtype is complex (NumPy / CuPy dtypes have .kind, torch's .is_complex)."""
    dt = x.dtype
    return bool(dt.is_complex) if hasattr(dt, "is_complex") else dt.kind == "c"


def _conj(x):
    """x's conjugate as an array of its own (torch's conj() is a lazy view the library cannot read)."""
    c = x.conj()
    return c.resolve_conj() if hasattr(c, "resolve_conj") else c


class Solver:
    """Factor a matrix once, solve many right-hand sides.

    ``Solver(a, kind="auto"|"lu"|"cholesky"|"qr")``: ``factor()`` factors a (auto: Cholesky, falling
    back to LU when a is not positive definite; describe() says which), ``solve(b, transpose=False)``
    solves a x = b (a^T x = b) with the factor, ``det()``, ``reset_operand(a2)`` refactors a new matrix of
    the same shape and dtype into the same buffers, ``describe()``, ``free()``; a context manager.
    ``solve`` and ``det`` may be called from several threads at once (the factor is read only).
    """

    def __init__(self, a, kind: str = "auto", *, check_finite: bool = False):
        where = "fusemath.linalg.Solver"
        if kind not in _KINDS:
            raise _C.InvalidArgumentError(f"{where}: kind = {kind!r}, expected 'lu', 'cholesky', 'qr' or 'auto'")
        self._a, self._li = _array(a)
        self._kind, self._chosen, self._why = kind, None, ""
        self._finite = int(bool(check_finite))
        self._lock = threading.Lock()
        self._freed = False
        self._f = {}  # the factor's arrays: lu / piv, l, q / r

    def _live(self, what: str) -> str:
        where = f"fusemath.linalg.Solver.{what}"
        if self._freed:
            raise _C.InvalidStateError(f"{where}: the solver was freed")
        return where

    def _factor_as(self, kind: str, where: str, reuse: bool):
        f = self._f if reuse and self._chosen == kind else {}
        if not f and kind != "qr" and isinstance(self._a, np.ndarray) and self._a.ndim >= 2 and \
                self._a.dtype.kind in "fc":
            # the factor column-major within each matrix: every solve then hands it to LAPACK in place
            cols = np.empty(self._a.shape[:-2] + self._a.shape[-2:][::-1], self._a.dtype).swapaxes(-1, -2)
            f = {"lu": cols} if kind == "lu" else {"l": cols}
        if kind == "lu":
            r = _run(_C.SOLVE_GETRF, where, self._li, self._a, check_finite=self._finite,
                     outs={_FACTOR: f.get("lu"), _PIVOTS: f.get("piv")})
            return {"lu": r[_FACTOR], "piv": r[_PIVOTS]}
        if kind == "cholesky":
            r = _run(_C.SOLVE_POTRF, where, self._li, self._a, check_finite=self._finite, outs={_FACTOR: f.get("l")})
            return {"l": r[_FACTOR]}
        r = _run(_C.SOLVE_GEQRF, where, self._li, self._a, check_finite=self._finite,
                 outs={_X: f.get("q"), _FACTOR: f.get("r")})
        return {"q": r[_X], "r": r[_FACTOR]}

    def factor(self, *, _reuse: bool = False) -> "Solver":
        """Factor the operand (again: after reset_operand). Raises LinAlgError when the kind cannot
        factor it (lu: singular, cholesky: not positive definite)."""
        where = self._live("factor")
        with self._lock:
            try:
                self._factor_locked(where, _reuse)
            except BaseException:
                # a failed (re)factorization may have overwritten the reused buffers part way: forget
                # them, so a later solve refactors (and raises again) instead of using a stale factor
                self._f, self._chosen, self._why = {}, None, ""
                raise
        return self

    def _factor_locked(self, where: str, reuse: bool) -> None:
        if self._kind != "auto":
            self._f, self._chosen = self._factor_as(self._kind, where, reuse), self._kind
            return
        try:
            self._f, self._chosen = self._factor_as("cholesky", where, reuse), "cholesky"
            self._why = "cholesky (the operand is positive definite)"
        except LinAlgError as exc:
            self._f, self._chosen = self._factor_as("lu", where, reuse), "lu"
            self._why = f"lu (cholesky failed: {exc})"

    def _factored(self, what: str) -> str:
        where = self._live(what)
        if self._chosen is None:
            self.factor()
        return where

    def solve(self, b, transpose: bool = False):
        """x with a x = b (transpose: a^T x = b); b (n,) or (..., n, k)."""
        where = self._factored("solve")
        f, kind = self._f, self._chosen
        if kind == "lu":
            lu, b, li = _pair(f["lu"], b)
            # trusted: the factor is factor()'s own, checked there (not re-checked, no sync for its pivots)
            return _run(_C.SOLVE_GETRS, where, li, lu, b, f["piv"], transpose=1 if transpose else 0,
                        check_finite=self._finite, trusted=1)[_X]
        if kind == "cholesky":
            l, b, li = _pair(f["l"], b)
            cplx = transpose and _is_complex(l)  # a^T = conj(a) for a Hermitian a
            x = _run(_C.SOLVE_POTRS, where, li, l, _conj(b) if cplx else b, check_finite=self._finite,
                     trusted=1)[_X]
            return _conj(x) if cplx else x
        q, r = f["q"], f["r"]
        b, _ = _array(b)
        vec = b.ndim == 1  # one vector: a column through the products, dropped at the end (batched q too)
        bb = b[..., None] if vec else b
        # check_finite is the library's check of trtrs's b: b itself (transpose) or q^H b, which is
        # non-finite exactly when b is (q is finite: checked at factor, 0 * inf is NaN); NumPy's
        # warning for that NaN is no news next to the library's error or its NaN result
        if not transpose:  # a = q r: x = r^-1 q^H b
            with np.errstate(invalid="ignore"):
                qb = q.conj().swapaxes(-1, -2) @ bb
            x = self._trtrs(where, r, qb, 0)
        else:  # a^T = r^T q^T: x = conj(q) r^-T b
            x = q.conj() @ self._trtrs(where, r, bb, 1)
        return x[..., 0] if vec else x

    def _trtrs(self, where: str, r, rhs, trans: int):
        """r^-1 rhs (trans: r^-T rhs), r upper triangular, with the solver's check_finite."""
        r, rhs, li = _pair(r, rhs)
        return _run(_C.SOLVE_TRTRS, where, li, r, rhs, uplo=1, transpose=trans, check_finite=self._finite,
                    trusted=1)[_X]

    def det(self):
        """det(a) from the factor."""
        where = self._factored("det")
        f, kind = self._f, self._chosen
        if kind == "lu":
            return _scalar(_run(_C.SOLVE_DET, where, self._li, f["lu"], None, f["piv"], trusted=1)[_W])
        if kind == "cholesky":  # det(a) = prod(diag(l))^2, the diagonal real and positive
            n = f["l"].shape[-1]
            ones = np.broadcast_to(np.arange(1, n + 1, dtype=np.int64), f["l"].shape[:-1])
            ones = ones if isinstance(f["l"], np.ndarray) else None  # GPU factor: det(l) by its own LU
            d = _run(_C.SOLVE_DET, where, self._li, f["l"], None, ones)[_W]
            return _scalar(d * d)
        return _scalar(_run(_C.SOLVE_DET, where, self._li, self._a)[_W])

    def reset_operand(self, a) -> "Solver":
        """A new operand of the same shape and dtype, factored into the same buffers (the library
        refuses another shape with a ShapeError naming the factor)."""
        self._live("reset_operand")
        self._a, self._li = _array(a)
        return self.factor(_reuse=self._chosen is not None)

    def describe(self) -> str:
        self._live("describe")
        shape, dt = tuple(self._a.shape), str(self._a.dtype)
        if self._chosen is None:
            return f"Solver kind={self._kind} {dt} {shape}: not factored yet"
        how = self._why if self._kind == "auto" else self._chosen
        return f"Solver kind={self._kind} -> {how}; {dt} {shape}; solve " + \
            ("cpu/lapack" if isinstance(self._a, np.ndarray) else "cuda/cusolver")

    def free(self) -> None:
        self._freed, self._f, self._a = True, {}, None

    def __enter__(self) -> "Solver":
        return self

    def __exit__(self, *exc) -> None:
        self.free()
