"""fusemath.distributed's dense linear algebra on block-cyclic matrices through ScaLAPACK (CPU ranks):
:class:`Grid`, :class:`Layout`, :func:`scatter` / :func:`gather`, :func:`matmul`, :func:`solve`,
:func:`cholesky` and :func:`cho_solve`, over libfusemath_mpi's ``fm_dist_*`` functions (C API:
``fusemath/fusemath_mpi.h``; docs/api.md, Distributed).

A matrix is cut into ``mb x nb`` blocks dealt round an ``nprow x npcol`` grid of the ranks (rank r at
grid place ``(r // npcol, r % npcol)``); each rank holds its blocks as one local NumPy array in Fortran
order, of shape ``layout.local_shape``. Every call here is collective over the layout's communicator
(call it on every rank, in the same order), but for the properties of a layout; a bad argument on any
rank raises the same error on every rank.
"""
from __future__ import annotations

import atexit
import ctypes
import numbers
from typing import Any, Optional, Tuple

import numpy as np

from . import _fusemath as _C
from .distributed import _COMM_T, _MPI, _Collective, _agreed, _check, _comm, _fn

_VOIDP = ctypes.c_void_p


class _Matrix(ctypes.Structure):  # fm_dist_matrix
    _fields_ = [(k, ctypes.c_int64) for k in ("m", "n", "mb", "nb", "local_rows", "local_cols", "ld")] + \
               [("data", ctypes.c_void_p)]


class _MatmulOptions(ctypes.Structure):  # fm_dist_matmul_options
    _fields_ = [("alpha", ctypes.c_double), ("beta", ctypes.c_double), ("epilogue", ctypes.c_uint),
                ("clamp", ctypes.c_double * 2), ("reserved", ctypes.c_int32 * 4)]


_ip = ctypes.POINTER(ctypes.c_int)
_MP = ctypes.POINTER(_Matrix)
_grid_create = _fn("fm_dist_grid_create", ctypes.c_int, _COMM_T, ctypes.c_int, ctypes.c_int, ctypes.POINTER(_VOIDP))
_grid_destroy = _fn("fm_dist_grid_destroy", None, _VOIDP)
_grid_shape = _fn("fm_dist_grid_shape", ctypes.c_int, _VOIDP, _ip, _ip, _ip, _ip)
_matrix_init = _fn("fm_dist_matrix_init", ctypes.c_int, _VOIDP, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                   ctypes.c_int64, _MP)
_c_global_index = _fn("fm_dist_matrix_global_index", ctypes.c_int, _VOIDP, _MP, ctypes.c_int, ctypes.c_int64,
                    ctypes.POINTER(ctypes.c_int64))
_options_init = _fn("fm_dist_matmul_options_init", None, ctypes.POINTER(_MatmulOptions))
_matmul = _fn("fm_dist_matmul", ctypes.c_int, _VOIDP, ctypes.c_int, _MP, _MP, _MP, _VOIDP,
              ctypes.POINTER(_MatmulOptions), _MP)
_solve = _fn("fm_dist_solve", ctypes.c_int, _VOIDP, ctypes.c_int, _MP, _MP)
_cholesky = _fn("fm_dist_cholesky", ctypes.c_int, _VOIDP, ctypes.c_int, ctypes.c_int, _MP)
_cho_solve = _fn("fm_dist_cho_solve", ctypes.c_int, _VOIDP, ctypes.c_int, ctypes.c_int, _MP, _MP)

_REAL = {np.dtype(np.float32): 3, np.dtype(np.float64): 4}  # fm_dtype FM_F32, FM_F64
_BIAS, _CLAMP = 1 << 0, 1 << 7  # FM_EPILOGUE_BIAS, FM_EPILOGUE_CLAMP


