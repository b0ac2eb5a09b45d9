"""The fused prolog / epilog chains of ``fusemath.fft``: a ``prolog=`` / ``epilog=`` dict
(``scale``, ``multiply``, ``conj``, and on GPU data a CUDA ``source`` / ``name`` / ``data``
callback) parsed into a :class:`_Chain` (the op bits, scale, array and callback the C library
takes), and the checks of a chain's multiply or data array against the transform's input or
output (library, dtype of the data's precision, broadcasting).
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from . import _fusemath as _C
from ._arrays import NUMPY, is_cuda_object, lib_of
from ._fft_arrays import _COMPLEX_OF, _REAL_OF
from ._matmul_args import native_aligned

_OP_SCALE, _OP_MULTIPLY, _OP_CONJ = _C.FFT_OP_SCALE, _C.FFT_OP_MULTIPLY, _C.FFT_OP_CONJ
_CHAIN_KEYS = ("scale", "multiply", "conj", "source", "name", "data")
_OP_CALLBACK = _C.FFT_OP_CALLBACK


class _Chain(tuple):
    """(ops, scale, array, source, name) of one side; array is the multiply or the data array."""
    __slots__ = ()

    def __new__(cls, ops=0, scale=None, arr=None, source=None, name=None):
        return super().__new__(cls, (ops, scale, arr, source, name))

    ops = property(lambda self: self[0])
    scale = property(lambda self: self[1])
    arr = property(lambda self: self[2])
    source = property(lambda self: self[3])
    name = property(lambda self: self[4])

    @property
    def multiplies(self) -> bool:
        return bool(self[0] & _OP_MULTIPLY)

    @property
    def array_key(self) -> str:
        """The dict key the caller passed the array under."""
        return "data" if self[0] & _OP_CALLBACK else "multiply"


CHAIN_SLOTS = ("prolog_array", "epilog_array")  # the C layer's names of the chains' arrays


def restated(where: str, exc: Exception, pro: "_Chain", epi: "_Chain") -> Exception:
    """The library's error in the caller's words, same exception type: `where` first, and the
    chains' arrays named as the caller passed them (prolog['multiply'] or prolog['data']), not by
    the C layer's slot names."""
    msg = str(exc)
    for slot, side, chain in zip(CHAIN_SLOTS, ("prolog", "epilog"), (pro, epi)):
        msg = msg.replace(slot, f"{side}[{chain.array_key!r}]")
    return type(exc)(f"{where}: {msg}")


_NO_CHAIN = _Chain()


def _chain(where: str, name: str, spec: Any) -> _Chain:
    """A prolog / epilog dict -> _Chain."""
    if spec is None:
        return _NO_CHAIN
    if not isinstance(spec, Mapping):
        raise TypeError(f"{where}: {name} must be a dict with keys among {list(_CHAIN_KEYS)}, "
                        f"not {type(spec).__name__}")
    unknown = [k for k in spec if k not in _CHAIN_KEYS]
    if unknown:
        raise _C.InvalidArgumentError(f"{where}: {name} has unknown keys {unknown}; expected some of "
                                      f"{list(_CHAIN_KEYS)}")
    ops = 0
    scale = spec.get("scale")
    if scale is not None:
        if isinstance(scale, (bool, str, bytes)):
            raise TypeError(f"{where}: {name}['scale'] must be a number, not {type(scale).__name__}")
        try:
            scale = complex(scale)
        except OverflowError:
            raise ValueError(f"{where}: {name}['scale'] is too large for a float64") from None
        except (TypeError, ValueError):
            raise TypeError(f"{where}: {name}['scale'] must be a number, not {type(scale).__name__}") from None
        if not (np.isfinite(scale.real) and np.isfinite(scale.imag)):
            raise ValueError(f"{where}: {name}['scale'] = {scale} is not finite")
        ops |= _OP_SCALE
    arr = spec.get("multiply")
    if arr is not None:
        ops |= _OP_MULTIPLY
        if getattr(arr, "ndim", None) == 0:  # a 0-d array broadcasts like a one-element one
            arr = arr.reshape(1)
        if isinstance(arr, np.ndarray):  # big-endian or misaligned: a native aligned copy, as x
            arr = native_aligned(arr)
    conj = spec.get("conj")
    if conj is None:  # absent, as for every other key
        conj = False
    if not isinstance(conj, (bool, np.bool_)):
        raise TypeError(f"{where}: {name}['conj'] must be a bool, not {type(conj).__name__}")
    if conj:
        ops |= _OP_CONJ
    source, fname, data = spec.get("source"), spec.get("name"), spec.get("data")
    if (source is None) != (fname is None):
        raise ValueError(f"{where}: {name} needs both 'source' and 'name' for a CUDA callback")
    if source is not None:
        for key, v in (("source", source), ("name", fname)):
            if not isinstance(v, str):
                raise TypeError(f"{where}: {name}[{key!r}] must be a str, not {type(v).__name__}")
        ops |= _OP_CALLBACK
    if data is not None:
        if source is None:
            raise ValueError(f"{where}: {name}['data'] is only passed to a CUDA callback ('source' and 'name')")
        if arr is not None:
            raise ValueError(f"{where}: {name} has both 'multiply' and 'data'; the callback gets the multiply "
                             "array as its data pointer")
        arr = data
    return _Chain(ops, scale, arr, source, fname)


