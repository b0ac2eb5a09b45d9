"""The arguments, arrays and chains of a ``fusemath.fft`` transform: the C library's transform
kinds and norm codes; numpy.fft's ``norm``, ``n`` / ``s`` and ``axis`` / ``axes`` as normalised
axes and lengths (numpy's errors); x from the caller's library (NumPy, PyTorch, CuPy, other GPU
arrays, lists), cropped or zero-padded, promoted (NumPy 2 rules, half precision on PyTorch CUDA
tensors); results made in x's library on its device; the dtype tables (real <-> complex of each
precision); the fused prolog / epilog dicts (``scale``, ``multiply``, ``conj``, a CUDA
``source`` / ``name`` / ``data`` callback) as the C library takes them, their arrays checked.
"""
from __future__ import annotations

import operator
from typing import Any, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import _fusemath as _C
from ._arrays import C32 as _C32
from ._arrays import NUMPY, adopt, fm_name, int_arg, is_cuda_object, lib_of
from ._matmul_args import native_aligned

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
        raise ValueError(f'{where}: invalid norm value {norm!r}; should be "backward", "ortho" or "forward"') from None


def _length(n: Any, name: str, where: str, keep: Optional[int] = None) -> int:
    """n as a transform length; with keep (the input's extent), -1 means keep it (NumPy 2's s[i])."""
    v = int_arg(n, name, where)  # bools refused, as NumPy does
    if v == -1 and keep is not None:
        v = keep
    if v < 1:
        raise ValueError(f"{where}: invalid number of FFT data points ({v}) specified in {name}; expected >= 1")
    if v > _MAX_POINTS:
        raise ValueError(f"{where}: {name} = {v} is too large (at most 2**58 points: a result must be addressable "
                         "in bytes)")
    return v


_MAX_POINTS = 1 << 58  # 16-byte elements within a signed 64-bit byte count


def _axes(axes: Any, ndim: int, name: str, where: str) -> Tuple[int, ...]:
    """Normalised axes (0 <= a < ndim), distinct."""
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
            raise np.exceptions.AxisError(
                f"{where}: {name} contains axis {a}, out of bounds for an array of dimension {ndim}")
        a %= ndim
        if a in out:
            raise ValueError(f"{where}: {name} repeats axis {a}; each axis may be transformed once")
        out.append(a)
    return tuple(out)


def _cook(where: str, x, s: Any, axes: Any, default_axes: Optional[Tuple[int, ...]], kind: int,
          one_d: bool) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    """(axes, transform lengths n) as numpy.fft's _cook_nd_args."""
    ndim = x.ndim
    sname, aname = ("n", "axis") if one_d else ("s", "axes")
    if ndim == 0:
        raise ValueError(f"{where}: x is 0-d; the FFT needs at least one dimension")
    if s is not None and (isinstance(s, (str, bytes)) or not hasattr(s, "__iter__")):
        raise TypeError(f"{where}: {sname} must be a sequence of ints, not {type(s).__name__}")
    if s is not None:
        s = list(s)
    if axes is None:
        if s is not None:
            axes = range(ndim - len(s), ndim)
            if len(s) > ndim:
                raise ValueError(f"{where}: {sname} has {len(s)} entries but x has only {ndim} dimensions")
        elif default_axes is not None:
            axes = default_axes
        else:
            axes = range(ndim)
    axes = _axes(axes, ndim, aname, where)
    if not axes:
        raise ValueError(f"{where}: {aname if s is None or len(s) else sname} is empty: there is nothing to "
                         "transform (give at least one axis)")
    if s is None:
        s = [None] * len(axes)
    if len(s) != len(axes):
        raise ValueError(f"{where}: {sname} and {aname} must have the same length ({len(s)} != {len(axes)})")
    n = []
    for i, (a, v) in enumerate(zip(axes, s)):
        if v is None:
            m = x.shape[a]
            v = 2 * (m - 1) if kind == _C2R and i == len(axes) - 1 else m
            if v < 1:
                raise ValueError(f"{where}: invalid number of FFT data points ({v}) along axis {a} "
                                 f"(x has extent {m} there)"
                                 + ("; irfft needs an input length >= 2 or an explicit n" if kind == _C2R else ""))
        else:
            v = _length(v, sname if one_d else f"{sname}[{i}]", where, keep=None if one_d else x.shape[a])
        n.append(v)
    return axes, tuple(n)


