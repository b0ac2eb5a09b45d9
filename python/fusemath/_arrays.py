"""Array libraries behind the front end: NumPy (host memory), PyTorch and CuPy.

PyTorch and CuPy are never imported by fusemath on its own: a library is registered
with the extension (``_fusemath.register_array_library``) the first time one of its
arrays is passed in, i.e. when the caller has imported it already. From then on the
extension reads those arrays' pointer, shape, strides, dtype and device directly
(torch: ``data_ptr()``, ``shape``, ``stride()``, ``dtype``, ``get_device()``; cupy:
``data.ptr``, ``data.device_id``, ``shape``, ``strides``, ``dtype``), allocates results
with the library (``torch.empty`` / ``cupy.empty``: the caller's allocator and pool) and
asks it for its current stream (``torch._C._cuda_getCurrentRawStream(device)``,
``cupy.cuda.get_current_stream(device).ptr``).

Other GPU arrays (``__cuda_array_interface__`` or a CUDA ``__dlpack_device__``) are
viewed, zero-copy, as CuPy arrays (PyTorch tensors if CuPy is not installed): results
need a library to be allocated with.
"""
from __future__ import annotations

import operator
import sys
import warnings
import weakref
from typing import Any, Optional

import numpy as np

from . import _fusemath as _C

__all__ = ["Lib", "NUMPY", "BF16", "C32", "lib_of", "is_cuda_object", "adopt", "operand", "host_array",
           "native_aligned", "refresh_copies"]


class _DType:
    """A dtype NumPy does not have (bfloat16 without ml_dtypes): a name, a kind, a size."""

    __slots__ = ("name", "kind", "itemsize")

    def __init__(self, name: str, kind: str, itemsize: int):
        self.name, self.kind, self.itemsize = name, kind, itemsize

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"dtype({self.name!r})"


def _bf16():
    try:  # NumPy arrays of ml_dtypes.bfloat16 are then recognised too
        import ml_dtypes  # noqa: F401  (optional; never required)

        return np.dtype(ml_dtypes.bfloat16)
    except Exception:
        return _DType("bfloat16", "f", 2)


BF16 = _bf16()
F8E4M3 = _DType("float8_e4m3fn", "f", 1)  # NumPy has no fp8: PyTorch tensors only
F8E5M2 = _DType("float8_e5m2", "f", 1)
C32 = _DType("complex32", "c", 4)  # complex half: PyTorch (torch.complex32 / chalf) only
_STANDINS = {"bf16": BF16, "f8e4m3": F8E4M3, "f8e5m2": F8E5M2, "c32": C32}

# the library's dtype names -> the array libraries' (torch's attributes; NumPy's for those it has)
_DTYPE_NAMES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64", "c64": "complex64",
                "c128": "complex128", "u8": "uint8", "i8": "int8", "i32": "int32", "i64": "int64", "u32": "uint32",
                "i16": "int16", "u16": "uint16", "u64": "uint64", "bool": "bool", "f8e4m3": "float8_e4m3fn",
                "f8e5m2": "float8_e5m2", "c32": "complex32"}
_NUMPY_DTYPES = {k: np.dtype(v) for k, v in _DTYPE_NAMES.items() if k not in _STANDINS}
_NUMPY_DTYPES.update(ld=np.dtype(np.longdouble), cld=np.dtype(np.clongdouble))


def int_arg(v: Any, name: str, where: str) -> int:
    """v as a Python int: ints and NumPy integers; bools (an index to Python, not a count) and
    arrays of one are a TypeError naming the argument."""
    try:
        if isinstance(v, (bool, np.bool_)):
            raise TypeError
        return operator.index(v)
    except TypeError:
        raise TypeError(f"{where}: {name} must be an int, not {type(v).__name__}") from None