class Grid(_Collective):
    """The process grid of ``comm``'s ranks that ScaLAPACK computes on (collective).

    ``Grid(comm, shape=None)``: shape None is the near-square ``nprow x npcol`` factorization of the
    size (nprow <= npcol); else ``(nprow, npcol)`` with ``nprow * npcol == comm.size``. Rank r of comm
    is at grid place ``(r // npcol, r % npcol)``. ``close()`` (or ``with``) frees it: collective, and
    before MPI is finalized. Layouts made from a communicator share one cached grid per communicator
    and shape (freed at exit); make a Grid to own its lifetime.
    """

    _free = staticmethod(_grid_destroy)

    def __init__(self, comm: Any, shape: Optional[Tuple[int, int]] = None):
        where = "fusemath.distributed.Grid"
        self._handle = None
        nprow, npcol = _agreed(comm, lambda: _grid_shape_arg(shape, where))
        handle = _VOIDP()
        _check(_grid_create(_comm(comm, where), nprow, npcol, ctypes.byref(handle)), where)
        self._handle, self.comm = handle, comm
        v = [ctypes.c_int() for _ in range(4)]
        _check(_grid_shape(handle, *(ctypes.byref(x) for x in v)), where)
        self.shape = (v[0].value, v[1].value)  #: (nprow, npcol)
        self.coords = (v[2].value, v[3].value)  #: this rank's (row, column) in the grid

    def _live(self, where: str) -> _VOIDP:
        if self._handle is None:
            raise _C.InvalidStateError(f"{where}: the grid was closed")
        return self._handle

    def close(self) -> None:
        """Free the BLACS grid (collective)."""
        super().close()

    def __repr__(self) -> str:
        return f"Grid({self.shape[0]} x {self.shape[1]}, at {self.coords})"


def _grid_shape_arg(shape: Any, where: str) -> Tuple[int, int]:
    if shape is None:
        return 0, 0
    try:
        nprow, npcol = (int(v) for v in shape)
    except (TypeError, ValueError):
        raise TypeError(f"{where}: grid shape must be None or (nprow, npcol), not {shape!r}") from None
    return nprow, npcol


_GRIDS: dict = {}  # (id(comm), shape) -> Grid made for Layouts given a communicator


@atexit.register  # registered after mpi4py's own (it finalizes MPI at exit): runs before it
def _close_cached_grids() -> None:
    for g in list(_GRIDS.values()):
        g.close()
    _GRIDS.clear()


def _cached_grid(comm: Any, shape: Any, where: str) -> Grid:
    key = (id(comm), shape if shape is None else tuple(shape))
    g = _GRIDS.get(key)
    if g is None or g.comm is not comm or g._handle is None:
        g = _GRIDS[key] = Grid(comm, shape)
    return g


