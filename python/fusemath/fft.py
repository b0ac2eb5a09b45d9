"""``fusemath.fft``: NumPy-compatible FFTs with fused prolog / epilog, and the :class:`FFT` planner.

    >>> import numpy as np, fusemath.fft as ff
    >>> x = np.random.rand(1024)
    >>> y = ff.rfft(x)                                   # == numpy.fft.rfft(x)
    >>> w = np.hanning(1024)
    >>> y = ff.rfft(x, prolog={"multiply": w}, epilog={"scale": 2.0})   # 2 * rfft(w * x), one pass
    >>> with ff.FFT(x.astype(complex)) as f:
    ...     f.plan(); y = f.execute(); z = f.execute(direction="inverse")

hfft / ihfft (numpy.fft's, the conjugation fused into the transform). Helpers as numpy.fft's:
fftfreq, rfftfreq (``like=`` an array: the result in its library and on
its device), fftshift, ifftshift (on the array's own library), so that code written against
numpy.fft runs unchanged.

Functions: fft, ifft, fft2, ifft2, fftn, ifftn, rfft, irfft, rfft2, irfft2, rfftn, irfftn with
numpy.fft's signatures (``n`` / ``s`` crop or zero-pad the input, ``axis`` / ``axes``,
``norm="backward" | "ortho" | "forward"``, ``out=``), plus the keywords

``prolog=`` / ``epilog=``: a dict ``{"scale": s, "multiply": array, "conj": bool}`` (any subset):
    the chain ``v -> conj?(v * scale * array)`` applied elementwise to the transform's input
    as it is loaded (prolog; after ``n`` / ``s`` padding or cropping) or to its output as it
    is stored (epilog; after the ``norm`` scaling). ``scale`` is a real or complex number;
    ``multiply`` an array of the data's precision (float32 / complex64 data take float32 or
    complex64, float64 / complex128 data float64 or complex128; real data - the input of
    rfft*, the output of irfft* - take a real array only) broadcasting against the input
    (prolog) or output (epilog) with NumPy rules; ``conj`` conjugates (ignored on real data).
    On GPU data a chain may also end with the caller's own CUDA C++ device function: keys
    ``"source"`` (the code) and ``"name"`` (the function), optionally ``"data"`` (an array of
    x's library handed to the function as a pointer, without being multiplied). Signature:
    ``__device__ T name(T x, unsigned long long offset, const void *data)`` with T float2
    (complex64 data), double2 (complex128), float (float32) or double (float64); offset is the
    element offset of x from the input's (prolog) or output's (epilog) data pointer (the flat
    index for C-contiguous arrays), data the "data" (or "multiply") array or NULL. It runs
    after scale / multiply / conj, compiled once with NVRTC into the cuFFT callback (cached on
    disk). A name the source does not define, or code that does not compile, raises
    InvalidArgumentError with the compiler's log; on NumPy data NotSupportedError.
``execution=``: None (where x lives), "cpu", "cuda", "cuda:N". ``stream=``: CUDA stream for
    GPU arrays (None: the array library's current stream).

Dtypes follow NumPy 2: float32 / float16 input gives complex64, float64 / integer / bool
input complex128; complex input to rfft* is a TypeError. Half precision stays half on PyTorch
CUDA tensors (cuFFT, as torch.fft does): float16 input gives torch.complex32, complex32 input
is taken as it is (irfft* gives float16); every transformed length must be a power of two, and
a prolog / epilog runs as a separate pass computing in float (a "source" function takes float2
/ float). NumPy and CuPy float16 input is promoted as above (neither has complex32); a complex32
tensor on the CPU raises NotSupportedError. Results are arrays of the input's
library (NumPy -> NumPy; PyTorch / CuPy arrays on their device once a backend for it exists).
Transforms over more than 3 axes run as several steps in the core (prolog in the first,
epilog in the last).
"""
from __future__ import annotations

import operator
from typing import Any, Tuple

import numpy as np

from . import _fusemath as _C
from ._arrays import _NUMPY_DTYPES, NUMPY, into_out
from ._fft_arrays import (
    _C2C,
    _C2R,
    _R2C,
    _axes,
    _chain,
    _cook,
    _half_on_gpu,
    _input,
    _length,
    _norm_code,
    _promote,
    _resize,
    check_libs,
)
from ._fft_plan import FFT, options
from ._options import _DEFAULT_OPTIONS, _resolve_execution