class Lib:
    """One array library as the front end sees it (registered with the extension)."""

    name = "?"
    index = -1

    def dtype_of(self, x) -> Any:
        """Canonical dtype (an np.dtype, or BF16) of an array of this library (NumPy's and CuPy's
        own)."""
        return x.dtype

    def device_of(self, x) -> int:
        """CUDA device of an array of this library, -1 for host memory (NumPy's)."""
        return -1

    def synchronize(self, device: int) -> None:
        """Wait for all work on a device (autotune only)."""

    def adopt(self, x):
        """A zero-copy view of a foreign GPU array as an array of this library."""
        raise NotImplementedError


class _NumPyLib(Lib):
    name = "numpy"

    def __init__(self):
        self.index = _C.register_array_library(
            "numpy", _C.STYLE_NUMPY, None, dict(_NUMPY_DTYPES), np.empty, None, None, None, None, None, 0
        )


NUMPY = _NumPyLib()


class _StreamCache:
    """External-stream wrappers per (handle, device), for allocations on a non-current stream."""

    def __init__(self, make):
        self._make = make
        self._cache = {}

    def get(self, handle: int, device: int):
        key = (handle, device)
        s = self._cache.get(key)
        if s is None:
            if len(self._cache) > 64:
                self._cache.clear()
            s = self._cache[key] = self._make(handle, device)
        return s


class _TorchLib(Lib):
    name = "torch"

    def __init__(self, torch, name: str = "torch"):
        self.name = name  # the tests register a torch-like stand-in under another name
        self.torch = torch
        t = torch
        dtypes = {k: getattr(t, v) for k, v in _DTYPE_NAMES.items() if hasattr(t, v)}
        self._canonical = {native: _STANDINS.get(k) or _NUMPY_DTYPES[k] for k, native in dtypes.items()}
        getter = getattr(t._C, "_cuda_getCurrentRawStream", None)  # 0.1 us; current_stream() is 4 us
        if getter is None:
            def getter(device, _cs=t.cuda.current_stream):
                return _cs(device).cuda_stream
        oom = getattr(t, "OutOfMemoryError", None) or getattr(t.cuda, "OutOfMemoryError", MemoryError)
        cpu = t.device("cpu")

        def device_obj(index: int):
            return cpu if index < 0 else t.device("cuda", index)

        self._device_obj = device_obj
        self._streams = _StreamCache(lambda h, d: t.cuda.ExternalStream(h, device=device_obj(d)))

        def slow_alloc(shape, dtype, device, stream):
            dev = device_obj(device)
            if stream is None:
                return t.empty(shape, dtype=dtype, device=dev)
            with t.cuda.stream(self._streams.get(stream, device)):
                return t.empty(shape, dtype=dtype, device=dev)

        try:
            ndev = t.cuda.device_count()
        except Exception:
            ndev = 0
        self.index = _C.register_array_library(
            name, _C.STYLE_TORCH, t.Tensor, dtypes, t.empty, getter, None, device_obj, oom, slow_alloc, ndev
        )

    def dtype_of(self, x):
        dt = self._canonical.get(x.dtype)
        if dt is None:
            raise _C.DtypeError(f"torch dtype {x.dtype} is not supported by fusemath")
        return dt

    def device_of(self, x) -> int:
        return x.get_device()

    def synchronize(self, device: int) -> None:
        if device >= 0:
            self.torch.cuda.synchronize(device)

    def adopt(self, x):
        t = self.torch
        if hasattr(x, "__dlpack__"):
            return t.from_dlpack(x)
        return t.as_tensor(x, device="cuda")  # __cuda_array_interface__: zero-copy


