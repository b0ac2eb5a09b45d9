"""The :class:`Matmul` planner (plan once, execute many times, like
``nvmath.linalg.advanced.Matmul``): the operands referenced zero-copy, ``plan()`` with an
epilogue chain and its inputs, ``autotune()``, ``execute()`` through the C Runner,
``reset_operands()`` with its layout checks (device, strides), ``describe()`` and ``free()``.
The library checks the problem (``_fusemath.call``: NumPy's 1-D promotion, shapes, dtypes,
epilogue inputs) and says what the results are; the operands are kept as the caller gave them.
Re-exported by ``fusemath._matmul`` (and as ``fusemath.Matmul``).
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Tuple

from . import _fusemath as _C
from ._arrays import (NUMPY, copy_behind, host_array, int_arg, into_out, lib_of, operand, refresh_copies,
                      remembered_copy, same_operand)
from ._matmul_args import (aux_key, checked_inputs, _dropout_arg, _dtype_of, _foreign, _merge_epilog, _ndarray,
                           overlaps_input, promote, recast_out, _split_inputs, _with_dropout_stream)
from ._options import Epilogue, as_options, epilogue_bits, resolve_execution

_data_ptr = _C.data_ptr
_call = _C.call
_MATMUL = _C.OP_MATMUL
_A, _B, _C_SLOT, _BIAS_SLOT, _D, _AUX, _SCALE = 0, 1, 2, 3, _C.MATMUL_D, _C.MATMUL_AUX, _C.MATMUL_SCALE


# ---------------------------------------------------------------------------
# Planner object
# ---------------------------------------------------------------------------
def _layout(x) -> Tuple[Any, ...]:
    """(device, strides in elements that matter): 0 for axes of extent <= 1; all 0 for empty arrays."""
    _, device, _, shape, strides = _C.tensor_info(x)
    empty = 0 in shape
    return (device,) + tuple(0 if empty or n <= 1 else s for n, s in zip(shape, strides))


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

    __slots__ = ("_lib", "_device", "_ops", "_opts", "_specs", "_plan", "_run", "_dropout", "__weakref__")

    def __init__(self, a: Any, b: Any, c: Any = None, *, alpha: Any = 1.0, beta: Any = None, options: Any = None):
        where = "fusemath.Matmul"
        self._plan = self._run = self._ops = self._dropout = None
        lib = NUMPY
        if type(a) is not _ndarray or type(b) is not _ndarray:
            fr = _foreign(a, b, where)
            if fr is not None:
                lib, a, b = fr
        self._lib = lib
        given = (a, b, c)
        a, b = self._conv(a, "a", where), self._conv(b, "b", where)
        if c is not None:
            c = self._conv(c, "c", where)
        ex = resolve_execution(None, as_options(options, where), where)
        self._device = lib.device_of(a if lib_of(a) is lib else b)
        self._opts = (alpha, beta, 0, ex[0], ex[1], ex[2], ex[3], ex[4], ex[5], None, None, 0, 0)
        ops = [a, b, c, None, None, None, None, None, None, None]
        if lib is NUMPY:
            promote(ops, (0, 1, 2), given)  # mixed dtypes as np.matmul: the copies follow the caller's arrays
        self._specs = _call(_MATMUL, _C.CALL_SPECS, lib.index, tuple(ops), self._opts, None, 3, where)  # checks
        self._ops = ops

    # -- state -------------------------------------------------------------
    def _alive(self, where: str) -> list:
        ops = self._ops
        if ops is None:
            raise _C.InvalidStateError(f"{where}: this Matmul was freed (free() or the end of its with block)")
        return ops

    def _conv(self, x: Any, name: str, where: str):
        if self._lib is NUMPY:
            return host_array(x, name, where)
        return x if type(x) is _ndarray else operand(x, name, where)[1]

    def _install(self, plan, specs, ops, opts) -> None:
        old = self._plan
        self._plan, self._specs, self._ops, self._opts = plan, specs, ops, opts
        self._rebuild()
        if old is not None and old is not plan:
            old.free()  # executions running on it hold their own reference in C

    def _rebuild(self) -> None:
        ops = self._ops
        ptrs = tuple(None if x is None or i == _D else _data_ptr(x) for i, x in enumerate(ops[:8]))
        keep = tuple(ops)
        scalar = self._lib is NUMPY and self._specs[0][1] == ()  # NumPy gives a scalar for 1-D @ 1-D
        run = _C.make_runner(self._plan, keep, ptrs, self._lib.index, self._device, self._specs, scalar,
                             "Matmul.execute()").run
        # a big-endian or misaligned host operand is computed from a native, aligned copy: the
        # copy follows the caller's array before each execute (in-place changes are seen)
        stale = tuple({id(f[0]): f for x in keep if x is not None and (f := copy_behind(x)) is not None}.values())
        if stale:
            def run(stream, out, _run=run, _stale=stale):
                for copy, src in _stale:
                    copy[...] = src
                return _run(stream, out)
        self._run = run

    # -- planning ------------------------------------------------------------
    def plan(self, epilogue: Any = None, bias: Any = None, *, epilog: Any = None,
             epilog_inputs: Optional[Mapping] = None, clamp: Any = None, dropout: Any = None):
        """Plan the product with an epilogue chain (None, str, :class:`Epilogue`) and its inputs.

        nvmath-python spellings are accepted: ``plan(epilog=Epilogue.DRELU_BGRAD,
        epilog_inputs={"relu_aux": mask})``. ``bias`` (or ``epilog_inputs["bias"]``, an
        ``(N,)`` row vector as in NumPy's ``a @ b + bias``), ``epilog_inputs["scale"]`` and
        ``clamp=(lo, hi)`` imply BIAS, SCALE and CLAMP. ``dropout=(p, generator)`` with a
        DROPOUT chain (as :func:`matmul`'s): p is planned; each :meth:`execute` draws its mask
        from the generator's stream at its position then and advances it by the result's size
        (as torch's dropout draws from its generator per call); such executes go through the
        stateless call on the cached plan. ``dropout=p`` with DDROPOUT. Re-planning replaces
        the previous plan. Returns self.
        """
        where = "Matmul.plan"
        ops = list(self._alive(where))
        epi = epilogue_bits(_merge_epilog(where, epilogue, epilog), where)
        epi, bias, scale, aux_in, clamp = _split_inputs(where, epi, bias, epilog_inputs, clamp)
        for slot, name, x in ((_BIAS_SLOT, "bias", bias), (_SCALE, "scale", scale), (_AUX, aux_key(epi), aux_in)):
            ops[slot] = None if x is None else self._conv(x, name, where)
        p, gen = _dropout_arg(where, epi, dropout)
        opts = self._opts[:2] + (epi,) + self._opts[3:9] + (clamp, p, 0, 0)
        plan, specs = _call(_MATMUL, _C.CALL_PLAN, self._lib.index, tuple(ops), opts, None, 3, where)
        self._install(plan, specs, ops, opts)
        self._dropout = gen
        return self

    def autotune(self, iterations: int = 3):
        """Time the candidate configurations (CPU panel heights; on a GPU, cuBLASLt's
        algorithms with the epilogue fused - its heuristic's list and a wider search over
        workspace limits and algorithm ids - and plain GEMMs plus the generated epilogue
        kernel) on the current operands and keep the fastest plan. Each timing makes
        ``iterations`` calls (1 to 1000; on a GPU at least 1 ms of them), in three rounds;
        candidates over 10% behind after the first round stop.

        CPU: a candidate's fastest call must beat the default's by 3%. GPU: each candidate is
        timed between two timings of the default (the clock drifts) and must beat their mean,
        as the median over the rounds, by 1% or by twice the default's typical change between
        those two timings when that is larger (at a power cap timings scatter by a few
        percent). A GPU winner must then win again in four 100 ms windows alternating with
        the default (in long loops at a power limit kernels can swap places; about 0.9 s).
        A candidate whose call fails drops out; a failing default raises.

        Plans with the defaults first if :meth:`plan` was not called. On GPU data it
        synchronizes the device before and after (it times). Returns self."""
        where = "Matmul.autotune"
        self._alive(where)
        iterations = int_arg(iterations, "iterations", where)  # NumPy integers too
        if not 1 <= iterations <= 1000:  # the C planner's limit (fm_autotune's repeats)
            raise ValueError(f"{where}: iterations = {iterations}, expected 1 to 1000")
        if self._plan is None:
            self.plan()
        lib, dev = self._lib, self._device
        lib.synchronize(dev)  # the tuning runs on the default stream (nothing to wait for on the host)
        plan, specs = _call(_MATMUL, _C.CALL_TUNE, lib.index, tuple(self._ops), self._opts, None, iterations, where)
        lib.synchronize(dev)
        self._install(plan, specs, self._ops, self._opts)
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
            results' library and device: nothing is allocated (fully validated once per object; a NumPy
            array reshaped, retyped or resized in place since is validated again).
        """
        run = self._run
        if run is None:
            self._alive("Matmul.execute")
            self.plan()
            run = self._run
        if self._dropout is not None:
            run = self._execute_dropout
        try:
            return run(stream, out)
        except (_C.DtypeError, _C.AliasError, _C.InvalidArgumentError):
            # np.matmul's out= of another dtype (or byte order), or overlapping an input: through a temporary
            if self._lib is not NUMPY or not (recast_out(out, self._ops[0].dtype) or (
                    type(out) is _ndarray and out.dtype == self._ops[0].dtype and overlaps_input(out, self._ops))):
                raise
        return into_out("Matmul.execute()", out, self._ops[0].dtype, lambda: run(stream, None))

    def _execute_dropout(self, stream: Any, out: Any):
        """execute() of a DROPOUT plan: the generator's position is a per-call argument, which the
        planned fast path (the Runner) does not carry; the stateless call finds the plan cached."""
        where = "Matmul.execute()"
        ops = list(self._alive(where))
        refresh_copies(*ops)  # operands run from copies (big-endian, misaligned, promoted) follow the caller's
        opts, lib = self._opts, self._lib
        ops[_D] = out
        return _with_dropout_stream(self._dropout, where, lambda pos, seed: _call(
            _MATMUL, _C.CALL_RUN, lib.index, tuple(ops), opts[:11] + (pos, seed), stream, 3, where))

    def reset_operands(self, a: Any = None, b: Any = None, c: Any = None, bias: Any = None, *,
                       epilog_inputs: Optional[Mapping] = None) -> None:
        """Point the plan at new arrays (None keeps the current one): a, b, c, bias, and in
        ``epilog_inputs`` the bias, scale, relu_aux or gelu_aux. Each must have the planned
        shape, dtype, device and memory layout (strides); a ValueError says what differs."""
        where = "Matmul.reset_operands"
        ops = self._alive(where)
        items = {"a": a, "b": b, "c": c, "bias": bias}
        if epilog_inputs is not None:
            items.update(checked_inputs(where, epilog_inputs, bias))
        # the slot of each argument the plan reads (an aux of the other kind has none)
        slots = {"a": _A, "b": _B, "c": _C_SLOT, "bias": _BIAS_SLOT, "scale": _SCALE, aux_key(self._opts[2]): _AUX}
        new = {}
        for name, value in items.items():
            if value is None:
                continue
            slot = slots.get(name)
            old = None if slot is None else ops[slot]
            if old is None:
                what = ("without c" if name == "c" else
                        "without a bias (plan(bias=...) first)" if name == "bias" else
                        f"without {name!r} (plan an epilogue that takes it first)")
                raise _C.InvalidArgumentError(f"{where}: {name} cannot be reset: the Matmul was planned {what}")
            x = self._conv(value, name, where)
            behind = copy_behind(old) if type(x) is _ndarray and x.dtype != old.dtype else None
            if behind is not None and behind[1].dtype == x.dtype:  # a promoted operand: promoted again
                x = remembered_copy(x, old.dtype)
            new[slot] = _same_layout(where, name, x, old)
        if new:
            ops = list(ops)
            for slot, x in new.items():
                ops[slot] = x
            self._ops = ops
            if self._plan is not None:
                self._rebuild()

    # -- information -----------------------------------------------------------
    def describe(self) -> str:
        """One line from the library (backend, dtype, sizes, epilogue; on the GPU also the
        cuBLASLt algorithm and passes chosen by the heuristic or :meth:`autotune`)."""
        ops = self._alive("Matmul.describe")
        if self._plan is None:
            a, b = ops[_A], ops[_B]
            return (f"matmul {_dtype_of(a)} a{tuple(a.shape)} @ b{tuple(b.shape)} -> {self._specs[0][1]} "
                    "(not planned yet)")
        return self._plan.describe()

    @property
    def backend(self) -> Optional[str]:
        """Name of the backend executing the plan (None before plan())."""
        self._alive("Matmul.backend")
        return None if self._plan is None else self._plan.backend

    @property
    def epilogue(self) -> Epilogue:
        self._alive("Matmul.epilogue")
        return Epilogue(self._opts[2])

    @property
    def result_shape(self) -> Tuple[int, ...]:
        self._alive("Matmul.result_shape")
        return self._specs[0][1]

    @property
    def dtype(self):
        """The operands' dtype, as their library spells it (np.dtype, torch.dtype)."""
        return self._alive("Matmul.dtype")[_A].dtype

    # -- lifetime ---------------------------------------------------------------
    def free(self) -> None:
        """Release the plan and the references to the operands (idempotent)."""
        plan = self._plan
        self._plan = self._run = self._ops = self._dropout = None
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


def _same_layout(where: str, name: str, x, old):
    """x, when it has the shape, dtype, library, device and memory layout the plan was made for."""
    same_operand(where, name, x, old, "the plan was made for")
    if _layout(x) != _layout(old):
        copied = copy_behind(x) is not None or copy_behind(old) is not None
        raise _C.InvalidArgumentError(
            f"{where}: {name} has strides {_C.tensor_info(x)[4]}, the plan was made for {_C.tensor_info(old)[4]} "
            "(in elements); pass an array with the same memory layout or create a new Matmul"
            + (" (a misaligned or big-endian array is used through a compact native copy: these are the "
               "copy's strides)" if copied else "")
        )
    return x
