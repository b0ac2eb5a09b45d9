"""``fusemath.matmul`` (stateless: one C call, ``_fusemath.call``, which allocates the results from
the core's output specs) and, re-exported from _matmul_plan, ``fusemath.Matmul`` (plan once; one
C call per execute, the Runner). Both compute ``D = act(alpha * a @ b + beta * c + bias)`` with
NumPy's matmul semantics; :func:`matmul` documents the arguments for both.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

from . import _fusemath as _C
from ._arrays import _BY_TYPE, NUMPY, host_array, into_out
from ._matmul_args import (aux_key, _BIAS, _CLAMP, _DDROPOUT, _DROPOUT, _dropout_arg, _foreign,
                           _merge_epilog, _ndarray, promote, _quantization_scales, recast_out, _split_inputs,
                           _with_dropout_stream)
from ._matmul_plan import Matmul
from ._options import AUTO_DEFAULTS, as_options, epilogue_bits, resolve_execution

__all__ = ["matmul", "Matmul"]

_call = _C.call
_MATMUL, _RUN = _C.OP_MATMUL, _C.CALL_RUN
_lib_by_type = _BY_TYPE.get


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
    dropout: Any = None,
    out: Any = None,
    execution: Any = None,
    stream: Any = None,
    options: Any = None,
    quantization_scales: Any = None,
):
    """``D = act(alpha * a @ b + beta * c + bias)`` (or another epilogue chain) in one call,
    with NumPy matmul semantics.

    Args:
        a, b: arrays: float32, float64, complex64, complex128, integers and bool (exact, as
            NumPy: wrapping; CPU only, no epilogue), and on a GPU also float16 and bfloat16
            (PyTorch). Host operands of mixed dtypes promote as ``np.matmul``'s
            (``np.result_type``); lists and nested sequences are read as ``np.asarray`` reads
            them; 0-d operands are a ValueError. ``np.matrix`` inputs give an ndarray.
            NumPy arrays or any host object with the buffer protocol or ``__dlpack__`` (NumPy results); PyTorch tensors or CuPy
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
        dropout: ``(p, generator)`` for a chain with DROPOUT (``"relu+dropout"``,
            ``"bias+relu+dropout+aux"``): after the activation each element is kept with
            probability ``1 - p`` and scaled by ``1/(1-p)``, else 0: element ``e`` (row-major
            over batch, M, N) is kept iff word ``position + e`` of the
            :class:`fusemath.random.Generator`'s portable stream (``random_raw``) is
            ``>= round(p * 2**32)``: the same on the CPU and the GPU, for any tiling; the
            generator then advances by ``d.size``, as ``d.size`` draws would. With ``aux`` the
            mask is returned as ``"dropout_aux"`` (the relu mask's layout; with relu, relu bit AND
            keep bit). ``dropout=p`` with ``"ddropout"`` (``"ddropout_bgrad"``) and
            ``epilog_inputs={"dropout_aux": mask}``: the backward, ``(a @ b) * mask / (1 - p)``.
        out: optional output array of the result's shape (may be ``c`` itself for an in-place
            update). A NumPy ``out`` of another dtype gets the result cast as ``np.matmul``
            casts it (``casting='same_kind'``, else a DtypeError with NumPy's wording), and one
            overlapping ``a``, ``b``, ``c`` or ``bias`` gets the right result through a
            temporary; PyTorch / CuPy ``out`` must have the result's dtype and not overlap.
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
    where = "fusemath.matmul"
    lib = NUMPY
    if type(a) is not _ndarray or type(b) is not _ndarray:
        lib = _lib_by_type(type(a)) or NUMPY  # PyTorch tensors / CuPy arrays seen before: one dict lookup
        if lib is NUMPY:
            fr = _foreign(a, b, where)
            if fr is not None:
                lib, a, b = fr
    if epilog is not None:
        epilogue = _merge_epilog(where, epilogue, epilog)
    epi = epilogue_bits(epilogue, where) if epilogue is not None else 0
    scale = aux_in = None
    if epilog_inputs is not None or clamp is not None or epi & _CLAMP:
        epi, bias, scale, aux_in, clamp = _split_inputs(where, epi, bias, epilog_inputs, clamp)
    elif bias is not None:  # the one C call checks the rest (a missing input too)
        epi |= _BIAS
    ex = AUTO_DEFAULTS if execution is None and options is None else resolve_execution(
        execution, as_options(options, where), where)
    qa = qb = None
    if quantization_scales is not None:  # (the library says they go with fp8 inputs only)
        qa, qb = _quantization_scales(where, lib, a, quantization_scales)
    ops = (a, b, c, bias, out, aux_in, None, scale, qa, qb)
    p = gen = None
    if dropout is not None or epi & (_DROPOUT | _DDROPOUT):
        p, gen = _dropout_arg(where, epi, dropout)
    opts = (alpha, beta, epi, ex[0], ex[1], ex[2], ex[3], ex[4], ex[5], clamp, p, 0, 0)
    if gen is not None:
        return _with_dropout_stream(gen, where, lambda pos, seed: _run_call(
            where, lib, ops, opts[:11] + (pos, seed), stream, epi))
    return _run_call(where, lib, ops, opts, stream, epi)


def _run_call(where: str, lib, ops, opts, stream, epi: int):
    """The one C call, with NumPy's conventions after a refusal of host operands."""
    try:
        return _call(_MATMUL, _RUN, lib.index, ops, opts, stream, 3, where)
    except Exception as exc:
        if lib is not NUMPY:
            raise
        refused = exc
    return _numpy_retry(where, ops, opts, stream, epi, refused)


def _numpy_retry(where: str, ops, opts, stream, epi: int, refused: Exception):
    """NumPy's conventions the library does not take, looked at only after it refused a host call
    (the common call pays nothing; a function of its own, so matmul's locals stay plain): host
    operands it does not take as they are (big-endian, misaligned, lists) as native NumPy arrays,
    mixed dtypes promoted, out= of another dtype through a temporary (an out= overlapping an input
    is the extension's: fmpy_call.c computes it into a temporary as it does for fft)."""
    fixed = list(_host_inputs(where, ops, epi) or ops)
    dt = promote(fixed, _PROMOTED, ops)
    out, changed = fixed[_D], not all(x is y for x, y in zip(fixed, ops))

    def run(new_d):
        return _call(_MATMUL, _RUN, NUMPY.index, tuple(fixed[:_D]) + (new_d,) + tuple(fixed[_D + 1:]), opts,
                     stream, 3, where)

    if recast_out(out, dt):
        return into_out(where, out, dt, lambda: run(None))
    if not changed:
        raise refused
    return run(out)


_INPUT_NAMES = ("a", "b", "c", "bias", None, "aux", None, "scale", None, None)
_PROMOTED, _D = (0, 1, 2, 3), 4  # a, b, c and bias take one dtype as NumPy's a @ b + c + bias does


def _host_inputs(where: str, ops, epi: int):
    """ops with every host input as a native, aligned NumPy array (a TypeError or DeviceError naming
    the argument for what is none); None if that changes nothing (the refusal was for something else)."""
    fixed = tuple(x if name is None or x is None else host_array(x, aux_key(epi) if name == "aux" else name, where)
                  for name, x in zip(_INPUT_NAMES, ops))
    return None if all(x is y for x, y in zip(fixed, ops)) else fixed