class _CuPyLib(Lib):
    name = "cupy"

    def __init__(self, cupy):
        self.cupy = cp = cupy
        dtypes = dict(_NUMPY_DTYPES)
        getter = cp.cuda.get_current_stream  # (device_id) -> Stream; .ptr is the handle
        try:
            getter(0)
        except TypeError:  # a CuPy whose get_current_stream takes no device
            def getter(device, _g=cp.cuda.get_current_stream, _D=cp.cuda.Device):
                with _D(device):
                    return _g()
        except Exception:
            pass
        def external(handle, device, _E=cp.cuda.ExternalStream):
            # CuPy 14 deprecates ExternalStream for Stream.from_external (which wants an
            # object speaking the CUDA stream protocol, not a handle); the wrapper only
            # makes our allocation land on the caller's stream, so the warning is noise
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                return _E(handle, device)

        self._streams = _StreamCache(external)

        def slow_alloc(shape, dtype, device, stream):
            with cp.cuda.Device(device):
                if stream is None:
                    return cp.empty(shape, dtype)
                with self._streams.get(stream, device):
                    return cp.empty(shape, dtype)

        try:
            ndev = cp.cuda.runtime.getDeviceCount()
        except Exception:
            ndev = 0
        self.index = _C.register_array_library(
            "cupy", _C.STYLE_CUPY, cp.ndarray, dtypes, cp.empty, getter, cp.cuda.runtime.getDevice, None,
            cp.cuda.memory.OutOfMemoryError, slow_alloc, ndev,
        )

    def device_of(self, x) -> int:
        return x.data.device_id

    def synchronize(self, device: int) -> None:
        if device >= 0:
            self.cupy.cuda.Device(device).synchronize()

    def adopt(self, x):
        cp = self.cupy
        if hasattr(x, "__cuda_array_interface__"):
            return cp.asarray(x)  # zero-copy view; honours the producer's CAI stream
        return cp.from_dlpack(x)


_LIBS = {}  # "torch" / "cupy" -> Lib
_BY_TYPE = {np.ndarray: None}  # type -> Lib (None: NumPy-compatible host array)


def _lib(name: str) -> Optional[Lib]:
    lib = _LIBS.get(name)
    if lib is None:
        mod = sys.modules.get(name)
        if mod is None:
            return None
        lib = _LIBS[name] = (_TorchLib if name == "torch" else _CuPyLib)(mod)
    return lib


def lib_of(x) -> Optional[Lib]:
    """The registered library of x (a PyTorch tensor or CuPy array), None otherwise.
    Registers the library the first time one of its arrays is seen; never imports it."""
    t = type(x)
    try:
        return _BY_TYPE[t]
    except KeyError:
        pass
    lib = None
    for name in ("torch", "cupy"):
        mod = sys.modules.get(name)
        if mod is None:
            continue
        base = mod.Tensor if name == "torch" else mod.ndarray
        if isinstance(x, base):
            lib = _lib(name)
            break
    if lib is not None or t.__module__ in ("builtins", "numpy", "array"):
        _BY_TYPE[t] = lib  # other types are asked again: their device may vary per object
    return lib


def is_cuda_object(x) -> bool:
    """A GPU array of an unregistered kind (__cuda_array_interface__ or a CUDA DLPack device)."""
    if hasattr(x, "__cuda_array_interface__"):
        return True
    dev = getattr(x, "__dlpack_device__", None)
    if dev is None:
        return False
    try:
        kind = int(dev()[0])
    except Exception:
        return False
    return kind in (2, 13)  # kDLCUDA, kDLCUDAManaged


def adopt(x, name: str, where: str):
    """(lib, view): a foreign GPU array viewed zero-copy through CuPy (else PyTorch)."""
    for mod in ("cupy", "torch"):
        if mod not in sys.modules:
            try:
                __import__(mod)
            except Exception:
                continue
        lib = _lib(mod)  # imported by now
        try:
            return lib, lib.adopt(x)
        except Exception as exc:
            raise TypeError(f"{where}: {name} (a {type(x).__name__} on the GPU) cannot be viewed as a "
                            f"{mod} array: {exc}") from exc
    raise _C.DeviceError(
        f"{where}: {name} is a GPU array ({type(x).__name__}); fusemath allocates GPU results with CuPy or "
        "PyTorch and neither is importable"
    )


