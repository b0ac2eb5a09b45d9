"""``fusemath.fft``: NumPy-compatible FFTs with fused prolog / epilog, and the :class:`FFT` planner.

    >>> import numpy as np, fusemath.fft as ff
    >>> x = np.random.rand(1024)
    >>> y = ff.rfft(x)                                   # == numpy.fft.rfft(x)
    >>> w = np.hanning(1024)
    >>> y = ff.rfft(x, prolog={"multiply": w}, epilog={"scale": 2.0})   # 2 * rfft(w * x), one pass
    >>> with ff.FFT(x.astype(complex)) as f:
    ...     f.plan(); y = f.execute(); z = f.execute(direction="inverse")

hfft / ihfft (numpy.fft's, the conjugation fused into the transform). Helpers as numpy.fft's:
fftfreq, rfftfreq (``like=`` an array: the result in its library and on
its device), fftshift, ifftshift (on the array's own library), so that code written against
numpy.fft runs unchanged.

Functions: fft, ifft, fft2, ifft2, fftn, ifftn, rfft, irfft, rfft2, irfft2, rfftn, irfftn with
numpy.fft's signatures (``n`` / ``s`` crop or zero-pad the input, ``axis`` / ``axes``,
``norm="backward" | "ortho" | "forward"``, ``out=``), plus the keywords

``prolog=`` / ``epilog=``: a dict ``{"scale": s, "multiply": array, "conj": bool}`` (any subset):
    the chain ``v -> conj?(v * scale * array)`` applied elementwise to the transform's input
    as it is loaded (prolog; after ``n`` / ``s`` padding or cropping) or to its output as it
    is stored (epilog; after the ``norm`` scaling). ``scale`` is a real or complex number;
    ``multiply`` an array of the data's precision (float32 / complex64 data take float32 or
    complex64, float64 / complex128 data float64 or complex128; real data - the input of
    rfft*, the output of irfft* - take a real array only) broadcasting against the input
    (prolog) or output (epilog) with NumPy rules; ``conj`` conjugates (ignored on real data).
    On GPU data a chain may also end with the caller's own CUDA C++ device function: keys
    ``"source"`` (the code) and ``"name"`` (the function), optionally ``"data"`` (an array of
    x's library handed to the function as a pointer, without being multiplied). Signature:
    ``__device__ T name(T x, unsigned long long offset, const void *data)`` with T float2
    (complex64 data), double2 (complex128), float (float32) or double (float64); offset is the
    element offset of x from the input's (prolog) or output's (epilog) data pointer (the flat
    index for C-contiguous arrays), data the "data" (or "multiply") array or NULL. It runs
    after scale / multiply / conj, compiled once with NVRTC into the cuFFT callback (cached on
    disk). A name the source does not define, or code that does not compile, raises
    InvalidArgumentError with the compiler's log; on NumPy data NotSupportedError.
``execution=``: None (where x lives), "cpu", "cuda", "cuda:N". ``stream=``: CUDA stream for
    GPU arrays (None: the array library's current stream).

Dtypes follow NumPy 2: float32 / float16 input gives complex64, float64 / integer / bool
input complex128; complex input to rfft* is a TypeError. Half precision stays half on PyTorch
CUDA tensors (cuFFT, as torch.fft does): float16 input gives torch.complex32, complex32 input
is taken as it is (irfft* gives float16); every transformed length must be a power of two, and
a prolog / epilog runs as a separate pass computing in float (a "source" function takes float2
/ float). NumPy and CuPy float16 input is promoted as above (neither has complex32); a complex32
tensor on the CPU raises NotSupportedError. Results are arrays of the input's
library (NumPy -> NumPy; PyTorch / CuPy arrays on their device once a backend for it exists).
Transforms over more than 3 axes run as several fused calls (prolog on the first, epilog on
the last).
"""
from __future__ import annotations

import operator
from typing import Any, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import _fusemath as _C
from ._arrays import C32 as _C32
from ._arrays import NUMPY, adopt, fm_name, is_cuda_object, lib_of
from ._options import _DEFAULT_OPTIONS, _resolve_execution

__all__ = [
    "fft", "ifft", "fft2", "ifft2", "fftn", "ifftn",
    "rfft", "irfft", "rfft2", "irfft2", "rfftn", "irfftn", "hfft", "ihfft",
    "fftfreq", "rfftfreq", "fftshift", "ifftshift",
    "FFT",
]

_C2C, _R2C, _C2R = _C.FFT_C2C, _C.FFT_R2C, _C.FFT_C2R
_KINDS = {"c2c": _C2C, "r2c": _R2C, "c2r": _C2R}
_KIND_NAMES = {v: k for k, v in _KINDS.items()}
_NORMS = {None: _C.FFT_NORM_BACKWARD, "backward": _C.FFT_NORM_BACKWARD, "ortho": _C.FFT_NORM_ORTHO,
          "forward": _C.FFT_NORM_FORWARD}
_EFFORTS = {"estimate": _C.FFT_EFFORT_ESTIMATE, "measure": _C.FFT_EFFORT_MEASURE,
            "patient": _C.FFT_EFFORT_PATIENT}
