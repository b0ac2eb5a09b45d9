"""fusemath: planned matmul with fused epilogues on the CPU (OpenBLAS) or the GPU (cuBLASLt).

    >>> import numpy as np, fusemath
    >>> a = np.random.rand(64, 32).astype(np.float32)
    >>> b = np.random.rand(32, 16).astype(np.float32)
    >>> bias = np.zeros(16, np.float32)
    >>> d = fusemath.matmul(a, b, bias=bias, epilogue="relu")    # relu(a @ b + bias)
    >>> mm = fusemath.Matmul(a, b); mm.plan(epilogue="gelu"); d = mm.execute()

NumPy arrays give NumPy results; PyTorch tensors and CuPy arrays (CPU or CUDA) are used
zero-copy and give results of their own library on their own device, computed
asynchronously on the library's current stream (or ``stream=``). Epilogue chains follow
nvmath-python (``epilog=``, ``epilog_inputs={"bias": ..., "relu_aux": ...}``, result keys
``"relu_aux"``, ``"drelu_bgrad"``, ...); see docs/epilogues.md and docs/api.md.

The arithmetic runs in libfusemath with the GIL released. Errors derive from
:class:`FusemathError` and from the matching builtin (ValueError, TypeError, MemoryError, ...).
"""
from . import _fusemath
from ._fusemath import (
    AliasError,
    BackendError,
    DeviceError,
    DtypeError,
    FusemathError,
    InternalError,
    InvalidArgumentError,
    InvalidStateError,
    LinAlgError,
    NotApplicableError,
    NotSupportedError,
    OutOfMemoryError,
    Plan,
    ShapeError,
    TooLargeError,
    UnavailableError,
)
from . import wisdom
from . import fft  # the module fusemath.fft (numpy.fft-style functions and the FFT planner)
from ._matmul import Matmul, matmul
from ._options import Epilogue, MatmulEpilog, MatmulOptions
from ._runtime import (
    BackendInfo,
    backends,
    cache_size,
    clear_cache,
    cuda_device_count,
    get_num_threads,
    library_version,
    set_num_threads,
)

__version__ = _fusemath.__version__

__all__ = [
    "wisdom",
    "fft",
    "matmul",
    "Matmul",
    "MatmulOptions",
    "Epilogue",
    "MatmulEpilog",
    "Plan",
    "set_num_threads",
    "get_num_threads",
    "backends",
    "BackendInfo",
    "cuda_device_count",
    "clear_cache",
    "cache_size",
    "library_version",
    "FusemathError",
    "InvalidArgumentError",
    "ShapeError",
    "DtypeError",
    "DeviceError",
    "NotSupportedError",
    "NotApplicableError",
    "OutOfMemoryError",
    "AliasError",
    "TooLargeError",
    "BackendError",
    "UnavailableError",
    "InvalidStateError",
    "LinAlgError",
    "InternalError",
    "__version__",
]
