"""The arguments, arrays and chains of a ``fusemath.fft`` transform: the C library's transform
kinds and norm codes; numpy.fft's ``norm``, ``n`` / ``s`` and ``axis`` / ``axes`` as normalised
axes and lengths (numpy's errors); x from the caller's library (NumPy, PyTorch, CuPy, other GPU
arrays, lists), cropped or zero-padded, promoted (NumPy 2 rules, half precision on PyTorch CUDA
tensors); the fused prolog / epilog dicts (``scale``, ``multiply``, ``conj``, a CUDA ``source`` /
``name`` / ``data`` callback) as the C library takes them. The core checks the arrays (shapes,
dtypes, devices) and says what the results are; only the array library, which it cannot tell
apart, is checked here.
"""
from __future__ import annotations

import math
import operator
import warnings
from typing import Any, Mapping, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from . import _fusemath as _C
from ._arrays import C32 as _C32
from ._arrays import NUMPY, int_arg, lib_of, native_aligned, operand

_C2C, _R2C, _C2R = _C.FFT_C2C, _C.FFT_R2C, _C.FFT_C2R
_NORMS = {None: _C.FFT_NORM_BACKWARD, "backward": _C.FFT_NORM_BACKWARD, "ortho": _C.FFT_NORM_ORTHO,
          "forward": _C.FFT_NORM_FORWARD}
_MAX_AXES = 3  # the planner's axes


# ---------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------
def _norm_code(norm: Any, where: str) -> int:
    try:
        return _NORMS[norm]
    except (KeyError, TypeError):
        raise ValueError(f'Invalid norm value {norm}; should be "backward","ortho" or "forward". '
                         f'({where}: norm = {norm!r})') from None


def _length(n: Any, name: str, where: str, keep: Optional[int] = None) -> int:
    """n as a transform length; with keep (the input's extent), -1 means keep it (NumPy 2's s[i])."""
    try:
        v = int_arg(n, name, where)  # bools refused
    except TypeError as exc:  # numpy's words first
        raise TypeError(f"'{type(n).__name__}' object cannot be interpreted as an integer ({exc})") from None
    if v == -1 and keep is not None:
        v = keep
    if v < 1:
        raise ValueError(_points_text(v, f"{where}: {name} = {v}; expected >= 1"))
    if v > _MAX_POINTS:
        raise ValueError(f"{where}: {name} = {v} is too large (at most 2**58 points: a result must be addressable "
                         "in bytes)")
    return v


_MAX_POINTS = 1 << 58  # 16-byte elements within a signed 64-bit byte count
_WARN_AT = 4  # warnings.warn's stacklevel for the caller of a numpy.fft function (_cook < _run < func)


def _points_text(v: int, detail: str) -> str:
    """numpy.fft's words for a transform length < 1, then fusemath's detail (code matching
    numpy's messages keeps working)."""
    return f"Invalid number of FFT data points ({v}) specified. ({detail})"


def axis_error(a: int, ndim: int, detail: str) -> np.exceptions.AxisError:
    """numpy's AxisError (a ValueError and an IndexError) in numpy's words, then fusemath's detail."""
    return np.exceptions.AxisError(f"axis {a} is out of bounds for array of dimension {ndim} ({detail})")


def _axes(axes: Any, ndim: int, name: str, where: str, distinct: bool = True) -> Tuple[int, ...]:
    """Normalised axes (0 <= a < ndim); distinct unless asked otherwise (numpy's fftn transforms a
    repeated axis again)."""
    if isinstance(axes, (str, bytes)) or not hasattr(axes, "__iter__"):
        raise TypeError(f"{where}: {name} must be a sequence of ints, not {type(axes).__name__}")
    out = []
    for a in axes:
        if isinstance(a, (bool, np.bool_)):
            raise TypeError(f"{where}: {name} must contain ints, not bool")
        try:
            a = operator.index(a)
        except TypeError:
            raise TypeError(f"{where}: {name} must contain ints, not {type(a).__name__}") from None
        if not -ndim <= a < ndim:
            raise axis_error(a, ndim, f"{where}: {name} contains axis {a}")
        a %= ndim
        if distinct and a in out:
            raise ValueError(f"{where}: {name} repeats axis {a}; each axis may be transformed once")
        out.append(a)
    return tuple(out)