_GPU_PROLOG = {"auto": _C.FFT_PROLOG_AUTO, "pass": _C.FFT_PROLOG_PASS, "callback": _C.FFT_PROLOG_CALLBACK}
_OP_SCALE, _OP_MULTIPLY, _OP_CONJ = _C.FFT_OP_SCALE, _C.FFT_OP_MULTIPLY, _C.FFT_OP_CONJ
_CHAIN_KEYS = ("scale", "multiply", "conj", "source", "name", "data")
_OP_CALLBACK = _C.FFT_OP_CALLBACK
_MAX_AXES = 3  # per library call

_F16, _F32, _F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
_C64, _C128 = np.dtype(np.complex64), np.dtype(np.complex128)
_COMPLEX_OF = {_F16: _C32, _F32: _C64, _F64: _C128}
_REAL_OF = {_C32: _F16, _C64: _F32, _C128: _F64}


# ---------------------------------------------------------------------------
# Arrays
# ---------------------------------------------------------------------------
def _input(x: Any, name: str, where: str):
    """(lib, array): PyTorch / CuPy arrays as they are, other GPU arrays viewed through
    CuPy / PyTorch, anything else as a NumPy array (lists too, as numpy.fft accepts)."""
    if type(x) is np.ndarray:
        return NUMPY, x
    if isinstance(x, np.ndarray):
        return NUMPY, x.view(np.ndarray)
    if x is None:
        raise TypeError(f"{where}: {name} must be an array, not None")
    lib = lib_of(x)
    if lib is not None:
        return lib, x
    if is_cuda_object(x):
        return adopt(x, name, where)
    if hasattr(x, "__dlpack__") and not isinstance(x, (list, tuple)):
        try:
            return NUMPY, np.from_dlpack(x)
        except (BufferError, TypeError, ValueError, RuntimeError):
            pass
    try:
        arr = np.asarray(x)
    except Exception as exc:
        raise TypeError(f"{where}: {name} must be an array, not {type(x).__name__} ({exc})") from None
    if arr.dtype == object:
        raise TypeError(f"{where}: {name} must be a numeric array, not {type(x).__name__} of objects")
    return NUMPY, arr


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


# ---------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------
def _norm_code(norm: Any, where: str) -> int:
    try:
        return _NORMS[norm]
    except (KeyError, TypeError):
        raise ValueError(f'{where}: invalid norm value {norm!r}; should be "backward", "ortho" or "forward"') from None


def _length(n: Any, name: str, where: str) -> int:
    try:
        v = operator.index(n)
    except TypeError:
        raise TypeError(f"{where}: {name} must be an int, not {type(n).__name__}") from None
    if v < 1:
        raise ValueError(f"{where}: invalid number of FFT data points ({v}) specified in {name}; expected >= 1")
    return v


def _axes(axes: Any, ndim: int, name: str, where: str) -> Tuple[int, ...]:
    """Normalised axes (0 <= a < ndim), distinct."""
    if isinstance(axes, (str, bytes)) or not hasattr(axes, "__iter__"):
        raise TypeError(f"{where}: {name} must be a sequence of ints, not {type(axes).__name__}")
    out = []
    for a in axes:
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
            v = _length(v, sname if one_d else f"{sname}[{i}]", where)
        n.append(v)
    return axes, tuple(n)


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
        except (TypeError, ValueError):
            raise TypeError(f"{where}: {name}['scale'] must be a number, not {type(scale).__name__}") from None
        if not (np.isfinite(scale.real) and np.isfinite(scale.imag)):
            raise ValueError(f"{where}: {name}['scale'] = {scale} is not finite")
        ops |= _OP_SCALE
    arr = spec.get("multiply")
    if arr is not None:
        ops |= _OP_MULTIPLY
    conj = spec.get("conj", False)
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


def _contiguous(lib, a):
    """A C-contiguous copy of a GPU array (of its own library)."""
    if hasattr(a, "contiguous"):  # torch
        return a.contiguous()
    return lib.cupy.ascontiguousarray(a)


def _copy_into(lib, dst, src) -> None:
    if hasattr(dst, "copy_"):  # torch
        dst.copy_(src)
    else:
        dst[...] = src


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
            raise TypeError(f"{where}: x has complex dtype {dt}; rfft takes real input (use fft for complex "
                            "input)")
        return x, dt
    if half and dt == _F16:
        want = _F16 if kind == _R2C else _C32
        return (x if dt == want else _astype(lib, x, want, where)), want
    if getattr(dt, "kind", "?") not in "biufc" or not isinstance(dt, np.dtype):
        raise _C.DtypeError(f"{where}: x has dtype {dt}, which the FFT does not take")
    if dt.kind == "c":
        if kind == _R2C:
            raise TypeError(f"{where}: x has complex dtype {dt}; rfft takes real input (use fft for complex "
                            "input)")
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


