"""Options, epilogues and small argument conversions shared by the fusemath front end."""
from __future__ import annotations

import enum
from dataclasses import dataclass, fields
from typing import Any, Mapping, Optional, Tuple, Union

from . import _fusemath as _C
from ._arrays import int_arg

__all__ = ["Epilogue", "MatmulOptions"]


class Epilogue(enum.IntFlag):
    """Epilogue bits of a matmul, mirroring ``FM_EPILOGUE_*`` in fusemath.h (see
    docs/epilogues.md for the exact semantics).

    Forward: ``D = act(alpha * scale[j] * (A @ B)[i, j] + beta * C + bias[j])`` with at most
    one activation (RELU, GELU, SIGMOID, TANH, SILU, CLAMP); ``AUX`` also returns the
    activation's auxiliary output (the relu bit mask, else the activation's input).
    Backward: ``DRELU`` / ``DGELU`` give ``D = (alpha A@B + beta C) * act'(aux)`` from the
    forward pass's aux (``epilog_inputs={"relu_aux": ...}`` / ``{"gelu_aux": ...}``), with
    ``BGRAD`` also the bias gradient (column sums of D). ``BGRADA`` / ``BGRADB``: ``D = A@B``
    plus the row sums of A / column sums of B. ``SCALE``: a per-column scale vector.
    ``DROPOUT`` (after the activation): kept elements times ``1/(1-p)``, the others 0, the mask
    drawn from a :class:`fusemath.random.Generator` (``dropout=(p, generator)``); with ``AUX`` the
    keep mask (with RELU: AND the relu bit), which ``DDROPOUT`` (``dropout=p``,
    ``epilog_inputs={"dropout_aux": ...}``) applies backward.

    The combinations carry the names nvmath-python / cuBLASLt use (``RELU_BIAS``,
    ``GELU_AUX_BIAS``, ``DRELU_BGRAD``, ...), and strings are accepted wherever an
    epilogue is: see :meth:`parse`.
    """

    DEFAULT = _C.EPILOGUE_DEFAULT
    BIAS = _C.EPILOGUE_BIAS
    RELU = _C.EPILOGUE_RELU
    GELU = _C.EPILOGUE_GELU
    AUX = _C.EPILOGUE_AUX
    SIGMOID = _C.EPILOGUE_SIGMOID
    TANH = _C.EPILOGUE_TANH
    SILU = _C.EPILOGUE_SILU
    CLAMP = _C.EPILOGUE_CLAMP
    DRELU = _C.EPILOGUE_DRELU
    DGELU = _C.EPILOGUE_DGELU
    BGRAD = _C.EPILOGUE_BGRAD
    BGRADA = _C.EPILOGUE_BGRADA
    BGRADB = _C.EPILOGUE_BGRADB
    SCALE = _C.EPILOGUE_SCALE
    DROPOUT = _C.EPILOGUE_DROPOUT
    DDROPOUT = _C.EPILOGUE_DDROPOUT
    RELU_BIAS = RELU | BIAS
    GELU_BIAS = GELU | BIAS
    RELU_AUX = RELU | AUX
    GELU_AUX = GELU | AUX
    RELU_AUX_BIAS = RELU | AUX | BIAS
    GELU_AUX_BIAS = GELU | AUX | BIAS
    DRELU_BGRAD = DRELU | BGRAD
    DGELU_BGRAD = DGELU | BGRAD

    @classmethod
    def parse(cls, text: str) -> "Epilogue":
        """``Epilogue.parse("bias+relu") == Epilogue.RELU_BIAS``; case-insensitive; words
        identity/none/default, bias, relu, gelu, sigmoid, tanh, silu, clamp, dropout, aux, drelu,
        dgelu, ddropout, bgrad, bgrada, bgradb, scale joined by ``+`` or ``_`` (so ``"DGELU_BGRAD"`` works).
        Raises ValueError (InvalidArgumentError) naming an unknown word or a chain without
        a meaning (two activations, aux without an activation, ...)."""
        return cls(_C.epilogue_parse(text))

    @property
    def canonical_name(self) -> str:
        """The library's canonical spelling: ``"bias+relu"``, ``"identity"``, ..."""
        return _C.epilogue_format(int(self))


