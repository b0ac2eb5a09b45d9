"""Reference results and array factories for the fusemath matmul tests.

References are computed in float64 / complex128 with NumPy. Tolerances follow the
usual floating-point error bound of a dot product of length K: |err| <= c*K*eps*(|alpha|
|a|@|b| + |beta||c| + |bias|), with eps the machine epsilon of the tested dtype.
"""
import math

import numpy as np

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
REAL_DTYPES = [np.float32, np.float64]
LAYOUTS = ["C", "F", "T", "strided", "neg"]


def rand(rng, shape, dtype):
    dtype = np.dtype(dtype)
    x = rng.standard_normal(shape)
    if dtype.kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return np.asarray(x).astype(dtype)


def make(rng, shape, dtype, layout="C"):
    """An array of logical `shape` with the given memory layout (values random)."""
    shape = tuple(shape)
    if layout == "C":
        return rand(rng, shape, dtype)
    if len(shape) == 1:
        if layout == "strided":
            return rand(rng, (shape[0] * 3,), dtype)[::3]
        if layout == "neg":
            return rand(rng, shape, dtype)[::-1]
        return rand(rng, shape, dtype)
    if layout == "F":
        return np.asfortranarray(rand(rng, shape, dtype))
    if layout == "T":
        base = rand(rng, shape[:-2] + (shape[-1], shape[-2]), dtype)
        x = np.swapaxes(base, -1, -2)
        assert x.shape == shape
        return x
    if layout == "strided":
        big = rand(rng, shape[:-2] + (shape[-2] * 2, shape[-1] * 3), dtype)
        x = big[..., ::2, ::3]
        assert x.shape == shape
        return x
    if layout == "neg":
        return rand(rng, shape, dtype)[..., ::-1, :][..., ::-1]
    raise ValueError(layout)


def wide(x):
    x = np.asarray(x)
    return x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)


def gelu(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def reference(a, b, c=None, alpha=1.0, beta=None, bias=None, act=None):
    """(pre-activation, result, error scale), all in float64/complex128."""
    A, B = wide(a), wide(b)
    pre = alpha * np.matmul(A, B)
    scale = abs(alpha) * np.matmul(np.abs(A), np.abs(B))
    if c is not None:
        beta = 1.0 if beta is None else beta
        pre = pre + beta * wide(c)
        scale = scale + abs(beta) * np.abs(wide(c))
    if bias is not None:
        bias = wide(bias)
        if np.ndim(a) >= 1 and np.ndim(b) == 1:
            pass  # N == 1: bias of shape (..., 1) broadcasts as is against (..., M)
        pre = pre + (bias[..., 0] if np.ndim(b) == 1 else bias)
        scale = scale + np.abs(bias[..., 0] if np.ndim(b) == 1 else bias)
    if act == "relu":
        out = np.maximum(pre, 0)
    elif act == "gelu":
        out = gelu(pre)
    else:
        out = pre
    return pre, out, scale


def tolerance(dtype, k, scale, ref):
    eps = np.finfo(np.dtype(dtype)).eps
    return 4.0 * (k + 4) * eps * scale + 8 * eps * np.abs(ref) + np.finfo(np.dtype(dtype)).tiny


def assert_close(got, ref, scale, dtype, k, what="result"):
    got = np.asarray(got)
    assert got.shape == np.shape(ref), f"{what}: shape {got.shape}, expected {np.shape(ref)}"
    err = np.abs(wide(got) - ref)
    tol = tolerance(dtype, k, scale, ref)
    bad = ~(err <= tol)  # also catches NaN
    if bad.any():
        idx = tuple(np.argwhere(bad)[0]) if err.ndim else ()
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {err.size} elements off; first at {idx}: got {wide(got)[idx]}, "
            f"expected {ref[idx]}, err {err[idx]:.3g} > tol {np.broadcast_to(tol, err.shape)[idx]:.3g}"
        )


def unpack_relu_mask(mask, n):
    """uint8 (..., M, row_bytes) -> bool (..., M, N): bit j%8 of byte j//8."""
    bits = np.unpackbits(mask, axis=-1, bitorder="little")
    return bits[..., :n].astype(bool)


# ---------------------------------------------------------------------------
# Every epilogue chain of docs/epilogues.md, in float64 / complex128.
# ---------------------------------------------------------------------------
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def gelu_grad(x):
    th = np.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x**3))
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * x * x)