class Layout:
    """The 2-D block-cyclic layout of one ``m x n`` matrix over a process grid.

    ``Layout(global_shape, comm, *, block=64, grid=None)``: block is ``mb`` or ``(mb, nb)``; grid None
    (near-square), ``(nprow, npcol)`` or a :class:`Grid` of comm. Collective the first time a grid of
    comm and that shape is made. ``local_shape`` is this rank's block of the matrix (numroc's counts);
    ``rows`` / ``cols`` the global indices of its local rows / columns.
    """

    def __init__(self, global_shape: Any, comm: Any, *, block: Any = 64, grid: Any = None):
        where = "fusemath.distributed.Layout"
        (m, n), (mb, nb) = _agreed(comm, lambda: (_pair(global_shape, "global_shape", where),
                                                  _pair(block, "block", where, both=True)))
        if isinstance(grid, Grid):
            if grid.comm is not comm and _MPI.Comm.Compare(grid.comm, comm) != _MPI.IDENT:
                raise ValueError(f"{where}: grid is a Grid of another communicator than comm")
            self.grid = grid
        else:
            self.grid = _cached_grid(comm, grid, where)
        mat = _Matrix()
        _agreed(comm, lambda: _check(_matrix_init(self.grid._live(where), m, n, mb, nb, ctypes.byref(mat)), where))
        self.comm = comm
        self.global_shape = (m, n)
        self.block = (mat.mb, mat.nb)
        self.local_shape = (mat.local_rows, mat.local_cols)

    def with_shape(self, global_shape: Any, block: Any = None) -> "Layout":
        """A layout of another matrix on the same grid (block: default this layout's)."""
        return Layout(global_shape, self.comm, block=self.block if block is None else block, grid=self.grid)

    def _indices(self, axis: int, place: int) -> np.ndarray:
        """Global indices of grid row (axis 0) / column (axis 1) `place`'s local rows / columns."""
        n, b, procs = self.global_shape[axis], self.block[axis], self.grid.shape[axis]
        g = np.arange(n)
        return g[(g // b) % procs == place]  # in local order: ascending global index

    @property
    def rows(self) -> np.ndarray:
        return self._indices(0, self.grid.coords[0])

    @property
    def cols(self) -> np.ndarray:
        return self._indices(1, self.grid.coords[1])

    def _matrix(self, local: Optional[np.ndarray]) -> _Matrix:
        """fm_dist_matrix of this layout over a local Fortran-order array (its own shape: the
        library checks it against the layout's)."""
        mat = _Matrix()
        mat.m, mat.n = self.global_shape
        mat.mb, mat.nb = self.block
        rows, cols = local.shape
        mat.local_rows, mat.local_cols, mat.ld = rows, cols, max(1, rows)
        mat.data = local.ctypes.data if local.size else None
        return mat

    def __repr__(self) -> str:
        return (f"Layout({self.global_shape[0]} x {self.global_shape[1]} in {self.block[0]} x {self.block[1]} "
                f"blocks on {self.grid.shape[0]} x {self.grid.shape[1]}, local {self.local_shape})")


def _pair(v: Any, name: str, where: str, both: bool = False) -> Tuple[int, int]:
    if both and isinstance(v, numbers.Integral):
        return int(v), int(v)
    try:
        a, b = v
        if not isinstance(a, numbers.Integral) or not isinstance(b, numbers.Integral):
            raise TypeError
    except (TypeError, ValueError):
        raise TypeError(f"{where}: {name} must be {'an int or ' if both else ''}a pair of ints, not {v!r}") from None
    return int(a), int(b)


def _check_layouts(layout: Any, count: int, comm: Any, where: str) -> Tuple[Layout, ...]:
    if isinstance(layout, Layout):
        layout = (layout,)
    if not isinstance(layout, (tuple, list)) or not all(isinstance(x, Layout) for x in layout) or \
            len(layout) not in count:
        raise TypeError(f"{where}: layout must be a tuple of {' or '.join(map(str, count))} fusemath.distributed."
                        "Layout, one per operand")
    if not isinstance(comm, _MPI.Comm):
        raise TypeError(f"{where}: comm must be an mpi4py communicator (mpi4py.MPI.Comm), not {type(comm).__name__}")
    for x in layout:
        if x.grid is not layout[0].grid:
            raise ValueError(f"{where}: mismatched layouts: the operands' layouts are on different grids (make them "
                             "from the same communicator and grid shape, or with_shape())")
        if x.comm is not comm and _MPI.Comm.Compare(x.comm, comm) != _MPI.IDENT:
            raise ValueError(f"{where}: a layout is of another communicator than comm")
    return tuple(layout)


def _local(x: Any, name: str, where: str, copy: bool = False) -> np.ndarray:
    """A rank's local block: a 2-D float32 / float64 NumPy array, in Fortran order (copied when
    it is not, or when copy)."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{where}: {name} must be a NumPy array (this rank's local block), not {type(x).__name__}")
    if x.dtype not in _REAL:
        raise _C.DtypeError(f"{where}: {name} has dtype {x.dtype}; expected float32 or float64 (native byte order)")
    if x.ndim != 2:
        raise _C.ShapeError(f"{where}: {name} is {x.ndim}-D; a local block is 2-D (layout.local_shape)")
    return np.array(x, order="F", copy=True) if copy else np.asfortranarray(x)


def _same_dtype(where: str, **arrays) -> np.dtype:
    names = list(arrays)
    t = arrays[names[0]].dtype
    for k in names[1:]:
        if arrays[k].dtype != t:
            raise _C.DtypeError(f"{where}: {k} has dtype {arrays[k].dtype} but {names[0]} {t}; expected the same")
    return t


def scatter(global_on_root: Any, comm: Any, layout: Layout, *, root: int = 0) -> np.ndarray:
    """This rank's local block (Fortran order) of the matrix ``global_on_root`` given on rank
    ``root`` (ignored on the others), cut as ``layout`` says (collective)."""
    where = "fusemath.distributed.scatter"

    def blocks():
        lay = _check_layouts(layout, (1,), comm, where)[0]
        if not isinstance(root, numbers.Integral) or not 0 <= root < comm.size:
            raise ValueError(f"{where}: root = {root!r}; expected a rank from 0 to {comm.size - 1}")
        if comm.rank != root:
            return None
        g = np.asarray(global_on_root)
        if g.shape != lay.global_shape:
            raise _C.ShapeError(f"{where}: the matrix on the root has shape {g.shape}; the layout's is "
                                f"{lay.global_shape}")
        npcol = lay.grid.shape[1]
        return [np.asfortranarray(g[np.ix_(lay._indices(0, r // npcol), lay._indices(1, r % npcol))])
                for r in range(comm.size)]

    return comm.scatter(_agreed(comm, blocks), root=root)


def gather(local: Any, comm: Any, layout: Layout, *, root: int = 0) -> Optional[np.ndarray]:
    """The whole matrix on rank ``root`` from every rank's local block in ``layout`` (collective);
    None on the other ranks."""
    where = "fusemath.distributed.gather"

    def mine():
        lay = _check_layouts(layout, (1,), comm, where)[0]
        if not isinstance(root, numbers.Integral) or not 0 <= root < comm.size:
            raise ValueError(f"{where}: root = {root!r}; expected a rank from 0 to {comm.size - 1}")
        if not isinstance(local, np.ndarray):
            raise TypeError(f"{where}: local must be a NumPy array, not {type(local).__name__}")
        if local.shape != lay.local_shape:
            raise _C.ShapeError(f"{where}: local has shape {local.shape}; this rank's block of the layout is "
                                f"{lay.local_shape}")
        return lay

    lay = _agreed(comm, mine)
    kinds = comm.allgather(local.dtype.str)
    if len(set(kinds)) > 1:
        raise _C.DtypeError(f"{where}: the ranks' local blocks have dtypes {sorted(set(kinds))}; expected one")
    parts = comm.gather(local, root=root)
    if comm.rank != root:
        return None
    out = np.empty(lay.global_shape, local.dtype)
    npcol = lay.grid.shape[1]
    for r, part in enumerate(parts):
        out[np.ix_(lay._indices(0, r // npcol), lay._indices(1, r % npcol))] = part
    return out


def _number(v: Any, name: str, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{where}: {name} must be a real number, not {type(v).__name__}")
    return float(v)


def _matmul_args(a, b, c, ld, alpha, beta, bias, epilogue, clamp, where):
    """matmul's local checks and arguments (no communication: _agreed runs it)."""
    a, b = _local(a, "a", where), _local(b, "b", where)
    arrays = {"a": a, "b": b}
    if c is not None:
        arrays["c"] = c = _local(c, "c", where)
    t = _same_dtype(where, **arrays)
    o = _MatmulOptions()
    _options_init(ctypes.byref(o))
    o.alpha, o.beta = _number(alpha, "alpha", where), _number(beta, "beta", where)
    if epilogue is not None and not isinstance(epilogue, (str, numbers.Integral)):
        raise TypeError(f"{where}: epilogue must be a name such as 'relu' or 'bias+gelu', not {type(epilogue).__name__}")
    o.epilogue = 0 if epilogue is None else (_C.epilogue_parse(epilogue) if isinstance(epilogue, str) else int(epilogue))
    if bias is not None:
        o.epilogue |= _BIAS
        bias = np.ascontiguousarray(bias, dtype=t)
        if bias.shape != (ld.global_shape[1],):
            raise _C.ShapeError(f"{where}: bias has shape {bias.shape}; expected the whole ({ld.global_shape[1]},) row "
                                "on every rank")
    if clamp is not None:
        o.epilogue |= _CLAMP
        o.clamp[0], o.clamp[1] = (_number(v, "clamp", where) for v in _pair_real(clamp, where))
    d = np.empty(ld.local_shape, t, order="F")
    return a, b, c, t, bias, o, d


def _pair_real(v: Any, where: str):
    try:
        lo, hi = v
    except (TypeError, ValueError):
        raise TypeError(f"{where}: clamp must be a pair (lo, hi), not {v!r}") from None
    return lo, hi


def matmul(a: Any, b: Any, comm: Any, *, layout: Any, c: Any = None, alpha: Any = 1.0, beta: Any = 0.0,
           bias: Any = None, epilogue: Any = None, clamp: Any = None) -> np.ndarray:
    """``D = act(alpha * A @ B + beta * C + bias)`` of block-cyclic matrices through pdgemm / psgemm;
    returns this rank's local block of D (collective).

    a, b (and c): this rank's local blocks (float32 or float64, all one dtype) in
    ``layout = (layout_a, layout_b)`` or ``(layout_a, layout_b, layout_d)``, on one grid; D's layout
    defaults to ``layout_a.with_shape((m, n), block=(layout_a.block[0], layout_b.block[1]))``, and c
    has D's. bias: the whole length-n vector on every rank; epilogue: a name ("relu", "gelu",
    "sigmoid", "tanh", "silu", "clamp", "bias+gelu", ...: a bias and one forward activation, the
    same words as fusemath.matmul's); clamp=(lo, hi). The bias and activation are applied to each
    rank's local block of D after the product.
    """
    where = "fusemath.distributed.matmul"
    lays = _agreed(comm, lambda: _check_layouts(layout, (2, 3), comm, where))
    la, lb = lays[0], lays[1]
    ld = lays[2] if len(lays) == 3 else la.with_shape((la.global_shape[0], lb.global_shape[1]),
                                                      block=(la.block[0], lb.block[1]))  # collective
    a, b, c, t, bias, o, d = _agreed(comm, lambda: _matmul_args(a, b, c, ld, alpha, beta, bias, epilogue, clamp,
                                                                where))
    ma, mb_, md = la._matrix(a), lb._matrix(b), ld._matrix(d)
    mc = ld._matrix(c) if c is not None else None
    _check(_matmul(la.grid._live(where), _REAL[t], ctypes.byref(ma), ctypes.byref(mb_),
                   ctypes.byref(mc) if mc is not None else None, bias.ctypes.data if bias is not None else None,
                   ctypes.byref(o), ctypes.byref(md)), where)
    return d


def solve(a: Any, b: Any, comm: Any, *, layout: Any, overwrite_a: bool = False,
          overwrite_b: bool = False) -> np.ndarray:
    """X with ``A X = B`` through pdgesv / psgesv; returns this rank's local block of X, in b's layout
    (collective). ``layout = (layout_a, layout_b)``: A n x n in square blocks, B n x k with A's row
    blocks. overwrite_a / overwrite_b let the library use a's / b's memory (when they are already
    Fortran-ordered). A singular A raises :class:`fusemath.LinAlgError` on every rank."""
    where = "fusemath.distributed.solve"

    def args():
        la, lb = _check_layouts(layout, (2,), comm, where)
        x, y = _local(a, "a", where, copy=not overwrite_a), _local(b, "b", where, copy=not overwrite_b)
        return la, lb, x, y, _same_dtype(where, a=x, b=y)

    la, lb, x, y, t = _agreed(comm, args)
    ma, mb_ = la._matrix(x), lb._matrix(y)
    _check(_solve(la.grid._live(where), _REAL[t], ctypes.byref(ma), ctypes.byref(mb_)), where)
    return y


def cholesky(a: Any, comm: Any, *, layout: Layout, upper: bool = False, overwrite_a: bool = False) -> np.ndarray:
    """The Cholesky factor L (``A = L L^T``, the default) or U (``A = U^T U``) through pdpotrf /
    pspotrf: this rank's local block of it, the other triangle zero, as numpy.linalg.cholesky
    (collective). A not positive definite raises :class:`fusemath.LinAlgError` on every rank."""
    where = "fusemath.distributed.cholesky"

    def args():
        la = _check_layouts(layout, (1,), comm, where)[0]
        if not isinstance(upper, (bool, np.bool_)):
            raise TypeError(f"{where}: upper must be a bool, not {type(upper).__name__}")
        x = _local(a, "a", where, copy=not overwrite_a)
        return la, x

    la, x = _agreed(comm, args)
    ma = la._matrix(x)
    _check(_cholesky(la.grid._live(where), _REAL[x.dtype], int(upper), ctypes.byref(ma)), where)
    r, c = la.rows[:, None], la.cols[None, :]
    x[(r > c) if upper else (r < c)] = 0  # the triangle ScaLAPACK left as it was
    return x


def cho_solve(c_and_lower: Any, b: Any, comm: Any, *, layout: Any, overwrite_b: bool = False) -> np.ndarray:
    """scipy.linalg.cho_solve over ranks: X with ``A X = B`` from ``(factor, lower)`` (factor: this
    rank's block of :func:`cholesky`'s result, lower: ``not upper``) through pdpotrs / pspotrs;
    ``layout = (layout_factor, layout_b)``; returns this rank's local block of X (collective)."""
    where = "fusemath.distributed.cho_solve"

    def args():
        lf, lb = _check_layouts(layout, (2,), comm, where)
        try:
            f, lower = c_and_lower
        except (TypeError, ValueError):
            raise TypeError(f"{where}: c_and_lower must be a pair (factor, lower)") from None
        f, y = _local(f, "factor", where), _local(b, "b", where, copy=not overwrite_b)
        return lf, lb, f, bool(lower), y, _same_dtype(where, factor=f, b=y)

    lf, lb, f, lower, y, t = _agreed(comm, args)
    mf, mb_ = lf._matrix(f), lb._matrix(y)
    _check(_cho_solve(lf.grid._live(where), _REAL[t], int(not lower), ctypes.byref(mf), ctypes.byref(mb_)), where)
    return y


def _global_index(layout: Layout, axis: int, local: int) -> int:
    """The library's global index of a local row / column (fm_dist_matrix_global_index; tests)."""
    mat = layout._matrix(np.empty(layout.local_shape))
    out = ctypes.c_int64()
    _check(_c_global_index(layout.grid._live("_global_index"), ctypes.byref(mat), axis, local, ctypes.byref(out)),
           "fusemath.distributed._global_index")
    return out.value
