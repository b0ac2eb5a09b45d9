"""``fusemath.matmul`` (stateless) and ``fusemath.Matmul`` (plan once, execute many times).

Both compute ``D = act(alpha * a @ b + beta * c + bias)`` with NumPy's matmul semantics:
a 1-D ``a`` gets a leading 1 prepended (and removed from the result), a 1-D ``b`` a
trailing 1 appended; batch dimensions broadcast. All shape/dtype logic lives here, the
arithmetic in libfusemath, which runs with the GIL released.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Tuple

import numpy as np

from . import _fusemath as _C
from ._options import (
    Epilogue,
    MatmulOptions,
    as_options,
    epilogue_bits,
    resolve_execution,
    stream_handle,
)

__all__ = ["matmul", "Matmul"]

_ndarray = np.ndarray
_empty = np.empty
_data_ptr = _C.data_ptr
_U8 = np.dtype(np.uint8)
_SUPPORTED = frozenset(
    np.dtype(t) for t in (np.float16, np.float32, np.float64, np.complex64, np.complex128)
)
_BIAS = int(Epilogue.BIAS)
_RELU = int(Epilogue.RELU)
_GELU = int(Epilogue.GELU)
_AUX = int(Epilogue.AUX)
_CPU_DEVICES = (1, 3)  # DLPack kDLCPU, kDLCUDAHost


# ---------------------------------------------------------------------------
# Array arguments
# ---------------------------------------------------------------------------
def _as_array(x: Any, name: str, where: str) -> np.ndarray:
    """A NumPy view of an array argument (no copy). NumPy arrays pass through;
    DLPack objects (CPU) and buffer-protocol objects are wrapped zero-copy. Anything
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
            f"{where}: {name} must be an array (NumPy, DLPack or buffer-protocol object), "
            f"not {type(x).__name__}"
        )
    if hasattr(x, "__dlpack__"):
        device = getattr(x, "__dlpack_device__", None)
        if device is not None:
            dev_type, dev_id = device()
            if int(dev_type) not in _CPU_DEVICES:
                raise _C.DeviceError(
                    f"{where}: {name} lives on DLPack device ({int(dev_type)}, {int(dev_id)}); "
                    "fusemath's Python front takes CPU arrays only for now"
                )
        try:
            return np.from_dlpack(x)
        except (BufferError, TypeError, ValueError, RuntimeError) as exc:
            raise TypeError(f"{where}: {name} cannot be imported through DLPack: {exc}") from exc
    try:
        view = memoryview(x)
    except TypeError:
        raise TypeError(
            f"{where}: {name} must be an array (NumPy, DLPack or buffer-protocol object), "
            f"not {type(x).__name__}"
        ) from None
    return np.asarray(view)


def _dtype_name(dt: np.dtype) -> str:
    return str(dt)


def _check_real_scalar(where: str, name: str, value: Any, dtype: np.dtype) -> None:
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