def _check_out(where: str, lib, out, shape, dtype):
    if lib is NUMPY:
        if not isinstance(out, np.ndarray):
            raise TypeError(f"{where}: out must be a NumPy array like x, not {type(out).__name__}")
        odt = out.dtype
        if not out.flags.writeable:
            raise ValueError(f"{where}: out is read-only")
    else:
        if lib_of(out) is not lib:
            raise TypeError(f"{where}: out must be an array of {lib.name} like x, not {type(out).__name__}")
        odt = lib.dtype_of(out)
    if tuple(out.shape) != tuple(shape):
        raise _C.ShapeError(f"{where}: out has shape {tuple(out.shape)}, expected {tuple(shape)}")
    if odt != dtype:
        raise _C.DtypeError(f"{where}: out has dtype {odt}, expected {dtype}")


def _empty(lib, shape, dtype, device: int):
    if lib is NUMPY:
        return np.empty(shape, dtype)
    return _C.lib_empty(lib.index, tuple(shape), fm_name(dtype), device)


def _groups(axes: Tuple[int, ...], kind: int):
    """Split the axes into library calls of at most 3 axes, in execution order: (kind, axes).
    r2c: the real-to-complex call (with the last axis) first; c2r: the complex-to-real one last."""
    if len(axes) <= _MAX_AXES:
        return [(kind, axes)]
    if kind == _R2C:
        head, rest = axes[-_MAX_AXES:], axes[:-_MAX_AXES]
        return [(_R2C, head)] + [(_C2C, rest[i:i + _MAX_AXES]) for i in range(0, len(rest), _MAX_AXES)]
    if kind == _C2R:
        tail, rest = axes[-_MAX_AXES:], axes[:-_MAX_AXES]
        return [(_C2C, rest[i:i + _MAX_AXES]) for i in range(0, len(rest), _MAX_AXES)] + [(_C2R, tail)]
    return [(_C2C, axes[i:i + _MAX_AXES]) for i in range(0, len(axes), _MAX_AXES)]


# ---------------------------------------------------------------------------
# The common driver
# ---------------------------------------------------------------------------
_FAST_DTYPES = {_C2C: (np.dtype(np.complex64), np.dtype(np.complex128)),
                _R2C: (np.dtype(np.float32), np.dtype(np.float64)),
                _C2R: (np.dtype(np.complex64), np.dtype(np.complex128))}


def _run_plain(where: str, x: np.ndarray, axes: Any, norm: Any, kind: int, inverse: bool):
    """A NumPy array of the transform's own dtype, no n / s, out, chain or execution, at most
    three distinct int axes (None: all): one C call after the checks such a call can fail (a
    cached plan makes the rest ~2 us). None when the call needs the general path, which then
    checks and explains."""
    if x.dtype not in _FAST_DTYPES[kind] or x.ndim == 0 or x.size == 0:
        return None
    nd = x.ndim
    if axes is None:
        axes = range(nd)
    elif type(axes) not in (list, tuple):
        return None
    if not 1 <= len(axes) <= _MAX_AXES:
        return None
    norm_axes = []
    for a in axes:
        if type(a) is not int or not -nd <= a < nd:
            return None  # the general path raises numpy's errors
        a %= nd
        if a in norm_axes:
            return None
        norm_axes.append(a)
    shape = list(x.shape)
    last = norm_axes[-1]
    if kind == _R2C:
        shape[last] = shape[last] // 2 + 1
    elif kind == _C2R:
        if shape[last] < 2:
            return None  # n = 2 (m - 1) < 1: the general path says so
        shape[last] = 2 * (shape[last] - 1)
    return _C.fft_execute(NUMPY.index, x, None, None, None, kind, inverse, tuple(norm_axes), _norm_code(norm, where),
                          _C.FFT_EFFORT_ESTIMATE, _C.EXECUTION_AUTO, 0, 0, 0, None, 0, None, None, None, None,
                          None, tuple(shape), None)


