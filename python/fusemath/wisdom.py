"""Autotune results that outlive the process.

``Matmul.autotune()`` times the candidate plans (CPU panel sizes; GPU cuBLASLt algorithms,
fused and as GEMM + separate epilogue kernel) and remembers the winner. ``save`` writes
every remembered result to a text file; ``load`` in a later process merges them back, after
which planning a tuned problem gives the tuned plan without timing again::

    mm = fusemath.Matmul(a, b); mm.plan(epilogue="bias+relu", bias=b0); mm.autotune()
    fusemath.wisdom.save("fusemath.wisdom")
    # later, in another process:
    fusemath.wisdom.load("fusemath.wisdom")

A result that no longer plans where it is loaded (another GPU, another cuBLASLt) falls back
to the default plan. FFTW's own wisdom (the plans measured by ``fusemath.fft.FFT.plan(effort=
"measure" | "patient")``) travels in the same file, with the paths those plans timed against
FFTW's (``describe()`` says ``timed``; after a load, ``wisdom``), so a later process plans those
FFTs without measuring or timing again.
"""
from __future__ import annotations

import os
from typing import Union

from . import _fusemath as _C

__all__ = ["save", "load", "size", "forget"]

PathLike = Union[str, bytes, "os.PathLike[str]"]


def _path(path: PathLike, what: str):
    try:
        p = os.fspath(path)
    except TypeError:
        raise TypeError(f"fusemath.wisdom.{what}: path must be a str, bytes or os.PathLike, "
                        f"not {type(path).__name__}") from None
    if ("\0" if isinstance(p, str) else b"\0") in p:
        raise ValueError(f"fusemath.wisdom.{what}: path {p!r} contains a NUL character")
    return p


def save(path: PathLike) -> None:
    """Write the autotune results of this process to ``path`` (replaced atomically).
    Raises ValueError (InvalidArgumentError) when the file cannot be written."""
    _C.wisdom_save(_path(path, "save"))


def load(path: PathLike) -> None:
    """Merge the autotune results in ``path`` into this process. Raises ValueError
    (InvalidArgumentError) naming the path when it cannot be read or is not a wisdom file;
    nothing is merged from a malformed file."""
    _C.wisdom_load(_path(path, "load"))


def size() -> int:
    """Number of autotune results held."""
    return _C.wisdom_size()


def forget() -> None:
    """Drop the autotune results of this process and the backends' planning knowledge (FFTW's
    wisdom, the CPU FFT's timed path choices): later plans are tuned or timed afresh. Plans
    already made, and cached, are kept."""
    _C.wisdom_forget()
