"""fakelib's torch-like library, plus DLPack's C exchange API (the table PyTorch >= 2.10
publishes as torch.Tensor.__dlpack_c_exchange_api__), written with ctypes: tests the fast
path of the extension (python/src/fmpy_dlpack.c) on machines without PyTorch.

Every tensor is reported with a byte_offset of 64 from a base 64 bytes lower, and with
strides NULL when it is C-contiguous, so both parts of a DLTensor get exercised.

    lib = fakexapi.install()          # registered with fusemath as "fakexapi"
    t = fakexapi.tensor(np_array)     # an XTensor
    fakexapi.STATS                    # calls of each table function
"""
import ctypes as C
import types

import numpy as np

import fakelib

DL_CPU, DL_INT, DL_UINT, DL_FLOAT, DL_BFLOAT, DL_COMPLEX = 1, 0, 1, 2, 4, 5
OFFSET = 64


class DLDevice(C.Structure):
    _fields_ = [("device_type", C.c_int32), ("device_id", C.c_int32)]


class DLDataType(C.Structure):
    _fields_ = [("code", C.c_uint8), ("bits", C.c_uint8), ("lanes", C.c_uint16)]


class DLTensor(C.Structure):
    _fields_ = [("data", C.c_void_p), ("device", DLDevice), ("ndim", C.c_int32), ("dtype", DLDataType),
                ("shape", C.POINTER(C.c_int64)), ("strides", C.POINTER(C.c_int64)), ("byte_offset", C.c_uint64)]


class DLPackVersion(C.Structure):
    _fields_ = [("major", C.c_uint32), ("minor", C.c_uint32)]


class DLManagedTensorVersioned(C.Structure):
    pass


