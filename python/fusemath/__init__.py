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
from typing import List as _List, NamedTuple as _NamedTuple, Optional as _Optional

from . import _fusemath as _C
from ._fusemath import (  # the error classes (FusemathError's tree) and Plan
    AliasError, BackendError, CancelledError, DeviceError, DtypeError, FusemathError, InternalError,
    InvalidArgumentError, InvalidStateError, LinAlgError, NotApplicableError, NotSupportedError,
    OutOfMemoryError, Plan, ShapeError, TooLargeError, UnavailableError,
)
from . import wisdom
from . import fft  # the module fusemath.fft (numpy.fft-style functions and the FFT planner)
from . import random  # the module fusemath.random (numpy.random.Generator's interface, Philox4x32-10)
from . import linalg  # the module fusemath.linalg (numpy.linalg / scipy.linalg solvers, the Solver planner)
from ._matmul import Matmul, matmul
from ._arrays import int_arg as _int_arg
from ._options import Epilogue, MatmulEpilog, MatmulOptions
# library-wide settings and information, documented in the extension
from ._fusemath import (blas_info, cache_bytes, cache_size, clear_cache, cuda_device_count, get_num_threads,
                        set_cache_max_bytes)

__version__ = _C.__version__
wisdom._warn_on_new_note()  # a saved machine profile from elsewhere, or damaged


# Library-wide settings and information: threads, backends, devices, versions
class BackendInfo(_NamedTuple):
    """One registered backend: ``available`` is False when its device is missing
    (``why`` then says why, else it is None)."""

    name: str
    device: str
    available: bool
    why: _Optional[str]


def set_num_threads(n: int) -> None:
    """Set the number of CPU threads the library uses (BLAS and its own epilogue
    threads together). ``n <= 0`` restores the default: ``FUSEMATH_NUM_THREADS``
    (read at import) or else the number of online cores."""
    n = _int_arg(n, "n", "set_num_threads")  # NumPy integers too
    if n > 4096:  # FM_MAX_THREADS, checked here too: a value past a C int would be a plain ValueError there
        raise _C.InvalidArgumentError(f"set_num_threads: n = {n}, expected <= 4096")
    _C.set_num_threads(max(n, 0))


def backends() -> _List[BackendInfo]:
    """The registered backends, in the order the planner offers problems to them."""
    return [BackendInfo(*entry) for entry in _C.backends()]


def calibrate(quick: bool = True, progress: bool = True) -> str:
    """Measure this machine's profile for ``execution="best"``: each operation family's times
    across sizes on the CPU and the GPU, and the host<->GPU copy rates (seconds with
    ``quick=True``, a minute or two without). It replaces the profile in use, is saved in the
    cache directory (``FUSEMATH_CACHE_DIR``, else ``~/.cache/fusemath``) for later processes, and
    travels with :func:`fusemath.wisdom.save`. ``progress``: a bar on stderr, or a callable
    ``progress(fraction, what)``. Ctrl-C stops it and leaves the previous profile in place.
    Returns :func:`machine_profile`'s text."""
    import sys

    def bar(fraction: float, what: str) -> None:
        done = int(30 * fraction)
        sys.stderr.write(f"\rcalibrating [{'#' * done}{'.' * (30 - done)}] {100 * fraction:3.0f}% {what[:40]:<40}")
        if fraction >= 1:
            sys.stderr.write("\n")
        sys.stderr.flush()

    before = wisdom._profile_note()
    _C.calibrate(bool(quick), progress if callable(progress) else bar if progress else None)
    wisdom._warn_on_new_note(before)  # measured, but not saved
    return machine_profile()


def machine_profile() -> str:
    """The profile ``execution="best"`` predicts from: where it came from (``builtin``: no
    calibration; or why a saved one was ignored), then its curves and copy rates."""
    return _C.profile_text()


def library_version() -> str:
    """Version of the libfusemath actually loaded ("MAJOR.MINOR.PATCH")."""
    return _C.__version__

__all__ = [
    "wisdom", "fft", "linalg", "matmul", "Matmul", "MatmulOptions", "Epilogue", "MatmulEpilog", "Plan",
    "set_num_threads", "get_num_threads", "backends", "blas_info", "BackendInfo", "cuda_device_count",
    "clear_cache", "cache_size", "cache_bytes", "set_cache_max_bytes", "library_version", "calibrate",
    "machine_profile", "CancelledError", "FusemathError", "InvalidArgumentError", "ShapeError", "DtypeError",
    "DeviceError", "NotSupportedError", "NotApplicableError", "OutOfMemoryError", "AliasError", "TooLargeError",
    "BackendError", "UnavailableError", "InvalidStateError", "LinAlgError", "InternalError", "__version__",
]
