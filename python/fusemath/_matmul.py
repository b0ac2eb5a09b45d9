"""``fusemath.matmul`` (stateless) and ``fusemath.Matmul`` (plan once, execute many times).

Both compute ``D = act(alpha * a @ b + beta * c + bias)`` (and the other epilogue chains
of docs/epilogues.md) with NumPy's matmul semantics: a 1-D ``a`` gets a leading 1
prepended (and removed from the result), a 1-D ``b`` a trailing 1 appended; batch
dimensions broadcast. The arithmetic runs in libfusemath with the GIL released.

Arrays: NumPy (and other host buffer-protocol / DLPack objects) give NumPy results.
PyTorch tensors and CuPy arrays (CPU or CUDA) are used zero-copy and give results of
their own library on their own device; other GPU arrays (``__cuda_array_interface__``,
CUDA DLPack) are viewed through CuPy (else PyTorch). GPU calls are asynchronous: they
are queued on ``stream`` (default: the array library's current stream) and never
synchronize. The stateless path for library arrays is one C call
(``_fusemath.array_matmul``); the planned path is one C call per execute (the Runner).
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Tuple

import numpy as np

from . import _fusemath as _C
from ._arrays import _BY_TYPE, BF16, NUMPY, adopt, fm_name, is_cuda_object, lib_of
from ._options import (
    AUTO_DEFAULTS,
    Epilogue,
    MatmulOptions,
    as_options,
    epilogue_bits,
    resolve_execution,
    stream_handle,
    validate_bits,
)

__all__ = ["matmul", "Matmul"]

_ndarray = np.ndarray
_empty = np.empty
_data_ptr = _C.data_ptr
_array_matmul = _C.array_matmul
_lib_by_type = _BY_TYPE.get
_U8 = np.dtype(np.uint8)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_SUPPORTED = frozenset(
    [np.dtype(t) for t in (np.float16, np.float32, np.float64, np.complex64, np.complex128)] + [BF16]
)
_BIAS = int(Epilogue.BIAS)
_RELU = int(Epilogue.RELU)
_GELU = int(Epilogue.GELU)
_AUX = int(Epilogue.AUX)
_CLAMP = int(Epilogue.CLAMP)
_SCALE = int(Epilogue.SCALE)
_DRELU = int(Epilogue.DRELU)
_DGELU = int(Epilogue.DGELU)
_BGRAD = int(Epilogue.BGRAD)
_BGRADA = int(Epilogue.BGRADA)
_BGRADB = int(Epilogue.BGRADB)
_ANY_BGRAD = _BGRAD | _BGRADA | _BGRADB
_ACTS = ((_RELU, "relu"), (_GELU, "gelu"), (int(Epilogue.SIGMOID), "sigmoid"), (int(Epilogue.TANH), "tanh"),
         (int(Epilogue.SILU), "silu"), (_CLAMP, "clamp"))
_FORWARD_ACTS = 0
for _bit, _ in _ACTS:
    _FORWARD_ACTS |= _bit
_NOT_COMPLEX = _FORWARD_ACTS | _DRELU | _DGELU | _SCALE  # complex data takes bias, bgrada, bgradb only
_EXTRA_BITS = _AUX | _ANY_BGRAD  # chains with a second result
_FAST_EXCLUDED = _SCALE | _CLAMP | _DRELU | _DGELU | _BGRADA | _BGRADB  # chains _split_inputs checks
_AUX_KEYS = {bit: name + "_aux" for bit, name in _ACTS}
_SLOT_D, _SLOT_AUX, _SLOT_BGRAD = _C.MATMUL_D, _C.MATMUL_AUX, _C.MATMUL_BGRAD
_INPUT_KEYS = ("bias", "relu_aux", "gelu_aux", "scale")
_CPU_DEVICES = (1, 3)  # DLPack kDLCPU, kDLCUDAHost


def _epilogue_name(bits: int) -> str:
    try:
        return _C.epilogue_format(bits)
    except ValueError:
        return hex(bits)


# ---------------------------------------------------------------------------
# Array arguments
# ---------------------------------------------------------------------------
def _as_array(x: Any, name: str, where: str) -> np.ndarray:
    """A NumPy view of a host array argument (no copy). NumPy arrays pass through;
    DLPack objects (CPU) and buffer-protocol objects are wrapped zero-copy. GPU arrays
    are a DeviceError here (this is the host path: a and b are host arrays); anything
    else (lists, scalars, None) is a TypeError naming the argument."""
    if type(x) is _ndarray:
        return x
    if isinstance(x, _ndarray):
        return x.view(_ndarray)  # drop subclass semantics (np.matrix, masked arrays)
    if x is None:
        raise TypeError(f"{where}: {name} must be an array, not None")
    if isinstance(x, np.generic):  # NumPy scalars are 0-d arrays
        return np.asarray(x)
    if isinstance(x, (str, int, float, complex, list, tuple)):
        raise TypeError(
            f"{where}: {name} must be an array (NumPy, PyTorch, CuPy, DLPack or buffer-protocol object), "
            f"not {type(x).__name__}"
        )
    if hasattr(x, "__dlpack__"):
        device = getattr(x, "__dlpack_device__", None)
        if device is not None:
            dev_type, dev_id = device()
            if int(dev_type) not in _CPU_DEVICES:
                raise _C.DeviceError(
                    f"{where}: {name} lives on DLPack device ({int(dev_type)}, {int(dev_id)}) but a and b are "
                    "host arrays; put all operands on one device (or pass GPU arrays for a and b)"
                )
        try:
            return np.from_dlpack(x)
        except (BufferError, TypeError, ValueError, RuntimeError) as exc:
            raise TypeError(f"{where}: {name} cannot be imported through DLPack: {exc}") from exc
    if hasattr(x, "__cuda_array_interface__"):
        raise _C.DeviceError(f"{where}: {name} is a GPU array but a and b are host arrays; put all operands on one "
                             "device (or pass GPU arrays for a and b)")
    try:
        view = memoryview(x)
    except TypeError:
        raise TypeError(
            f"{where}: {name} must be an array (NumPy, PyTorch, CuPy, DLPack or buffer-protocol object), "
            f"not {type(x).__name__}"
        ) from None
    return np.asarray(view)


def _operand(x: Any, name: str, where: str):
    """An operand of a problem on library arrays: PyTorch/CuPy arrays as they are, other
    GPU arrays viewed through CuPy/PyTorch, host arrays as NumPy views."""
    if type(x) is _ndarray:
        return x
    if lib_of(x) is not None:
        return x
    if is_cuda_object(x):
        return adopt(x, name, where)[1]
    return _as_array(x, name, where)


def _dtype_of(x):
    """Canonical dtype (np.dtype, or BF16) of a NumPy or library array."""
    if isinstance(x, _ndarray):
        return x.dtype
    lib = lib_of(x)
    return lib.dtype_of(x) if lib is not None else x.dtype


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


def _dtype_name(dt) -> str:
    return str(dt)


def _check_real_scalar(where: str, name: str, value: Any, dtype) -> None:
    """A complex scalar with a nonzero imaginary part cannot scale real operands."""
    if type(value) is float or type(value) is int or value is None:
        return
    try:
        imag = complex(value).imag
    except (TypeError, ValueError):
        return  # not a number: the C layer raises TypeError naming it
    if imag != 0:
        raise _C.InvalidArgumentError(
            f"{where}: {name} = {value!r} has an imaginary part but the operands are real ({_dtype_name(dtype)})"
        )


def _clamp_pair(where: str, clamp: Any) -> Tuple[float, float]:
    try:
        lo, hi = clamp
        lo, hi = float(lo), float(hi)
    except (TypeError, ValueError):
        raise TypeError(f"{where}: clamp must be a pair of real numbers (lo, hi), not {clamp!r}") from None
    if not lo <= hi:
        raise _C.InvalidArgumentError(f"{where}: clamp = ({lo}, {hi}), expected lo <= hi (and no NaN)")
    return lo, hi


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
        sa, sb = getattr(scales, "a", None), getattr(scales, "b", None)
        if getattr(scales, "d", None) is not None:
            raise _C.InvalidArgumentError(f"{where}: quantization_scales.d is not supported (no fp8 output)")
    out = []
    for key, v in (("a", sa), ("b", sb)):
        if v is None or not isinstance(v, (int, float)):
            out.append(v)
            continue
        if lib.name == "torch":
            out.append(lib.torch.full((1,), float(v), dtype=lib.torch.float32, device=a.device))
        elif lib.name == "cupy":
            with lib.cupy.cuda.Device(a.data.device_id):
                out.append(lib.cupy.full((1,), float(v), dtype=lib.cupy.float32))
        else:
            raise TypeError(f"{where}: quantization_scales['{key}'] must be an array of {lib.name}")
    return out[0], out[1]


def _split_inputs(where: str, epi: int, bias: Any, epilog_inputs: Any, clamp: Any):
    """Epilogue arguments -> (bits, bias, scale, aux input, clamp pair). bias=, scale and
    clamp= imply their bits (like nvmath's epilog_inputs); DRELU/DGELU need their aux."""
    scale = relu_aux = gelu_aux = None
    if epilog_inputs is not None:
        if not isinstance(epilog_inputs, Mapping):
            raise TypeError(f"{where}: epilog_inputs must be a dict such as {{'bias': array}}")
        unknown = [k for k in epilog_inputs if k not in _INPUT_KEYS]
        if unknown:
            raise _C.InvalidArgumentError(
                f"{where}: unknown epilog_inputs {unknown}; expected some of {list(_INPUT_KEYS)}"
            )
        if "bias" in epilog_inputs:
            if bias is not None:
                raise TypeError(f"{where}: give the bias either as bias= or in epilog_inputs, not both")
            bias = epilog_inputs["bias"]
        scale = epilog_inputs.get("scale")
        relu_aux = epilog_inputs.get("relu_aux")
        gelu_aux = epilog_inputs.get("gelu_aux")
    base = epi
    if bias is not None:
        epi |= _BIAS
    if scale is not None:
        epi |= _SCALE
    if clamp is not None:
        epi |= _CLAMP
    if epi != base:
        validate_bits(epi, where)
    if epi & _BIAS and bias is None:
        raise _C.InvalidArgumentError(f"{where}: epilogue {_epilogue_name(epi)!r} adds a bias but bias= was not given")
    if epi & _SCALE and scale is None:
        raise _C.InvalidArgumentError(
            f"{where}: epilogue {_epilogue_name(epi)!r} has 'scale' but epilog_inputs['scale'] was not given"
        )
    clamp_pair = None
    if epi & _CLAMP:
        if clamp is None:
            raise _C.InvalidArgumentError(
                f"{where}: epilogue {_epilogue_name(epi)!r} clamps but clamp=(lo, hi) was not given"
            )
        clamp_pair = _clamp_pair(where, clamp)
    aux_in = None
    if epi & (_DRELU | _DGELU):
        key, other, aux_in, wrong = (("relu_aux", "gelu_aux", relu_aux, gelu_aux) if epi & _DRELU
                                     else ("gelu_aux", "relu_aux", gelu_aux, relu_aux))
        if aux_in is None:
            fwd = "RELU_AUX" if epi & _DRELU else "GELU_AUX"
            raise _C.InvalidArgumentError(
                f"{where}: epilogue {_epilogue_name(epi)!r} reads the forward pass's aux: pass "
                f"epilog_inputs={{{key!r}: ...}} (the {key!r} result of the {fwd} matmul)"
            )
        if wrong is not None:
            raise _C.InvalidArgumentError(
                f"{where}: epilog_inputs[{other!r}] does not go with {_epilogue_name(epi)!r}, which takes {key!r}"
            )
    elif relu_aux is not None or gelu_aux is not None:
        key = "relu_aux" if relu_aux is not None else "gelu_aux"
        raise _C.InvalidArgumentError(
            f"{where}: epilog_inputs[{key!r}] is an input of DRELU / DGELU (and their _BGRAD forms) only; "
            f"the epilogue is {_epilogue_name(epi)!r}"
        )
    return epi, bias, scale, aux_in, clamp_pair


class _Operands:
    """Validated, promoted operands of one matmul problem (shared by both front ends)."""

    __slots__ = (
        "a", "b", "c",                  # promoted (>= 2-D) views handed to the library
        "a_user", "b_user", "c_user",   # the arrays as given (after conversion)
        "dtype",                        # canonical dtype: np.dtype or BF16
        "native",                       # a.dtype as the caller's library spells it
        "m", "n", "k", "batch",
        "dshape",                       # promoted output shape (..., M, N)
        "rshape",                       # result shape as NumPy returns it (1-D dims removed)
        "a1d", "b1d", "alpha", "beta",
        "lib", "device",                # library and device (-1: host) of the results
    )

    def __init__(self, where: str, a: Any, b: Any, c: Any, alpha: Any, beta: Any, lib=None):
        if lib is None:
            a = _as_array(a, "a", where)
            b = _as_array(b, "b", where)
            dtype, bdtype = a.dtype, b.dtype
            self.lib, self.device = NUMPY, -1
        else:
            a = _operand(a, "a", where)
            b = _operand(b, "b", where)
            dtype, bdtype = _dtype_of(a), _dtype_of(b)
            self.lib = lib
            self.device = lib.device_of(a if lib_of(a) is lib else b)
        if bdtype != dtype:
            raise _C.DtypeError(
                f"{where}: a has dtype {_dtype_name(dtype)} but b has dtype {_dtype_name(bdtype)}; "
                "mixed dtypes are not supported (convert one of them)"
            )
        if dtype not in _SUPPORTED:
            raise _C.DtypeError(
                f"{where}: a and b have dtype {_dtype_name(dtype)}, which is not supported; expected "
                "float32, float64, complex64 or complex128 (float16, bfloat16 where a GPU backend is available)"
            )
        if a.ndim == 0 or b.ndim == 0:
            which = "a" if a.ndim == 0 else "b"
            raise _C.ShapeError(
                f"{where}: {which} is 0-d (a scalar); matmul needs operands with at least one dimension "
                "(use * to scale by a scalar)"
            )
        self.a_user, self.b_user = a, b
        self.native = a.dtype
        self.a1d = a1d = a.ndim == 1
        self.b1d = b1d = b.ndim == 1
        if a1d:
            a = a[None, :]
        if b1d:
            b = b[:, None]
        ash, bsh = (a.shape, b.shape) if lib is None else (tuple(a.shape), tuple(b.shape))
        m, k = ash[-2], ash[-1]
        k2, n = bsh[-2], bsh[-1]
        if k != k2:
            raise _C.ShapeError(
                f"{where}: a has shape {tuple(self.a_user.shape)} and b has shape {tuple(self.b_user.shape)}; the "
                f"last dimension of a ({k}) must equal the {'only' if b1d else 'second-to-last'} dimension of b ({k2})"
            )
        sa, sb = ash[:-2], bsh[:-2]
        if sa == sb:
            batch = sa
        else:
            try:
                batch = tuple(np.broadcast_shapes(sa, sb))
            except ValueError:
                raise _C.ShapeError(
                    f"{where}: the batch dimensions of a {sa} and of b {sb} do not broadcast "
                    f"(a has shape {tuple(self.a_user.shape)}, b has shape {tuple(self.b_user.shape)})"
                ) from None
        self.a, self.b = a, b
        self.dtype = dtype
        self.m, self.n, self.k, self.batch = m, n, k, batch
        self.dshape = batch + (m, n)
        self.rshape = batch + ((() if a1d else (m,)) + (() if b1d else (n,)))
        self.alpha = alpha
        if dtype.kind != "c":
            _check_real_scalar(where, "alpha", alpha, dtype)
            if c is not None and beta is not None:
                _check_real_scalar(where, "beta", beta, dtype)
        if c is None:
            if beta is not None and beta != 0:
                raise _C.InvalidArgumentError(f"{where}: beta = {beta!r} was given but c is None")
            self.c = self.c_user = None
            self.beta = 0.0
        else:
            self.beta = 1.0 if beta is None else beta
            self.set_c(where, c)

    def conv(self, x: Any, name: str, where: str):
        """Another array argument of this problem (NumPy view on the host path)."""
        return _as_array(x, name, where) if self.lib is NUMPY else _operand(x, name, where)

    def empty(self, shape: Tuple[int, ...], dtype):
        """A new array of the results' library on the results' device."""
        if self.lib is NUMPY:
            return _empty(shape, dtype)
        return _C.lib_empty(self.lib.index, shape, fm_name(dtype), self.device)

    # -- c ----------------------------------------------------------------
    def check_c(self, where: str, c: Any):
        """-> (c as given, c promoted to the rank of dshape)."""
        c = self.conv(c, "c", where)
        cdt = c.dtype if type(c) is _ndarray else _dtype_of(c)
        if cdt != self.dtype:
            raise _C.DtypeError(
                f"{where}: c has dtype {_dtype_name(cdt)} but a and b have dtype "
                f"{_dtype_name(self.dtype)}; mixed dtypes are not supported"
            )
        rshape = self.rshape
        cshape = tuple(c.shape)
        if len(cshape) > len(rshape) or any(
            cs != rs and cs != 1 for cs, rs in zip(reversed(cshape), reversed(rshape))
        ):
            raise _C.ShapeError(
                f"{where}: c has shape {cshape}, which does not broadcast to the result shape {rshape}"
            )
        cf = c
        if len(cshape) < len(rshape):
            cf = c[(None,) * (len(rshape) - len(cshape))]
        return c, self.expand_result(cf)

    def set_c(self, where: str, c: Any) -> None:
        self.c_user, self.c = self.check_c(where, c)

    # -- epilogue inputs ------------------------------------------------------
    def _vector(self, where: str, name: str, x: Any, dtype, what: str):
        x = self.conv(x, name, where)
        xdt = x.dtype if type(x) is _ndarray else _dtype_of(x)
        if xdt != dtype:
            raise _C.DtypeError(
                f"{where}: {name} has dtype {_dtype_name(xdt)} but {what} {_dtype_name(dtype)}"
                + ("; mixed dtypes are not supported" if name == "bias" else "")
            )
        if x.ndim == 0:
            raise _C.ShapeError(f"{where}: {name} is 0-d; expected shape (N,) or (..., N) with N = {self.n}")
        if x.shape[-1] != self.n:
            raise _C.ShapeError(
                f"{where}: {name} has length {x.shape[-1]} (shape {tuple(x.shape)}), expected N = {self.n}, "
                "the number of columns of the result"
            )
        return x

    def check_bias(self, where: str, bias: Any):
        return self._vector(where, "bias", bias, self.dtype, "a and b have dtype")

    def check_scale(self, where: str, scale: Any):
        want = _F64 if self.dtype == _F64 else _F32
        return self._vector(where, "scale", scale, want, f"{_dtype_name(self.dtype)} data takes a scale of dtype")

    def aux_in_spec(self, mask: bool) -> Tuple[Tuple[int, ...], Any]:
        """(shape, dtype) of the relu_aux / gelu_aux input: those of the forward pass's result."""
        if mask:
            return self.batch + ((() if self.a1d else (self.m,)) + (_C.relu_mask_row_bytes(self.n),)), _U8
        return self.rshape, self.dtype

    def check_aux_in(self, where: str, epi: int, x: Any):
        mask = bool(epi & _DRELU)
        name = "relu_aux" if mask else "gelu_aux"
        x = self.conv(x, name, where)
        shape, dtype = self.aux_in_spec(mask)
        if tuple(x.shape) != shape:
            raise _C.ShapeError(
                f"{where}: {name} has shape {tuple(x.shape)}, expected {shape} (the {name!r} result of the "
                f"{'RELU_AUX' if mask else 'GELU_AUX'} matmul on operands of these shapes)"
            )
        xdt = x.dtype if type(x) is _ndarray else _dtype_of(x)
        if xdt != dtype:
            raise _C.DtypeError(f"{where}: {name} has dtype {_dtype_name(xdt)}, expected {_dtype_name(dtype)}")
        return x

    def expand_aux_in(self, epi: int, x):
        """The aux input with the promoted (size-1) axes put back."""
        if epi & _DRELU:
            return x[..., None, :] if self.a1d else x
        return self.expand_result(x)

    def epilogue_spec(self, where: str, epilogue: Any, bias: Any, epilog_inputs: Any, clamp: Any):
        """-> (bits, bias, scale, aux input as given, clamp pair), all checked."""
        epi = epilogue_bits(epilogue, where)
        if epilog_inputs is None and clamp is None and not epi & _FAST_EXCLUDED:
            # the common chains (identity, bias, forward activations, aux): few checks
            if epi & _NOT_COMPLEX and self.dtype.kind == "c":
                raise _C.NotSupportedError(
                    f"{where}: epilogue {_epilogue_name(epi)!r} is not defined for complex dtype "
                    f"{_dtype_name(self.dtype)} (complex data takes bias, bgrada and bgradb)"
                )
            if bias is not None:
                return epi | _BIAS, self.check_bias(where, bias), None, None, None
            if epi & _BIAS:
                raise _C.InvalidArgumentError(
                    f"{where}: epilogue {_epilogue_name(epi)!r} adds a bias but bias= was not given"
                )
            return epi, None, None, None, None
        epi, bias, scale, aux_in, clamp_pair = _split_inputs(where, epi, bias, epilog_inputs, clamp)
        if epi & _NOT_COMPLEX and self.dtype.kind == "c":
            raise _C.NotSupportedError(
                f"{where}: epilogue {_epilogue_name(epi)!r} is not defined for complex dtype "
                f"{_dtype_name(self.dtype)} (complex data takes bias, bgrada and bgradb)"
            )
        if bias is not None:
            bias = self.check_bias(where, bias)
        if scale is not None:
            scale = self.check_scale(where, scale)
        if aux_in is not None:
            aux_in = self.check_aux_in(where, epi, aux_in)
        return epi, bias, scale, aux_in, clamp_pair

    # -- outputs --------------------------------------------------------------
    def extra_output(self, epi: int):
        """(key, slot, shape as returned, promoted shape, dtype) of the second result of the
        chain ("relu_aux", "gelu_aux", ..., "drelu_bgrad", "bgrada", ...), or None.
        The returned shape has the memory layout of the promoted one (size-1 axes removed)."""
        if epi & _AUX:
            if epi & _RELU:
                rb = _C.relu_mask_row_bytes(self.n)
                ret = self.batch + ((() if self.a1d else (self.m,)) + (rb,))
                return "relu_aux", _SLOT_AUX, ret, self.batch + (self.m, rb), _U8
            return _AUX_KEYS[epi & _FORWARD_ACTS], _SLOT_AUX, self.rshape, self.dshape, self.dtype
        if epi & _ANY_BGRAD:
            if epi & _BGRAD:
                key = "drelu_bgrad" if epi & _DRELU else "dgelu_bgrad"
            else:
                key = "bgrada" if epi & _BGRADA else "bgradb"
            shape = self.batch + ((self.m,) if epi & _BGRADA else (self.n,))
            return key, _SLOT_BGRAD, shape, shape, self.dtype
        return None

    def expand_result(self, x):
        """View of an array of the result shape with the promoted (size-1) axes put back."""
        if self.a1d and self.b1d:
            return x[..., None, None]
        if self.a1d:
            return x[..., None, :]
        if self.b1d:
            return x[..., None]
        return x

    @property
    def scalar(self) -> bool:
        """The NumPy result is a scalar (two 1-D operands, no batch)."""
        return self.a1d and self.b1d and not self.batch and self.lib is NUMPY


def _check_out(where: str, ops: _Operands, out: Any) -> np.ndarray:
    out = _as_array(out, "out", where)
    if out.shape != ops.rshape:
        raise _C.ShapeError(f"{where}: out has shape {out.shape}, expected {ops.rshape}")
    if out.dtype != ops.dtype:
        raise _C.InvalidArgumentError(
            f"{where}: out has dtype {_dtype_name(out.dtype)}, expected {_dtype_name(ops.dtype)} "
            "(the dtype of a and b)"
        )
    if not out.flags.writeable:
        raise _C.InvalidArgumentError(f"{where}: out is read-only")
    return out


# ---------------------------------------------------------------------------
# Stateless matmul
# ---------------------------------------------------------------------------
_FAST_2D = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


def _plain_2d(a: _ndarray, b: Any, alpha: Any, bias: Any, epilogue: Any):
    """The common stateless host call: 2-D NumPy operands of one dtype, a real alpha, an
    optional (N,) bias, a forward epilogue with no second result. One C call after the
    checks such a call can fail (about 1.5 us less than the general path for 64 x 64); None
    when anything else is asked (the general path then checks and explains)."""
    if (type(b) is not _ndarray or a.ndim != 2 or b.ndim != 2 or a.dtype != b.dtype or a.dtype not in _FAST_2D
            or type(alpha) not in (float, int)):
        return None
    m, k = a.shape
    n = b.shape[1]
    if b.shape[0] != k or m == 0 or n == 0:
        return None
    epi = epilogue_bits(epilogue, "fusemath.matmul") if epilogue is not None else 0
    if epi & (_FAST_EXCLUDED | _EXTRA_BITS):
        return None
    if bias is not None:
        if type(bias) is not _ndarray or bias.shape != (n,) or bias.dtype != a.dtype:
            return None
        epi |= _BIAS
    elif epi & _BIAS:
        return None
    d = _empty((m, n), a.dtype)
    _C.matmul(a, b, None, bias, d, None, alpha, 0.0, epi, *AUTO_DEFAULTS[:5], None, None, None, AUTO_DEFAULTS[5],
              None)
    return d


def matmul(
    a: Any,
    b: Any,
    c: Any = None,
    *,
    alpha: Any = 1.0,
    beta: Any = None,
    bias: Any = None,
    epilogue: Any = None,
    epilog: Any = None,
    epilog_inputs: Optional[Mapping[str, Any]] = None,
    clamp: Any = None,
    out: Any = None,
    execution: Any = None,
    stream: Any = None,
    options: Any = None,
    quantization_scales: Any = None,
):
    """``D = act(alpha * a @ b + beta * c + bias)`` (or another epilogue chain) in one call,
    with NumPy matmul semantics.

    Args:
        a, b: arrays of one dtype: float32, float64, complex64, complex128, and on a GPU
            also float16 and bfloat16 (PyTorch). NumPy arrays or any host object with the
            buffer protocol or ``__dlpack__`` (NumPy results); PyTorch tensors or CuPy
            arrays, on the CPU or a CUDA device (results of that library on that device,
            allocated with ``torch.empty`` / ``cupy.empty``); other GPU arrays
            (``__cuda_array_interface__``, CUDA DLPack), viewed through CuPy or PyTorch.
            1-D operands are promoted as ``numpy.matmul`` does; batch dimensions broadcast.
        c: optional addend, broadcastable to the result; ``beta`` defaults to 1 with ``c``.
        alpha, beta: scalars (complex allowed for complex dtypes).
        bias: shape ``(N,)`` or ``(..., N)``: added to every **row** (NumPy's
            ``a @ b + bias``; nvmath-python's bias is instead an ``(M,)`` column vector).
            Implies the BIAS epilogue. Same as ``epilog_inputs={"bias": bias}``.
        epilogue: None, a string (``"relu"``, ``"bias+gelu"``, ``"RELU_AUX_BIAS"``,
            ``"DRELU_BGRAD"``, ``"sigmoid"``, ``"clamp"``, ...) or an :class:`Epilogue`.
            ``epilog`` is nvmath-python's name for the same argument. GELU is the tanh
            approximation. See docs/epilogues.md for every chain.
        epilog_inputs: nvmath-python style dict of epilogue inputs: ``"bias"``,
            ``"relu_aux"`` (the bit mask of a RELU_AUX forward call, for DRELU /
            DRELU_BGRAD), ``"gelu_aux"`` (the pre-activation of a GELU_AUX call, for DGELU /
            DGELU_BGRAD) and ``"scale"`` (a per-column scale vector, float32 for
            float16/bfloat16/float32 data and float64 for float64 data; implies SCALE).
        clamp: ``(lo, hi)`` for the CLAMP activation (``min(max(x, lo), hi)``); implies it,
            as ``numpy.clip(a @ b, lo, hi)``.
        out: optional output array of exactly the result's shape and dtype (may be ``c``
            itself for an in-place update, must not overlap ``a`` or ``b``).
        execution: None (where the operands live), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``;
            operands elsewhere are copied by the library (NumPy inputs with ``"cuda"`` give
            NumPy results).
        stream: CUDA stream for GPU work: an int (``cudaStream_t``), a ``cupy.cuda.Stream``,
            a ``torch.cuda.Stream`` or any object with ``__cuda_stream__``. None: the
            current stream of the operands' library. GPU calls return without
            synchronizing; results are allocated on (and ordered by) that stream.
        options: :class:`MatmulOptions` or a dict with the same keys.
        quantization_scales: for fp8 inputs (PyTorch ``float8_e4m3fn`` / ``float8_e5m2`` on a
            GPU of compute capability 8.9+), as nvmath-python: ``{"a": sa, "b": sb}`` with
            Python numbers or one-element float32 device arrays; ``D = sa * sb * (a @ b)``
            then the epilogue. The result is bfloat16 unless ``out`` is float16, bfloat16 or
            float32. cuBLASLt's fp8 kernels need ``b`` column-major: pass ``w.T`` of a
            row-major ``(N, K)`` weight (the layout of ``x @ w.T``); other layouts are refused
            with a message saying so.

    Returns:
        The result (``out`` if given); with a chain that has a second result, the tuple
        ``(d, {key: x})`` with nvmath-python's keys: ``"relu_aux"`` (uint8 bit mask
        ``(..., M, relu_mask_row_bytes(N))``, bit ``j % 8`` of byte ``j // 8`` of row ``i``
        set where the pre-activation ``> 0``), ``"gelu_aux"`` / ``"sigmoid_aux"`` /
        ``"tanh_aux"`` / ``"silu_aux"`` / ``"clamp_aux"`` (the pre-activation),
        ``"drelu_bgrad"`` / ``"dgelu_bgrad"`` / ``"bgradb"`` (length N) and ``"bgrada"``
        (length M), gradients of shape ``(L,)`` or ``(batch..., L)``.

    Raises:
        ValueError subclasses (ShapeError, InvalidArgumentError, AliasError, DeviceError)
        for shapes, epilogue names, missing epilogue inputs, overlapping outputs and mixed
        devices; TypeError subclasses (DtypeError, NotSupportedError) for dtypes;
        MemoryError (OutOfMemoryError) when host or GPU memory runs out; RuntimeError
        (BackendError) when cuBLASLt / OpenBLAS / CUDA report an error. See
        ``fusemath.FusemathError``.
    """
    if type(a) is not _ndarray or type(b) is not _ndarray:
        lib = _lib_by_type(type(a))  # PyTorch tensors / CuPy arrays seen before: one dict lookup
        if lib is None:
            fr = _foreign(a, b, "fusemath.matmul")
            if fr is not None:
                lib, a, b = fr
        if lib is not None:  # library / GPU arrays: everything else happens in one C call
            where = "fusemath.matmul"
            if epilog is not None:
                epilogue = _merge_epilog(where, epilogue, epilog)
            epi = epilogue_bits(epilogue, where) if epilogue is not None else 0
            scale = aux_in = None
            if epilog_inputs is None and clamp is None and not epi & _FAST_EXCLUDED:
                if bias is not None:
                    epi |= _BIAS
                elif epi & _BIAS:
                    raise _C.InvalidArgumentError(
                        f"{where}: epilogue {_epilogue_name(epi)!r} adds a bias but bias= was not given"
                    )
            else:
                epi, bias, scale, aux_in, clamp = _split_inputs(where, epi, bias, epilog_inputs, clamp)
            if c is None:
                if beta is not None and beta != 0:
                    raise _C.InvalidArgumentError(f"{where}: beta = {beta!r} was given but c is None")
                beta = 0.0
            elif beta is None:
                beta = 1.0
            if execution is None and options is None:
                ex = AUTO_DEFAULTS
            else:
                ex = resolve_execution(execution, as_options(options, where), where)
            try:
                qa = qb = None
                if quantization_scales is not None:
                    qa, qb = _quantization_scales(where, lib, a, quantization_scales)
                return _array_matmul(lib.index, a, b, c, bias, scale, aux_in, out, alpha, beta, epi, ex[0], ex[1],
                                     ex[2], ex[3], ex[4], ex[5], clamp, stream, qa, qb)
            except _C.AliasError as exc:
                raise _C.AliasError(f"{where}: an output overlaps an input ({exc})") from None

    if quantization_scales is not None:
        raise _C.InvalidArgumentError(
            "fusemath.matmul: quantization_scales go with fp8 inputs (PyTorch float8 tensors on a GPU); "
            "a and b are host arrays here"
        )
    if (c is None and out is None and beta is None and epilog is None and epilog_inputs is None and clamp is None
            and execution is None and stream is None and options is None and type(a) is _ndarray):
        d = _plain_2d(a, b, alpha, bias, epilogue)
        if d is not None:
            return d

    where = "fusemath.matmul"
    if epilog is not None:
        epilogue = _merge_epilog(where, epilogue, epilog)
    ops = _Operands(where, a, b, c, alpha, beta)
    epi, bias_arr, scale, aux_in, clamp_pair = ops.epilogue_spec(where, epilogue, bias, epilog_inputs, clamp)
    opts = as_options(options, where)
    ex, dev, nth, panel, strategy, compute = resolve_execution(execution, opts, where)
    sh = stream_handle(stream, where)
    if out is None:
        d = _empty(ops.rshape, ops.dtype)
        d_full = d.reshape(ops.dshape)  # C-contiguous: a view
    else:
        d = _check_out(where, ops, out)
        d_full = ops.expand_result(d)
    aux_full = None if aux_in is None else ops.expand_aux_in(epi, aux_in)
    bgrad = extra = key = None
    if epi & _EXTRA_BITS:
        key, slot, ret, full, dt = ops.extra_output(epi)
        extra = _empty(ret, dt)
        if slot == _SLOT_AUX:
            aux_full = extra.reshape(full)
        else:
            bgrad = extra
    try:
        _C.matmul(ops.a, ops.b, ops.c, bias_arr, d_full, aux_full, ops.alpha, ops.beta, epi, ex, dev, nth, panel,
                  strategy, sh, bgrad, scale, compute, clamp_pair)
    except _C.AliasError as exc:
        raise _C.AliasError(f"{where}: out overlaps an input ({exc})") from None
    if out is None and ops.scalar:
        d = d[()]
    if key is not None:
        return d, {key: extra}
    return d


# ---------------------------------------------------------------------------
# Planner object
# ---------------------------------------------------------------------------
def _layout(x) -> Tuple[Any, ...]:
    """(device, strides that matter): 0 for axes of extent <= 1; all 0 for empty arrays."""
    if isinstance(x, _ndarray):
        if x.size == 0:
            return (-1,) + (0,) * x.ndim
        return (-1,) + tuple(s if n > 1 else 0 for n, s in zip(x.shape, x.strides))
    _, device, _, shape, strides = _C.tensor_info(x)
    if 0 in shape:
        return (device,) + (0,) * len(shape)
    return (device,) + tuple(s if n > 1 else 0 for n, s in zip(shape, strides))


def _strides_text(x) -> str:
    if isinstance(x, _ndarray):
        return f"{x.strides} (bytes)"
    return f"{_C.tensor_info(x)[4]} (elements)"


class Matmul:
    """A planned matmul ``D = act(alpha * a @ b + beta * c + bias)`` on fixed operands,
    like ``nvmath.linalg.advanced.Matmul``::

        with fusemath.Matmul(a, b) as mm:
            mm.plan(epilogue="bias+relu", bias=b0)
            d = mm.execute()            # a new array per call
            mm.execute(out=d)           # or into a given array (no allocation)
            a[...] = next_a             # in-place changes are seen by the next execute
            mm.reset_operands(a=other)  # or new arrays of the same shape/dtype/layout

    Operands may be NumPy, PyTorch or CuPy arrays (see :func:`matmul`); results are of
    the operands' library on their device. The operands are referenced (not copied)
    while the object lives: their memory must not be freed, resized or re-pointed, and
    their contents at execute time are what is multiplied. ``execute()`` before
    ``plan()`` plans with the defaults (no epilogue). After ``free()`` (or leaving the
    ``with`` block) every method raises InvalidStateError. One Matmul may be executed
    from several threads at once (each call gets its own output);
    ``plan``/``reset_operands``/``free`` must not race with ``execute``.
    """

    __slots__ = ("_ops", "_exec", "_epi", "_inputs", "_clamp", "_plan", "_run", "__weakref__")

    def __init__(self, a: Any, b: Any, c: Any = None, *, alpha: Any = 1.0, beta: Any = None, options: Any = None):
        where = "fusemath.Matmul"
        self._plan = None
        self._run = None
        self._ops = None
        lib = None
        if type(a) is not _ndarray or type(b) is not _ndarray:
            fr = _foreign(a, b, where)
            if fr is not None:
                lib, a, b = fr
        ops = _Operands(where, a, b, c, alpha, beta, lib)
        self._exec = resolve_execution(None, as_options(options, where), where)
        self._epi = 0
        self._inputs = (None, None, None)  # bias, aux input (relu_aux / gelu_aux), scale: as given
        self._clamp = None
        self._ops = ops

    # -- state -------------------------------------------------------------
    def _alive(self, where: str) -> _Operands:
        ops = self._ops
        if ops is None:
            raise _C.InvalidStateError(f"{where}: this Matmul was freed (free() or the end of its with block)")
        return ops

    def _arrays(self, ops: _Operands, epi: int, aux_in):
        """(d, aux, bgrad) for planning/tuning: templates of the outputs (the library's
        arrays on the results' device), aux the promoted input of drelu/dgelu."""
        d = ops.empty(ops.dshape, ops.dtype)
        aux = None if aux_in is None else ops.expand_aux_in(epi, aux_in)
        bgrad = None
        if epi & _EXTRA_BITS:
            _, slot, _, full, dt = ops.extra_output(epi)
            x = ops.empty(full, dt)
            if slot == _SLOT_AUX:
                aux = x
            else:
                bgrad = x
        return d, aux, bgrad

    def _call(self, fn, ops: _Operands, epi: int, inputs, clamp, **extra):
        bias, aux_in, scale = inputs
        d, aux, bgrad = self._arrays(ops, epi, aux_in)
        ex = self._exec
        return fn(ops.a, ops.b, ops.c, bias, d, aux, ops.alpha, ops.beta, epi, ex[0], ex[1], ex[2], ex[3], ex[4],
                  bgrad=bgrad, scale=scale, compute=ex[5], clamp=clamp, **extra)

    def _install(self, plan, epi: int, inputs, clamp) -> None:
        old = self._plan
        self._plan, self._epi, self._inputs, self._clamp = plan, epi, inputs, clamp
        self._rebuild()
        if old is not None and old is not plan:
            old.free()  # executions running on it hold their own reference in C

    def _rebuild(self) -> None:
        ops, epi = self._ops, self._epi
        bias, aux_in, scale = self._inputs
        ptrs = (
            _data_ptr(ops.a), _data_ptr(ops.b), None if ops.c is None else _data_ptr(ops.c),
            None if bias is None else _data_ptr(bias), None, None if aux_in is None else _data_ptr(aux_in),
            None, None if scale is None else _data_ptr(scale),
        )
        outs = [(_SLOT_D, ops.rshape, fm_name(ops.dtype), None)]
        if epi & _EXTRA_BITS:
            key, slot, ret, _, dt = ops.extra_output(epi)
            outs.append((slot, ret, fm_name(dt), key))
        keep = (ops.a, ops.b, ops.c, bias, aux_in, scale)
        self._run = _C.make_runner(self._plan, keep, ptrs, ops.lib.index, ops.device, tuple(outs), ops.scalar).run

    # -- planning ------------------------------------------------------------
    def plan(self, epilogue: Any = None, bias: Any = None, *, epilog: Any = None,
             epilog_inputs: Optional[Mapping] = None, clamp: Any = None):
        """Plan the product with an epilogue chain (None, str, :class:`Epilogue`) and its inputs.

        nvmath-python spellings are accepted: ``plan(epilog=Epilogue.DRELU_BGRAD,
        epilog_inputs={"relu_aux": mask})``. ``bias`` (or ``epilog_inputs["bias"]``, an
        ``(N,)`` row vector as in NumPy's ``a @ b + bias``), ``epilog_inputs["scale"]`` and
        ``clamp=(lo, hi)`` imply BIAS, SCALE and CLAMP. Re-planning replaces the previous
        plan. Returns self.
        """
        where = "Matmul.plan"
        ops = self._alive(where)
        epilogue = _merge_epilog(where, epilogue, epilog)
        epi, bias, scale, aux_in, clamp_pair = ops.epilogue_spec(where, epilogue, bias, epilog_inputs, clamp)
        inputs = (bias, aux_in, scale)
        plan = self._call(_C.plan_matmul, ops, epi, inputs, clamp_pair)
        self._install(plan, epi, inputs, clamp_pair)
        return self

    def autotune(self, iterations: int = 3):
        """Time the candidate configurations (CPU panel heights, cuBLASLt algorithms and
        fused/unfused epilogues) on the current operands (``iterations`` repeats each) and
        keep the fastest plan. Plans with the defaults first if :meth:`plan` was not
        called. On GPU data it synchronizes the device before and after (it times).
        Returns self."""
        where = "Matmul.autotune"
        ops = self._alive(where)
        if isinstance(iterations, bool) or not isinstance(iterations, int):
            raise TypeError(f"{where}: iterations must be an int, not {type(iterations).__name__}")
        if iterations < 1:
            raise ValueError(f"{where}: iterations = {iterations}, expected >= 1")
        if self._plan is None:
            self.plan()
        epi, inputs, clamp = self._epi, self._inputs, self._clamp
        gpu = not ops.lib.host and ops.device >= 0
        if gpu:
            ops.lib.synchronize(ops.device)  # the tuning runs on the default stream
        plan = self._call(_C.autotune, ops, epi, inputs, clamp, repeats=iterations)
        if gpu:
            ops.lib.synchronize(ops.device)
        self._install(plan, epi, inputs, clamp)
        return self

    # -- execution -----------------------------------------------------------
    def execute(self, *, stream: Any = None, out: Any = None):
        """Compute and return the result (same return convention as :func:`matmul`).

        stream: None (the current stream of the operands' library, looked up per call:
            ``torch._C._cuda_getCurrentRawStream`` / ``cupy.cuda.get_current_stream``), an
            int handle, or a CuPy / PyTorch stream (resolved once and cached while the same
            object is passed). GPU work is queued without synchronizing; results are
            allocated with that stream current (a non-current stream takes a slower path).
        out: an array for the result, of the planned shape and dtype, C-contiguous, of the
            results' library and device: nothing is allocated (validated once per object).
        """
        run = self._run
        if run is None:
            self._alive("Matmul.execute")
            self.plan()
            run = self._run
        return run(stream, out)

    def reset_operands(self, a: Any = None, b: Any = None, c: Any = None, bias: Any = None, *,
                       epilog_inputs: Optional[Mapping] = None) -> None:
        """Point the plan at new arrays (None keeps the current one): a, b, c, bias, and in
        ``epilog_inputs`` the bias, scale, relu_aux or gelu_aux. Each must have the planned
        shape, dtype, device and memory layout (strides); a ValueError says what differs."""
        where = "Matmul.reset_operands"
        ops = self._alive(where)
        cur_bias, cur_aux, cur_scale = self._inputs
        items = [("a", a, ops.a_user), ("b", b, ops.b_user), ("c", c, ops.c_user), ("bias", bias, cur_bias)]
        if epilog_inputs is not None:
            if not isinstance(epilog_inputs, Mapping):
                raise TypeError(f"{where}: epilog_inputs must be a dict such as {{'bias': array}}")
            aux_key = "relu_aux" if self._epi & _DRELU else "gelu_aux" if self._epi & _DGELU else None
            for key, value in epilog_inputs.items():
                if key == "bias":
                    if bias is not None:
                        raise TypeError(f"{where}: give the bias either as bias= or in epilog_inputs, not both")
                    items[3] = ("bias", value, cur_bias)
                elif key == "scale":
                    items.append(("scale", value, cur_scale))
                elif key in ("relu_aux", "gelu_aux"):
                    items.append((key, value, cur_aux if key == aux_key else None))
                else:
                    raise _C.InvalidArgumentError(
                        f"{where}: unknown epilog_inputs [{key!r}]; expected some of {list(_INPUT_KEYS)}"
                    )
        new = {}
        for name, value, old in items:
            if value is None:
                continue
            if old is None:
                what = ("without c" if name == "c" else
                        "without a bias (plan(bias=...) first)" if name == "bias" else
                        f"without {name!r} (plan an epilogue that takes it first)")
                raise _C.InvalidArgumentError(f"{where}: {name} cannot be reset: the Matmul was planned {what}")
            x = ops.conv(value, name, where)
            if tuple(x.shape) != tuple(old.shape):
                raise _C.ShapeError(
                    f"{where}: {name} has shape {tuple(x.shape)}, the plan was made for {tuple(old.shape)}"
                )
            xdt, odt = _dtype_of(x), _dtype_of(old)
            if xdt != odt:
                raise _C.InvalidArgumentError(
                    f"{where}: {name} has dtype {_dtype_name(xdt)}, the plan was made for {_dtype_name(odt)}"
                )
            if lib_of(x) is not lib_of(old):
                raise _C.DeviceError(f"{where}: {name} is a {type(x).__name__}, the plan was made for a "
                                     f"{type(old).__name__} (array library and device must stay the same)")
            lx, lo = _layout(x), _layout(old)
            if lx[0] != lo[0]:
                raise _C.DeviceError(f"{where}: {name} is on device {lx[0]}, the plan was made for device {lo[0]}")
            if lx != lo:
                raise _C.InvalidArgumentError(
                    f"{where}: {name} has strides {_strides_text(x)}, the plan was made for {_strides_text(old)}; "
                    "pass an array with the same memory layout or create a new Matmul"
                )
            new[name] = x
        if "a" in new:
            x = new["a"]
            ops.a_user, ops.a = x, (x[None, :] if ops.a1d else x)
        if "b" in new:
            x = new["b"]
            ops.b_user, ops.b = x, (x[:, None] if ops.b1d else x)
        if "c" in new:
            ops.set_c(where, new["c"])
        self._inputs = (
            new.get("bias", cur_bias),
            new.get("relu_aux", new.get("gelu_aux", cur_aux)),
            new.get("scale", cur_scale),
        )
        if new and self._plan is not None:
            self._rebuild()

    # -- information -----------------------------------------------------------
    def describe(self) -> str:
        """One line from the library (backend, dtype, sizes, epilogue; on the GPU also the
        cuBLASLt algorithm and passes chosen by the heuristic or :meth:`autotune`)."""
        ops = self._alive("Matmul.describe")
        if self._plan is None:
            return f"matmul {ops.dtype} {ops.m}x{ops.n}x{ops.k} batch={ops.batch} (not planned yet)"
        return self._plan.describe()

    @property
    def backend(self) -> Optional[str]:
        """Name of the backend executing the plan (None before plan())."""
        self._alive("Matmul.backend")
        return None if self._plan is None else self._plan.backend

    @property
    def epilogue(self) -> Epilogue:
        return Epilogue(self._epi)

    @property
    def result_shape(self) -> Tuple[int, ...]:
        return self._alive("Matmul.result_shape").rshape

    @property
    def dtype(self):
        """The operands' dtype, as their library spells it (np.dtype, torch.dtype)."""
        return self._alive("Matmul.dtype").native

    # -- lifetime ---------------------------------------------------------------
    def free(self) -> None:
        """Release the plan and the references to the operands (idempotent)."""
        plan = self._plan
        self._plan = None
        self._run = None
        self._ops = None
        self._inputs = (None, None, None)
        if plan is not None:
            plan.free()

    def __enter__(self) -> "Matmul":
        self._alive("Matmul.__enter__")
        return self

    def __exit__(self, *exc) -> None:
        self.free()

    def __repr__(self) -> str:
        if self._ops is None:
            return "<fusemath.Matmul (freed)>"
        return f"<fusemath.Matmul {self.describe()}>"