def _run(where: str, a: Any, s: Any, axes: Any, norm: Any, out: Any, prolog: Any, epilog: Any, *, kind: int,
         inverse: bool, one_d: bool, default_axes=None, execution: Any = None, stream: Any = None):
    if (type(a) is np.ndarray and s is None and out is None and prolog is None and epilog is None
            and execution is None and stream is None and default_axes is None):
        res = _run_plain(where, a, axes, norm, kind, inverse)
        if res is not None:
            return res
    lib, x = _input(a, "x", where)
    norm_code = _norm_code(norm, where)
    pro = _chain(where, "prolog", prolog)
    epi = _chain(where, "epilog", epilog)
    pro_ops, pro_scale, pro_arr = pro[:3]
    epi_ops, epi_scale, epi_arr = epi[:3]
    ex, dev_id, nth, _ = _resolve_execution(execution, _DEFAULT_OPTIONS, where)
    if not one_d and axes is not None and hasattr(axes, "__len__") and len(axes) == 0 and not s:
        # numpy: an empty axes list transforms nothing (a copy of x)
        return np.array(x, copy=True) if lib is NUMPY else x.clone() if hasattr(x, "clone") else x.copy()
    axes_t, n = _cook(where, x, s, axes, default_axes, kind, one_d)
    # input lengths, then the transform's dtype
    in_len = list(n)
    if kind == _C2R:
        in_len[-1] = n[-1] // 2 + 1
    x = _resize(lib, x, axes_t, in_len, where)
    x, in_dt = _promote(where, lib, x, kind, _half_on_gpu(lib, x, ex))
    out_dt = _out_dtype(kind, in_dt)
    out_shape = list(x.shape)
    for ax, v in zip(axes_t, n):
        out_shape[ax] = v
    if kind == _R2C:
        out_shape[axes_t[-1]] = n[-1] // 2 + 1
    out_shape = tuple(out_shape)
    _check_chain_arrays(where, lib, pro, epi, tuple(x.shape), in_dt, out_shape, out_dt)
    if pro_scale is not None and pro_scale.imag != 0 and kind == _R2C:
        raise ValueError(f"{where}: prolog['scale'] = {pro_scale} is complex but rfft's input is real")
    if epi_scale is not None and epi_scale.imag != 0 and kind == _C2R:
        raise ValueError(f"{where}: epilog['scale'] = {epi_scale} is complex but irfft's output is real")
    if out is not None:
        _check_out(where, lib, out, out_shape, out_dt)
    device = -1 if lib is NUMPY else lib.device_of(x)
    if 0 in out_shape:  # an empty batch: nothing to transform
        return out if out is not None else _empty(lib, out_shape, out_dt, device)
    groups = _groups(axes_t, kind)
    src = x
    for gi, (gkind, gaxes) in enumerate(groups):
        first, last = gi == 0, gi == len(groups) - 1
        if gkind == _C2R:
            dst, dshape = out, out_shape
        elif kind == _C2R:  # the complex stages before the c2r one: a new intermediate, then in place
            dst, dshape = (None if first else src), tuple(src.shape)
        elif first:
            dst, dshape = out, out_shape
        else:  # c2c stages after the first: in place
            dst, dshape = src, out_shape
        args = (pro_arr if first else None, epi_arr if last else None,
                gkind, inverse, gaxes, norm_code, _C.FFT_EFFORT_ESTIMATE, ex, dev_id, nth,
                pro_ops if first else 0, pro_scale if first else None,
                epi_ops if last else 0, epi_scale if last else None,
                pro.source if first else None, pro.name if first else None,
                epi.source if last else None, epi.name if last else None,
                dshape, stream)
        try:
            try:
                res = _C.fft_execute(lib.index, src, dst, *args)
            except _C.NotSupportedError as exc:
                # cuFFT takes nested positive strides only: transform a contiguous copy
                if lib is NUMPY or "contiguous" not in str(exc):
                    raise
                res = _C.fft_execute(lib.index, _contiguous(lib, src), None, *args)
                if dst is not None:
                    _copy_into(lib, dst, res)
                    res = dst
        except _C.AliasError as exc:
            raise _C.AliasError(f"{where}: out overlaps the input ({exc})") from None
        src = res
    return src


# ---------------------------------------------------------------------------
# numpy.fft functions
# ---------------------------------------------------------------------------
def fft(a, n=None, axis=-1, norm=None, out=None, *, prolog=None, epilog=None, execution=None, stream=None):
    """1-D discrete Fourier transform, as ``numpy.fft.fft`` (plus ``prolog`` / ``epilog``)."""
    return _run("fusemath.fft.fft", a, None if n is None else [n], [axis], norm, out, prolog, epilog,
                kind=_C2C, inverse=False, one_d=True, execution=execution, stream=stream)


def ifft(a, n=None, axis=-1, norm=None, out=None, *, prolog=None, epilog=None, execution=None, stream=None):
    """1-D inverse discrete Fourier transform, as ``numpy.fft.ifft``."""
    return _run("fusemath.fft.ifft", a, None if n is None else [n], [axis], norm, out, prolog, epilog,
                kind=_C2C, inverse=True, one_d=True, execution=execution, stream=stream)


def fft2(a, s=None, axes=(-2, -1), norm=None, out=None, *, prolog=None, epilog=None, execution=None,
         stream=None):
    """2-D discrete Fourier transform, as ``numpy.fft.fft2``."""
    return _run("fusemath.fft.fft2", a, s, axes, norm, out, prolog, epilog, kind=_C2C, inverse=False,
                one_d=False, execution=execution, stream=stream)


def ifft2(a, s=None, axes=(-2, -1), norm=None, out=None, *, prolog=None, epilog=None, execution=None,
          stream=None):
    """2-D inverse discrete Fourier transform, as ``numpy.fft.ifft2``."""
    return _run("fusemath.fft.ifft2", a, s, axes, norm, out, prolog, epilog, kind=_C2C, inverse=True,
                one_d=False, execution=execution, stream=stream)


def fftn(a, s=None, axes=None, norm=None, out=None, *, prolog=None, epilog=None, execution=None, stream=None):
    """N-D discrete Fourier transform, as ``numpy.fft.fftn`` (any number of axes)."""
    return _run("fusemath.fft.fftn", a, s, axes, norm, out, prolog, epilog, kind=_C2C, inverse=False,
                one_d=False, execution=execution, stream=stream)


