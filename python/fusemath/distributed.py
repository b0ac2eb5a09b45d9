"""Distributed FFTs and dense linear algebra over MPI ranks (``fusemath.distributed``): slab-decomposed
c2c and r2c / c2r transforms of 2-D and 3-D NumPy arrays through FFTW-MPI (CPU ranks) or of CuPy arrays /
torch CUDA tensors through local cuFFT plans and all-to-alls over NCCL or MPI (GPU ranks, one GPU per
rank or ranks sharing one; the same blocks: ``local_shape`` does not depend on the device), and matmul (with a fused
bias / activation), solve and cholesky on block-cyclic matrices through ScaLAPACK (:class:`Layout`,
:func:`scatter`, :func:`gather`: python/fusemath/_dist_scalapack.py), on libfusemath_mpi (its C API:
``fusemath/fusemath_mpi.h``, docs/api.md, Distributed).

``comm`` is an mpi4py intra-communicator the caller owns (the library never initializes or
finalizes MPI). Every call that takes ``comm`` or acts on an :class:`FFT` (but ``describe()`` and
the shape properties) is collective: call it on every rank, in the same order. A bad argument on
any rank raises the same error on every rank.

This module talks to libfusemath_mpi through ctypes rather than a C extension: the handful of
calls it makes are dwarfed by an MPI all-to-all, it needs neither mpi4py's nor MPI's headers when
the wheel is built, and ``_fusemath`` keeps no MPI dependency.
"""
from __future__ import annotations

import builtins
import ctypes
import os
from typing import Any, Optional, Tuple

import numpy as np

from . import _fusemath as _C
from ._fft_arrays import _chain, _norm_code
from ._arrays import refresh_copies

try:
    from mpi4py import MPI as _MPI
except ImportError as _exc:  # pragma: no cover - depends on the machine
    raise ImportError("fusemath.distributed needs mpi4py (pip install mpi4py, against the system MPI: "
                      "scripts/setup.sh installs both)") from _exc

_LIB_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libfusemath_mpi.so")
if not os.path.exists(_LIB_PATH):  # pragma: no cover - depends on the build
    raise ImportError(f"fusemath.distributed: {_LIB_PATH} does not exist: fusemath was built without MPI or "
                      "FFTW-MPI (apt-get install libopenmpi-dev openmpi-bin libfftw3-mpi-dev, then rebuild)")
_lib = ctypes.CDLL(_LIB_PATH)

_i64p = ctypes.POINTER(ctypes.c_int64)
_COMM_T = ctypes.c_void_p if _MPI._sizeof(_MPI.Comm) == ctypes.sizeof(ctypes.c_void_p) else ctypes.c_int


class _Chain(ctypes.Structure):
    _fields_ = [("ops", ctypes.c_uint), ("scale", ctypes.c_double * 2), ("source", ctypes.c_char_p),
                ("symbol", ctypes.c_char_p)]


class _Options(ctypes.Structure):  # fm_dist_fft_options
    _fields_ = [(k, ctypes.c_int32) for k in ("kind", "inverse", "in_layout", "out_layout", "norm", "effort",
                                              "num_threads", "overwrite_input", "device_type", "device_id")] + \
               [("decomposition", ctypes.c_int32), ("grid_rows", ctypes.c_int32), ("prolog", _Chain),
                ("epilog", _Chain)]


class _Tensor(ctypes.Structure):  # fm_tensor (FM_MAX_NDIM = 8)
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("dtype", ctypes.c_int32), ("ndim", ctypes.c_int32), ("shape", ctypes.c_int64 * 8),
                ("strides", ctypes.c_int64 * 8)]


def _fn(name, restype, *argtypes):
    f = getattr(_lib, name)
    f.restype, f.argtypes = restype, list(argtypes)
    return f