_F16, _F32, _F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
_C64, _C128 = np.dtype(np.complex64), np.dtype(np.complex128)
_COMPLEX_OF = {_F16: _C32, _F32: _C64, _F64: _C128}
_REAL_OF = {_C32: _F16, _C64: _F32, _C128: _F64}


# ---------------------------------------------------------------------------
# Arrays
# ---------------------------------------------------------------------------
def _input(x: Any, name: str, where: str):
    """(lib, array): PyTorch / CuPy arrays as they are, other GPU arrays viewed through
    CuPy / PyTorch, anything else as a NumPy array (lists too, as numpy.fft accepts); at most
    8 dimensions (FM_MAX_NDIM)."""
    lib, arr = _input_any(x, name, where)
    if len(arr.shape) > 8:
        raise _C.ShapeError(f"{where}: {name} has {len(arr.shape)} dimensions; at most 8 are supported")
    return lib, arr


def _input_any(x: Any, name: str, where: str):
    if type(x) is np.ndarray:
        return NUMPY, _native(x)
    if isinstance(x, np.ndarray):
        return NUMPY, _native(x.view(np.ndarray))
    if x is None:
        raise TypeError(f"{where}: {name} must be an array, not None")
    lib = lib_of(x)
    if lib is not None:
        return lib, x
    if is_cuda_object(x):
        return adopt(x, name, where)
    dlpack_error = None
    if hasattr(x, "__dlpack__") and not isinstance(x, (list, tuple)):
        try:
            return NUMPY, np.from_dlpack(x)
        except (BufferError, TypeError, ValueError, RuntimeError) as exc:
            dlpack_error = exc  # NumPy may still read it another way (the buffer protocol)
    why = f" (its __dlpack__ failed: {type(dlpack_error).__name__}: {dlpack_error})" if dlpack_error else ""
    try:
        arr = np.asarray(x)
    except Exception as exc:
        raise TypeError(f"{where}: {name} must be an array, not {type(x).__name__} ({exc}){why}") from None
    if arr.dtype == object:
        raise TypeError(f"{where}: {name} must be a numeric array, not {type(x).__name__} of objects{why}")
    return NUMPY, _native(arr)


# big-endian or misaligned data computes from a native, aligned copy, as numpy.fft does
_native = native_aligned


def _dtype(lib, x) -> np.dtype:
    return x.dtype if lib is NUMPY else lib.dtype_of(x)


def _astype(lib, x, dtype: np.dtype, where: str):
    """x converted to dtype in its own library (a copy)."""
    if lib is NUMPY:
        return x.astype(dtype)
    torch = getattr(lib, "torch", None)
    if torch is not None and hasattr(x, "to"):
        return x.to(getattr(torch, dtype.name))
    if hasattr(x, "astype"):
        return x.astype(dtype)
    raise _C.DtypeError(f"{where}: x has dtype {_dtype(lib, x)}; convert it to {dtype} first")


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
    z = _zeros(lib, x, tuple(big), where)
    z[tuple(slice(0, e) for e in x.shape)] = x
    return z


def _contiguous(lib, a):
    """A C-contiguous copy of a GPU array (of its own library)."""
    if hasattr(a, "contiguous"):  # torch
        return a.contiguous()
    return lib.cupy.ascontiguousarray(a)


def _is_contiguous(a) -> bool:
    """A GPU array (of its own library) in C order."""
    test = getattr(a, "is_contiguous", None)  # torch
    if test is not None:
        return bool(test())
    flags = getattr(a, "flags", None)  # cupy
    return flags is None or bool(flags.c_contiguous)


def _copy_into(lib, dst, src) -> None:
    if hasattr(dst, "copy_"):  # torch
        dst.copy_(src)
    else:
        dst[...] = src


def _half_on_gpu(lib, x, execution: int) -> bool:
    """float16 stays half precision (cuFFT) for PyTorch CUDA tensors transformed on the GPU."""
    return (getattr(lib, "torch", None) is not None and execution != _C.EXECUTION_CPU
            and lib.device_of(x) >= 0)