__all__ = [
    "fft", "ifft", "fft2", "ifft2", "fftn", "ifftn",
    "rfft", "irfft", "rfft2", "irfft2", "rfftn", "irfftn", "hfft", "ihfft",
    "fftfreq", "rfftfreq", "fftshift", "ifftshift",
    "FFT",
]


# ---------------------------------------------------------------------------
# The common driver
# ---------------------------------------------------------------------------
_call, _FFT, _RUN = _C.call, _C.OP_FFT, _C.CALL_RUN
# effort, execution, device_id, num_threads, the chains (none), gpu_prolog, n (c2r: the default)
_PLAIN_OPTIONS = (_C.FFT_EFFORT_ESTIMATE, _C.EXECUTION_AUTO, 0, 0, 0, None, 0, None, None, None, None, None,
                  _C.FFT_PROLOG_AUTO, 0)
_FAST_DTYPES = {_C2C: (np.dtype(np.complex64), np.dtype(np.complex128)),
                _R2C: (np.dtype(np.float32), np.dtype(np.float64)),
                _C2R: (np.dtype(np.complex64), np.dtype(np.complex128))}


def _run_plain(where: str, x: np.ndarray, axes: Any, norm: Any, kind: int, inverse: bool):
    """A NumPy array of the transform's own dtype, no n / s, out, chain or execution, int axes
    (None: all): one C call (a cached plan makes it ~2 us). None when the call needs the general
    path, which then checks and explains in numpy's words (axes out of range or repeated, a 0-d
    or too short x) or transforms a native, aligned copy (a misaligned or byte-strided x)."""
    if x.dtype not in _FAST_DTYPES[kind] or x.size == 0:
        return None
    if axes is None:
        axes = range(x.ndim)
    elif type(axes) not in (list, tuple):
        return None
    for a in axes:
        if type(a) is not int:
            return None
    norm = _norm_code(norm, where)
    try:
        return _call(_FFT, _RUN, NUMPY.index, (x, None, None, None), (kind, inverse, axes, norm) + _PLAIN_OPTIONS,
                     None, 3, where)
    except ValueError:
        return None


def _run(where: str, a: Any, s: Any, axes: Any, norm: Any, out: Any, prolog: Any, epilog: Any, *, kind: int,
         inverse: bool, one_d: bool, execution: Any = None, stream: Any = None):
    if (type(a) is np.ndarray and s is None and out is None and prolog is None and epilog is None
            and execution is None and stream is None):
        res = _run_plain(where, a, axes, norm, kind, inverse)
        if res is not None:
            return res
    lib, x = _input(a, "x", where)
    norm_code = _norm_code(norm, where)
    pro = _chain(where, "prolog", prolog, real_data=kind == _R2C)
    epi = _chain(where, "epilog", epilog, real_data=kind == _C2R)
    ex, dev_id, nth, _ = _resolve_execution(execution, _DEFAULT_OPTIONS, where)
    axes_t, n = _cook(where, x, s, axes, kind, one_d)
    if not axes_t:
        # numpy: no axes (an empty axes list, or a 0-d x) transforms nothing (a copy of x); a chain
        # or out= would be skipped silently by that copy, and rfftn/irfftn have no last axis to halve
        if kind != _C2C or out is not None or pro.ops or epi.ops:
            raise ValueError(f"{where}: axes is empty: there is nothing to transform"
                             + ("" if kind == _C2C else " (rfftn/irfftn need at least one axis)")
                             + ("; prolog=, epilog= and out= need at least one axis" if kind == _C2C else ""))
        return np.array(x, copy=True) if lib is NUMPY else x.clone() if hasattr(x, "clone") else x.copy()
    if len(set(axes_t)) < len(axes_t):
        return _run_repeated(where, x, axes_t, n, (norm, out, prolog, epilog), kind, inverse, (execution, stream))
    in_len = list(n)  # the input's lengths: the output's, but for c2r's halved last axis
    if kind == _C2R:
        in_len[-1] = n[-1] // 2 + 1
    x = _promote(where, lib, _resize(lib, x, axes_t, in_len, where), kind, _half_on_gpu(lib, x, ex))
    check_libs(where, lib, out, pro, epi)
    opts = options(kind, inverse, axes_t, (ex, dev_id, nth), n[-1] if kind == _C2R else 0, (pro, epi), norm_code)
    ops = (x, out, pro.arr, epi.arr)
    # (a layout cuFFT cannot take runs through a staged device copy in the backend: describe() says so)
    try:
        return _call(_FFT, _RUN, lib.index, ops, opts, stream, 3, where)
    except _C.FusemathError:
        if type(out) is not np.ndarray or out.dtype.kind not in "biufc":
            raise
        # numpy.fft's out= of another dtype than the result's (the core's output spec says which)
        rdt = _NUMPY_DTYPES[_call(_FFT, _C.CALL_SPECS, lib.index, (x, None) + ops[2:], opts, None, 3, where)[0][2]]
        if out.dtype == rdt:
            raise
    return into_out(where, out, rdt, lambda: _call(_FFT, _RUN, lib.index, (x, None) + ops[2:], opts, stream, 3, where),
                    ufunc="fft")


