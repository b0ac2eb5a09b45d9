"""The :class:`FFT` planner of ``fusemath.fft`` (plan once, execute many times, in the spirit
of nvmath-python's ``FFT``): the operand checked and kept zero-copy, ``plan()`` with the
fused chains, effort, norm and GPU prolog mode, one library plan per direction and layout,
``execute()``, ``reset_operand()`` and ``free()``; with the tables of the planner's string
arguments (kind, effort, gpu_prolog, direction). Re-exported by ``fusemath.fft``.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional, Tuple

import numpy as np

from . import _fusemath as _C
from ._arrays import C32 as _C32
from ._arrays import refresh_copies, same_operand
from ._fft_arrays import (_C2C, _C2R, _C64, _C128, _CLD, _F16, _F32, _F64, _LD, _MAX_AXES, _NO_CHAIN, _R2C, _Chain,
                          _axes, _chain, _input, _length, _norm_code, check_libs)
from ._options import _DEFAULT_OPTIONS, _choice, _resolve_execution

_KINDS = {"c2c": _C2C, "r2c": _R2C, "c2r": _C2R}
_KIND_NAMES = {v: k for k, v in _KINDS.items()}
_EFFORTS = {"estimate": _C.FFT_EFFORT_ESTIMATE, "measure": _C.FFT_EFFORT_MEASURE,
            "patient": _C.FFT_EFFORT_PATIENT}
_GPU_PROLOG = {"auto": _C.FFT_PROLOG_AUTO, "kernel": _C.FFT_PROLOG_KERNEL, "pass": _C.FFT_PROLOG_PASS,
               "callback": _C.FFT_PROLOG_CALLBACK}


# ---------------------------------------------------------------------------
# Planner
# ---------------------------------------------------------------------------
_DIRECTIONS = ("forward", "inverse")
_FFT, _RUN, _PLAN = _C.OP_FFT, _C.CALL_RUN, _C.CALL_PLAN
# the result's dtype where it is not x's: r2c gives the complex, c2r the real type of x's precision
_RESULT_DTYPES = {(_R2C, _F16): _C32, (_R2C, _F32): _C64, (_R2C, _F64): _C128,
                  (_C2R, _C32): _F16, (_C2R, _C64): _F32, (_C2R, _C128): _F64}


def options(kind: int, inverse: bool, axes, execution, n: int, chains: Tuple[_Chain, _Chain], norm: int,
            effort: int = _C.FFT_EFFORT_ESTIMATE, gpu_prolog: int = _C.FFT_PROLOG_AUTO):
    """call()'s options tuple, in fmpy_fft.c's order (the stateless functions' and the planner's)."""
    (pro, epi), (ex, dev, nth) = chains, execution
    return (kind, inverse, axes, norm, effort, ex, dev, nth, pro.ops, pro.scale, epi.ops, epi.scale,
            pro.source, pro.name, epi.source, epi.name, gpu_prolog, n)


class _Setup(NamedTuple):
    """What an FFT's plans depend on besides x's layout, replaced as one object by plan(): the
    chains and call()'s options per direction (forward, inverse). The plans themselves live in the
    library context's plan cache (one per direction and layout)."""

    chains: Tuple[_Chain, _Chain]
    opts: Tuple[tuple, tuple]


