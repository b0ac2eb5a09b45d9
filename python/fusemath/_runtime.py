"""Library-wide settings and information: threads, backends, devices, versions."""
from __future__ import annotations

from typing import List, NamedTuple, Optional

from . import _fusemath as _C
from ._arrays import int_arg

__all__ = [
    "BackendInfo",
    "backends",
    "cuda_device_count",
    "get_num_threads",
    "set_num_threads",
    "clear_cache",
    "cache_size",
    "library_version",
]


class BackendInfo(NamedTuple):
    """One registered backend: ``available`` is False when its device is missing
    (``why`` then says why, else it is None)."""

    name: str
    device: str
    available: bool
    why: Optional[str]


_MAX_THREADS = 4096  # FM_MAX_THREADS (core/src/internal.h)


def set_num_threads(n: int) -> None:
    """Set the number of CPU threads the library uses (BLAS and its own epilogue
    threads together). ``n <= 0`` restores the default: ``FUSEMATH_NUM_THREADS``
    (read at import) or else the number of online cores."""
    n = int_arg(n, "n", "set_num_threads")  # NumPy integers too
    if n > _MAX_THREADS:  # checked here too: a value past a C int would be an OverflowError there
        raise _C.InvalidArgumentError(f"set_num_threads: n = {n}, expected <= {_MAX_THREADS}")
    _C.set_num_threads(max(n, 0))


def get_num_threads() -> int:
    """The number of CPU threads the library uses."""
    return _C.get_num_threads()


def backends() -> List[BackendInfo]:
    """The registered backends, in the order the planner offers problems to them."""
    return [BackendInfo(*entry) for entry in _C.backends()]


def cuda_device_count() -> int:
    """Number of usable CUDA devices; 0 without a CUDA build, driver or GPU."""
    return _C.cuda_device_count()


def clear_cache() -> None:
    """Drop the library's cached plans (plans held by Matmul objects stay valid)."""
    _C.clear_cache()


def cache_size() -> int:
    """Number of plans in the library's cache."""
    return _C.cache_size()


def library_version() -> str:
    """Version of the libfusemath actually loaded ("MAJOR.MINOR.PATCH")."""
    return _C.__version__