def _run_repeated(where: str, x: Any, axes: Tuple[int, ...], n: Tuple[int, ...], args: Tuple, kind: int,
                  inverse: bool, place: Tuple):
    """numpy 2's fftn / rfftn / ifftn / irfftn over axes that repeat one: its 1-D transforms in its
    order (c2c and rfftn from the last axis back, irfftn's c2c from the first, the r2c first and
    the c2r last), runs of distinct axes fused into one call each (they commute); the prolog in the
    first call, the epilog and out in the last."""
    k = len(axes) - 1
    order = list(range(k, -1, -1)) if kind == _C2C else [k] + list(range(k - 1, -1, -1)) if kind == _R2C \
        else list(range(k + 1))
    groups: list = []  # runs of distinct axes, as indices into axes
    for i in (order if kind != _C2R else reversed(order)):  # c2r: grouped from its end, r2c's is its start
        if not groups or axes[i] in [axes[j] for j in groups[-1]]:
            groups.append([])
        groups[-1].append(i)
    if kind == _C2R:
        groups = [g[::-1] for g in reversed(groups)]
    norm, out, prolog, epilog = args
    for g, idx in enumerate(groups):
        special = kind != _C2C and k in idx  # the halved axis goes last in its call
        idx = sorted(idx, key=lambda i: (special and i == k, i))
        first, last = g == 0, g == len(groups) - 1
        x = _run(where, x, [n[i] for i in idx], [axes[i] for i in idx], norm, out if last else None,
                 prolog if first else None, epilog if last else None, kind=kind if special else _C2C,
                 inverse=inverse, one_d=False, execution=place[0], stream=place[1])
    return x


# ---------------------------------------------------------------------------
# numpy.fft functions
# ---------------------------------------------------------------------------
def _one_d(name: str, kind: int, inverse: bool, doc: str):
    """A numpy.fft function over one axis (fft, ifft, rfft, irfft): numpy's signature, _run's work."""
    where = "fusemath.fft." + name

    def func(a, n=None, axis=-1, norm=None, out=None, *, prolog=None, epilog=None, execution=None,
             stream=None):
        return _run(where, a, None if n is None else [n], [axis], norm, out, prolog, epilog, kind=kind,
                    inverse=inverse, one_d=True, execution=execution, stream=stream)

    func.__name__ = func.__qualname__ = name
    func.__doc__ = doc
    return func


def _n_d(name: str, kind: int, inverse: bool, default_axes: Any, doc: str):
    """A numpy.fft function over several axes (fft2, fftn, rfft2, ...): numpy's signature, _run's work."""
    where = "fusemath.fft." + name

    def func(a, s=None, axes=default_axes, norm=None, out=None, *, prolog=None, epilog=None, execution=None,
             stream=None):
        return _run(where, a, s, axes, norm, out, prolog, epilog, kind=kind, inverse=inverse, one_d=False,
                    execution=execution, stream=stream)

    func.__name__ = func.__qualname__ = name
    func.__doc__ = doc
    return func


_2D = (-2, -1)
fft = _one_d("fft", _C2C, False, """1-D discrete Fourier transform, as ``numpy.fft.fft`` (plus ``prolog`` /
    ``epilog``).""")
ifft = _one_d("ifft", _C2C, True, """1-D inverse discrete Fourier transform, as ``numpy.fft.ifft``.""")
fft2 = _n_d("fft2", _C2C, False, _2D, """2-D discrete Fourier transform, as ``numpy.fft.fft2``.""")
ifft2 = _n_d("ifft2", _C2C, True, _2D, """2-D inverse discrete Fourier transform, as ``numpy.fft.ifft2``.""")
fftn = _n_d("fftn", _C2C, False, None, """N-D discrete Fourier transform, as ``numpy.fft.fftn`` (any number of
    axes).""")
