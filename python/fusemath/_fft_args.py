"""The arguments of the ``fusemath.fft`` transforms: the transform kinds (c2c, r2c, c2r) and
the norm codes of the C library, the number of axes one library call takes, and the checks
that turn numpy.fft's ``norm``, ``n`` / ``s`` and ``axis`` / ``axes`` into normalised axes and
transform lengths (numpy's errors and messages), for the functions, the helpers and the
:class:`~fusemath.fft.FFT` planner alike.
"""
from __future__ import annotations

import operator
from typing import Any, Optional, Tuple

import numpy as np

from . import _fusemath as _C
from ._arrays import int_arg

_C2C, _R2C, _C2R = _C.FFT_C2C, _C.FFT_R2C, _C.FFT_C2R
_NORMS = {None: _C.FFT_NORM_BACKWARD, "backward": _C.FFT_NORM_BACKWARD, "ortho": _C.FFT_NORM_ORTHO,
          "forward": _C.FFT_NORM_FORWARD}
_MAX_AXES = 3  # the planner's axes


# ---------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------
def _norm_code(norm: Any, where: str) -> int:
    try:
        return _NORMS[norm]
    except (KeyError, TypeError):
        raise ValueError(f'{where}: invalid norm value {norm!r}; should be "backward", "ortho" or "forward"') from None


def _length(n: Any, name: str, where: str, keep: Optional[int] = None) -> int:
    """n as a transform length; with keep (the input's extent), -1 means keep it (NumPy 2's s[i])."""
    v = int_arg(n, name, where)  # bools refused, as NumPy does
    if v == -1 and keep is not None:
        v = keep
    if v < 1:
        raise ValueError(f"{where}: invalid number of FFT data points ({v}) specified in {name}; expected >= 1")
    if v > _MAX_POINTS:
        raise ValueError(f"{where}: {name} = {v} is too large (at most 2**58 points: a result must be addressable "
                         "in bytes)")
    return v


_MAX_POINTS = 1 << 58  # 16-byte elements within a signed 64-bit byte count


def _axes(axes: Any, ndim: int, name: str, where: str) -> Tuple[int, ...]:
    """Normalised axes (0 <= a < ndim), distinct."""
    if isinstance(axes, (str, bytes)) or not hasattr(axes, "__iter__"):
        raise TypeError(f"{where}: {name} must be a sequence of ints, not {type(axes).__name__}")
    out = []
    for a in axes:
        if isinstance(a, (bool, np.bool_)):
            raise TypeError(f"{where}: {name} must contain ints, not bool")
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
    if not axes:
        raise ValueError(f"{where}: {aname if s is None or len(s) else sname} is empty: there is nothing to "
                         "transform (give at least one axis)")
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
            v = _length(v, sname if one_d else f"{sname}[{i}]", where, keep=None if one_d else x.shape[a])
        n.append(v)
    return axes, tuple(n)
