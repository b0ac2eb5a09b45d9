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

import numbers

from typing import Any, Mapping, Optional

import numpy as np

from . import _fusemath as _C
from ._arrays import _BY_TYPE
from ._matmul_args import (
    _BIAS,
    _EXTRA_BITS,
    _FAST_EXCLUDED,
    _SLOT_AUX,
    _epilogue_name,
    _foreign,
    _merge_epilog,
    _ndarray,
    _quantization_scales,
    _split_inputs,
    alias_error,
)
from ._matmul_operands import _Operands, _check_out, _empty
from ._matmul_plan import Matmul
from ._options import (
    AUTO_DEFAULTS,
    as_options,
    epilogue_bits,
    resolve_execution,
    stream_handle,
)

# Importable from here as before the split into the _matmul_*.py modules (private names).
from ._arrays import BF16, NUMPY, adopt, fm_name, is_cuda_object, lib_of  # noqa: F401
from ._matmul_args import (  # noqa: F401
    _ACTS,
    _ANY_BGRAD,
    _AUX,
    _AUX_KEYS,
    _BGRAD,
    _BGRADA,
    _BGRADB,
    _CLAMP,
    _CPU_DEVICES,
    _DGELU,
    _DRELU,
    _FORWARD_ACTS,
    _GELU,
    _INPUT_KEYS,
    _NOT_COMPLEX,
    _RELU,
    _SCALE,
    _SLOT_BGRAD,
    _SLOT_D,
    _as_array,
    _check_real_scalar,
    _clamp_pair,
    _dtype_name,
    _dtype_of,
    _operand,
)
from ._matmul_operands import _F32, _F64, _SUPPORTED, _U8  # noqa: F401
from ._matmul_plan import _data_ptr, _layout, _strides_text  # noqa: F401
from ._options import Epilogue, MatmulOptions, validate_bits  # noqa: F401

__all__ = ["matmul", "Matmul"]

_array_matmul = _C.array_matmul
_lib_by_type = _BY_TYPE.get


# ---------------------------------------------------------------------------
# Stateless matmul
# ---------------------------------------------------------------------------
_FAST_2D = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


def _plain_2d(a: _ndarray, b: Any, alpha: Any, bias: Any, epilogue: Any, out: Any):
    """The common stateless host call: 2-D NumPy operands of one dtype, a real alpha, an
    optional (N,) bias, a forward epilogue with no second result, an optional NumPy out of the
    result's shape and dtype. One C call after the checks such a call can fail (about 1.5 us
    less than the general path for 64 x 64); None when anything else is asked (the general
    path then checks and explains)."""
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
    if out is None:
        d = _empty((m, n), a.dtype)
    elif (type(out) is _ndarray and out.shape == (m, n) and out.dtype == a.dtype and out.flags.writeable
          and out.flags.aligned):
        d = out
    else:
        return None
    try:
        _C.matmul(a, b, None, bias, d, None, alpha, 0.0, epi, *AUTO_DEFAULTS[:5], None, None, None, AUTO_DEFAULTS[5],
                  None)
    except _C.AliasError as exc:
        raise alias_error("fusemath.matmul", "out", exc) from None
    except ValueError:
        # a misaligned operand (the C side refuses it as InvalidArgumentError, or its array
        # conversion as a plain ValueError for a byte stride that is no multiple of the item
        # size): the general path computes from an aligned copy (checked only here, after a
        # refusal, so the common call pays nothing for it)
        if a.flags.aligned and b.flags.aligned and (bias is None or bias.flags.aligned):
            raise
        return None
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
        alpha, beta: scalars (complex allowed for complex dtypes). As in BLAS, ``beta = 0``
            ignores ``c`` (NaN or inf there does not propagate), ``k = 0`` gives
            ``beta * c`` (plus the epilogue) whatever ``alpha`` is, and ``alpha = 0`` does not
            read ``a`` and ``b``, on the CPU and the GPU (NaN or inf there does not propagate;
            NumPy's ``0 * (a @ b)`` would give NaN).
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
                if beta is not None and not (isinstance(beta, numbers.Number) and beta == 0):
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
                raise alias_error(where, "an output", exc) from None

    if quantization_scales is not None:
        raise _C.InvalidArgumentError(
            "fusemath.matmul: quantization_scales go with fp8 inputs (PyTorch float8 tensors on a GPU); "
            "a and b are host arrays here"
        )
    if (c is None and beta is None and epilog is None and epilog_inputs is None and clamp is None
            and execution is None and stream is None and options is None and type(a) is _ndarray):
        d = _plain_2d(a, b, alpha, bias, epilogue, out)
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
        raise alias_error(where, "out", exc) from None
    if out is None and ops.scalar:
        d = d[()]
    elif out is not None and isinstance(out, _ndarray):
        d = out  # the caller's object itself (a subclass such as np.matrix stays one), as NumPy returns it
    if key is not None:
        return d, {key: extra}
    return d