_AXES_NONE_TEXT = ("`axes` should not be `None` if `s` is not `None` (Deprecated in NumPy 2.0). In a future version "
                   "of NumPy, this will raise an error and `s[i]` will correspond to the size along the transformed "
                   "axis specified by `axes[i]`. To retain current behaviour, pass a sequence [0, ..., k-1] to "
                   "`axes` for an array of dimension k.")
_S_NONE_TEXT = ("Passing an array containing `None` values to `s` is deprecated in NumPy 2.0 and will raise an error "
                "in a future version of NumPy. To use the default behaviour of the corresponding 1-D transform, pass "
                "the value matching the default for its `n` parameter. To use the default behaviour for every axis, "
                "the `s` argument can be omitted.")


def _cook(where: str, x, s: Any, axes: Any, kind: int,
          one_d: bool) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    """(axes, transform lengths n) as numpy.fft's _cook_nd_args: its DeprecationWarnings, its
    errors in its words; a repeated axis stays (transformed again); empty axes mean nothing to do."""
    ndim = x.ndim
    sname, aname = ("n", "axis") if one_d else ("s", "axes")
    if s is not None and (isinstance(s, (str, bytes)) or not hasattr(s, "__iter__")):
        raise TypeError(f"{where}: {sname} must be a sequence of ints, not {type(s).__name__}")
    if s is not None:
        s = list(s)
    if axes is None:
        if s is not None:
            warnings.warn(_AXES_NONE_TEXT, DeprecationWarning, stacklevel=_WARN_AT)
            if len(s) > ndim:
                raise axis_error(-len(s), ndim, f"{where}: {sname} has {len(s)} entries but x has only {ndim} "
                                 "dimensions")
        axes = range(ndim - len(s), ndim) if s is not None else range(ndim)
    axes = _axes(axes, ndim, aname, where, distinct=False)
    if s is None:
        s = [None] * len(axes)
    elif len(s) != len(axes):
        raise ValueError(f"Shape and axes have different lengths. ({where}: {sname} has {len(s)} entries, "
                         f"{aname} {len(axes)})")
    elif not one_d and None in s:
        warnings.warn(_S_NONE_TEXT, DeprecationWarning, stacklevel=_WARN_AT)
    n = []
    for i, (a, v) in enumerate(zip(axes, s)):
        if v is None:
            m = x.shape[a]
            v = 2 * (m - 1) if kind == _C2R and i == len(axes) - 1 else m
            if v < 1:
                raise ValueError(_points_text(v, f"{where}: x has extent {m} along axis {a}"
                                 + ("; irfft needs an input length >= 2 or an explicit n" if kind == _C2R else "")))
        else:
            v = _length(v, sname if one_d else f"{sname}[{i}]", where, keep=None if one_d else x.shape[a])
        n.append(v)
    return axes, tuple(n)


_F16, _F32, _F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
_C64, _C128 = np.dtype(np.complex64), np.dtype(np.complex128)
_LD, _CLD = np.dtype(np.longdouble), np.dtype(np.clongdouble)


# ---------------------------------------------------------------------------
# Arrays
# ---------------------------------------------------------------------------
def _input(x: Any, name: str, where: str):
    """(lib, array) as _arrays.operand gives it (lists too, as numpy.fft accepts); at most 8
    dimensions (FM_MAX_NDIM)."""
    lib, arr = operand(x, name, where)
    if len(arr.shape) > 8:
        raise _C.ShapeError(f"{where}: {name} has {len(arr.shape)} dimensions; at most 8 are supported")
    return lib, arr


def _astype(lib, x, dtype: np.dtype, where: str):
    """x converted to dtype in its own library (a copy)."""
    if lib is NUMPY:
        return x.astype(dtype)
    torch = getattr(lib, "torch", None)
    if torch is not None and hasattr(x, "to"):
        return x.to(getattr(torch, dtype.name))
    if hasattr(x, "astype"):
        return x.astype(dtype)
    raise _C.DtypeError(f"{where}: x has dtype {lib.dtype_of(x)}; convert it to {dtype} first")