def into_out(where: str, out: np.ndarray, dt, compute, ufunc: str = "matmul"):
    """NumPy's out= of another dtype than the result's (matmul's, fft's), or overlapping an input:
    the result computed into a new array (compute()), then cast into out with casting='same_kind'
    (np.copyto writes it as NumPy would, an out whose elements share memory too)."""
    if not np.can_cast(dt, out.dtype, "same_kind"):
        raise _C.DtypeError(f"Cannot cast ufunc '{ufunc}' output from {np.dtype(dt)!r} to {out.dtype!r} with "
                            f"casting rule 'same_kind' ({where}: the result is {np.dtype(dt)}, out is {out.dtype})")
    if not out.flags.writeable:
        raise _C.InvalidArgumentError(f"{where}: out is read-only")
    r = compute()
    d = r[0] if type(r) is tuple else r
    if np.shape(d) != out.shape:
        raise _C.ShapeError(f"{where}: out has shape {out.shape}, expected {np.shape(d)}")
    np.copyto(out, d, casting="same_kind")
    return (out, r[1]) if type(r) is tuple else out


# ---------------------------------------------------------------------------
# Host array arguments (every operation's): NumPy views of host objects, native aligned copies
# ---------------------------------------------------------------------------
_ndarray = np.ndarray
_CPU_DEVICES = (1, 3)  # DLPack kDLCPU, kDLCUDAHost


def host_array(x: Any, name: str, where: str) -> np.ndarray:
    """A NumPy array for a host array input: one in a byte order other than the machine's, or at
    an address that is not a multiple of its element size, is a native, aligned copy (NumPy's own
    routines compute on such arrays too); anything else a view (no copy)."""
    return native_aligned(_host_view(x, name, where))


def native_aligned(arr: np.ndarray) -> np.ndarray:
    """arr, or a copy in the machine's byte order and aligned to its element size (BLAS and FFTW
    read whole native elements), in arr's own memory order; the copy is remembered (copy_behind)."""
    isz = arr.dtype.itemsize
    if arr.dtype.isnative and arr.flags.aligned and all(st % isz == 0 for st in arr.strides):
        return arr
    # (a structured array's field can step by a byte count that is no multiple of its element:
    # the libraries count strides in elements, so it is copied too)
    return remembered_copy(arr, arr.dtype.newbyteorder("="))


def remembered_copy(arr: np.ndarray, dtype) -> np.ndarray:
    """arr as a copy of dtype in arr's memory order, remembered (copy_behind) so that a planner holding
    it sees the caller's later in-place changes; host memory running out is fusemath's OutOfMemoryError."""
    try:
        copy = arr.astype(dtype, order="K")
    except MemoryError as exc:
        raise _C.OutOfMemoryError(f"fusemath: cannot allocate a {dtype} copy of shape {arr.shape}: {exc}") from exc
    _COPIED_FROM[id(copy)] = (weakref.ref(copy), arr)
    weakref.finalize(copy, _COPIED_FROM.pop, id(copy), None)
    return copy


# Each such copy (by id, with a weak reference to tell a reused id apart) -> the caller's array
# it was made from: a planner that holds a copy (or a view of one: a promoted 1-D operand, a
# broadcast c) refreshes it from there before every execute, so in-place changes to the caller's
# array are seen as they are for every other operand.
_COPIED_FROM: dict = {}


def copy_behind(arr: Any):
    """(copy, source) when arr is, or views, a copy native_aligned made; else None."""
    while isinstance(arr, np.ndarray):
        entry = _COPIED_FROM.get(id(arr))
        if entry is not None and entry[0]() is arr:
            return arr, entry[1]
        arr = arr.base
    return None


def refresh_copies(*arrs: Any) -> None:
    """Bring the copies behind arrs (if any) up to date with the caller's arrays they were made
    from; one dict test when no copy exists (an execute path)."""
    if not _COPIED_FROM:
        return
    for arr in arrs:
        found = copy_behind(arr)
        if found is not None:
            found[0][...] = found[1]


