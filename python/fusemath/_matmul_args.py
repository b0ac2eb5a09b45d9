"""The arguments of ``fusemath.matmul`` and ``fusemath.Matmul`` before they make a problem:
the epilogue bits and their tables (activations, chains with a second result, epilog_inputs
keys), NumPy's type promotion and out= rules, a and b taken from PyTorch / CuPy / other GPU
arrays, and the parsing of the epilogue arguments (``epilogue`` / ``epilog``, ``epilog_inputs``,
``bias``, ``clamp``) and of fp8 ``quantization_scales``.
"""
from __future__ import annotations

import numbers
from typing import Any, Mapping

import numpy as np

from . import _fusemath as _C
from ._arrays import NUMPY, adopt, is_cuda_object, lib_of, remembered_copy
from ._options import Epilogue

_ndarray = np.ndarray
_BIAS, _CLAMP, _SCALE = int(Epilogue.BIAS), int(Epilogue.CLAMP), int(Epilogue.SCALE)
_DRELU, _DGELU = int(Epilogue.DRELU), int(Epilogue.DGELU)
_DROPOUT, _DDROPOUT = int(Epilogue.DROPOUT), int(Epilogue.DDROPOUT)
_INPUT_KEYS = ("bias", "relu_aux", "gelu_aux", "dropout_aux", "scale")
_AUX_KEYS = {_DRELU: "relu_aux", _DGELU: "gelu_aux", _DDROPOUT: "dropout_aux"}  # the aux input of each backward chain


def aux_key(epi: int):
    """The epilog_inputs key of the aux a backward chain reads (None for other chains; two kinds
    together are the library's refusal)."""
    return next((k for bit, k in _AUX_KEYS.items() if epi & bit), None)


def _epilogue_name(bits: int) -> str:
    try:
        return _C.epilogue_format(bits)
    except ValueError:
        return hex(bits)


# ---------------------------------------------------------------------------
# Array arguments
# ---------------------------------------------------------------------------
def promote(ops: list, slots, given) -> Any:
    """NumPy's type promotion: the NumPy arrays ops[i], i in slots, that differ from their common
    dtype (np.result_type; a Python number among the arguments as given is weak, as in NumPy 2's
    ``a @ b + 1.0``) replaced by copies of that dtype (remembered_copy); returns the common dtype
    (None when there is none: the library's dtype error then says which operand)."""
    dts = [given[i] if type(given[i]) in (int, float, complex) else ops[i].dtype
           for i in slots if isinstance(ops[i], _ndarray)]
    try:
        dt = np.result_type(*dts) if dts else None
    except TypeError:  # no common dtype (strings, objects)
        return None
    for i in slots:
        if isinstance(ops[i], _ndarray) and ops[i].dtype != dt:
            ops[i] = remembered_copy(ops[i], dt)
    return dt


def overlaps_input(out: np.ndarray, ops) -> bool:
    """Whether out's memory extent meets that of an input among ops (a, b, c, bias) other than c
    itself (an exact in-place D = C the library takes)."""
    return any(isinstance(x, _ndarray) and not (i == 2 and x is out) and np.may_share_memory(out, x)
               for i, x in enumerate(ops[:4]))


def recast_out(out: Any, dt) -> bool:
    """Whether out is a NumPy array of a number dtype other than dt, which into_out fills (an out of
    strings, objects etc. stays the library's refusal)."""
    return isinstance(out, _ndarray) and dt is not None and out.dtype != dt and out.dtype.kind in "biufc"


def _dtype_of(x):
    """Canonical dtype (np.dtype, or BF16) of a NumPy or library array."""
    return (lib_of(x) or NUMPY).dtype_of(x)


def _foreign(a: Any, b: Any, where: str):
    """(lib, a, b) when a or b is a PyTorch/CuPy array or another GPU array (viewed through
    CuPy/PyTorch); None when both are host arrays for the NumPy path."""
    lib = lib_of(a) or lib_of(b)
    if lib is not None:
        return lib, a, b
    if type(a) is not _ndarray and is_cuda_object(a):
        lib, a = adopt(a, "a", where)
        return lib, a, b
    if type(b) is not _ndarray and is_cuda_object(b):
        lib, b = adopt(b, "b", where)
        return lib, a, b
    return None


def _merge_epilog(where: str, epilogue: Any, epilog: Any) -> Any:
    if epilog is None:
        return epilogue
    if epilogue is not None:
        raise TypeError(f"{where}: give either epilogue or epilog, not both")
    return epilog


def _quantization_scales(where: str, lib, a: Any, scales: Any):
    """nvmath-python's quantization_scales for fp8 inputs -> (a_scale, b_scale): a dict
    {"a": s, "b": s} (or an object with attributes a and b); each a Python number or a
    one-element float32 array on the operands' device; missing keys mean 1."""
    if isinstance(scales, Mapping):
        unknown = [k for k in scales if k not in ("a", "b")]
        if unknown:
            raise _C.InvalidArgumentError(
                f"{where}: quantization_scales has keys {unknown}; expected 'a' and/or 'b' (fp8 output, "
                "hence a 'd' scale, is not supported)"
            )
        sa, sb = scales.get("a"), scales.get("b")
    else:
        if not (hasattr(scales, "a") or hasattr(scales, "b")) or isinstance(scales, (str, bytes, numbers.Number)):
            raise TypeError(f"{where}: quantization_scales must be a dict {{'a': ..., 'b': ...}} or an object with "
                            f"attributes a and b, not {type(scales).__name__}")
        sa, sb = getattr(scales, "a", None), getattr(scales, "b", None)
        if getattr(scales, "d", None) is not None:
            raise _C.InvalidArgumentError(f"{where}: quantization_scales.d is not supported (no fp8 output)")
    out = []
    for v in (sa, sb):
        if isinstance(v, (int, float)):  # a number: a one-element float32 array on the operands' device
            arr = _C.lib_empty(lib.index, (1,), "f32", lib.device_of(a))
            arr[0] = float(v)
            v = arr
        out.append(v)
    return out[0], out[1]