def _zeros(lib, x, shape: Tuple[int, ...], where: str):
    """Zeros of x's dtype, library and device."""
    if lib is NUMPY:
        return np.zeros(shape, x.dtype)
    torch = getattr(lib, "torch", None)
    if torch is not None and hasattr(torch, "zeros"):
        return torch.zeros(shape, dtype=x.dtype, device=x.device)
    cupy = getattr(lib, "cupy", None)
    if cupy is not None:
        with cupy.cuda.Device(x.data.device_id):
            return cupy.zeros(shape, dtype=x.dtype)
    raise _C.NotSupportedError(f"{where}: zero-padding arrays of {lib.name} is not supported; pad x first")


def _resize(lib, x, axes: Sequence[int], lengths: Sequence[int], where: str):
    """x cropped (a view) or zero-padded (a copy) to lengths along axes, as numpy.fft does."""
    shape = list(x.shape)
    crop = [slice(None)] * len(shape)
    pad = False
    for ax, n in zip(axes, lengths):
        if shape[ax] > n:
            crop[ax] = slice(0, n)
            shape[ax] = n
        elif shape[ax] < n:
            pad = True
    if any(c != slice(None) for c in crop):
        x = x[tuple(crop)]
    if not pad:
        return x
    big = list(x.shape)
    for ax, n in zip(axes, lengths):
        big[ax] = n
    count = math.prod(max(e, 1) for e in big)
    if count * x.dtype.itemsize >= 2**63:  # NumPy would say "array is too big" without naming s / n
        raise _C.TooLargeError(f"{where}: zero-padding x to shape {tuple(big)} (s / n) needs more bytes than "
                               f"a 64-bit size holds")
    # torch's OutOfMemoryError is a RuntimeError; NumPy's and CuPy's are MemoryErrors
    oom = (MemoryError, getattr(getattr(lib, "torch", None), "OutOfMemoryError", MemoryError))
    try:
        z = _zeros(lib, x, tuple(big), where)
    except oom as exc:  # NumPy's, torch's or CuPy's: fusemath's class, naming what it was for
        raise _C.OutOfMemoryError(f"{where}: cannot allocate the zero-padded input of shape {tuple(big)} "
                                  f"(s / n): {exc}") from None
    z[tuple(slice(0, e) for e in x.shape)] = x
    return z


def _half_on_gpu(lib, x, execution: int) -> bool:
    """float16 stays half precision (cuFFT) for PyTorch CUDA tensors transformed on the GPU."""
    return (getattr(lib, "torch", None) is not None and execution != _C.EXECUTION_CPU
            and lib.device_of(x) >= 0)


def _promote(where: str, lib, x, kind: int, half: bool = False):
    """x in the dtype the transform takes (a copy when it changes), NumPy 2 rules: real and integer
    input as float32 / float64 (rfft) or complex64 / complex128; complex input as it is (the core
    says which it takes). With half, float16 stays half (float16 for rfft, complex32 otherwise)."""
    dt = lib.dtype_of(x)
    if getattr(dt, "kind", "") == "c":  # complex32 (PyTorch) too
        if kind == _R2C:
            raise TypeError(f"{where}: x has complex dtype {dt}; this transform (rfft, rfftn, ihfft) takes "
                            "real input (use fft for complex input)")
        return x
    if half and dt == _F16:
        return x if kind == _R2C else _astype(lib, x, _C32, where)
    if not isinstance(dt, np.dtype) or dt.kind not in "biuf":
        raise _C.DtypeError(f"{where}: x has dtype {dt}; supported: float16/32/64, longdouble, integers, "
                            "complex64/128, clongdouble")
    real = _F32 if dt in (_F16, _F32) else _LD if dt == _LD else _F64
    if real == _LD:  # long double stays long double (libfftw3l), as numpy.fft computes it
        return x if kind == _R2C else _astype(lib, x, _CLD, where)
    want = real if kind == _R2C else _C64 if real == _F32 else _C128
    return x if dt == want else _astype(lib, x, want, where)


