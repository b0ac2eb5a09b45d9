"""numpy.fft's helpers for ``fusemath.fft``, on the caller's array library: the sample
frequencies :func:`fftfreq` / :func:`rfftfreq` (``like=`` an array gives them in its library
and on its device) and :func:`fftshift` / :func:`ifftshift` (on the array's own library), so
that code written against numpy.fft runs unchanged. Re-exported by ``fusemath.fft``.
"""
from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ._arrays import NUMPY
from ._fft_args import _axes, _length
from ._fft_arrays import _input


# ---------------------------------------------------------------------------
# Helpers (numpy.fft's, on the caller's array library)
# ---------------------------------------------------------------------------
def _freq(where: str, n: Any, d: Any, device: Any, like: Any, real: bool):
    if isinstance(n, (bool, np.bool_)):
        raise TypeError(f"{where}: n must be an int, not bool")
    n = _length(n, "n", where)
    if device not in (None, "cpu"):
        raise ValueError(f"{where}: device {device!r} is not supported (None or 'cpu', as numpy.fft; "
                         "for a GPU array pass like=x)")
    try:
        if d is None or isinstance(d, (str, bytes, bool, np.bool_)):  # (None would become NaN)
            raise TypeError
        d = float(np.asarray(d, dtype=np.float64).reshape(()))  # a number, or an array of one
    except OverflowError:
        raise ValueError(f"{where}: d (the sample spacing) is too large for a float64") from None
    except (TypeError, ValueError):
        raise TypeError(f"{where}: d (the sample spacing) must be a real number, not {type(d).__name__}") from None
    if not d or not np.isfinite(d):
        raise ValueError(f"{where}: d (the sample spacing) is {d}; expected a finite, nonzero number")
    ref = np.fft.rfftfreq(n, d) if real else np.fft.fftfreq(n, d)
    if like is None:
        return ref
    lib, x = _input(like, "like", where)
    if lib is NUMPY:
        return ref
    if lib.name == "torch":
        t = lib.torch
        return t.as_tensor(ref, device=x.device)
    cp = lib.cupy
    with cp.cuda.Device(lib.device_of(x)):
        return cp.asarray(ref)


def fftfreq(n, d=1.0, device=None, *, like=None):
    """Sample frequencies of an n-point FFT with sample spacing d, as ``numpy.fft.fftfreq``
    ([0, 1, ..., n/2 - 1, -n/2, ..., -1] / (d n), float64). ``device``: None or "cpu" (NumPy
    2's). ``like``: an array whose library and device the result takes (a CuPy array or
    PyTorch tensor on its GPU); None: NumPy."""
    return _freq("fusemath.fft.fftfreq", n, d, device, like, real=False)


def rfftfreq(n, d=1.0, device=None, *, like=None):
    """Sample frequencies of rfft's n // 2 + 1 outputs, as ``numpy.fft.rfftfreq``; ``device``
    and ``like`` as for :func:`fftfreq`."""
    return _freq("fusemath.fft.rfftfreq", n, d, device, like, real=True)


def _shift(where: str, x: Any, axes: Any, inverse: bool):
    lib, a = _input(x, "x", where)
    shape = tuple(a.shape)
    if axes is None:
        ax = tuple(range(len(shape)))
    else:
        try:
            axes = (operator.index(axes),)  # one axis
        except TypeError:
            pass
        if isinstance(axes, (str, bytes)) or not hasattr(axes, "__iter__"):
            raise TypeError(f"{where}: axes must be an int or a sequence of ints, not {type(axes).__name__}")
        # each axis checked; a repeated axis rolls twice, as numpy's
        ax = tuple(_axes((a,), len(shape), "axes", where)[0] for a in axes)
    shifts = tuple(-(shape[i] // 2) if inverse else shape[i] // 2 for i in ax)
    if not ax:  # nothing to roll: a copy, as numpy's
        return a.copy() if lib is NUMPY or not hasattr(a, "clone") else a.clone()
    if lib is NUMPY:
        return np.roll(a, shifts, ax)
    if lib.name == "torch":
        return lib.torch.roll(a, shifts, ax)
    return lib.cupy.roll(a, shifts, ax)


def fftshift(x, axes=None):
    """The zero-frequency term moved to the centre, as ``numpy.fft.fftshift`` (axes: None for
    all, an int or a sequence of ints); a new array of x's library."""
    return _shift("fusemath.fft.fftshift", x, axes, inverse=False)


def ifftshift(x, axes=None):
    """The inverse of :func:`fftshift` (they differ for odd lengths), as
    ``numpy.fft.ifftshift``."""
    return _shift("fusemath.fft.ifftshift", x, axes, inverse=True)