def gelu_grad_limits(xs):
    """gelu'(x) in float64 where the formula is finite, its limits 1 (x > 10) and 0 (x < -10)
    beyond, where x * x overflows: what a kernel must return at huge activation inputs."""
    with np.errstate(over="ignore", invalid="ignore"):
        formula = gelu_grad(xs)
    return np.where(np.abs(xs) > 10, (xs > 0).astype(np.float64), formula)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def activation(name, x, clamp=None):
    if name is None:
        return x
    if name == "relu":
        return np.maximum(x, 0)
    if name == "gelu":
        return gelu(x)
    if name == "sigmoid":
        return sigmoid(x)
    if name == "tanh":
        return np.tanh(x)
    if name == "silu":
        return x * sigmoid(x)
    if name == "clamp":
        return np.minimum(np.maximum(x, clamp[0]), clamp[1])
    raise ValueError(name)


#: an upper bound of |act'(x)|: errors of the pre-activation grow by at most this much
MAX_SLOPE = {None: 1.0, "relu": 1.0, "clamp": 1.0, "gelu": 1.13, "sigmoid": 0.25, "tanh": 1.0, "silu": 1.1}


def _promote(x, at):
    """A 1-D operand as NumPy promotes it: at=0 prepends a 1 (a), at=1 appends one (b)."""
    x = wide(x)
    if x.ndim == 1:
        return (x[None, :] if at == 0 else x[:, None]), True
    return x, False


def _result_view(x, a1d, b1d):
    if b1d:
        x = x[..., 0]
    if a1d:
        x = x[..., 0, :] if not b1d else x[..., 0]
    return x


def _row_vector(v):
    """bias / scale (N,) or (batch..., N) -> broadcastable over rows (..., 1, N)."""
    return wide(v)[..., None, :]


def chain_reference(a, b, c=None, *, alpha=1.0, beta=None, bias=None, scale=None, act=None, clamp=None,
                    drelu_mask=None, dgelu_x=None, bgrad=None):
    """Reference of one chain, on the promoted (..., M, N) problem.

    Returns a dict with (all float64 / complex128, result shapes as NumPy returns them):
      pre: the activation input x (forward) or alpha*A@B + beta*C (backward)
      d: the result; d_err: an error scale of d (the tolerance is eps * K * d_err)
      bgrad: the bias gradient ("bgrad": drelu/dgelu_bgrad, "bgrada", "bgradb") or None,
      bgrad_err: its error scale.
    drelu_mask: bool array of D's result shape (the mask bits); dgelu_x: the gelu input.
    """
    A, a1d = _promote(a, 0)
    B, b1d = _promote(b, 1)
    prod = np.matmul(A, B)
    err = np.matmul(np.abs(A), np.abs(B)) * abs(alpha)
    if scale is not None:
        S = _row_vector(scale)
        prod = prod * S
        err = err * np.abs(S)
    t = alpha * prod
    if c is not None:
        beta = 1.0 if beta is None else beta
        C = wide(c)
        rshape_nd = np.broadcast_shapes(A.shape[:-2], B.shape[:-2])
        if a1d or b1d:  # c is given in the result shape: put the promoted axes back
            C = C.reshape((1,) * (len(rshape_nd) + 2 - a1d - b1d - C.ndim) + C.shape)
            if a1d:
                C = C[..., None, :] if not b1d else C[..., None]
            if b1d:
                C = C[..., None]
        t = t + beta * C
        err = err + abs(beta) * np.abs(C)
    out = {"bgrad": None, "bgrad_err": None}
    if drelu_mask is not None or dgelu_x is not None:
        if drelu_mask is not None:
            gate = _expand_like(np.asarray(drelu_mask, dtype=np.float64), a1d, b1d)
        else:
            gate = gelu_grad(_expand_like(wide(dgelu_x), a1d, b1d))
        d = t * gate
        d_err = err * np.maximum(np.abs(gate), 1.0) + np.abs(d)
        pre = t
    else:
        if bias is not None:
            Bv = _row_vector(bias)
            t = t + Bv
            err = err + np.abs(Bv)
        pre = t
        d = activation(act, pre, clamp)
        d_err = err * MAX_SLOPE[act] + np.abs(d)
    d, pre, d_err = np.broadcast_arrays(d, pre, d_err)
    if bgrad == "bgrad":  # column sums of D over its rows
        out["bgrad"] = d.sum(axis=-2)
        out["bgrad_err"] = (d_err + np.abs(d)).sum(axis=-2) * 2
    elif bgrad == "bgrada":  # row sums of A, A broadcast to D's batch
        Ab = np.broadcast_to(A, d.shape[:-2] + A.shape[-2:])
        out["bgrad"] = Ab.sum(axis=-1)
        out["bgrad_err"] = np.abs(Ab).sum(axis=-1)
    elif bgrad == "bgradb":
        Bb = np.broadcast_to(B, d.shape[:-2] + B.shape[-2:])
        out["bgrad"] = Bb.sum(axis=-2)
        out["bgrad_err"] = np.abs(Bb).sum(axis=-2)
    out["pre"] = _result_view(pre, a1d, b1d)
    out["d"] = _result_view(d, a1d, b1d)
    out["d_err"] = _result_view(d_err, a1d, b1d)
    return out