def _host_view(x: Any, name: str, where: str) -> np.ndarray:
    """A NumPy view of a host array argument (no copy where it has one). NumPy arrays pass
    through (subclasses as plain ndarrays); DLPack objects (CPU) and buffer-protocol objects are
    wrapped zero-copy; anything else np.asarray reads as numbers (lists, Python and NumPy numbers,
    ``__array__`` objects; an object whose ``__dlpack__`` failed, too) as np.asarray makes it. GPU
    arrays are a DeviceError here (this is the host path); what is no array of numbers (None, str,
    dicts) a TypeError naming the argument."""
    if type(x) is _ndarray:
        return x
    if isinstance(x, _ndarray):
        return x.view(_ndarray)  # drop subclass semantics (np.matrix, masked arrays)
    failed = ""
    if hasattr(x, "__dlpack__"):
        device = getattr(x, "__dlpack_device__", None)
        if device is not None:
            try:
                dev_type, dev_id = (int(v) for v in device())
            except (TypeError, ValueError):
                raise TypeError(
                    f"{where}: {name}.__dlpack_device__() did not return (device_type, device_id)"
                ) from None
            if dev_type not in _CPU_DEVICES:
                raise _C.DeviceError(
                    f"{where}: {name} lives on DLPack device ({dev_type}, {dev_id}) but a and b are "
                    "host arrays; put all operands on one device (or pass GPU arrays for a and b)"
                )
        try:
            return np.from_dlpack(x)
        except (BufferError, TypeError, ValueError, RuntimeError) as exc:
            failed = f" (its __dlpack__ failed: {type(exc).__name__}: {exc})"  # NumPy may read it otherwise
    if hasattr(x, "__cuda_array_interface__"):
        raise _C.DeviceError(f"{where}: {name} is a GPU array but a and b are host arrays; put all operands on one "
                             "device (or pass GPU arrays for a and b)")
    try:
        return np.asarray(memoryview(x))  # (bytes as uint8; None, numbers, str, lists have no buffer)
    except TypeError:
        pass
    try:
        arr = np.asarray(x)
    except Exception:
        if isinstance(x, (list, tuple)):
            raise  # NumPy's own refusal (a ragged sequence)
        arr = None
    if arr is None or arr.dtype.kind in "OUSV":
        raise TypeError(f"{where}: {name} must be an array, not {'None' if x is None else type(x).__name__}{failed} "
                        "(NumPy, PyTorch, CuPy, DLPack or buffer-protocol objects, or nested sequences of numbers)")
    return arr


def operand(x: Any, name: str, where: str):
    """(lib, array): PyTorch / CuPy arrays as they are, other GPU arrays viewed through CuPy /
    PyTorch, anything else as a NumPy array (host_array: lists too, big-endian or misaligned data
    as a native, aligned copy)."""
    if type(x) is _ndarray:
        return NUMPY, native_aligned(x)
    lib = lib_of(x)
    if lib is not None:
        return lib, x
    if is_cuda_object(x):
        return adopt(x, name, where)
    return NUMPY, host_array(x, name, where)


def same_operand(where: str, name: str, x, old, planned: str):
    """x, when it has the shape, dtype, array library and device of old, the operand a planner was
    made for (planned: the words saying so, "the plan was made for")."""
    if tuple(x.shape) != tuple(old.shape):
        raise _C.ShapeError(f"{where}: {name} has shape {tuple(x.shape)}, {planned} {tuple(old.shape)}")
    lib, olib = lib_of(x) or NUMPY, lib_of(old) or NUMPY
    if lib.dtype_of(x) != olib.dtype_of(old):
        raise _C.DtypeError(f"{where}: {name} has dtype {lib.dtype_of(x)}, {planned} {olib.dtype_of(old)}")
    dev, odev = lib.device_of(x), olib.device_of(old)
    if lib is not olib or dev != odev:
        raise _C.DeviceError(f"{where}: {name} is a {type(x).__name__} on {'cpu' if dev < 0 else f'cuda:{dev}'}, "
                             f"{planned} a {type(old).__name__} on {'cpu' if odev < 0 else f'cuda:{odev}'}: {name} "
                             f"must be an array of {olib.name} on the planned device")
    return x