def checked_inputs(where: str, epilog_inputs: Any, bias: Any) -> Mapping:
    """epilog_inputs, when it is a dict of known keys whose bias is not also given as bias=."""
    if not isinstance(epilog_inputs, Mapping):
        raise TypeError(f"{where}: epilog_inputs must be a dict such as {{'bias': array}}")
    unknown = [k for k in epilog_inputs if k not in _INPUT_KEYS]
    if unknown:
        raise _C.InvalidArgumentError(f"{where}: unknown epilog_inputs {unknown}; expected some of {list(_INPUT_KEYS)}")
    if bias is not None and "bias" in epilog_inputs:
        raise TypeError(f"{where}: give the bias either as bias= or in epilog_inputs, not both")
    return epilog_inputs


def _split_inputs(where: str, epi: int, bias: Any, epilog_inputs: Any, clamp: Any):
    """Epilogue arguments -> (bits, bias, scale, aux input, clamp). bias=, scale and clamp=
    imply their bits (like nvmath's epilog_inputs); the aux key must be the chain's. The library
    checks that each input the chain reads is given, the clamp pair (lo <= hi) and that the chain
    has a meaning."""
    scale = None
    auxes = {}  # the aux inputs given, by key
    if epilog_inputs is not None:
        if "bias" in checked_inputs(where, epilog_inputs, bias):
            bias = epilog_inputs["bias"]
        scale = epilog_inputs.get("scale")
        auxes = {k: epilog_inputs[k] for k in _AUX_KEYS.values() if epilog_inputs.get(k) is not None}
    epi |= (_BIAS if bias is not None else 0) | (_SCALE if scale is not None else 0) | (
        _CLAMP if clamp is not None else 0)
    if epi & _CLAMP and clamp is None:
        raise _C.InvalidArgumentError(
            f"{where}: epilogue {_epilogue_name(epi)!r} clamps but clamp=(lo, hi) was not given")
    key = aux_key(epi)
    aux_in = auxes.pop(key, None)
    if auxes:
        raise _C.InvalidArgumentError(
            f"{where}: epilog_inputs[{next(iter(auxes))!r}] does not go with {_epilogue_name(epi)!r}" +
            (f", which takes {key!r}" if key else " (an input of DRELU / DGELU / DDROPOUT and their _BGRAD forms only)"))
    return epi, bias, scale, aux_in, clamp


# ---------------------------------------------------------------------------
# Dropout
# ---------------------------------------------------------------------------
def _dropout_arg(where: str, epi: int, dropout: Any):
    """dropout= -> (p, generator): ``(p, generator)`` for a chain with DROPOUT (the mask is drawn
    from the generator's stream), ``p`` (or ``(p, None)``) for DDROPOUT, which only scales by
    1/(1-p) through the forward pass's mask. The library checks p's range."""
    if not epi & (_DROPOUT | _DDROPOUT):
        if dropout is not None:
            raise _C.InvalidArgumentError(
                f"{where}: dropout= was given but the epilogue {_epilogue_name(epi)!r} has no dropout "
                "(e.g. epilogue='relu+dropout' with dropout=(p, generator), or 'ddropout' with dropout=p)")
        return None, None
    if isinstance(dropout, tuple) and len(dropout) == 2:
        p, gen = dropout
    elif isinstance(dropout, numbers.Real) and not isinstance(dropout, bool):
        p, gen = dropout, None
    elif dropout is None:
        raise _C.InvalidArgumentError(
            f"{where}: epilogue {_epilogue_name(epi)!r} needs dropout=(p, generator)" if epi & _DROPOUT else
            f"{where}: epilogue {_epilogue_name(epi)!r} needs dropout=p (the forward pass's probability)")
    else:
        raise TypeError(f"{where}: dropout must be (p, generator) or a probability p, not {type(dropout).__name__}")
    if isinstance(p, bool) or not isinstance(p, numbers.Real):
        raise TypeError(f"{where}: dropout's p must be a real number, not {type(p).__name__}")
    if epi & _DROPOUT:
        from .random import Generator  # (random imports nothing of matmul's)
        if not isinstance(gen, Generator):
            raise TypeError(f"{where}: dropout=(p, generator) needs a fusemath.random.Generator as its second "
                            f"item (the mask's stream), not {type(gen).__name__}")
        if gen.state["mode"] != "portable":
            raise _C.NotSupportedError(
                f"{where}: dropout draws its mask from the portable stream (the same on every device); the "
                "generator is in curand mode: use fusemath.random.Generator(seed, mode='portable')")
    elif gen is not None:
        raise _C.InvalidArgumentError(
            f"{where}: {_epilogue_name(epi)!r} takes no generator (it applies the forward pass's mask); "
            "pass dropout=p")
    return float(p), gen


def _with_dropout_stream(gen, where: str, call):
    """call(position, seed) with the generator's next words, then its position advanced by the
    result's element count (numel(D): one word per element), under the generator's lock so that
    two threads never draw the same mask."""
    with gen._lock:
        gen._live("matmul")  # a freed generator is an InvalidStateError
        pos, seed = gen._pos, gen._seed
        res = call(pos, seed - (1 << 64) if seed >= 1 << 63 else seed)
        d = res[0] if type(res) is tuple else res
        n = 1
        for e in getattr(d, "shape", ()):
            n *= int(e)
        gen._pos = pos + n
    return res