_options_init = _fn("fm_dist_fft_options_init", None, ctypes.POINTER(_Options))
_local_shape = _fn("fm_dist_local_shape", ctypes.c_int, _COMM_T, ctypes.c_int, _i64p, ctypes.POINTER(_Options),
                   ctypes.c_int, _i64p, _i64p)
_plan = _fn("fm_dist_fft_plan", ctypes.c_int, _COMM_T, ctypes.c_int, _i64p, ctypes.c_int, _i64p,
            ctypes.POINTER(_Options), ctypes.POINTER(ctypes.c_void_p))
_plan_chains = _fn("fm_dist_fft_plan_chains", ctypes.c_int, _COMM_T, ctypes.c_int, _i64p, ctypes.c_int, _i64p,
                   ctypes.POINTER(_Tensor), ctypes.POINTER(_Tensor), ctypes.POINTER(_Options),
                   ctypes.POINTER(ctypes.c_void_p))
_execute = _fn("fm_dist_fft_execute", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_execute_stream = _fn("fm_dist_fft_execute_stream", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                      ctypes.c_void_p)
_local = _fn("fm_dist_fft_local", ctypes.c_int, ctypes.c_void_p, ctypes.c_int, _i64p, _i64p)
_describe = _fn("fm_dist_fft_describe", ctypes.c_char_p, ctypes.c_void_p)
_destroy = _fn("fm_dist_fft_destroy", None, ctypes.c_void_p)
_mpi_library = _fn("fm_dist_mpi_library", ctypes.c_char_p)
_last_error = _fn("fm_last_error", ctypes.c_char_p)  # libfusemath's, reached through libfusemath_mpi

_probe = _Options()
_options_init(ctypes.byref(_probe))
if _probe.prolog.scale[0] != 1.0 or _probe.epilog.scale[0] != 1.0:  # pragma: no cover - a layout mismatch
    raise ImportError("fusemath.distributed: the ctypes layout of fm_dist_fft_options does not match the library's")
_ours, _theirs = (v.strip("\x00 \n").splitlines()[:1] for v in (_mpi_library().decode(), _MPI.Get_library_version()))
if _ours != _theirs:  # pragma: no cover - depends on the machine
    raise ImportError(f"fusemath.distributed: mpi4py runs on {_theirs} but libfusemath_mpi was built with {_ours}; "
                      "both must use the same MPI (reinstall mpi4py against the system MPI)")

# fm_status -> the exception classes of the rest of fusemath (python/src/fmpy_args.c's table)
_ERRORS = {1: "InvalidArgumentError", 2: "ShapeError", 3: "DtypeError", 5: "NotSupportedError",
           6: "OutOfMemoryError", 7: "AliasError", 8: "TooLargeError", 9: "BackendError", 10: "UnavailableError",
           12: "InvalidStateError", 13: "LinAlgError", 14: "InternalError"}
_KINDS = {"c2c": 0, "r2c": 1, "c2r": 2}
_LAYOUTS = {"slab": 0, "transposed": 1}
_DECOMPOSITIONS = {"slab": 0, "pencil": 1}
_EFFORTS = {"estimate": 0, "measure": 1, "patient": 2}
_DTYPES = {np.dtype(np.float32): 3, np.dtype(np.float64): 4, np.dtype(np.complex64): 5, np.dtype(np.complex128): 6}
_DTYPE_OF = {v: k for k, v in _DTYPES.items()}
# NumPy dtype -> fm_dtype, for the chains' multiply arrays (the library says which it takes)
_FM_DTYPES = {np.dtype(k): v for k, v in ((np.float16, 1), (np.float32, 3), (np.float64, 4), (np.complex64, 5),
                                          (np.complex128, 6), (np.int8, 7), (np.uint8, 8), (np.int32, 9),
                                          (np.int64, 10), (np.uint32, 11), (np.int16, 15), (np.uint16, 16),
                                          (np.uint64, 17), (np.bool_, 18))}
_RESULT = {(0, 5): 5, (0, 6): 6, (1, 3): 5, (1, 4): 6, (2, 5): 3, (2, 6): 4}


def _check(status: int, where: str) -> None:
    if status:
        msg = (_last_error() or b"").decode(errors="replace")
        raise getattr(_C, _ERRORS.get(status, "InternalError"))(f"{where}: {msg}")


def _choice(value: Any, table: dict, name: str, where: str) -> int:
    try:
        return table[value]
    except (KeyError, TypeError):
        raise ValueError(f"{where}: {name} = {value!r}; expected one of {list(table)}") from None


def _comm(comm: Any, where: str):
    if not isinstance(comm, _MPI.Comm):
        raise TypeError(f"{where}: comm must be an mpi4py communicator (mpi4py.MPI.Comm), not {type(comm).__name__}")
    return _COMM_T(_MPI._handleof(comm))


def _agreed(comm: Any, thunk):
    """thunk()'s value, or on every rank the error of the first rank whose thunk raised: a bad
    argument on one rank must not leave the others waiting in the collective that follows (one
    allgather; not a communicator: every rank fails alike later, in the library's own check)."""
    try:
        value, err = thunk(), None
    except Exception as exc:
        value, err = None, exc
    allgather = getattr(comm, "allgather", None)
    if not callable(allgather):
        if err is not None:
            raise err
        return value
    failed = [(r, e) for r, e in enumerate(allgather(None if err is None else (type(err).__name__, str(err)))) if e]
    if not failed:
        return value
    if err is not None:
        raise err
    rank, (name, msg) = failed[0]
    raise (getattr(_C, name, None) or getattr(builtins, name, RuntimeError))(f"{msg} (on rank {rank})")


def _i64(values) -> ctypes.Array:
    return (ctypes.c_int64 * max(1, len(values)))(*values)


def _logical_shape(global_shape: Any, kind: int, n: Optional[int], where: str) -> Tuple[int, ...]:
    """The transform's logical (real for r2c / c2r) shape from the input's global shape."""
    try:
        shape = tuple(int(v) for v in global_shape)
    except TypeError:
        raise TypeError(f"{where}: global_shape must be a sequence of ints, not {type(global_shape).__name__}") from None
    if kind == 2 and shape:
        m = shape[-1]
        last = 2 * (m - 1) if n is None else int(n)
        if last // 2 + 1 != m:
            raise _C.ShapeError(f"{where}: c2r output length n = {last} needs {last // 2 + 1} input points along the "
                                f"last axis, global_shape has {m}")
        shape = shape[:-1] + (last,)
    elif n is not None:
        raise ValueError(f"{where}: n is for kind='c2r' only")
    return shape


def _grid_rows(grid: Any, comm: Any, decomposition: Any, where: str) -> int:
    """fm_dist_fft_options.grid_rows (P1) of grid=None | (P1, P2); grid is this front's argument (P2 is
    not passed to the library), so it is checked here: whole numbers >= 1 whose product is the size,
    pencils only (whether P1 divides the size, the library checks)."""
    if grid is None:
        return 0
    if decomposition != "pencil":
        raise ValueError(f"{where}: grid = {grid!r} is for decomposition='pencil' (a slab has no process grid)")
    try:
        p1, p2 = grid
    except (TypeError, ValueError):
        raise TypeError(f"{where}: grid must be None or a pair (P1, P2) of ints, not {grid!r}") from None
    for v in (p1, p2):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{where}: grid must be None or a pair (P1, P2) of ints, not {grid!r}")
        if v < 1:
            raise ValueError(f"{where}: grid = {tuple(grid)}; P1 and P2 must be >= 1")
    p1, p2 = int(p1), int(p2)
    _comm(comm, where)  # a communicator first (its TypeError), then its size
    size = comm.Get_size()
    if p1 * p2 != size:
        raise ValueError(f"{where}: grid = ({p1}, {p2}); P1 x P2 must be the communicator's {size} ranks")
    return p1


def _options(kind: int, inverse: bool, layout_in: Any, layout_out: Any, where: str, decomposition: Any = "slab",
             grid_rows: int = 0) -> _Options:
    o = _Options()
    _options_init(ctypes.byref(o))
    o.kind, o.inverse = kind, int(inverse)
    o.in_layout = _choice(layout_in, _LAYOUTS, "layout_in", where)
    o.out_layout = _choice(layout_out, _LAYOUTS, "layout_out", where)
    o.decomposition = _choice(decomposition, _DECOMPOSITIONS, "decomposition", where)
    o.grid_rows = grid_rows
    return o


def local_shape(global_shape: Any, comm: Any, *, kind: str = "c2c", which: str = "in", layout: str = "slab",
                n: Optional[int] = None, decomposition: str = "slab",
                grid: Optional[Tuple[int, int]] = None) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    """This rank's block of the input (``which="in"``) or the output (``"out"``) of a transform
    whose input has ``global_shape``: ``(local_shape, offset)``.

    ``decomposition="slab"``: as FFTW-MPI's local_size functions give (axis 0 split in blocks of
    ceil(n0 / size) rows); for ``layout="transposed"`` the block is of the array with axes 0 and 1
    swapped, in that order. ``decomposition="pencil"`` (3-D, CPU and GPU ranks) on a P1 x P2 grid (``grid``,
    None: MPI_Dims_create's, P1 >= P2; rank r is (r // P2, r % P2) = (r1, r2)): ``layout="slab"`` is
    the z-pencil (axis 0 block r1 of P1, axis 1 block r2 of P2, axis 2 whole), ``"transposed"`` the
    x-pencil (axis 0 whole, axis 1 block r1 of P1, axis 2 block r2 of P2), both in logical axis
    order (never swapped; the offset is non-zero on two axes), in the same ceil(n / P) blocks.
    Local (no communication)."""
    where = "fusemath.distributed.local_shape"
    kind_code = _choice(kind, _KINDS, "kind", where)
    w = _choice(which, {"in": 0, "out": 1}, "which", where)
    shape = _logical_shape(global_shape, kind_code, n, where)
    o = _options(kind_code, kind_code == 2, layout if w == 0 else "slab", layout if w == 1 else "slab", where,
                 decomposition, _grid_rows(grid, comm, decomposition, where))
    loc, off = _i64([0] * len(shape)), _i64([0] * len(shape))
    _check(_local_shape(_comm(comm, where), len(shape), _i64(shape), ctypes.byref(o), w, loc, off), where)
    return tuple(loc[:len(shape)]), tuple(off[:len(shape)])


def _gpu(a: Any) -> Optional[Tuple[str, int]]:
    """("cupy" | "torch", device id) of a CuPy array or a torch CUDA tensor, else None (GPU ranks take
    those: docs/design.md, Distributed, GPU ranks)."""
    top = type(a).__module__.split(".")[0]
    if top == "cupy" and hasattr(a, "data") and hasattr(a, "device"):
        return "cupy", int(a.device.id)
    if top == "torch" and getattr(a, "is_cuda", False):
        return "torch", int(a.device.index)
    return None


def _np_dtype(a: Any) -> np.dtype:
    dt = a.dtype
    return np.dtype(str(dt).replace("torch.", "")) if type(dt).__module__.startswith("torch") else np.dtype(dt)


def _ptr(a: Any) -> Optional[int]:
    """The data pointer of a NumPy, CuPy or torch array (None where it is empty)."""
    if a.size == 0 if isinstance(a, np.ndarray) else (a.numel() == 0 if hasattr(a, "numel") else a.size == 0):
        return None
    if isinstance(a, np.ndarray):
        return a.ctypes.data
    return int(a.data_ptr()) if hasattr(a, "data_ptr") else int(a.data.ptr)


def _contiguous(a: Any) -> Any:
    if isinstance(a, np.ndarray):
        return np.ascontiguousarray(a)
    if hasattr(a, "is_contiguous"):  # torch
        return a if a.is_contiguous() else a.contiguous()
    import cupy
    return cupy.ascontiguousarray(a)


def _empty(like: Any, shape: Tuple[int, ...], dtype: np.dtype) -> Any:
    """An empty array of shape and dtype of like's kind and device."""
    if isinstance(like, np.ndarray):
        return np.empty(shape, dtype)
    if hasattr(like, "is_cuda"):
        import torch
        return torch.empty(shape, dtype=getattr(torch, dtype.name), device=like.device)
    import cupy
    with cupy.cuda.Device(like.device.id):
        return cupy.empty(shape, dtype)


def _stream(like: Any) -> Optional[int]:
    """The caller's current stream on like's device (CuPy's or torch's), as a cudaStream_t."""
    if hasattr(like, "is_cuda"):
        import torch
        return int(torch.cuda.current_stream(like.device).cuda_stream) or None
    import cupy
    with cupy.cuda.Device(like.device.id):
        return int(cupy.cuda.get_current_stream().ptr) or None


def _tensor(a: Any) -> _Tensor:
    """The fm_tensor of a NumPy array (host) or a CuPy / torch CUDA array, its strides in elements
    (the library checks them)."""
    t = _Tensor()
    t.data = _ptr(a)
    g = _gpu(a)
    t.device_type, t.device_id = (2, g[1]) if g else (1, 0)  # FM_DEVICE_CUDA / FM_DEVICE_CPU
    dt = _np_dtype(a)
    t.dtype, t.ndim = _FM_DTYPES.get(dt, 0), min(a.ndim, 8)
    strides = a.stride() if hasattr(a, "stride") and callable(a.stride) else tuple(v // dt.itemsize for v in a.strides)
    for i in range(t.ndim):
        t.shape[i] = a.shape[i]
        t.strides[i] = strides[i]
    return t


class _Collective:
    """The owner of a handle that a collective C call frees (FFTW-MPI's plans and BLACS grids hold a
    communicator): close() frees it once, and never after MPI is finalized; ``with`` and the garbage
    collector call close(). A subclass names the C function in _free (a staticmethod)."""

    _handle: Any = None
    _free: Any = None

    def close(self) -> None:
        """Free the handle (collective)."""
        h, self._handle = self._handle, None
        if h is not None and not _MPI.Is_finalized():
            self._free(h)

    def __enter__(self):  # -> the subclass
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass


class FFT(_Collective):
    """A slab- or pencil-decomposed FFT over the ranks of ``comm`` (plan once, execute many times).

    ``FFT(x_local, comm, *, global_shape, axes=None, decomposition="slab", kind=None, n=None,
    direction=None, layout_in="slab", layout_out="slab", grid=None)``: x_local is this rank's block
    (``local_shape()``) of the input, a NumPy array on every rank (CPU ranks: FFTW-MPI) or a CuPy
    array / torch CUDA tensor on every rank (GPU ranks: the array's device is the rank's GPU; execute
    returns the same kind of array and runs on the framework's current stream; the exchange is
    chosen at planning, FUSEMATH_DIST_EXCHANGE, and named in describe()), whose global shape is ``global_shape`` (2-D or 3-D; c2c
    complex64 / complex128, r2c float32 / float64, c2r complex). kind: None (complex -> "c2c",
    real -> "r2c"), "c2c", "r2c" or "c2r"; n: c2r's output length along the last axis (default
    2 (m - 1)); direction: "forward" (c2c, r2c) or "inverse" (c2c, c2r). layout_out="transposed"
    leaves the output with axes 0 and 1 swapped, split along the global axis 1 (FFTW's
    FFTW_MPI_TRANSPOSED_OUT: one all-to-all fewer); an inverse with layout_in="transposed" takes
    that output back. The transform runs over every axis (axes: None or all of them in order).

    ``decomposition="pencil"`` (3-D; CPU ranks with NumPy arrays, GPU ranks with CuPy / torch CUDA blocks,
    the same blocks either way): the ranks form a
    P1 x P2 grid (``grid=(P1, P2)``, None: MPI_Dims_create's, P1 >= P2) and two axes are split
    (``local_shape(..., decomposition="pencil", grid=...)``): the "slab" layout is the z-pencil (axis
    0 over P1, axis 1 over P2, axis 2 whole), "transposed" the x-pencil (axis 0 whole, axis 1 over P1,
    axis 2 over P2), both in logical axis order (out_offset non-zero on two axes). Slab -> transposed
    (or back) costs 2 all-to-alls, each within a row or a column of the grid; slab -> slab 4. The
    local transforms are fusemath's own FFTs (FFTW on CPU ranks, cuFFT on GPU ranks, where the
    exchanges are the GPU ranks' own: staged / CUDA-aware MPI / NCCL, named in describe()); the chains
    go into the first and last of them (or the first pack / last unpack). overwrite_input is ignored there (the input is never changed).

    ``plan(prolog=None, epilog=None, effort="estimate", norm="backward", num_threads=None,
    overwrite_input=False)``:
    prolog / epilog as in ``fusemath.fft``, ``{"scale": s, "multiply": array, "conj": bool}``, fused
    into the copies into and out of FFTW's buffers: a multiply array is this rank's block of the
    side it multiplies (prolog: x_local's shape; epilog: ``out_local_shape``, transposed where the
    output is), C-contiguous, real or complex of the data's precision (real on the real side of
    r2c / c2r), no broadcasting; it is kept and read at every execute (its values may change
    between executes). ``execute(x_local=None, out=None)`` returns this rank's output block.
    ``close()`` (or ``with``) frees the plan: collective, call it on every rank.
    """

    _free = staticmethod(_destroy)

    def __init__(self, x_local: Any, comm: Any, *, global_shape: Any, axes: Any = None,
                 decomposition: str = "slab", kind: Optional[str] = None, n: Optional[int] = None,
                 direction: Optional[str] = None, layout_in: str = "slab", layout_out: str = "slab",
                 grid: Optional[Tuple[int, int]] = None):
        where = "fusemath.distributed.FFT"
        self._where, self._handle = where, None
        _agreed(comm, lambda: self._setup(x_local, comm, global_shape, axes, decomposition, kind, n, direction,
                                          layout_in, layout_out, grid, where))

    def _setup(self, x_local, comm, global_shape, axes, decomposition, kind, n, direction, layout_in, layout_out,
               grid, where):
        """The constructor's checks and state (local; the constructor agrees on their outcome)."""
        self._gpu = _gpu(x_local)  # GPU ranks: the array's device is this rank's GPU
        if not isinstance(x_local, np.ndarray) and self._gpu is None:
            raise TypeError(f"{where}: x_local must be a NumPy array (CPU ranks) or a CuPy array / torch CUDA tensor "
                            f"(GPU ranks), not {type(x_local).__name__}")
        dtype = _np_dtype(x_local)
        if kind is None:
            kind = "c2c" if dtype.kind == "c" else "r2c"
        self._kind = _choice(kind, _KINDS, "kind", where)
        if direction is None:
            direction = "inverse" if self._kind == 2 else "forward"
        self._inverse = _choice(direction, {"forward": 0, "inverse": 1}, "direction", where)
        self._shape = _logical_shape(global_shape, self._kind, n, where)
        if axes is not None and tuple(axes) != tuple(range(len(self._shape))):
            raise ValueError(f"{where}: axes = {tuple(axes)}; a distributed transform runs over every axis "
                             f"{tuple(range(len(self._shape)))} (other axes are not implemented)")
        if dtype not in _DTYPES:
            raise _C.DtypeError(f"{where}: x_local has dtype {dtype}; expected float32 / float64 (r2c) or "
                                "complex64 / complex128 (c2c, c2r), native byte order")
        if x_local.ndim != len(self._shape):
            raise _C.ShapeError(f"{where}: x_local is {x_local.ndim}-D, global_shape {tuple(global_shape)} is "
                                f"{len(self._shape)}-D")
        self._comm, self._dtype = comm, dtype
        self._opts = _options(self._kind, self._inverse, layout_in, layout_out, where, decomposition,
                              _grid_rows(grid, comm, decomposition, where))
        if self._gpu is not None:
            self._opts.device_type, self._opts.device_id = 2, self._gpu[1]
        self._x = _contiguous(x_local)
        self._planned_opts = None
        self._arrays = (None, None)  # the planned chains' multiply arrays, read at every execute
        self._planned_overwrite = False

    def plan(self, prolog: Any = None, epilog: Any = None, effort: str = "estimate", norm: Any = "backward",
             num_threads: Optional[int] = None, overwrite_input: bool = False) -> "FFT":
        """Plan (collective): FFTW-MPI's plan with the chains, norm and effort; returns self.
        overwrite_input=True lets execute() destroy its input (FFTW-MPI then runs on it directly where
        there is no prolog: one copy fewer); execute() then needs x_local each call, since the
        constructor's array (the caller's own, when it was C-contiguous) would be the one destroyed."""
        where = self._where + ".plan"
        o, arrays = _agreed(self._comm, lambda: self._plan_options(prolog, epilog, effort, norm, num_threads, where,
                                                                   overwrite_input))
        shape = self._shape
        handle = ctypes.c_void_p()
        tensors = [None if a is None else ctypes.byref(_tensor(a)) for a in arrays]
        _check(_plan_chains(_comm(self._comm, where), len(shape), _i64(shape), _DTYPES[self._dtype],
                            _i64(self._x.shape), tensors[0], tensors[1], ctypes.byref(o), ctypes.byref(handle)), where)
        self.close()
        self._handle, self._arrays, self._planned_overwrite = handle, arrays, bool(o.overwrite_input)
        return self

    def _plan_options(self, prolog, epilog, effort, norm, num_threads, where, overwrite_input):
        o = _Options.from_buffer_copy(self._opts)
        if not isinstance(overwrite_input, (bool, np.bool_)):
            raise TypeError(f"{where}: overwrite_input must be a bool, not {type(overwrite_input).__name__}")
        o.overwrite_input = int(overwrite_input)
        o.norm, o.effort = _norm_code(norm, where), _choice(effort, _EFFORTS, "effort", where)
        o.num_threads = 0 if num_threads is None else int(num_threads)
        arrays = []
        for name, spec, real in (("prolog", prolog, self._kind == 1), ("epilog", epilog, self._kind == 2)):
            ch = _chain(where, name, spec, real_data=real)
            side = getattr(o, name)
            side.ops = ch.ops
            if ch.scale is not None:
                side.scale[0], side.scale[1] = ch.scale.real, ch.scale.imag
            if ch.arr is not None and self._gpu is None and not isinstance(ch.arr, np.ndarray):
                raise TypeError(f"{where}: {name}['{ch.key}'] must be a NumPy array (this rank's block), not "
                                f"{type(ch.arr).__name__}")
            if ch.arr is not None and self._gpu is not None and _gpu(ch.arr) != self._gpu:
                raise TypeError(f"{where}: {name}['{ch.key}'] must be a {self._gpu[0]} array on cuda:{self._gpu[1]} "
                                f"(this rank's block, where x_local is), not {type(ch.arr).__name__}")
            arrays.append(ch.arr)
        return o, arrays

    def _block(self, which: int) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
        if self._handle is None:
            raise _C.InvalidStateError(f"{self._where}: plan() first (or the FFT was closed)")
        nd = len(self._shape)
        loc, off = _i64([0] * nd), _i64([0] * nd)
        _check(_local(self._handle, which, loc, off), self._where)
        return tuple(loc[:nd]), tuple(off[:nd])

    @property
    def out_local_shape(self) -> Tuple[int, ...]:
        """This rank's output block (a slab's transposed output: axes 0 and 1 swapped; pencils keep the
        logical axis order)."""
        return self._block(1)[0]

    @property
    def out_offset(self) -> Tuple[int, ...]:
        return self._block(1)[1]

    @property
    def out_dtype(self) -> np.dtype:
        return _DTYPE_OF[_RESULT[(self._kind, _DTYPES[self._dtype])]]

    def execute(self, x_local: Any = None, out: Any = None) -> np.ndarray:
        """Run the planned transform (collective) on x_local (default: the constructor's) into out
        (default: a new array of out_local_shape); returns out."""
        where = self._where + ".execute"
        x, out = _agreed(self._comm, lambda: self._operands(x_local, out, where))
        if self._gpu is not None:  # on the caller's current stream of the array's framework
            _check(_execute_stream(self._handle, _ptr(x), _ptr(out), _stream(x)), where)
            return out
        refresh_copies(*self._arrays)  # multiply arrays run from aligned native copies follow the caller's
        _check(_execute(self._handle, x.ctypes.data if x.size else None, out.ctypes.data if out.size else None),
               where)
        return out

    def _operands(self, x_local, out, where):
        shape = self.out_local_shape
        if x_local is None:
            if self._planned_overwrite:
                raise ValueError(f"{where}: x_local is required: the plan has overwrite_input=True, which "
                                 "destroys the input, and the constructor's array would be transformed again")
            x = self._x
        else:
            self._same_kind(x_local, "x_local", where)
            if _np_dtype(x_local) != self._dtype:
                raise _C.DtypeError(f"{where}: x_local has dtype {x_local.dtype}; expected {self._dtype}, as planned")
            if tuple(x_local.shape) != tuple(self._x.shape):
                raise _C.ShapeError(f"{where}: x_local has shape {tuple(x_local.shape)}; expected "
                                    f"{tuple(self._x.shape)}, as planned")
            x = _contiguous(x_local)
        if out is None:
            out = _empty(self._x, shape, self.out_dtype)
        else:
            self._same_kind(out, "out", where)
            if _np_dtype(out) != self.out_dtype:
                raise _C.DtypeError(f"{where}: out has dtype {out.dtype}; expected {self.out_dtype}")
            contiguous = out.flags.c_contiguous and out.flags.writeable if isinstance(out, np.ndarray) else (
                out.is_contiguous() if hasattr(out, "is_contiguous") else out.flags.c_contiguous)
            if tuple(out.shape) != shape or not contiguous:
                raise _C.ShapeError(f"{where}: out must be a writeable C-contiguous {self.out_dtype} array of shape "
                                    f"{shape}")
        return x, out

    def _same_kind(self, a: Any, name: str, where: str) -> None:
        """a is what the plan takes: a NumPy array (CPU ranks), or an array of x_local's framework on its GPU."""
        if self._gpu is None and not isinstance(a, np.ndarray):
            raise TypeError(f"{where}: {name} must be a NumPy array, not {type(a).__name__}")
        if self._gpu is not None and _gpu(a) != self._gpu:
            raise TypeError(f"{where}: {name} must be a {self._gpu[0]} array on cuda:{self._gpu[1]}, as planned, not "
                            f"{type(a).__name__}")

    def describe(self) -> str:
        """The plan in one line (local)."""
        if self._handle is None:
            return f"{self._where}: not planned"
        return _describe(self._handle).decode()

    def close(self) -> None:
        """Free the plan (collective: FFTW-MPI's plans hold a communicator)."""
        super().close()


from ._dist_scalapack import Grid, Layout, cho_solve, cholesky, gather, matmul, scatter, solve  # noqa: E402

__all__ = ["FFT", "local_shape", "Grid", "Layout", "scatter", "gather", "matmul", "solve", "cholesky", "cho_solve"]