def _check_chain_array(where: str, name: str, lib, arr, target_shape, data_dtype: np.dtype):
    """The multiply array of a chain: same library, dtype of the data's precision, broadcasting."""
    key = f"{name}['multiply']"
    if lib is NUMPY:
        if not isinstance(arr, np.ndarray):
            if lib_of(arr) is not None or is_cuda_object(arr):
                raise _C.DeviceError(f"{where}: {key} is a {type(arr).__name__} but x is a NumPy array")
            raise TypeError(f"{where}: {key} must be an array, not {type(arr).__name__}")
        dt = arr.dtype
    else:
        if lib_of(arr) is not lib:
            raise TypeError(f"{where}: {key} must be an array of {lib.name} like x, not {type(arr).__name__}")
        dt = lib.dtype_of(arr)
    real = _REAL_OF.get(data_dtype, data_dtype)
    if data_dtype.kind == "c":
        ok, want = (real, _COMPLEX_OF[real]), f"{real} or {_COMPLEX_OF[real]}"
    else:
        ok, want = (real,), f"{real} (the data it multiplies is real)"
    if dt not in ok:
        raise _C.DtypeError(f"{where}: {key} has dtype {dt}, expected {want}")
    shape = tuple(arr.shape)
    if len(shape) > len(target_shape) or any(
            a != t and a != 1 for a, t in zip(reversed(shape), reversed(target_shape))):
        raise _C.ShapeError(f"{where}: {key} has shape {shape}, which does not broadcast against the "
                            f"{'input' if name == 'prolog' else 'output'} shape {tuple(target_shape)}")


def _check_data_array(where: str, name: str, lib, arr) -> None:
    """A callback's data array: any dtype and shape, but x's library (and so its device)."""
    key = f"{name}['data']"
    if lib is NUMPY:
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"{where}: {key} must be an array like x, not {type(arr).__name__}")
    elif lib_of(arr) is not lib:
        raise TypeError(f"{where}: {key} must be an array of {lib.name} like x, not {type(arr).__name__}")


def _check_chain_arrays(where: str, lib, pro: _Chain, epi: _Chain, in_shape, in_dt, out_shape, out_dt) -> None:
    for name, ch, shape, dt in (("prolog", pro, in_shape, in_dt), ("epilog", epi, out_shape, out_dt)):
        if ch.arr is None:
            continue
        if ch.multiplies:
            _check_chain_array(where, name, lib, ch.arr, shape, dt)
        else:
            _check_data_array(where, name, lib, ch.arr)
