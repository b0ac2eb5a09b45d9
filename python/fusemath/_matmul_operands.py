"""The operands of one matmul problem, shared by ``fusemath.matmul`` and ``fusemath.Matmul``:
:class:`_Operands` checks and promotes a, b and c (dtypes, NumPy's 1-D promotion, batch
broadcasting, alpha / beta), checks the epilogue inputs (bias, scale, relu_aux / gelu_aux)
against the problem, gives the shape and dtype of the result and of a chain's second result,
and allocates arrays of the results' library on their device; :func:`_check_out` checks a
host ``out=``.
"""
from __future__ import annotations

import numbers

from typing import Any, Tuple

import numpy as np

from . import _fusemath as _C
from ._arrays import BF16, NUMPY, fm_name, lib_of
from ._matmul_args import (
    _ANY_BGRAD,
    _AUX,
    _AUX_KEYS,
    _BGRAD,
    _BGRADA,
    _BIAS,
    _DRELU,
    _FAST_EXCLUDED,
    _FORWARD_ACTS,
    _NOT_COMPLEX,
    _RELU,
    _SLOT_AUX,
    _SLOT_BGRAD,
    _as_array,
    _check_real_scalar,
    _dtype_name,
    _dtype_of,
    _epilogue_name,
    _ndarray,
    _operand,
    _split_inputs,
)
from ._options import epilogue_bits

_empty = np.empty
_U8 = np.dtype(np.uint8)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_SUPPORTED = frozenset(
    [np.dtype(t) for t in (np.float16, np.float32, np.float64, np.complex64, np.complex128)] + [BF16]
)


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
        # here, not first at plan() under a C name (beta without c has its own message below)
        for name, v in (("alpha", alpha), ("beta", beta if c is not None else None)):
            if v is not None and type(v) is not float and type(v) is not int:
                try:
                    complex(v)
                except OverflowError:
                    pass  # a number too large for a float64: the C layer says so
                except (TypeError, ValueError):
                    raise TypeError(f"{where}: {name} must be a number, not {type(v).__name__}") from None
        if dtype.kind != "c":
            _check_real_scalar(where, "alpha", alpha, dtype)
            if c is not None and beta is not None:
                _check_real_scalar(where, "beta", beta, dtype)
        if c is None:
            if beta is not None and not (isinstance(beta, numbers.Number) and beta == 0):
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
    out = _as_array(out, "out", where, output=True)
    if out.shape != ops.rshape:
        raise _C.ShapeError(f"{where}: out has shape {out.shape}, expected {ops.rshape}")
    if out.dtype != ops.dtype:
        raise _C.InvalidArgumentError(
            f"{where}: out has dtype {_dtype_name(out.dtype)}, expected {_dtype_name(ops.dtype)} "
            "(the dtype of a and b)"
        )
    if not out.flags.writeable:
        raise _C.InvalidArgumentError(f"{where}: out is read-only")
    if not out.flags.aligned:
        raise _C.InvalidArgumentError(
            f"{where}: out at {hex(out.__array_interface__['data'][0])} is not aligned to {out.dtype.alignment} bytes "
            "(the result is written as whole elements); pass an aligned array (NumPy allocates aligned ones)"
        )
    return out