def ifftn(a, s=None, axes=None, norm=None, out=None, *, prolog=None, epilog=None, execution=None, stream=None):
    """N-D inverse discrete Fourier transform, as ``numpy.fft.ifftn``."""
    return _run("fusemath.fft.ifftn", a, s, axes, norm, out, prolog, epilog, kind=_C2C, inverse=True,
                one_d=False, execution=execution, stream=stream)


def rfft(a, n=None, axis=-1, norm=None, out=None, *, prolog=None, epilog=None, execution=None, stream=None):
    """1-D FFT of real input, as ``numpy.fft.rfft``: length n -> n // 2 + 1. Complex input: TypeError."""
    return _run("fusemath.fft.rfft", a, None if n is None else [n], [axis], norm, out, prolog, epilog,
                kind=_R2C, inverse=False, one_d=True, execution=execution, stream=stream)


def irfft(a, n=None, axis=-1, norm=None, out=None, *, prolog=None, epilog=None, execution=None, stream=None):
    """Inverse of rfft, as ``numpy.fft.irfft``: output length n (default 2 * (m - 1)); the input
    is cropped or zero-padded to n // 2 + 1 along axis."""
    return _run("fusemath.fft.irfft", a, None if n is None else [n], [axis], norm, out, prolog, epilog,
                kind=_C2R, inverse=True, one_d=True, execution=execution, stream=stream)


def rfft2(a, s=None, axes=(-2, -1), norm=None, out=None, *, prolog=None, epilog=None, execution=None,
          stream=None):
    """2-D FFT of real input, as ``numpy.fft.rfft2`` (the last axis is halved)."""
    return _run("fusemath.fft.rfft2", a, s, axes, norm, out, prolog, epilog, kind=_R2C, inverse=False,
                one_d=False, execution=execution, stream=stream)


def irfft2(a, s=None, axes=(-2, -1), norm=None, out=None, *, prolog=None, epilog=None, execution=None,
           stream=None):
    """Inverse of rfft2, as ``numpy.fft.irfft2``."""
    return _run("fusemath.fft.irfft2", a, s, axes, norm, out, prolog, epilog, kind=_C2R, inverse=True,
                one_d=False, execution=execution, stream=stream)


def rfftn(a, s=None, axes=None, norm=None, out=None, *, prolog=None, epilog=None, execution=None, stream=None):
    """N-D FFT of real input, as ``numpy.fft.rfftn`` (the last of axes is halved)."""
    return _run("fusemath.fft.rfftn", a, s, axes, norm, out, prolog, epilog, kind=_R2C, inverse=False,
                one_d=False, execution=execution, stream=stream)


def irfftn(a, s=None, axes=None, norm=None, out=None, *, prolog=None, epilog=None, execution=None,
           stream=None):
    """Inverse of rfftn, as ``numpy.fft.irfftn`` (the last of axes has output length s[-1],
    default 2 * (m - 1))."""
    return _run("fusemath.fft.irfftn", a, s, axes, norm, out, prolog, epilog, kind=_C2R, inverse=True,
                one_d=False, execution=execution, stream=stream)


_SWAPPED_NORM = {None: "forward", "backward": "forward", "ortho": "ortho", "forward": "backward"}


def _swapped_norm(norm: Any, where: str) -> str:
    _norm_code(norm, where)  # an unknown norm is an error naming it
    return _SWAPPED_NORM[norm]


def hfft(a, n=None, axis=-1, norm=None, out=None, *, execution=None, stream=None):
    """FFT of a signal with Hermitian symmetry, given by its first half (a real spectrum), as
    ``numpy.fft.hfft``: ``irfft(conj(a), n, norm=<swapped>)``, the conjugation fused into the
    transform as a prolog (one call, no conjugated copy). Output length n along axis (default
    2 * (m - 1)), real."""
    where = "fusemath.fft.hfft"
    return _run(where, a, None if n is None else [n], [axis], _swapped_norm(norm, where), out, {"conj": True}, None,
                kind=_C2R, inverse=True, one_d=True, execution=execution, stream=stream)


def ihfft(a, n=None, axis=-1, norm=None, out=None, *, execution=None, stream=None):
    """Inverse of :func:`hfft`, as ``numpy.fft.ihfft``: ``conj(rfft(a, n, norm=<swapped>))``,
    the conjugation fused into the transform as an epilog. Real input; n // 2 + 1 complex
    outputs along axis."""
    where = "fusemath.fft.ihfft"
    return _run(where, a, None if n is None else [n], [axis], _swapped_norm(norm, where), out, None, {"conj": True},
                kind=_R2C, inverse=False, one_d=True, execution=execution, stream=stream)