#: nvmath-python's name for the same enumeration.
MatmulEpilog = Epilogue

_PARSED: dict = {}  # epilogue strings -> their bits (parsed by the library once per string)


def epilogue_bits(epilogue: Union[None, str, int, Epilogue], where: str) -> int:
    """Epilogue argument (None, str, int or Epilogue) -> int bits; the library says whether the
    chain has a meaning."""
    if epilogue is None:
        return 0
    if isinstance(epilogue, str):
        bits = _PARSED.get(epilogue)
        if bits is None:
            bits = _C.epilogue_parse(epilogue)  # ValueError naming the unknown word
            if len(_PARSED) < 256:
                _PARSED[epilogue] = bits
        return bits
    try:
        return int_arg(epilogue, "epilogue", where)  # NumPy integers too
    except TypeError:
        raise TypeError(f"{where}: epilogue must be None, a str such as 'bias+relu', or a fusemath.Epilogue, "
                        f"not {type(epilogue).__name__}") from None


@dataclass
class MatmulOptions:
    """Options of a matmul (like ``nvmath.linalg.advanced.MatmulOptions``).

    Attributes:
        execution: ``None``/``"auto"`` (where the operands live), ``"cpu"``, ``"cuda"``,
            ``"cuda:N"`` or ``"best"`` (where the machine profile predicts the result soonest,
            the copies included: :func:`fusemath.calibrate`).
        device_id: CUDA device for ``execution="cuda"``.
        num_threads: CPU threads for this matmul; 0 = the library setting
            (:func:`fusemath.set_num_threads`).
        panel_rows: CPU rows per fused panel; 0 = heuristic (``Matmul.autotune`` picks one).
        cpu_strategy: ``"auto"`` (heuristic), ``"tiles"`` (one single-threaded OpenBLAS GEMM
            per tile, epilogue fused per tile), ``"kernel"`` (the same tiles through fusemath's
            own GEMM kernel, which applies alpha, beta*C, bias and relu in registers before
            storing D; real float32/float64 with forward epilogues; ``"auto"`` picks it when
            k <= 384, and for longer k on AVX-512 CPUs) or ``"blas_threads"`` (OpenBLAS
            threads one GEMM, the epilogue runs as parallel passes; can pay off for lone large
            f64 products).
        compute: ``"default"`` (the dtype's own precision; f16/bf16 accumulate in f32) or
            ``"tf32"`` (float32 data on tensor cores with tf32 inputs: opt-in, CUDA only,
            about 1e-3 relative error).

    The GPU algorithm and the number of passes a plan uses are chosen by the library (and
    by :meth:`Matmul.autotune`); :meth:`Matmul.describe` shows them. The clamp bounds of the
    ``CLAMP`` epilogue are an epilogue argument (``clamp=(lo, hi)``), not an option.
    """

    execution: Optional[str] = None
    device_id: int = 0
    num_threads: int = 0
    panel_rows: int = 0
    cpu_strategy: str = "auto"
    compute: str = "default"


_OPTION_NAMES = tuple(f.name for f in fields(MatmulOptions))
_DEFAULT_OPTIONS = MatmulOptions()


def as_options(options: Union[None, MatmulOptions, Mapping[str, Any]], where: str) -> MatmulOptions:
    if options is None:
        return _DEFAULT_OPTIONS
    if isinstance(options, MatmulOptions):
        return options
    if isinstance(options, Mapping):
        unknown = [k for k in options if k not in _OPTION_NAMES]
        if unknown:
            raise TypeError(f"{where}: unknown option(s) {unknown}; expected some of {list(_OPTION_NAMES)}")
        return MatmulOptions(**options)
    raise TypeError(f"{where}: options must be a MatmulOptions or a dict, not {type(options).__name__}")