# ---------------------------------------------------------------------------
# The fused prolog / epilog chains
# ---------------------------------------------------------------------------
_OP_SCALE, _OP_MULTIPLY, _OP_CONJ = _C.FFT_OP_SCALE, _C.FFT_OP_MULTIPLY, _C.FFT_OP_CONJ
_CHAIN_KEYS = ("scale", "multiply", "conj", "source", "name", "data")
_OP_CALLBACK = _C.FFT_OP_CALLBACK


class _Chain(NamedTuple):
    """One side's ops, scale, array (the multiply or the callback's data array: key) and callback."""

    ops: int = 0
    scale: Optional[complex] = None
    arr: Any = None
    source: Optional[str] = None
    name: Optional[str] = None
    key: str = "multiply"


_NO_CHAIN = _Chain()


def _chain(where: str, name: str, spec: Any, real_data: bool = False) -> _Chain:
    """A prolog / epilog dict -> _Chain; real_data: the data it is applied to is real (a complex scale
    is an error there)."""
    if spec is None:
        return _NO_CHAIN
    if not isinstance(spec, Mapping):
        raise TypeError(f"{where}: {name} must be a dict with keys among {list(_CHAIN_KEYS)}, "
                        f"not {type(spec).__name__}")
    unknown = [k for k in spec if k not in _CHAIN_KEYS]
    if unknown:
        raise _C.InvalidArgumentError(f"{where}: {name} has unknown keys {unknown}; expected some of "
                                      f"{list(_CHAIN_KEYS)}")
    ops = 0
    scale = spec.get("scale")
    if scale is not None:
        if isinstance(scale, (bool, str, bytes)):
            raise TypeError(f"{where}: {name}['scale'] must be a number, not {type(scale).__name__}")
        try:
            scale = complex(scale)
        except OverflowError:
            raise ValueError(f"{where}: {name}['scale'] is too large for a float64") from None
        except (TypeError, ValueError):
            raise TypeError(f"{where}: {name}['scale'] must be a number, not {type(scale).__name__}") from None
        if scale.imag != 0 and real_data:
            raise ValueError(f"{where}: {name}['scale'] = {scale} is complex but the data it scales is real")
        ops |= _OP_SCALE
    arr = spec.get("multiply")
    if arr is not None:
        ops |= _OP_MULTIPLY
        if getattr(arr, "ndim", None) == 0:  # a 0-d array broadcasts like a one-element one
            arr = arr.reshape(1)
        if isinstance(arr, np.ndarray):  # big-endian or misaligned: a native aligned copy, as x
            arr = native_aligned(arr)
    conj = spec.get("conj")
    if conj is None:  # absent, as for every other key
        conj = False
    if not isinstance(conj, (bool, np.bool_)):
        raise TypeError(f"{where}: {name}['conj'] must be a bool, not {type(conj).__name__}")
    if conj:
        ops |= _OP_CONJ
    source, fname, data = spec.get("source"), spec.get("name"), spec.get("data")
    if (source is None) != (fname is None):
        raise ValueError(f"{where}: {name} needs both 'source' and 'name' for a CUDA callback")
    if source is not None:  # the C layer takes str only
        ops |= _OP_CALLBACK
    if data is not None:
        if source is None:
            raise ValueError(f"{where}: {name}['data'] is only passed to a CUDA callback ('source' and 'name')")
        if arr is not None:
            raise ValueError(f"{where}: {name} has both 'multiply' and 'data'; the callback gets the multiply "
                             "array as its data pointer")
        arr = data
    key = "data" if source is not None else "multiply"  # as call() names the array
    return _Chain(ops, scale, arr, source, fname, key)


def check_libs(where: str, lib, out, pro: _Chain, epi: _Chain) -> None:
    """out and the chains' arrays of x's array library: the core checks their shapes, dtypes and
    memory but cannot tell libraries apart (a NumPy call must not return a GPU array, and NumPy
    results stay NumPy arrays); lists and other non-arrays are the core's to name."""
    for side, arr, key in (("out", out, None), ("prolog", pro.arr, pro.key), ("epilog", epi.arr, epi.key)):
        if arr is not None and lib_of(arr) is not (None if lib is NUMPY else lib):
            name = side if key is None else f"{side}[{key!r}]"
            raise TypeError(f"{where}: {name} must be an array of {lib.name} like x, not {type(arr).__name__}")