# ---------------------------------------------------------------------------
# Helpers (numpy.fft's, on the caller's array library)
# ---------------------------------------------------------------------------
def _freq(where: str, n: Any, d: Any, device: Any, like: Any, real: bool):
    if isinstance(n, (bool, np.bool_)):
        raise TypeError(f"{where}: n must be an int, not bool")
    n = _length(n, "n", where)
    if device not in (None, "cpu"):
        raise ValueError(f"{where}: device {device!r} is not supported (None or 'cpu', as numpy.fft; "
                         "for a GPU array pass like=x)")
    try:
        if isinstance(d, (str, bytes, bool, np.bool_)):
            raise TypeError
        d = float(np.asarray(d, dtype=np.float64).reshape(()))  # a number, or an array of one
    except (TypeError, ValueError):
        raise TypeError(f"{where}: d (the sample spacing) must be a real number, not {type(d).__name__}") from None
    if not d or not np.isfinite(d):
        raise ValueError(f"{where}: d (the sample spacing) is {d}; expected a finite, nonzero number")
    ref = np.fft.rfftfreq(n, d) if real else np.fft.fftfreq(n, d)
    if like is None:
        return ref
    lib, x = _input(like, "like", where)
    if lib is NUMPY:
        return ref
    if lib.name == "torch":
        t = lib.torch
        return t.as_tensor(ref, device=x.device)
    cp = lib.cupy
    with cp.cuda.Device(lib.device_of(x)):
        return cp.asarray(ref)


def fftfreq(n, d=1.0, device=None, *, like=None):
    """Sample frequencies of an n-point FFT with sample spacing d, as ``numpy.fft.fftfreq``
    ([0, 1, ..., n/2 - 1, -n/2, ..., -1] / (d n), float64). ``device``: None or "cpu" (NumPy
    2's). ``like``: an array whose library and device the result takes (a CuPy array or
    PyTorch tensor on its GPU); None: NumPy."""
    return _freq("fusemath.fft.fftfreq", n, d, device, like, real=False)


def rfftfreq(n, d=1.0, device=None, *, like=None):
    """Sample frequencies of rfft's n // 2 + 1 outputs, as ``numpy.fft.rfftfreq``; ``device``
    and ``like`` as for :func:`fftfreq`."""
    return _freq("fusemath.fft.rfftfreq", n, d, device, like, real=True)