def _promote(where: str, lib, x, kind: int, half: bool = False):
    """x in the dtype the transform takes (a copy when it changes), NumPy 2 rules; with half,
    float16 stays half (float16 for rfft, complex32 otherwise)."""
    dt = _dtype(lib, x)
    if dt is _C32:  # PyTorch only; the cpu refuses it with NotSupportedError
        if kind == _R2C:
            raise TypeError(f"{where}: x has complex dtype {dt}; this transform (rfft, rfftn, ihfft) takes "
                            "real input (use fft for complex input)")
        return x, dt
    if half and dt == _F16:
        want = _F16 if kind == _R2C else _C32
        return (x if dt == want else _astype(lib, x, want, where)), want
    if getattr(dt, "kind", "?") not in "biufc" or not isinstance(dt, np.dtype):
        raise _C.DtypeError(f"{where}: x has dtype {dt}, which the FFT does not take")
    if dt.kind == "c":
        if kind == _R2C:
            raise TypeError(f"{where}: x has complex dtype {dt}; this transform (rfft, rfftn, ihfft) takes "
                            "real input (use fft for complex input)")
        if dt not in (_C64, _C128):
            raise _C.DtypeError(f"{where}: x has dtype {dt}; supported: complex64, complex128")
        return x, dt
    if dt.kind == "f" and dt.itemsize > 8:
        raise _C.DtypeError(f"{where}: x has dtype {dt}; supported: float16/32/64, integers, complex64/128")
    real = _F32 if dt in (_F16, _F32) else _F64
    want = real if kind == _R2C else _COMPLEX_OF[real]
    return (x if dt == want else _astype(lib, x, want, where)), want


def _out_dtype(kind: int, in_dtype: np.dtype) -> np.dtype:
    if kind == _R2C:
        return _COMPLEX_OF[in_dtype]
    if kind == _C2R:
        return _REAL_OF[in_dtype]
    return in_dtype


def _check_out(where: str, lib, out) -> None:
    """out of x's array library (the core checks its shape, dtype and memory; it cannot tell libraries apart:
    a NumPy call must not return a GPU array, and NumPy results stay NumPy arrays)."""
    if lib_of(out) is not (None if lib is NUMPY else lib):  # NumPy: no torch / CuPy out (lists: the core says)
        raise TypeError(f"{where}: out must be an array of {lib.name} like x, not {type(out).__name__}")


def check_empty_out(where: str, lib, out, shape, dtype) -> None:
    """out= of an empty transform, which makes no core call that would check it."""
    if lib is NUMPY and not isinstance(out, np.ndarray):
        raise TypeError(f"{where}: out must be a NumPy array like x, not {type(out).__name__}")
    if tuple(out.shape) != tuple(shape):
        raise _C.ShapeError(f"{where}: out has shape {tuple(out.shape)}, expected {tuple(shape)}")
    if _dtype(lib, out) != dtype:
        raise _C.DtypeError(f"{where}: out has dtype {_dtype(lib, out)}, expected {dtype}")
    if lib is NUMPY and not out.flags.writeable:
        raise _C.InvalidArgumentError(f"{where}: out is read-only; an output must be writable")


def _empty(lib, shape, dtype, device: int):
    if lib is NUMPY:
        return np.empty(shape, dtype)
    return _C.lib_empty(lib.index, tuple(shape), fm_name(dtype), device)


# ---------------------------------------------------------------------------
# The fused prolog / epilog chains
# ---------------------------------------------------------------------------
_OP_SCALE, _OP_MULTIPLY, _OP_CONJ = _C.FFT_OP_SCALE, _C.FFT_OP_MULTIPLY, _C.FFT_OP_CONJ
_CHAIN_KEYS = ("scale", "multiply", "conj", "source", "name", "data")
_OP_CALLBACK = _C.FFT_OP_CALLBACK


class _Chain(tuple):
    """(ops, scale, array, source, name) of one side; array is the multiply or the data array."""
    __slots__ = ()

    def __new__(cls, ops=0, scale=None, arr=None, source=None, name=None):
        return super().__new__(cls, (ops, scale, arr, source, name))

    ops = property(lambda self: self[0])
    scale = property(lambda self: self[1])
    arr = property(lambda self: self[2])
    source = property(lambda self: self[3])
    name = property(lambda self: self[4])

    @property
    def multiplies(self) -> bool:
        return bool(self[0] & _OP_MULTIPLY)

    @property
    def array_key(self) -> str:
        """The dict key the caller passed the array under."""
        return "data" if self[0] & _OP_CALLBACK else "multiply"