def _expand_like(x, a1d, b1d):
    if a1d:
        x = x[..., None, :] if not b1d else x[..., None]
    if b1d:
        x = x[..., None]
    return x


def eps_of(dtype):
    """Machine epsilon of a dtype; also "bfloat16" (2**-8) and "tf32" (2**-10, f32 on tensor cores)."""
    if isinstance(dtype, str) and dtype in ("bfloat16", "bf16"):
        return 2.0**-8
    if isinstance(dtype, str) and dtype == "tf32":
        return 2.0**-10
    return float(np.finfo(np.dtype(dtype)).eps)


def assert_within(got, ref, err_scale, dtype, k, what="result", factor=4.0):
    """|got - ref| <= factor * (k + 4) * eps * err_scale (+ tiny), elementwise."""
    got = wide(np.asarray(got))
    ref = np.asarray(ref)
    assert got.shape == ref.shape, f"{what}: shape {got.shape}, expected {ref.shape}"
    eps = eps_of(dtype)
    tol = factor * (k + 4) * eps * np.asarray(err_scale) + 1e-30
    err = np.abs(got - ref)
    bad = ~(err <= tol)
    if bad.any():
        idx = tuple(np.argwhere(bad)[0]) if err.ndim else ()
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {err.size} elements off; first at {idx}: got {got[idx]}, "
            f"expected {ref[idx]}, err {err[idx]:.3g} > tol {np.broadcast_to(tol, err.shape)[idx]:.3g}"
        )


def assert_norm_close(got, ref, rtol, what="result"):
    """||got - ref|| <= rtol * ||ref|| (low precision: f16, bf16, tf32)."""
    got = wide(np.asarray(got))
    ref = np.asarray(ref)
    assert got.shape == ref.shape, f"{what}: shape {got.shape}, expected {ref.shape}"
    assert np.all(np.isfinite(got)), f"{what}: non-finite values"
    diff = float(np.linalg.norm((got - ref).ravel()))
    scale = float(np.linalg.norm(ref.ravel())) or 1.0
    assert diff <= rtol * scale, f"{what}: relative error {diff / scale:.3g} > {rtol}"


def relu_mask_bits(pre, n):
    """The relu bit mask (uint8, (..., M, relu_mask_row_bytes(N))) of a pre-activation (..., M, N)."""
    bits = np.asarray(pre) > 0
    rb = (n + 127) // 128 * 16
    padded = np.zeros(bits.shape[:-1] + (rb * 8,), dtype=bool)
    padded[..., :n] = bits
    return np.packbits(padded, axis=-1, bitorder="little")


def away_from_zero(rng, shape, dtype, margin=0.25):
    """Random values with |x| >= margin (so relu masks do not depend on rounding)."""
    x = rng.standard_normal(shape)
    x = np.where(x >= 0, x + margin, x - margin)
    return np.asarray(x).astype(dtype)


def call_matmul(a, b, c=None, bias=None, d=None, aux=None, *, plan=False, module=None, stream=None, alpha=1.0,
                beta=0.0, epilogue=0, execution=0, num_threads=0):
    """A matmul through the extension's one entry point, _fusemath.call (NumPy results): the result,
    or with plan=True the Plan for operands laid out like these."""
    import fusemath
    C = module or fusemath._fusemath
    res = C.call(C.OP_MATMUL, C.CALL_PLAN if plan else C.CALL_RUN, 0, (a, b, c, bias, d, aux) + (None,) * 4,
                 (alpha, beta, epilogue, execution, 0, num_threads, 0, 0, 0, None, None, 0, 0), stream)
    return res[0] if plan else res