ifftn = _n_d("ifftn", _C2C, True, None, """N-D inverse discrete Fourier transform, as ``numpy.fft.ifftn``.""")
rfft = _one_d("rfft", _R2C, False, """1-D FFT of real input, as ``numpy.fft.rfft``: length n -> n // 2 + 1.
    Complex input: TypeError.""")
irfft = _one_d("irfft", _C2R, True, """Inverse of rfft, as ``numpy.fft.irfft``: output length n (default
    2 * (m - 1)); the input is cropped or zero-padded to n // 2 + 1 along axis.""")
rfft2 = _n_d("rfft2", _R2C, False, _2D, """2-D FFT of real input, as ``numpy.fft.rfft2`` (the last axis is
    halved).""")
irfft2 = _n_d("irfft2", _C2R, True, _2D, """Inverse of rfft2, as ``numpy.fft.irfft2``.""")
rfftn = _n_d("rfftn", _R2C, False, None, """N-D FFT of real input, as ``numpy.fft.rfftn`` (the last of axes is
    halved).""")
irfftn = _n_d("irfftn", _C2R, True, None, """Inverse of rfftn, as ``numpy.fft.irfftn`` (the last of axes has
    output length s[-1], default 2 * (m - 1)).""")


_SWAPPED_NORM = {None: "forward", "backward": "forward", "ortho": "ortho", "forward": "backward"}


def _swapped_norm(norm: Any, where: str) -> str:
    _norm_code(norm, where)  # an unknown norm is an error naming it
    return _SWAPPED_NORM[norm]


def hfft(a, n=None, axis=-1, norm=None, out=None, *, execution=None, stream=None):
    """FFT of a signal with Hermitian symmetry, given by its first half (a real spectrum), as
    ``numpy.fft.hfft``: ``irfft(conj(a), n, norm=<swapped>)``, the conjugation fused into the
    transform as a prolog (one call, no conjugated copy). Output length n along axis (default
    2 * (m - 1)), real."""
    where = "fusemath.fft.hfft"
    return _run(where, a, None if n is None else [n], [axis], _swapped_norm(norm, where), out, {"conj": True}, None,
                kind=_C2R, inverse=True, one_d=True, execution=execution, stream=stream)


def ihfft(a, n=None, axis=-1, norm=None, out=None, *, execution=None, stream=None):
    """Inverse of :func:`hfft`, as ``numpy.fft.ihfft``: ``conj(rfft(a, n, norm=<swapped>))``,
    the conjugation fused into the transform as an epilog. Real input; n // 2 + 1 complex
    outputs along axis."""
    where = "fusemath.fft.ihfft"
    return _run(where, a, None if n is None else [n], [axis], _swapped_norm(norm, where), out, None, {"conj": True},
                kind=_R2C, inverse=False, one_d=True, execution=execution, stream=stream)


# ---------------------------------------------------------------------------
# Helpers (numpy.fft's, on the caller's array library)
# ---------------------------------------------------------------------------
def _freq(where: str, n: Any, d: Any, device: Any, like: Any, real: bool):
    if not isinstance(n, (int, np.integer)):  # numpy's class and words (bools: _length's TypeError)
        raise ValueError(f"n should be an integer ({where}: n = {n!r})")
    n = _length(n, "n", where)  # bools refused
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
    if not ax and not shape:  # numpy's roll of a 0-d array over no axes fails so
        raise ValueError(f"not enough values to unpack (expected 2, got 0) ({where}: x is 0-d: there is no axis "
                         "to shift, as numpy.fft refuses it)")
    if not ax:  # nothing to roll: a copy, as numpy's
        return a.copy() if lib is NUMPY or not hasattr(a, "clone") else a.clone()
    xp = getattr(lib, "torch", None) or getattr(lib, "cupy", None) or np  # roll(a, shifts, axes) in each
    return xp.roll(a, shifts, ax)


def fftshift(x, axes=None):
    """The zero-frequency term moved to the centre, as ``numpy.fft.fftshift`` (axes: None for
    all, an int or a sequence of ints); a new array of x's library."""
    return _shift("fusemath.fft.fftshift", x, axes, inverse=False)


def ifftshift(x, axes=None):
    """The inverse of :func:`fftshift` (they differ for odd lengths), as
    ``numpy.fft.ifftshift``."""
    return _shift("fusemath.fft.ifftshift", x, axes, inverse=True)