CHAIN_SLOTS = ("prolog_array", "epilog_array")  # the C layer's names of the chains' arrays


def restated(where: str, exc: Exception, pro: "_Chain", epi: "_Chain") -> Exception:
    """The library's error in the caller's words, same exception type: `where` first, and the
    chains' arrays named as the caller passed them (prolog['multiply'] or prolog['data']), not by
    the C layer's slot names."""
    msg = str(exc)
    for slot, side, chain in zip(CHAIN_SLOTS, ("prolog", "epilog"), (pro, epi)):
        msg = msg.replace(slot, f"{side}[{chain.array_key!r}]")
    return type(exc)(msg if msg.startswith(where + ": ") else f"{where}: {msg}")


_NO_CHAIN = _Chain()


def _chain(where: str, name: str, spec: Any) -> _Chain:
    """A prolog / epilog dict -> _Chain."""
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
        if not (np.isfinite(scale.real) and np.isfinite(scale.imag)):
            raise ValueError(f"{where}: {name}['scale'] = {scale} is not finite")
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
    if source is not None:
        for key, v in (("source", source), ("name", fname)):
            if not isinstance(v, str):
                raise TypeError(f"{where}: {name}[{key!r}] must be a str, not {type(v).__name__}")
        ops |= _OP_CALLBACK
    if data is not None:
        if source is None:
            raise ValueError(f"{where}: {name}['data'] is only passed to a CUDA callback ('source' and 'name')")
        if arr is not None:
            raise ValueError(f"{where}: {name} has both 'multiply' and 'data'; the callback gets the multiply "
                             "array as its data pointer")
        arr = data
    return _Chain(ops, scale, arr, source, fname)


def _check_chain_array(where: str, name: str, lib, arr, target_shape, data_dtype: np.dtype):
    """The multiply array of a chain: same library, dtype of the data's precision, broadcasting."""
    key = f"{name}['multiply']"
    if lib is NUMPY:
        if not isinstance(arr, np.ndarray):
            if lib_of(arr) is not None or is_cuda_object(arr):
                raise _C.DeviceError(f"{where}: {key} is a {type(arr).__name__} but x is a NumPy array")
            raise TypeError(f"{where}: {key} must be an array, not {type(arr).__name__}")
        dt = arr.dtype
    else:
        if lib_of(arr) is not lib:
            raise TypeError(f"{where}: {key} must be an array of {lib.name} like x, not {type(arr).__name__}")
        dt = lib.dtype_of(arr)
    real = _REAL_OF.get(data_dtype, data_dtype)
    if data_dtype.kind == "c":
        ok, want = (real, _COMPLEX_OF[real]), f"{real} or {_COMPLEX_OF[real]}"
    else:
        ok, want = (real,), f"{real} (the data it multiplies is real)"
    if dt not in ok:
        raise _C.DtypeError(f"{where}: {key} has dtype {dt}, expected {want}")
    shape = tuple(arr.shape)
    if len(shape) > len(target_shape) or any(
            a != t and a != 1 for a, t in zip(reversed(shape), reversed(target_shape))):
        raise _C.ShapeError(f"{where}: {key} has shape {shape}, which does not broadcast against the "
                            f"{'input' if name == 'prolog' else 'output'} shape {tuple(target_shape)}")


def _check_data_array(where: str, name: str, lib, arr) -> None:
    """A callback's data array: any dtype and shape, but x's library (and so its device)."""
    key = f"{name}['data']"
    if lib is NUMPY:
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"{where}: {key} must be an array like x, not {type(arr).__name__}")
    elif lib_of(arr) is not lib:
        raise TypeError(f"{where}: {key} must be an array of {lib.name} like x, not {type(arr).__name__}")


def _check_chain_arrays(where: str, lib, pro: _Chain, epi: _Chain, in_shape, in_dt, out_shape, out_dt) -> None:
    for name, ch, shape, dt in (("prolog", pro, in_shape, in_dt), ("epilog", epi, out_shape, out_dt)):
        if ch.arr is None:
            continue
        if ch.multiplies:
            _check_chain_array(where, name, lib, ch.arr, shape, dt)
        else:
            _check_data_array(where, name, lib, ch.arr)