#: (execution, device_id, num_threads, panel_rows, cpu_strategy, compute) of the defaults
AUTO_DEFAULTS = (_C.EXECUTION_AUTO, 0, 0, 0, _C.CPU_STRATEGY_AUTO, _C.COMPUTE_DEFAULT)
_COMPUTES = {"default": _C.COMPUTE_DEFAULT, "tf32": _C.COMPUTE_TF32}
_CPU_STRATEGIES = {"auto": _C.CPU_STRATEGY_AUTO, "tiles": _C.CPU_STRATEGY_TILES,
                   "blas_threads": _C.CPU_STRATEGY_BLAS_THREADS, "kernel": _C.CPU_STRATEGY_KERNEL}
_EXECUTIONS = {"auto": _C.EXECUTION_AUTO, "": _C.EXECUTION_AUTO, "cpu": _C.EXECUTION_CPU, "cuda": _C.EXECUTION_CUDA,
               "best": _C.EXECUTION_BEST}


def _choice(value: Any, table: Mapping[str, int], name: str, where: str) -> int:
    """A string option (case and surrounding blanks aside) -> its code."""
    key = value.strip().lower() if isinstance(value, str) else None
    if key not in table:
        raise ValueError(f"{where}: {name} {value!r} is not one of {', '.join(map(repr, table))}")
    return table[key]


def resolve_execution(execution: Any, opts: MatmulOptions, where: str) -> Tuple[int, int, int, int, int, int]:
    """-> (execution code, device_id, num_threads, panel_rows, cpu_strategy, compute) for the C layer."""
    if execution is None and opts is _DEFAULT_OPTIONS:
        return AUTO_DEFAULTS
    ex, dev, nth, panel = _resolve_execution(execution, opts, where)
    if opts is _DEFAULT_OPTIONS:
        return ex, dev, nth, panel, _C.CPU_STRATEGY_AUTO, _C.COMPUTE_DEFAULT
    compute = "default" if opts.compute is None else opts.compute
    return (ex, dev, nth, panel, _choice(opts.cpu_strategy, _CPU_STRATEGIES, "cpu_strategy", where),
            _choice(compute, _COMPUTES, "compute", where))


def _resolve_execution(execution: Any, opts: MatmulOptions, where: str) -> Tuple[int, int, int, int]:
    """-> (execution code, device_id, num_threads, panel_rows); the library checks their ranges."""
    if execution is None:
        execution = opts.execution
    device_id = int_arg(opts.device_id, "device_id", where)
    num_threads = int_arg(opts.num_threads, "num_threads", where)
    panel_rows = int_arg(opts.panel_rows, "panel_rows", where)
    if execution is None:
        return _C.EXECUTION_AUTO, device_id, num_threads, panel_rows
    if isinstance(execution, Mapping):  # nvmath style {"name": "cuda", "device_id": 1}
        unknown = [k for k in execution if k not in ("name", "device_id", "num_threads")]
        if unknown or "name" not in execution:
            raise ValueError(f"{where}: execution dict must have 'name' and optionally 'device_id', got {execution!r}")
        if "device_id" in execution:
            device_id = int_arg(execution["device_id"], "device_id", where)
        if "num_threads" in execution and execution["num_threads"] is not None:
            num_threads = int_arg(execution["num_threads"], "num_threads", where)
        execution = execution["name"]
    if not isinstance(execution, str):
        raise TypeError(f"{where}: execution must be None, 'cpu', 'cuda', 'cuda:N' or 'best', not {type(execution).__name__}")
    text = execution.strip().lower()
    if text.startswith("cuda:") and text[5:].isascii() and text[5:].isdigit():  # ('²'.isdigit() is True)
        return _C.EXECUTION_CUDA, int(text[5:]), num_threads, panel_rows
    if text not in _EXECUTIONS:
        raise ValueError(f"{where}: execution {execution!r} is not one of None, 'auto', 'cpu', 'cuda', 'cuda:N', 'best'")
    code = _EXECUTIONS[text]
    return code, 0 if code == _C.EXECUTION_CPU else device_id, num_threads, panel_rows
