"""The :class:`Matmul` planner (plan once, execute many times, like
``nvmath.linalg.advanced.Matmul``): the operands referenced zero-copy, ``plan()`` with an
epilogue chain and its inputs, ``autotune()``, ``execute()`` through the C Runner,
``reset_operands()`` with its layout checks (device, strides), ``describe()`` and ``free()``.
Re-exported by ``fusemath._matmul`` (and as ``fusemath.Matmul``).
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Tuple

import numpy as np

from . import _fusemath as _C
from ._arrays import fm_name, int_arg, lib_of
from ._matmul_args import (
    _DGELU,
    _DRELU,
    _EXTRA_BITS,
    _INPUT_KEYS,
    _SLOT_AUX,
    _SLOT_D,
    _dtype_name,
    _dtype_of,
    _foreign,
    _merge_epilog,
    copy_behind,
    _ndarray,
)
from ._matmul_operands import _Operands
from ._options import Epilogue, as_options, resolve_execution

_data_ptr = _C.data_ptr


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
        run = _C.make_runner(self._plan, keep, ptrs, ops.lib.index, ops.device, tuple(outs), ops.scalar).run
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
        ops = self._alive(where)
        iterations = int_arg(iterations, "iterations", where)  # NumPy integers too
        if not 1 <= iterations <= 1000:  # the C planner's limit (fm_matmul_autotune's repeats)
            raise ValueError(f"{where}: iterations = {iterations}, expected 1 to 1000")
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
            results' library and device: nothing is allocated (fully validated once per object; a NumPy
            array reshaped, retyped or resized in place since is validated again).
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
                copied = copy_behind(x) is not None or copy_behind(old) is not None
                raise _C.InvalidArgumentError(
                    f"{where}: {name} has strides {_strides_text(x)}, the plan was made for {_strides_text(old)}; "
                    "pass an array with the same memory layout or create a new Matmul"
                    + (" (a misaligned or big-endian array is used through a compact native copy: these are the "
                       "copy's strides)" if copied else "")
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
        self._alive("Matmul.epilogue")
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
