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
