"""The CUDA array libraries the GPU tests run on (CuPy, PyTorch), behind one small interface:
what every GPU test file needs (streams, devices, transposed views, host copies). Each test
file subclasses CuPyLib / TorchLib for what only it uses and gets them through `get`."""
import pytest


class CuPyLib:
    name = "cupy"

    def __init__(self):
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("CuPy sees no GPU")
        self.m = cupy

    def host(self, x):
        return self.m.asnumpy(x)

    def empty(self, shape, dtype):
        return self.m.empty(shape, dtype)

    def swap(self, x):
        return self.m.swapaxes(x, -1, -2)

    def is_array(self, x):
        return isinstance(x, self.m.ndarray)

    def device_of(self, x):
        return x.device.id

    def new_stream(self):
        return self.m.cuda.Stream(non_blocking=True)

    def handle(self, s):
        return s.ptr

    def on(self, s):
        return s

    def current_handle(self):
        return self.m.cuda.get_current_stream().ptr

    def synchronize(self):
        self.m.cuda.Device().synchronize()


class TorchLib:
    name = "torch"

    def __init__(self):
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False")
        self.m = torch

    def swap(self, x):
        return x.transpose(-1, -2)

    def device_of(self, x):
        return x.device.index

    def new_stream(self):
        return self.m.cuda.Stream()

    def handle(self, s):
        return s.cuda_stream

    def on(self, s):
        return self.m.cuda.stream(s)

    def current_handle(self):
        return self.m.cuda.current_stream().cuda_stream

    def synchronize(self):
        self.m.cuda.synchronize()


_LIBS = {}


def load(cls):
    """An instance of cls, made once; the exception instead when the library or its GPU is missing."""
    if cls not in _LIBS:
        try:
            _LIBS[cls] = cls()
        except Exception as exc:  # not installed, or no GPU for it
            _LIBS[cls] = exc
    return _LIBS[cls]


def get(cls):
    """load(cls), skipping the calling test when it is unavailable."""
    lib = load(cls)
    if isinstance(lib, Exception):
        pytest.skip(f"{cls.name} unavailable: {lib}")
    return lib