class _Operands:
    """Validated, promoted operands of one matmul problem (shared by both front ends)."""

    __slots__ = (
        "a", "b", "c",                  # promoted (>= 2-D) views handed to the library
        "a_user", "b_user", "c_user",   # the arrays as given (after NumPy conversion)
        "dtype", "m", "n", "k", "batch",
        "dshape",                       # promoted output shape (..., M, N)
        "rshape",                       # result shape as NumPy returns it (1-D dims removed)
        "a1d", "b1d", "alpha", "beta",
    )

    def __init__(self, where: str, a: Any, b: Any, c: Any, alpha: Any, beta: Any):
        a = _as_array(a, "a", where)
        b = _as_array(b, "b", where)
        dtype = a.dtype
        if b.dtype != dtype:
            raise _C.DtypeError(
                f"{where}: a has dtype {_dtype_name(dtype)} but b has dtype {_dtype_name(b.dtype)}; "
                "mixed dtypes are not supported (convert one of them)"
            )
        if dtype not in _SUPPORTED:
            raise _C.DtypeError(
                f"{where}: a and b have dtype {_dtype_name(dtype)}, which is not supported; expected "
                "float32, float64, complex64 or complex128 (float16 where a GPU backend is available)"
            )
        if a.ndim == 0 or b.ndim == 0:
            which = "a" if a.ndim == 0 else "b"
            raise _C.ShapeError(
                f"{where}: {which} is 0-d (a scalar); matmul needs operands with at least one dimension "
                "(use * to scale by a scalar)"
            )
        self.a_user, self.b_user = a, b
        self.a1d = a1d = a.ndim == 1
        self.b1d = b1d = b.ndim == 1
        if a1d:
            a = a[None, :]
        if b1d:
            b = b[:, None]
        m, k = a.shape[-2], a.shape[-1]
        k2, n = b.shape[-2], b.shape[-1]
        if k != k2:
            raise _C.ShapeError(
                f"{where}: a has shape {self.a_user.shape} and b has shape {self.b_user.shape}; the last "
                f"dimension of a ({k}) must equal the {'only' if b1d else 'second-to-last'} dimension of b ({k2})"
            )
        sa, sb = a.shape[:-2], b.shape[:-2]
        if sa == sb:
            batch = sa
        else:
            try:
                batch = np.broadcast_shapes(sa, sb)
            except ValueError:
                raise _C.ShapeError(
                    f"{where}: the batch dimensions of a {sa} and of b {sb} do not broadcast "
                    f"(a has shape {self.a_user.shape}, b has shape {self.b_user.shape})"
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

    # -- c ----------------------------------------------------------------
    def check_c(self, where: str, c: Any) -> Tuple[np.ndarray, np.ndarray]:
        """-> (c as given, c promoted to the rank of dshape)."""
        c = _as_array(c, "c", where)
        if c.dtype != self.dtype:
            raise _C.DtypeError(
                f"{where}: c has dtype {_dtype_name(c.dtype)} but a and b have dtype "
                f"{_dtype_name(self.dtype)}; mixed dtypes are not supported"
            )
        rshape = self.rshape
        if c.ndim > len(rshape) or any(
            cs != rs and cs != 1 for cs, rs in zip(reversed(c.shape), reversed(rshape))
        ):
            raise _C.ShapeError(
                f"{where}: c has shape {c.shape}, which does not broadcast to the result shape {rshape}"
            )
        cf = c
        if c.ndim < len(rshape):
            cf = c[(None,) * (len(rshape) - c.ndim)]
        if self.a1d and self.b1d:
            cf = cf[..., None, None]
        elif self.a1d:
            cf = cf[..., None, :]
        elif self.b1d:
            cf = cf[..., None]
        return c, cf

    def set_c(self, where: str, c: Any) -> None:
        self.c_user, self.c = self.check_c(where, c)

    # -- bias / epilogue ----------------------------------------------------
    def check_bias(self, where: str, bias: Any) -> np.ndarray:
        bias = _as_array(bias, "bias", where)
        if bias.dtype != self.dtype:
            raise _C.DtypeError(
                f"{where}: bias has dtype {_dtype_name(bias.dtype)} but a and b have dtype "
                f"{_dtype_name(self.dtype)}; mixed dtypes are not supported"
            )
        if bias.ndim == 0:
            raise _C.ShapeError(f"{where}: bias is 0-d; expected shape (N,) or (..., N) with N = {self.n}")
        if bias.shape[-1] != self.n:
            raise _C.ShapeError(
                f"{where}: bias has length {bias.shape[-1]} (shape {bias.shape}), expected N = {self.n}, "
                "the number of columns of the result"
            )
        return bias

    def epilogue_and_bias(self, where: str, epilogue: Any, bias: Any) -> Tuple[int, Optional[np.ndarray]]:
        epi = epilogue_bits(epilogue, where)
        if bias is not None:
            bias = self.check_bias(where, bias)
            epi |= _BIAS  # bias= implies the BIAS epilogue, like nvmath's epilog_inputs
        elif epi & _BIAS:
            raise _C.InvalidArgumentError(
                f"{where}: epilogue {_C.epilogue_format(epi)!r} adds a bias but bias= was not given"
            )
        if epi & (_RELU | _GELU) and self.dtype.kind == "c":
            raise _C.NotSupportedError(
                f"{where}: epilogue {_C.epilogue_format(epi)!r} is not defined for complex dtype "
                f"{_dtype_name(self.dtype)}"
            )
        return epi, bias

    # -- output / aux -----------------------------------------------------
    def aux_spec(self, epi: int) -> Tuple[Optional[str], Tuple[int, ...], Optional[np.dtype]]:
        """-> (key in the aux dict, shape as returned, dtype); key None without AUX.
        The returned shape has the memory layout of the promoted aux (size-1 axes removed)."""
        if not epi & _AUX:
            return None, (), None
        if epi & _RELU:
            rb = _C.relu_mask_row_bytes(self.n)
            return "relu_aux", self.batch + ((() if self.a1d else (self.m,)) + (rb,)), _U8
        return "gelu_aux", self.rshape, self.dtype

    def aux_full_shape(self, epi: int) -> Tuple[int, ...]:
        if epi & _RELU:
            return self.batch + (self.m, _C.relu_mask_row_bytes(self.n))
        return self.dshape

    def expand_result(self, x: np.ndarray) -> np.ndarray:
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
        return self.a1d and self.b1d and not self.batch


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


def _aux_result(key: str, aux: np.ndarray) -> dict:
    return {key: aux}


# ---------------------------------------------------------------------------
# Stateless matmul
# ---------------------------------------------------------------------------
def matmul(
    a: Any,
    b: Any,
    c: Any = None,
    *,
    alpha: Any = 1.0,
    beta: Any = None,
    bias: Any = None,
    epilogue: Any = None,
    out: Any = None,
    execution: Any = None,
    stream: Any = None,
    options: Any = None,
):
    """``D = act(alpha * a @ b + beta * c + bias)`` in one call, with NumPy matmul semantics.

    Args:
        a, b: arrays (NumPy, or any CPU object with the buffer protocol or ``__dlpack__``)
            of one dtype: float32, float64, complex64 or complex128. 1-D operands are
            promoted as ``numpy.matmul`` does; batch dimensions broadcast.
        c: optional addend, broadcastable to the result; ``beta`` defaults to 1 with ``c``.
        alpha, beta: scalars (complex allowed for complex dtypes).
        bias: shape ``(N,)`` or ``(..., N)``: added to every row. Implies the BIAS epilogue.
        epilogue: None, a string (``"relu"``, ``"gelu"``, ``"bias+relu"``, ``"RELU_AUX_BIAS"``,
            ...) or an :class:`Epilogue`. GELU is the tanh approximation.
        out: optional output array of exactly the result's shape and dtype (may be ``c``
            itself for an in-place update, must not overlap ``a`` or ``b``).
        execution: None (where the operands live), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
        stream: CUDA stream (int handle or CuPy/PyTorch stream) for GPU execution.
        options: :class:`MatmulOptions` or a dict with the same keys.

    Returns:
        The result as a NumPy array (``out`` if given); with an ``*_AUX`` epilogue the tuple
        ``(d, {"relu_aux": mask})`` or ``(d, {"gelu_aux": preactivation})``, as nvmath-python.
        The relu mask is uint8 ``(..., M, fusemath._fusemath.relu_mask_row_bytes(N))`` with
        bit ``j % 8`` of byte ``j // 8`` of row ``i`` set where ``D[i, j] > 0`` before relu.

    Raises:
        ValueError subclasses (ShapeError, InvalidArgumentError, AliasError) for shapes,
        epilogue names and overlapping outputs; TypeError subclasses (DtypeError,
        NotSupportedError) for dtypes; see ``fusemath.FusemathError``.
    """
    where = "fusemath.matmul"
    ops = _Operands(where, a, b, c, alpha, beta)
    epi, bias_arr = ops.epilogue_and_bias(where, epilogue, bias)
    opts = as_options(options, where)
    ex, dev, nth, panel, strategy = resolve_execution(execution, opts, where)
    sh = stream_handle(stream, where)
    if out is None:
        d = _empty(ops.rshape, ops.dtype)
        d_full = d.reshape(ops.dshape)  # C-contiguous: a view
    else:
        d = _check_out(where, ops, out)
        d_full = ops.expand_result(d)
    key, aux_shape, aux_dtype = ops.aux_spec(epi)
    aux = aux_full = None
    if key is not None:
        aux = _empty(aux_shape, aux_dtype)
        aux_full = aux.reshape(ops.aux_full_shape(epi))
    try:
        _C.matmul(ops.a, ops.b, ops.c, bias_arr, d_full, aux_full, ops.alpha, ops.beta, epi, ex, dev, nth, panel, strategy, sh)
    except _C.AliasError as exc:
        raise _C.AliasError(f"{where}: out overlaps an input ({exc})") from None
    if out is None and ops.scalar:
        d = d[()]
    if key is not None:
        return d, {key: aux}
    return d


# ---------------------------------------------------------------------------
# Planner object
# ---------------------------------------------------------------------------
def _layout(x: np.ndarray) -> Tuple[int, ...]:
    """Byte strides that matter (0 for axes of extent <= 1; all 0 for empty arrays)."""
    if x.size == 0:
        return (0,) * x.ndim
    return tuple(s if n > 1 else 0 for n, s in zip(x.shape, x.strides))


def _make_runner(plan, pa, pb, pc, pbias, keep, dshape, dtype, key, aux_shape, aux_dtype, scalar):
    """The per-execute callable: a C Runner bound to the plan and the operand addresses.

    It allocates the outputs with numpy.empty, runs the plan (GIL released) and returns the
    result in one C call. It holds `keep` (the operand arrays), so an execution in flight
    keeps the memory behind pa..pbias alive even if another thread calls free() or
    reset_operands() meanwhile."""
    return _C.make_runner(plan, keep, pa, pb, pc, pbias, _empty, dshape, dtype, aux_shape, aux_dtype, key,
                          scalar).run


class Matmul:
    """A planned matmul ``D = act(alpha * a @ b + beta * c + bias)`` on fixed operands,
    like ``nvmath.linalg.advanced.Matmul``::

        with fusemath.Matmul(a, b) as mm:
            mm.plan(epilogue="bias+relu", bias=b0)
            d = mm.execute()            # a new array per call
            a[...] = next_a             # in-place changes are seen by the next execute
            mm.reset_operands(a=other)  # or new arrays of the same shape/dtype/layout

    The operands are referenced (not copied) while the object lives: their memory must
    not be freed or resized, and their contents at execute time are what is multiplied.
    ``execute()`` before ``plan()`` plans with the defaults (no epilogue). After
    ``free()`` (or leaving the ``with`` block) every method raises InvalidStateError.
    One Matmul may be executed from several threads at once (each call gets its own
    output); ``plan``/``reset_operands``/``free`` must not race with ``execute``.
    """

    __slots__ = ("_ops", "_exec", "_epi", "_bias", "_plan", "_run", "_ptrs", "__weakref__")

    def __init__(self, a: Any, b: Any, c: Any = None, *, alpha: Any = 1.0, beta: Any = None, options: Any = None):
        where = "fusemath.Matmul"
        self._plan = None
        self._run = None
        self._ops = None
        ops = _Operands(where, a, b, c, alpha, beta)
        self._exec = resolve_execution(None, as_options(options, where), where)
        self._epi = 0
        self._bias = None
        self._ptrs = [_data_ptr(ops.a), _data_ptr(ops.b), None if ops.c is None else _data_ptr(ops.c), None]
        self._ops = ops

    # -- state -------------------------------------------------------------
    def _alive(self, where: str) -> _Operands:
        ops = self._ops
        if ops is None:
            raise _C.InvalidStateError(f"{where}: this Matmul was freed (free() or the end of its with block)")
        return ops

    def _templates(self, ops: _Operands, epi: int):
        d = _empty(ops.dshape, ops.dtype)
        aux = None
        if epi & _AUX:
            aux = _empty(ops.aux_full_shape(epi), _U8 if epi & _RELU else ops.dtype)
        return d, aux

    def _install(self, plan, epi: int, bias: Optional[np.ndarray]) -> None:
        old = self._plan
        self._plan, self._epi, self._bias = plan, epi, bias
        self._ptrs[3] = None if bias is None else _data_ptr(bias)
        self._rebuild()
        if old is not None and old is not plan:
            old.free()  # executions running on it hold their own reference in C

    def _rebuild(self) -> None:
        ops, epi = self._ops, self._epi
        key, aux_shape, aux_dtype = ops.aux_spec(epi)
        pa, pb, pc, pbias = self._ptrs
        keep = (ops.a, ops.b, ops.c, self._bias)
        self._run = _make_runner(
            self._plan, pa, pb, pc, pbias, keep, ops.rshape, ops.dtype, key, aux_shape, aux_dtype,
            ops.scalar,
        )

    # -- planning ------------------------------------------------------------
    def plan(self, epilogue: Any = None, bias: Any = None, *, epilog: Any = None, epilog_inputs: Optional[Mapping] = None):
        """Plan the product with an epilogue (None, str, :class:`Epilogue`) and its bias.

        nvmath-python spellings are accepted: ``plan(epilog=Epilogue.RELU_BIAS,
        epilog_inputs={"bias": b0})``. Passing ``bias`` implies the BIAS epilogue.
        Re-planning replaces the previous plan. Returns self.
        """
        where = "Matmul.plan"
        ops = self._alive(where)
        if epilog is not None:
            if epilogue is not None:
                raise TypeError(f"{where}: give either epilogue or epilog, not both")
            epilogue = epilog
        if epilog_inputs is not None:
            if not isinstance(epilog_inputs, Mapping):
                raise TypeError(f"{where}: epilog_inputs must be a dict such as {{'bias': array}}")
            unknown = [k for k in epilog_inputs if k != "bias"]
            if unknown:
                raise _C.InvalidArgumentError(f"{where}: unknown epilog_inputs {unknown}; only 'bias' is taken")
            if "bias" in epilog_inputs:
                if bias is not None:
                    raise TypeError(f"{where}: give the bias either as bias= or in epilog_inputs, not both")
                bias = epilog_inputs["bias"]
        epi, bias_arr = ops.epilogue_and_bias(where, epilogue, bias)
        d, aux = self._templates(ops, epi)
        plan = _C.plan_matmul(ops.a, ops.b, ops.c, bias_arr, d, aux, ops.alpha, ops.beta, epi, *self._exec)
        self._install(plan, epi, bias_arr)
        return self

    def autotune(self, iterations: int = 3):
        """Time the candidate configurations on the current operands (``iterations``
        repeats each) and keep the fastest plan. Plans with the defaults first if
        :meth:`plan` was not called. Returns self."""
        where = "Matmul.autotune"
        ops = self._alive(where)
        if isinstance(iterations, bool) or not isinstance(iterations, int):
            raise TypeError(f"{where}: iterations must be an int, not {type(iterations).__name__}")
        if iterations < 1:
            raise ValueError(f"{where}: iterations = {iterations}, expected >= 1")
        if self._plan is None:
            self.plan()
        epi, bias = self._epi, self._bias
        d, aux = self._templates(ops, epi)
        plan = _C.autotune(ops.a, ops.b, ops.c, bias, d, aux, ops.alpha, ops.beta, epi, *self._exec, iterations)
        self._install(plan, epi, bias)
        return self

    # -- execution -----------------------------------------------------------
    def execute(self, *, stream: Any = None):
        """Compute and return a new result (same return convention as :func:`matmul`)."""
        run = self._run
        if run is None:
            self._alive("Matmul.execute")
            self.plan()
            run = self._run
        if stream is None:
            return run(None)
        return run(stream_handle(stream, "Matmul.execute"))

    def reset_operands(self, a: Any = None, b: Any = None, c: Any = None, bias: Any = None) -> None:
        """Point the plan at new arrays (None keeps the current one). Each must have the
        planned shape, dtype and memory layout (strides); a ValueError says what differs."""
        where = "Matmul.reset_operands"
        ops = self._alive(where)
        new = {}
        for name, value, old in (("a", a, ops.a_user), ("b", b, ops.b_user), ("c", c, ops.c_user), ("bias", bias, self._bias)):
            if value is None:
                continue
            if old is None:
                what = "without c" if name == "c" else "without a bias (plan(bias=...) first)"
                raise _C.InvalidArgumentError(f"{where}: {name} cannot be reset: the Matmul was planned {what}")
            x = _as_array(value, name, where)
            if x.shape != old.shape:
                raise _C.ShapeError(f"{where}: {name} has shape {x.shape}, the plan was made for {old.shape}")
            if x.dtype != old.dtype:
                raise _C.InvalidArgumentError(
                    f"{where}: {name} has dtype {_dtype_name(x.dtype)}, the plan was made for {_dtype_name(old.dtype)}"
                )
            if _layout(x) != _layout(old):
                raise _C.InvalidArgumentError(
                    f"{where}: {name} has strides {x.strides} (bytes), the plan was made for {old.strides}; "
                    "pass an array with the same memory layout or create a new Matmul"
                )
            new[name] = x
        if "a" in new:
            x = new["a"]
            ops.a_user, ops.a = x, (x[None, :] if ops.a1d else x)
            self._ptrs[0] = _data_ptr(ops.a)
        if "b" in new:
            x = new["b"]
            ops.b_user, ops.b = x, (x[:, None] if ops.b1d else x)
            self._ptrs[1] = _data_ptr(ops.b)
        if "c" in new:
            ops.set_c(where, new["c"])
            self._ptrs[2] = _data_ptr(ops.c)
        if "bias" in new:
            self._bias = new["bias"]
            self._ptrs[3] = _data_ptr(self._bias)
        if new and self._plan is not None:
            self._rebuild()

    # -- information -----------------------------------------------------------
    def describe(self) -> str:
        """One line from the library (backend, dtype, sizes, epilogue, ...)."""
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
    def dtype(self) -> np.dtype:
        return self._alive("Matmul.dtype").dtype

    # -- lifetime ---------------------------------------------------------------
    def free(self) -> None:
        """Release the plan and the references to the operands (idempotent)."""
        plan = self._plan
        self._plan = None
        self._run = None
        self._ops = None
        self._bias = None
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
