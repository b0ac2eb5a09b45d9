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
to the default plan. The CPU FFT's timed choices are results like autotune's: a plan made with
``fusemath.fft.FFT.plan(effort="measure" | "patient")`` times FFTW's own plan against the
library's paths (``describe()`` says ``timed``) and remembers the faster (one ``fft`` line of
the file; planned from there, ``describe()`` says ``wisdom``). FFTW's own wisdom (the plans it
measured) travels in the same file, so a later process plans those FFTs without measuring or
timing again. Files of an earlier format version load without error, but their results are not
applied (they were keyed differently); the FFTW wisdom in them still is. The machine profile of
``execution="best"`` (:func:`fusemath.calibrate`) travels in the file too; one measured on another
machine or by another version, or damaged, is ignored with a RuntimeWarning.
"""
from __future__ import annotations

import os
import warnings
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
    """Write the results of this process (autotune's, the CPU FFT's timed choices) and FFTW's
    wisdom to ``path`` (replaced atomically).
    Raises ValueError (InvalidArgumentError) when the file cannot be written."""
    _C.wisdom_save(_path(path, "save"))


def load(path: PathLike) -> None:
    """Merge the results in ``path`` into this process. Raises ValueError
    (InvalidArgumentError) naming the path when it cannot be read or is not a wisdom file;
    nothing is merged from a malformed file."""
    before = _profile_note()
    _C.wisdom_load(_path(path, "load"))
    _warn_on_new_note(before)


def _profile_note() -> str:
    """The profile text's "note: ..." line (why a profile was ignored or not saved), or ""."""
    return next((ln for ln in _C.profile_text().splitlines() if ln.startswith("note: ")), "")


def _warn_on_new_note(before: str = "") -> None:
    """A RuntimeWarning when the machine profile has a new note: a saved or loaded profile that was
    ignored (corrupt, another machine or version), a calibration that could not be saved."""
    note = _profile_note()
    if note and note != before:
        warnings.warn(f"fusemath: machine profile {note}", RuntimeWarning, stacklevel=3)


def size() -> int:
    """Number of results held (autotune's and the CPU FFT's timed choices)."""
    return _C.wisdom_size()


def forget() -> None:
    """Drop the results of this process (autotune's, the CPU FFT's timed path choices) and the
    backends' planning knowledge (FFTW's wisdom): later plans are tuned or timed afresh. Plans
    already made, and cached, are kept."""
    _C.wisdom_forget()
