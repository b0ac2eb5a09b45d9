"""A torch-like array library backed by NumPy host memory, for testing on machines without
PyTorch or a GPU the code fusemath runs for PyTorch tensors: the extension reads its
tensors through data_ptr(), shape, stride(), dtype, get_device(), is_cuda, allocates with
its empty(shape, dtype=, device=), and the front end returns its tensors.

    lib = fakelib.install()      # registered with fusemath under the name "faketorch"
    t = fakelib.tensor(np_array)
"""
import types

import numpy as np

import fusemath


class FakeDtype:
    """torch.dtype stand-in: one singleton object per dtype."""

    def __init__(self, name, np_dtype):
        self.name = name
        self.np = np.dtype(np_dtype)

    def __repr__(self):
        return f"faketorch.{self.name}"


float16 = FakeDtype("float16", np.float16)
bfloat16 = FakeDtype("bfloat16", np.uint16)  # storage only
float32 = FakeDtype("float32", np.float32)
float64 = FakeDtype("float64", np.float64)
complex64 = FakeDtype("complex64", np.complex64)
complex128 = FakeDtype("complex128", np.complex128)
complex32 = FakeDtype("complex32", np.uint32)  # storage only (complex half)
uint8 = FakeDtype("uint8", np.uint8)
int8 = FakeDtype("int8", np.int8)
int32 = FakeDtype("int32", np.int32)
int64 = FakeDtype("int64", np.int64)
int16 = FakeDtype("int16", np.int16)  # not supported by fusemath
_BY_NP = {d.np: d for d in (float16, float32, float64, complex64, complex128, uint8, int8, int32, int64, int16)}


class Size(tuple):
    """torch.Size stand-in (a tuple subclass)."""


class FakeOutOfMemoryError(RuntimeError):
    """Like torch.OutOfMemoryError: a RuntimeError, not a MemoryError."""


class Tensor:
    """A CPU tensor over a NumPy array (views share memory)."""

    is_cuda = False

    def __init__(self, array, dtype=None):
        self._a = array
        self._dtype = dtype or _BY_NP[array.dtype]
        self.conj_bit = False
        self.neg_bit = False
        self.calls = 0

    @property
    def dtype(self):
        return self._dtype

    @property
    def shape(self):
        return Size(self._a.shape)

    @property
    def ndim(self):
        return self._a.ndim

    def stride(self):
        return tuple(s // self._a.itemsize for s in self._a.strides)

    def data_ptr(self):
        self.calls += 1
        return self._a.__array_interface__["data"][0]

    def get_device(self):
        return -1

    def is_conj(self):
        return self.conj_bit

    def is_neg(self):
        return self.neg_bit

    def __getitem__(self, index):
        return Tensor(self._a[index], self._dtype)

    def numpy(self):
        return self._a

    def __repr__(self):
        return f"faketorch.Tensor({self._a!r})"


#: allocations above this many elements raise FakeOutOfMemoryError (None: no limit)
LIMIT = [None]
ALLOCATIONS = [0]


def empty(shape, dtype=None, device=None):
    assert device == ("cpu", None), f"fusemath must pass the device, got {device!r}"
    n = int(np.prod(shape, dtype=np.float64))
    if LIMIT[0] is not None and n > LIMIT[0]:
        raise FakeOutOfMemoryError(f"fake: tried to allocate {n} elements")
    ALLOCATIONS[0] += 1
    return Tensor(np.empty(shape, dtype.np), dtype)


def device(kind, index=None):
    return (kind, index)


class _Stream:
    def __init__(self, handle):
        self.cuda_stream = handle


module = types.ModuleType("faketorch")
module.__dict__.update(
    float16=float16, bfloat16=bfloat16, float32=float32, float64=float64, complex64=complex64,
    complex128=complex128, complex32=complex32, uint8=uint8, int8=int8, int32=int32, int64=int64, Tensor=Tensor, empty=empty,
    device=device, OutOfMemoryError=FakeOutOfMemoryError,
    _C=types.SimpleNamespace(_cuda_getCurrentRawStream=lambda index: 0),
    cuda=types.SimpleNamespace(device_count=lambda: 0, current_stream=lambda index=None: _Stream(0),
                               ExternalStream=lambda h, device=None: _Stream(h), synchronize=lambda d=None: None),
)

_LIB = []


def register(mod, name, cls, cache):
    """Register mod as a torch-like library (once, kept in the list cache) and route cls objects
    to it in the front end."""
    if not cache:
        from fusemath import _arrays

        lib = _arrays._TorchLib(mod, name=name)
        _arrays._BY_TYPE[cls] = lib
        cache.append(lib)
    return cache[0]


def install():
    """Register the library (once) and route Tensor objects to it in the front end."""
    return register(module, "faketorch", Tensor, _LIB)


def tensor(array):
    return Tensor(np.asarray(array))


def numpy(x):
    return x.numpy() if isinstance(x, Tensor) else np.asarray(x)


assert fusemath  # imported for its side effects in install()