def _shift(where: str, x: Any, axes: Any, inverse: bool):
    lib, a = _input(x, "x", where)
    shape = tuple(a.shape)
    if axes is None:
        ax = tuple(range(len(shape)))
    else:
        try:
            axes = (operator.index(axes),)  # one axis
        except TypeError:
            pass
        if isinstance(axes, (str, bytes)) or not hasattr(axes, "__iter__"):
            raise TypeError(f"{where}: axes must be an int or a sequence of ints, not {type(axes).__name__}")
        # each axis checked; a repeated axis rolls twice, as numpy's
        ax = tuple(_axes((a,), len(shape), "axes", where)[0] for a in axes)
    shifts = tuple(-(shape[i] // 2) if inverse else shape[i] // 2 for i in ax)
    if not ax:  # nothing to roll: a copy, as numpy's
        return a.copy() if lib is NUMPY or not hasattr(a, "clone") else a.clone()
    if lib is NUMPY:
        return np.roll(a, shifts, ax)
    if lib.name == "torch":
        return lib.torch.roll(a, shifts, ax)
    return lib.cupy.roll(a, shifts, ax)


def fftshift(x, axes=None):
    """The zero-frequency term moved to the centre, as ``numpy.fft.fftshift`` (axes: None for
    all, an int or a sequence of ints); a new array of x's library."""
    return _shift("fusemath.fft.fftshift", x, axes, inverse=False)


def ifftshift(x, axes=None):
    """The inverse of :func:`fftshift` (they differ for odd lengths), as
    ``numpy.fft.ifftshift``."""
    return _shift("fusemath.fft.ifftshift", x, axes, inverse=True)


# ---------------------------------------------------------------------------
# Planner
# ---------------------------------------------------------------------------
_DIRECTIONS = ("forward", "inverse")


class FFT:
    """Plan an FFT once, execute it many times (in the spirit of nvmath-python's ``FFT``).

    ``FFT(x, axes=None, kind=None, *, n=None, execution=None)``: x is used zero-copy (not
    promoted: complex64 / complex128 for c2c and c2r, float32 / float64 for r2c). axes: 1 to 3
    distinct axes (default: the last min(ndim, 3)); for r2c / c2r the last of them is the
    halved one. kind: None (complex x -> "c2c", real x -> "r2c"), "c2c", "r2c" or "c2r";
    n: for c2r, the output length along the last axis (default 2 * (m - 1)).

    ``plan(prolog=None, epilog=None, effort="measure", norm="backward")`` fixes the fused
    chains (dicts as in the functions; their arrays are kept and read at each execute) and
    the scaling; ``execute(direction=None, out=None, stream=None)`` runs it on the current
    operand: direction "forward" (c2c, r2c; the default except for c2r) or "inverse" (c2c,
    c2r) and returns a new array (or ``out``). ``reset_operand(x)`` swaps in another array
    of the same shape and dtype (other strides re-plan). ``free()`` / ``with`` release it.
    """

    def __init__(self, x: Any, axes: Any = None, kind: Optional[str] = None, *, n: Optional[int] = None,
                 execution: Any = None):
        where = "fusemath.fft.FFT"
        self._freed = False
        self._plans = {}
        self._planned = False
        lib, x = _input(x, "x", where)
        dt = _dtype(lib, x)
        if kind is None:
            kind_code = _C2C if getattr(dt, "kind", "") == "c" else _R2C
        else:
            if kind not in _KINDS:
                raise ValueError(f"{where}: kind {kind!r} is not one of 'c2c', 'r2c', 'c2r' (or None)")
            kind_code = _KINDS[kind]
        want = (_F32, _F64, _F16) if kind_code == _R2C else (_C64, _C128, _C32)
        if dt not in want:
            hint = "; use kind='c2c' with complex input" if kind_code == _R2C and dt in (_C64, _C128, _C32) else ""
            raise _C.DtypeError(f"{where}: x has dtype {dt}; a {_KIND_NAMES[kind_code]} transform takes "
                                f"{want[0]}, {want[1]} or {want[2]} (the planner does not convert){hint}")
        if dt in (_F16, _C32) and getattr(lib, "torch", None) is None:
            raise TypeError(f"{where}: x has dtype {dt}: half-precision FFTs give complex32 results, which only "
                            f"PyTorch has ({lib.name} does not); pass a torch CUDA tensor or convert x to "
                            "float32 / complex64")
        if x.ndim == 0:
            raise ValueError(f"{where}: x is 0-d; the FFT needs at least one dimension")
        if axes is None:
            axes = tuple(range(max(0, x.ndim - _MAX_AXES), x.ndim))
        elif isinstance(axes, int):
            axes = (axes,)
        axes = _axes(axes, x.ndim, "axes", where)
        if not 1 <= len(axes) <= _MAX_AXES:
            raise ValueError(f"{where}: axes has {len(axes)} entries; the planner takes 1 to 3 axes")
        shape = list(x.shape)
        if kind_code == _C2R:
            m = shape[axes[-1]]
            n = 2 * (m - 1) if n is None else _length(n, "n", where)
            if n < 1:
                raise ValueError(f"{where}: c2r with input length {m} along axis {axes[-1]} gives no output; "
                                 "pass n")
            if n // 2 + 1 != m:
                raise _C.ShapeError(f"{where}: c2r output length n = {n} needs {n // 2 + 1} input points along "
                                    f"axis {axes[-1]}, x has {m}")
            shape[axes[-1]] = n
        elif n is not None:
            raise ValueError(f"{where}: n is for kind='c2r' only")
        elif kind_code == _R2C:
            shape[axes[-1]] = shape[axes[-1]] // 2 + 1
        self._where = where
        self._lib, self._x, self._dtype = lib, x, dt
        self._kind, self._axes = kind_code, axes
        self._out_shape = tuple(shape)
        self._out_dtype = _out_dtype(kind_code, dt)
        self._device = -1 if lib is NUMPY else lib.device_of(x)
        self._exec = _resolve_execution(execution, _DEFAULT_OPTIONS, where)[:3]
        self._chains = (_NO_CHAIN, _NO_CHAIN)
        self._norm = _C.FFT_NORM_BACKWARD
        self._effort = _C.FFT_EFFORT_ESTIMATE
        self._gpu_prolog = _C.FFT_PROLOG_AUTO

    # -- helpers ---------------------------------------------------------------
    def _alive(self, what: str) -> None:
        if self._freed:
            raise _C.InvalidStateError(f"{self._where}.{what}: the FFT was freed")

    def _layout(self, arr):
        info = _C.tensor_info(arr)
        return tuple(info[3]), tuple(info[4]), info[0] % 64

    def _direction(self, direction: Optional[str]) -> bool:
        if direction is None:
            return self._kind == _C2R
        if direction not in _DIRECTIONS:
            raise ValueError(f"{self._where}.execute: direction {direction!r} is not 'forward' or 'inverse'")
        inverse = direction == "inverse"
        if self._kind == _R2C and inverse:
            raise ValueError(f"{self._where}.execute: an r2c FFT is forward only (plan a c2r FFT for the inverse)")
        if self._kind == _C2R and not inverse:
            raise ValueError(f"{self._where}.execute: a c2r FFT is inverse only")
        return inverse

    def _plan_for(self, inverse: bool, out):
        key = (inverse, self._layout(self._x)[1], self._layout(out)[1])
        p = self._plans.get(key)
        if p is None:
            pro, epi = self._chains
            ex, dev, nth = self._exec
            p = _C.plan_fft(self._x, out, pro.arr, epi.arr, self._kind, inverse, self._axes, self._norm,
                            self._effort, ex, dev, nth, pro.ops, pro.scale, epi.ops, epi.scale,
                            pro.source, pro.name, epi.source, epi.name, self._gpu_prolog)
            self._plans[key] = p
        return p

    def _free_plans(self) -> None:
        for p in self._plans.values():
            p.free()
        self._plans = {}

    # -- public ------------------------------------------------------------------
    def plan(self, prolog: Any = None, epilog: Any = None, effort: str = "measure", norm: Any = "backward",
             gpu_prolog: str = "auto"):
        """Plan with the fused chains; plans the default direction now (the other on first use).

        effort: "measure" by default: a planner object is made to run many times, and FFTW's
        measured plans pay (c64 1024x1024 2-D on the 2-core dev machine: 9.5 ms measured vs
        43.5 ms estimated). "estimate" plans at once; "patient" searches longer. The stateless
        functions (fft, fftn, ...) always use estimate with cached plans.

        gpu_prolog (cuda only): how the prolog runs - "callback" (a cuFFT load callback: no extra
        pass, but cuFFT runs slower with one on large transforms), "pass" (one generated
        elementwise kernel before the transform) or "auto" (the callback for small transforms,
        the pass for large ones; docs/performance.md has the measurements)."""
        self._alive("plan()")
        where = self._where + ".plan"
        if effort not in _EFFORTS:
            raise ValueError(f"{where}: effort {effort!r} is not one of {list(_EFFORTS)}")
        if gpu_prolog not in _GPU_PROLOG:
            raise ValueError(f"{where}: gpu_prolog {gpu_prolog!r} is not one of {list(_GPU_PROLOG)}")
        norm_code = _norm_code(norm, where)
        pro = _chain(where, "prolog", prolog)
        epi = _chain(where, "epilog", epilog)
        pro_scale, epi_scale = pro.scale, epi.scale
        _check_chain_arrays(where, self._lib, pro, epi, tuple(self._x.shape), self._dtype, self._out_shape,
                            self._out_dtype)
        if pro_scale is not None and pro_scale.imag != 0 and self._kind == _R2C:
            raise ValueError(f"{where}: prolog['scale'] = {pro_scale} is complex but the r2c input is real")
        if epi_scale is not None and epi_scale.imag != 0 and self._kind == _C2R:
            raise ValueError(f"{where}: epilog['scale'] = {epi_scale} is complex but the c2r output is real")
        self._free_plans()
        self._chains = (pro, epi)
        self._norm, self._effort = norm_code, _EFFORTS[effort]
        self._gpu_prolog = _GPU_PROLOG[gpu_prolog]
        template = _empty(self._lib, self._out_shape, self._out_dtype, self._device)
        self._plan_for(self._kind == _C2R, template)
        self._planned = True
        return self

    def execute(self, direction: Optional[str] = None, out: Any = None, stream: Any = None):
        """Run the FFT on the current operand; returns a new array, or out."""
        self._alive("execute()")
        if not self._planned:
            raise _C.InvalidStateError(f"{self._where}.execute: call plan() first")
        inverse = self._direction(direction)
        if out is None:
            out = _empty(self._lib, self._out_shape, self._out_dtype, self._device)
        else:
            _check_out(self._where + ".execute", self._lib, out, self._out_shape, self._out_dtype)
        p = self._plan_for(inverse, out)
        pro_arr, epi_arr = self._chains[0].arr, self._chains[1].arr
        if stream is None and self._device >= 0:
            stream = _C.current_stream(self._lib.index, self._device)
        elif stream is not None and not isinstance(stream, int):
            from ._options import stream_handle
            stream = stream_handle(stream, self._where + ".execute")
        args = [_C.data_ptr(self._x), _C.data_ptr(out),
                None if pro_arr is None else _C.data_ptr(pro_arr),
                None if epi_arr is None else _C.data_ptr(epi_arr)]
        if stream is not None:
            args.append(stream)
        p.execute(*args)
        return out

    def reset_operand(self, x: Any) -> None:
        """Use another array of the same shape, dtype and library/device from now on."""
        self._alive("reset_operand()")
        where = self._where + ".reset_operand"
        lib, x = _input(x, "x", where)
        dt = _dtype(lib, x)
        if lib is not self._lib or (lib is not NUMPY and lib.device_of(x) != self._device):
            raise _C.DeviceError(f"{where}: x must be an array of {self._lib.name} on the planned device")
        if tuple(x.shape) != tuple(self._x.shape):
            raise _C.ShapeError(f"{where}: x has shape {tuple(x.shape)}, the FFT was planned for "
                                f"{tuple(self._x.shape)}")
        if dt != self._dtype:
            raise _C.DtypeError(f"{where}: x has dtype {dt}, the FFT was planned for {self._dtype}")
        self._x = x  # other strides get their own plan on the next execute

    def describe(self) -> str:
        """One line describing the default-direction plan (or the problem, before plan())."""
        self._alive("describe()")
        if self._plans:
            return next(iter(self._plans.values())).describe()
        return (f"fft {_KIND_NAMES[self._kind]} {self._dtype} shape={tuple(self._x.shape)} axes={self._axes} "
                "(not planned)")

    @property
    def result_shape(self) -> Tuple[int, ...]:
        return self._out_shape

    @property
    def result_dtype(self):
        return self._out_dtype

    @property
    def kind(self) -> str:
        return _KIND_NAMES[self._kind]

    @property
    def axes(self) -> Tuple[int, ...]:
        return self._axes

    def free(self) -> None:
        """Release the plans and the operand references; later use raises InvalidStateError."""
        if self._freed:
            return
        self._free_plans()
        self._x = None
        self._chains = (_NO_CHAIN, _NO_CHAIN)
        self._freed = True

    def __enter__(self) -> "FFT":
        return self

    def __exit__(self, *exc) -> None:
        self.free()

    def __repr__(self) -> str:
        if self._freed:
            return "<fusemath.fft.FFT (freed)>"
        return f"<fusemath.fft.FFT {self.describe()}>"