class FFT:
    """Plan an FFT once, execute it many times (in the spirit of nvmath-python's ``FFT``).

    ``FFT(x, axes=None, kind=None, *, n=None, execution=None)``: x is used zero-copy (not
    promoted: complex64 / complex128 for c2c and c2r, float32 / float64 for r2c). axes: 1 to 3
    distinct axes (default: the last min(ndim, 3)); for r2c / c2r the last of them is the
    halved one. kind: None (complex x -> "c2c", real x -> "r2c"), "c2c", "r2c" or "c2r";
    n: for c2r, the output length along the last axis (default 2 * (m - 1)).

    ``plan(prolog=None, epilog=None, effort="measure", norm="backward")`` fixes the fused
    chains (dicts as in the functions; their arrays are kept and read at each execute) and
    the scaling; ``execute(direction=None, out=None, stream=None)`` runs it on the current
    operand: direction "forward" (c2c, r2c; the default except for c2r) or "inverse" (c2c,
    c2r) and returns a new array (or ``out``). ``reset_operand(x)`` swaps in another array
    of the same shape and dtype (other strides re-plan). ``free()`` / ``with`` release it.

    Threads: ``execute()`` may run from several threads at once (the GIL is released during the
    transform); each call uses the operand and chains it started with, so a concurrent
    ``reset_operand()`` or ``plan()`` is safe (a running call keeps the chains it started with).
    """

    def __init__(self, x: Any, axes: Any = None, kind: Optional[str] = None, *, n: Optional[int] = None,
                 execution: Any = None):
        where = "fusemath.fft.FFT"
        self._freed = False
        self._plan = None
        lib, x = _input(x, "x", where)
        dt = lib.dtype_of(x)
        if kind is None:
            kind_code = _C2C if getattr(dt, "kind", "") == "c" else _R2C
        else:
            kind_code = _choice(kind, _KINDS, "kind", where)
        want = (_F32, _F64, _LD, _F16) if kind_code == _R2C else (_C64, _C128, _CLD, _C32)
        if dt not in want:
            hint = "; use kind='c2c' with complex input" if kind_code == _R2C and getattr(dt, "kind", "") == "c" else ""
            raise _C.DtypeError(f"{where}: x has dtype {dt}; a {_KIND_NAMES[kind_code]} transform takes "
                                f"{', '.join(map(str, want[:-1]))} or {want[-1]} (the planner does not convert){hint}")
        if dt in (_F16, _C32) and getattr(lib, "torch", None) is None:
            raise TypeError(f"{where}: x has dtype {dt}: half-precision FFTs give complex32 results, which only "
                            f"PyTorch has ({lib.name} does not); pass a torch CUDA tensor or convert x to "
                            "float32 / complex64")
        if x.ndim == 0:
            raise ValueError(f"{where}: x is 0-d; the FFT needs at least one dimension")
        if axes is None:
            axes = tuple(range(max(0, x.ndim - _MAX_AXES), x.ndim))
        elif isinstance(axes, bool):
            raise TypeError(f"{where}: axes must be an int or a sequence of ints, not bool")
        elif isinstance(axes, (int, np.integer)):
            axes = (int(axes),)
        axes = _axes(axes, x.ndim, "axes", where)
        if not 1 <= len(axes) <= _MAX_AXES:
            raise ValueError(f"{where}: axes has {len(axes)} entries; the planner takes 1 to 3 axes")
        shape = list(x.shape)
        if kind_code == _C2R:
            m = shape[axes[-1]]
            n = 2 * (m - 1) if n is None else _length(n, "n", where)
            if n < 1:
                raise ValueError(f"{where}: c2r with input length {m} along axis {axes[-1]} gives no output; "
                                 "pass n")
            if n // 2 + 1 != m:
                raise _C.ShapeError(f"{where}: c2r output length n = {n} needs {n // 2 + 1} input points along "
                                    f"axis {axes[-1]}, x has {m}")
            shape[axes[-1]] = n
        elif n is not None:
            raise ValueError(f"{where}: n is for kind='c2r' only")
        elif kind_code == _R2C:
            shape[axes[-1]] = shape[axes[-1]] // 2 + 1
        self._where = where
        self._lib, self._x, self._dtype = lib, x, dt
        self._kind, self._axes = kind_code, axes
        self._out_shape = tuple(shape)
        self._out_dtype = _RESULT_DTYPES.get((kind_code, dt), dt)
        self._exec = _resolve_execution(execution, _DEFAULT_OPTIONS, where)[:3]
        self._n = shape[axes[-1]] if kind_code == _C2R else 0  # c2r: the output length of the halved axis
        self._setup = None  # plan()'s

    # -- helpers ---------------------------------------------------------------
    def _alive(self, what: str) -> None:
        if self._freed:
            raise _C.InvalidStateError(f"{self._where}.{what}: the FFT was freed")

    def _direction(self, direction: Optional[str]) -> bool:
        if direction is None:
            return self._kind == _C2R
        if direction not in _DIRECTIONS:
            raise ValueError(f"{self._where}.execute: direction {direction!r} is not 'forward' or 'inverse'")
        inverse = direction == "inverse"
        if self._kind == _R2C and inverse:
            raise ValueError(f"{self._where}.execute: an r2c FFT is forward only (plan a c2r FFT for the inverse)")
        if self._kind == _C2R and not inverse:
            raise ValueError(f"{self._where}.execute: a c2r FFT is inverse only")
        return inverse

    # -- public ------------------------------------------------------------------
    def plan(self, prolog: Any = None, epilog: Any = None, effort: str = "measure", norm: Any = "backward",
             gpu_prolog: str = "auto"):
        """Plan with the fused chains; plans the default direction now (the other on first use).

        effort: "measure" by default: a planner object is made to run many times, and FFTW's
        measured plans pay (c64 1024x1024 2-D on the 2-core dev machine: 9.5 ms measured vs
        43.5 ms estimated). "estimate" plans at once; "patient" searches longer. The stateless
        functions (fft, fftn, ...) always use estimate with cached plans.

        gpu_prolog (cuda only): how the chains run - "kernel" (the transform and both chains as
        generated kernels, one read and one write of the data each; c2c, complex64 / complex128,
        power-of-two lengths: 1-D up to 4096 / 2048 points in one kernel, longer 1-D up to 2^24
        on contiguous rows in two or three, several axes one kernel per axis), "callback" (cuFFT
        with a load callback: no extra pass, but cuFFT runs slower with one on large
        transforms), "pass" (cuFFT after one generated elementwise kernel) or "auto" (the kernel
        where it reads and writes whole memory sectors, else the callback for small transforms
        and the pass for large ones; docs/performance.md has the measurements). With "pass" and
        "callback" the epilog is a cuFFT store callback."""
        self._alive("plan()")
        where = self._where + ".plan"
        norm_code = _norm_code(norm, where)
        pro = _chain(where, "prolog", prolog, real_data=self._kind == _R2C)
        epi = _chain(where, "epilog", epilog, real_data=self._kind == _C2R)
        check_libs(where, self._lib, None, pro, epi)
        # everything a plan depends on, swapped in one step: an execute() running in another
        # thread keeps the setup it started with (or finds its plans freed: InvalidStateError)
        effort, gpu_prolog = _choice(effort, _EFFORTS, "effort", where), _choice(gpu_prolog, _GPU_PROLOG,
                                                                                 "gpu_prolog", where)
        new = _Setup((pro, epi), tuple(options(self._kind, inverse, self._axes, self._exec, self._n, (pro, epi),
                                               norm_code, effort, gpu_prolog) for inverse in (False, True)))
        plan = _C.call(_FFT, _PLAN, self._lib.index, (self._x, None, pro.arr, epi.arr), new.opts[self._kind == _C2R],
                       None, 3, where)[0]
        old, self._setup, self._plan = self._plan, new, plan
        if old is not None:
            old.free()  # the context's cache and running executions hold their own references
        return self

    def execute(self, direction: Optional[str] = None, out: Any = None, stream: Any = None):
        """Run the FFT on the current operand; returns a new array, or out."""
        self._alive("execute()")
        if self._plan is None:
            raise _C.InvalidStateError(f"{self._where}.execute: call plan() first")
        # this call's operand and setup (chains), held by the frame until the transform is done:
        # another thread's reset_operand() or plan() may replace them meanwhile
        x, setup = self._x, self._setup
        if x is None or setup is None:
            raise _C.InvalidStateError(f"{self._where}.execute: the FFT was freed")
        inverse = self._direction(direction)
        if out is not None:  # (the chains' arrays were checked by plan())
            check_libs(self._where + ".execute", self._lib, out, _NO_CHAIN, _NO_CHAIN)
        (pro, epi), opts = setup
        refresh_copies(x, pro.arr, epi.arr)  # big-endian or misaligned arrays run from copies
        return _C.call(_FFT, _RUN, self._lib.index, (x, out, pro.arr, epi.arr), opts[inverse], stream, 3,
                       self._where + ".execute")

    def reset_operand(self, x: Any) -> None:
        """Use another array of the same shape, dtype and library/device from now on."""
        self._alive("reset_operand()")
        where = self._where + ".reset_operand"
        # (other strides get their own plan on the next execute)
        self._x = same_operand(where, "x", _input(x, "x", where)[1], self._x, "the FFT was planned for")

    def describe(self) -> str:
        """One line describing the default-direction plan (or the problem, before plan())."""
        self._alive("describe()")
        if self._plan is not None:
            return self._plan.describe()
        return (f"fft {_KIND_NAMES[self._kind]} {self._dtype} shape={tuple(self._x.shape)} axes={self._axes} "
                "(not planned)")

    @property
    def result_shape(self) -> Tuple[int, ...]:
        self._alive("result_shape")
        return self._out_shape

    @property
    def result_dtype(self):
        self._alive("result_dtype")
        return self._out_dtype

    @property
    def kind(self) -> str:
        self._alive("kind")
        return _KIND_NAMES[self._kind]

    @property
    def axes(self) -> Tuple[int, ...]:
        self._alive("axes")
        return self._axes

    def free(self) -> None:
        """Release the plans and the operand references; later use raises InvalidStateError."""
        if self._freed:
            return
        plan, self._plan = self._plan, None
        if plan is not None:
            plan.free()
        self._x = self._setup = None  # (the setup's chains hold their arrays)
        self._freed = True

    def __enter__(self) -> "FFT":
        self._alive("__enter__")
        return self

    def __exit__(self, *exc) -> None:
        self.free()

    def __repr__(self) -> str:
        if self._freed:
            return "<fusemath.fft.FFT (freed)>"
        return f"<fusemath.fft.FFT {self.describe()}>"