DELETER = C.CFUNCTYPE(None, C.POINTER(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [("version", DLPackVersion), ("manager_ctx", C.c_void_p), ("deleter", DELETER),
                                     ("flags", C.c_uint64), ("dl_tensor", DLTensor)]
SET_ERROR = C.CFUNCTYPE(None, C.c_void_p, C.c_char_p, C.c_char_p)
ALLOCATOR = C.CFUNCTYPE(C.c_int, C.POINTER(DLTensor), C.POINTER(C.POINTER(DLManagedTensorVersioned)), C.c_void_p,
                        SET_ERROR)
MANAGED_FROM_PY = C.CFUNCTYPE(C.c_int, C.c_void_p, C.POINTER(C.POINTER(DLManagedTensorVersioned)))
TO_PY = C.CFUNCTYPE(C.c_int, C.POINTER(DLManagedTensorVersioned), C.POINTER(C.c_void_p))
DLTENSOR_FROM_PY = C.CFUNCTYPE(C.c_int, C.c_void_p, C.POINTER(DLTensor))
WORK_STREAM = C.CFUNCTYPE(C.c_int, C.c_int32, C.c_int32, C.POINTER(C.c_void_p))


class Header(C.Structure):
    _fields_ = [("version", DLPackVersion), ("prev_api", C.c_void_p)]


class ExchangeAPI(C.Structure):
    _fields_ = [("header", Header), ("managed_tensor_allocator", ALLOCATOR),
                ("managed_tensor_from_py_object_no_sync", MANAGED_FROM_PY),
                ("managed_tensor_to_py_object_no_sync", TO_PY),
                ("dltensor_from_py_object_no_sync", DLTENSOR_FROM_PY), ("current_work_stream", WORK_STREAM)]


_DL = {"float16": (DL_FLOAT, 16), "bfloat16": (DL_BFLOAT, 16), "float32": (DL_FLOAT, 32),
       "float64": (DL_FLOAT, 64), "complex64": (DL_COMPLEX, 64), "complex128": (DL_COMPLEX, 128),
       "complex32": (DL_COMPLEX, 32), "uint8": (DL_UINT, 8), "int8": (DL_INT, 8), "int32": (DL_INT, 32),
       "int64": (DL_INT, 64), "int16": (DL_INT, 16)}
_FROM_DL = {v: getattr(fakelib, k) for k, v in _DL.items()}

#: calls of each table function; what the tests configure
STATS = {"read": 0, "alloc": 0, "to_py": 0, "stream": 0, "freed": 0, "alloc_failed": 0}
#: limit: allocations above this many elements fail; fail: (kind, message) every allocation
#: fails with (PyTorch's allocator reports every failure as kind "MemoryError")
CONFIG = {"limit": None, "transposed_alloc": False, "fail": None}
STREAM_BASE = 0x5000  # current_work_stream(cuda, d) answers STREAM_BASE + d
_LIVE = {}  # address of a DLManagedTensorVersioned -> (struct, array, shape/strides buffers)


class XTensor(fakelib.Tensor):
    """A fakelib tensor whose type publishes the exchange table."""

    def __getitem__(self, index):
        return XTensor(self._a[index], self._dtype)


def _fill(dl, arr, dtype, keep):
    code, bits = _DL[dtype.name]
    shape = (C.c_int64 * max(arr.ndim, 1))(*arr.shape)
    keep.append(shape)
    dl.data = arr.__array_interface__["data"][0] - OFFSET
    dl.byte_offset = OFFSET
    dl.device = DLDevice(DL_CPU, 0)
    dl.ndim = arr.ndim
    dl.dtype = DLDataType(code, bits, 1)
    dl.shape = shape
    if arr.flags.c_contiguous:
        dl.strides = None
    else:
        strides = (C.c_int64 * max(arr.ndim, 1))(*(s // arr.itemsize for s in arr.strides))
        keep.append(strides)
        dl.strides = strides


def _dltensor_from_py(obj_addr, out):
    t = C.cast(obj_addr, C.py_object).value
    STATS["read"] += 1
    keep = []
    _fill(out.contents, t._a, t._dtype, keep)
    t._dl_keep = keep  # alive until control returns (and beyond: the tensor holds it)
    return 0


def _managed_from_py(obj_addr, out):
    return -1  # not used by fusemath


def _delete(mt):
    STATS["freed"] += 1
    _LIVE.pop(C.addressof(mt.contents), None)


_DELETER = DELETER(_delete)


def _allocate(proto, out, err_ctx, set_error):
    p = proto.contents
    shape = tuple(p.shape[i] for i in range(p.ndim))
    n = int(np.prod(shape, dtype=np.float64))
    if CONFIG["limit"] is not None and n > CONFIG["limit"]:
        STATS["alloc_failed"] += 1
        set_error(err_ctx, b"MemoryError", f"fake xapi: out of memory for {n} elements".encode())
        return -1
    if CONFIG["fail"] is not None:
        STATS["alloc_failed"] += 1
        set_error(err_ctx, *(x.encode() for x in CONFIG["fail"]))
        return -1
    dtype = _FROM_DL[(p.dtype.code, p.dtype.bits)]
    arr = np.empty(shape[::-1], dtype.np).T if CONFIG["transposed_alloc"] and p.ndim == 2 else np.empty(shape, dtype.np)
    mt = DLManagedTensorVersioned()
    mt.version = DLPackVersion(1, 3)
    mt.deleter = _DELETER
    keep = []
    _fill(mt.dl_tensor, arr, dtype, keep)
    _LIVE[C.addressof(mt)] = (mt, arr, dtype, keep)
    STATS["alloc"] += 1
    out[0] = C.pointer(mt)
    return 0


def _to_py(mt, out):
    addr = C.addressof(mt.contents)
    _, arr, dtype, _ = _LIVE.pop(addr)
    STATS["to_py"] += 1
    t = XTensor(arr, dtype)
    C.pythonapi.Py_IncRef(C.py_object(t))  # a new reference for the caller
    out[0] = id(t)
    return 0


def _work_stream(device_type, device_id, out):
    STATS["stream"] += 1
    out[0] = STREAM_BASE + device_id if device_type == 2 else None
    return 0


READ = DLTENSOR_FROM_PY(_dltensor_from_py)  # kept: a test swaps the table's entry and restores it
_API = ExchangeAPI(Header(DLPackVersion(1, 3), None), ALLOCATOR(_allocate), MANAGED_FROM_PY(_managed_from_py),
                   TO_PY(_to_py), READ, WORK_STREAM(_work_stream))
_NAME = b"dlpack_exchange_api"
_new_capsule = C.pythonapi.PyCapsule_New
_new_capsule.restype = C.py_object
_new_capsule.argtypes = [C.c_void_p, C.c_char_p, C.c_void_p]
XTensor.__dlpack_c_exchange_api__ = _new_capsule(C.addressof(_API), _NAME, None)


def _empty(shape, dtype=None, device=None):
    t = fakelib.empty(shape, dtype=dtype, device=device)
    return XTensor(t._a, t._dtype)


module = types.ModuleType("fakexapi")
module.__dict__.update(fakelib.module.__dict__)
module.__dict__.update(Tensor=XTensor, empty=_empty)
_LIB = []


def install():
    return fakelib.register(module, "fakexapi", XTensor, _LIB)


def tensor(array):
    return XTensor(np.asarray(array))
