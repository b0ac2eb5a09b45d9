"""fusemath.matmul results against a float64/complex128 NumPy reference."""
import numpy as np
import pytest

import fusemath
from mmref import (
    DTYPES,
    LAYOUTS,
    REAL_DTYPES,
    assert_close,
    make,
    reference,
    tolerance,
    unpack_relu_mask,
    wide,
)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout_a", LAYOUTS)
@pytest.mark.parametrize("layout_b", ["C", "F", "strided", "neg"])
def test_2d_layouts(rng, dtype, layout_a, layout_b):
    m, k, n = 13, 9, 11
    a = make(rng, (m, k), dtype, layout_a)
    b = make(rng, (k, n), dtype, layout_b)
    d = fusemath.matmul(a, b)
    assert isinstance(d, np.ndarray) and d.dtype == np.dtype(dtype) and d.shape == (m, n)
    _, ref, scale = reference(a, b)
    assert_close(d, ref, scale, dtype, k)


@pytest.mark.parametrize("dtype", DTYPES)
def test_transposed_views_and_explicit_slices(rng, dtype):
    base_a = make(rng, (20, 30), dtype)
    base_b = make(rng, (30, 24), dtype)
    # a.T, a[::2, ::3], a[::-1] as the task describes them
    cases = [
        (base_a.T, make(rng, (20, 7), dtype)),
        (base_a[::2, ::3], base_b[::3, ::2]),
        (base_a[::-1], base_b),
        (base_a[::-1, ::-1][:, 5:], base_b[5:, ::-2]),
    ]
    for a, b in cases:
        d = fusemath.matmul(a, b)
        _, ref, scale = reference(a, b)
        assert_close(d, ref, scale, dtype, a.shape[-1], what=f"a strides {a.strides}, b strides {b.strides}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape_a,shape_b",
    [
        ((3, 7, 5), (3, 5, 9)),
        ((3, 1, 6, 4), (4, 4, 5)),  # broadcast batch: (3,1,M,K) @ (4,K,N) -> (3,4,M,N)
        ((2, 6, 4), (4, 5)),
        ((6, 4), (2, 3, 4, 5)),
        ((1, 6, 4), (3, 4, 5)),
    ],
)
def test_batched_and_broadcast(rng, dtype, shape_a, shape_b):
    a = make(rng, shape_a, dtype)
    b = make(rng, shape_b, dtype, "F" if len(shape_b) == 2 else "C")
    d = fusemath.matmul(a, b)
    assert d.shape == np.matmul(a, b).shape
    _, ref, scale = reference(a, b)
    assert_close(d, ref, scale, dtype, shape_a[-1])


@pytest.mark.parametrize("dtype", DTYPES)
def test_batched_strided_views(rng, dtype):
    a = make(rng, (4, 10, 12), dtype)[::2, ::-1, 1::2]  # (2, 10, 6)
    b = np.swapaxes(make(rng, (2, 7, 6), dtype), -1, -2)  # (2, 6, 7)
    d = fusemath.matmul(a, b)
    _, ref, scale = reference(a, b)
    assert_close(d, ref, scale, dtype, 6)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape_a,shape_b",
    [
        ((5,), (5, 9)),
        ((7, 5), (5,)),
        ((5,), (5,)),
        ((5,), (2, 5, 9)),
        ((2, 7, 5), (5,)),
        ((3, 1, 7, 5), (5,)),
    ],
)
def test_1d_operands_follow_numpy(rng, dtype, shape_a, shape_b):
    a = make(rng, shape_a, dtype, "strided")
    b = make(rng, shape_b, dtype)
    d = fusemath.matmul(a, b)
    expected = np.matmul(a, b)
    assert np.shape(d) == np.shape(expected)
    assert type(d) is type(expected)  # 1-D @ 1-D gives a NumPy scalar, as numpy.matmul
    _, ref, scale = reference(a, b)
    assert_close(d, ref, scale, dtype, 5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_1d_with_c_bias_and_out(rng, dtype):
    a = make(rng, (5,), dtype)
    b = make(rng, (2, 5, 9), dtype)
    c = make(rng, (9,), dtype)
    bias = make(rng, (9,), dtype)
    out = np.empty((2, 9), dtype)
    d = fusemath.matmul(a, b, c, beta=0.5, bias=bias, out=out)
    assert d is out
    _, ref, scale = reference(a, b, c, beta=0.5, bias=bias)
    assert_close(d, ref, scale, dtype, 5)
    # 1-D b: N == 1, bias of shape (1,)
    a2 = make(rng, (4, 5), dtype)
    b2 = make(rng, (5,), dtype)
    bias2 = make(rng, (1,), dtype)
    d2 = fusemath.matmul(a2, b2, bias=bias2)
    assert d2.shape == (4,)
    ref2 = wide(a2) @ wide(b2) + wide(bias2)[0]
    assert_close(d2, ref2, np.abs(wide(a2)) @ np.abs(wide(b2)) + abs(wide(bias2)[0]), dtype, 5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fortran_ordered(rng, dtype):
    a = np.asfortranarray(make(rng, (33, 17), dtype))
    b = np.asfortranarray(make(rng, (17, 21), dtype))
    out = np.asfortranarray(np.empty((33, 21), dtype))
    d = fusemath.matmul(a, b, out=out)
    assert d is out and d.flags.f_contiguous
    _, ref, scale = reference(a, b)
    assert_close(d, ref, scale, dtype, 17)


EPILOGUES = [
    # (epilogue spelling, activation, needs bias, aux key)
    (None, None, False, None),
    ("identity", None, False, None),
    ("relu", "relu", False, None),
    ("gelu", "gelu", False, None),
    ("bias", None, True, None),
    ("bias+relu", "relu", True, None),
    ("bias+gelu", "gelu", True, None),
    ("RELU_BIAS", "relu", True, None),
    ("GELU_BIAS", "gelu", True, None),
    ("relu_aux", "relu", False, "relu_aux"),
    ("GELU_AUX", "gelu", False, "gelu_aux"),
    ("RELU_AUX_BIAS", "relu", True, "relu_aux"),
    ("gelu_aux_bias", "gelu", True, "gelu_aux"),
    (fusemath.Epilogue.RELU, "relu", False, None),
    (fusemath.Epilogue.GELU_BIAS, "gelu", True, None),
    (fusemath.Epilogue.RELU_AUX_BIAS, "relu", True, "relu_aux"),
    (fusemath.Epilogue.GELU | fusemath.Epilogue.AUX, "gelu", False, "gelu_aux"),
]


def check_epilogue_result(result, a, b, bias, act, aux_key, dtype, c=None, alpha=1.0, beta=None):
    pre, ref, scale = reference(a, b, c=c, alpha=alpha, beta=beta, bias=bias, act=act)
    k = a.shape[-1]
    if aux_key is None:
        assert isinstance(result, np.ndarray), f"expected an array, got {type(result)}"
        d = result
    else:
        assert isinstance(result, tuple) and len(result) == 2, "an AUX epilogue returns (d, {aux})"
        d, aux = result
        assert list(aux) == [aux_key]
        x = aux[aux_key]
        if aux_key == "gelu_aux":
            assert x.dtype == np.dtype(dtype) and x.shape == d.shape
            assert_close(x, pre, scale, dtype, k, what="gelu preactivation")
        else:
            n = pre.shape[-1]
            row_bytes = fusemath._fusemath.relu_mask_row_bytes(n)
            assert row_bytes == (n + 127) // 128 * 16
            assert x.dtype == np.uint8 and x.shape == pre.shape[:-1] + (row_bytes,)
            bits = unpack_relu_mask(x, n)
            sure = np.abs(pre) > 2 * tolerance(dtype, k, scale, pre)
            assert sure.any()
            np.testing.assert_array_equal(bits[sure], (pre > 0)[sure], err_msg="relu mask bits")
    assert_close(d, ref, scale, dtype, k, what=f"epilogue {act}")
    if act == "relu":
        assert (wide(d) >= 0).all()
    return d


@pytest.mark.parametrize("dtype", REAL_DTYPES)
@pytest.mark.parametrize("epilogue,act,needs_bias,aux_key", EPILOGUES)
def test_epilogues(rng, dtype, epilogue, act, needs_bias, aux_key):
    m, k, n = 37, 19, 150  # n > 128: a relu mask row spans two 16-byte blocks
    a = make(rng, (m, k), dtype)
    b = make(rng, (k, n), dtype, "T")
    bias = make(rng, (n,), dtype) if needs_bias else None
    result = fusemath.matmul(a, b, bias=bias, epilogue=epilogue)
    check_epilogue_result(result, a, b, bias, act, aux_key, dtype)


@pytest.mark.parametrize("dtype", REAL_DTYPES)
@pytest.mark.parametrize("epilogue,act,needs_bias,aux_key", [e for e in EPILOGUES if e[2] or e[3]])
def test_epilogues_batched_with_c_and_alpha(rng, dtype, epilogue, act, needs_bias, aux_key):
    a = make(rng, (2, 1, 9, 6), dtype, "strided")
    b = make(rng, (3, 6, 20), dtype)
    c = make(rng, (3, 9, 20), dtype)
    bias = make(rng, (3, 20), dtype) if needs_bias else None  # per-batch bias (..., N)
    result = fusemath.matmul(a, b, c, alpha=0.75, beta=-0.5, bias=bias, epilogue=epilogue)
    check_epilogue_result(result, a, b, None if bias is None else bias[:, None, :], act, aux_key, dtype, c=c,
                          alpha=0.75, beta=-0.5)


@pytest.mark.parametrize("dtype", REAL_DTYPES)
def test_epilogue_large_threaded_panels(rng, dtype):
    # big enough for the library's multi-threaded panel path
    m, k, n = 300, 96, 257
    a = make(rng, (m, k), dtype)
    b = make(rng, (k, n), dtype)
    bias = make(rng, (n,), dtype)
    for epilogue, act, key in [("bias+relu", "relu", None), ("RELU_AUX_BIAS", "relu", "relu_aux"),
                               ("GELU_AUX_BIAS", "gelu", "gelu_aux")]:
        result = fusemath.matmul(a, b, bias=bias, epilogue=epilogue)
        check_epilogue_result(result, a, b, bias, act, key, dtype)


def test_bias_implies_bias_epilogue(rng):
    a = make(rng, (4, 3), np.float64)
    b = make(rng, (3, 5), np.float64)
    bias = make(rng, (5,), np.float64)
    d = fusemath.matmul(a, b, bias=bias, epilogue="relu")
    np.testing.assert_allclose(d, np.maximum(a @ b + bias, 0), rtol=1e-12, atol=1e-12)
    d = fusemath.matmul(a, b, bias=bias)
    np.testing.assert_allclose(d, a @ b + bias, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("c_shape", [(7, 9), (9,), (7, 1), (), (2, 7, 9), (1, 9)])
def test_alpha_beta_c(rng, dtype, c_shape):
    a = make(rng, (2, 7, 4), dtype)
    b = make(rng, (4, 9), dtype)
    c = make(rng, c_shape, dtype)
    d = fusemath.matmul(a, b, c, alpha=-1.5, beta=0.25)
    _, ref, scale = reference(a, b, c, alpha=-1.5, beta=0.25)
    assert_close(d, ref, scale, dtype, 4)
    # beta defaults to 1 with c
    d = fusemath.matmul(a, b, c)
    _, ref, scale = reference(a, b, c)
    assert_close(d, ref, scale, dtype, 4)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_alpha_beta(rng, dtype):
    a = make(rng, (6, 5), dtype, "T")
    b = make(rng, (5, 8), dtype, "neg")
    c = make(rng, (6, 8), dtype)
    bias = make(rng, (8,), dtype)
    alpha, beta = 0.5 - 2j, 1j
    d = fusemath.matmul(a, b, c, alpha=alpha, beta=beta, bias=bias)
    _, ref, scale = reference(a, b, c, alpha=alpha, beta=beta, bias=bias)
    assert_close(d, ref, scale, dtype, 5)
    # NumPy scalars as alpha
    d = fusemath.matmul(a, b, alpha=np.complex64(2 + 1j))
    _, ref, scale = reference(a, b, alpha=2 + 1j)
    assert_close(d, ref, scale, dtype, 5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_out_is_c_in_place(rng, dtype):
    a = make(rng, (8, 6), dtype)
    b = make(rng, (6, 5), dtype)
    c = make(rng, (8, 5), dtype)
    c0 = c.copy()
    d = fusemath.matmul(a, b, c, beta=2.0, out=c)
    assert d is c
    _, ref, scale = reference(a, b, c0, beta=2.0)
    assert_close(d, ref, scale, dtype, 6)


@pytest.mark.parametrize("dtype", REAL_DTYPES)
def test_out_with_bias_relu(rng, dtype):
    """The stateless call into a given out (2-D NumPy, bias, relu: the one-C-call path)."""
    a = make(rng, (9, 7), dtype)
    b = make(rng, (7, 5), dtype)
    bias = make(rng, (5,), dtype)
    out = np.full((9, 5), np.nan, dtype)
    d = fusemath.matmul(a, b, bias=bias, epilogue="relu", alpha=0.5, out=out)
    assert d is out
    _, ref, scale = reference(a, b, None, alpha=0.5, bias=bias, act="relu")
    assert_close(d, ref, scale, dtype, 7)


def test_out_strided_view(rng):
    a = make(rng, (6, 4), np.float64)
    b = make(rng, (4, 5), np.float64)
    big = np.zeros((12, 15))
    out = big[::2, ::3]
    fusemath.matmul(a, b, out=out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-12, atol=1e-12)
    mask = np.ones_like(big, dtype=bool)
    mask[::2, ::3] = False
    assert (big[mask] == 0).all(), "wrote outside the out view"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape_a,shape_b",
    [((0, 4), (4, 5)), ((3, 4), (4, 0)), ((3, 0), (0, 5)), ((0, 3, 4), (4, 5)), ((2, 3, 0), (2, 0, 5)),
     ((0,), (0, 5)), ((0,), (0,)), ((0, 0), (0, 0))],
)
def test_zero_size_like_numpy(rng, dtype, shape_a, shape_b):
    a = make(rng, shape_a, dtype)
    b = make(rng, shape_b, dtype)
    expected = np.matmul(a, b)
    d = fusemath.matmul(a, b)
    assert np.shape(d) == np.shape(expected)
    np.testing.assert_array_equal(d, expected)


@pytest.mark.parametrize("dtype", REAL_DTYPES)
def test_k_zero_gives_bias_and_epilogue(rng, dtype):
    a = np.empty((4, 0), dtype)
    b = np.empty((0, 6), dtype)
    bias = make(rng, (6,), dtype)
    c = make(rng, (4, 6), dtype)
    d = fusemath.matmul(a, b, c, beta=2.0, bias=bias, epilogue="relu")
    np.testing.assert_allclose(d, np.maximum(2.0 * c + bias, 0), rtol=1e-6)
    d, aux = fusemath.matmul(a, b, bias=bias, epilogue="gelu_aux_bias")
    np.testing.assert_allclose(aux["gelu_aux"], np.broadcast_to(bias, (4, 6)), rtol=1e-6)
    d, aux = fusemath.matmul(a, b, bias=bias, epilogue="relu_aux_bias")
    np.testing.assert_allclose(d, np.broadcast_to(np.maximum(bias, 0), (4, 6)), rtol=1e-6)
    bits = unpack_relu_mask(aux["relu_aux"], 6)
    np.testing.assert_array_equal(bits, np.broadcast_to(bias > 0, (4, 6)))


def test_zero_size_aux():
    a = np.empty((0, 3), np.float32)
    b = np.ones((3, 4), np.float32)
    d, aux = fusemath.matmul(a, b, epilogue="relu_aux")
    assert d.shape == (0, 4) and aux["relu_aux"].shape == (0, 16)
    a = np.ones((2, 3), np.float32)
    b = np.ones((3, 0), np.float32)
    d, aux = fusemath.matmul(a, b, epilogue="gelu_aux")
    assert d.shape == (2, 0) and aux["gelu_aux"].shape == (2, 0)


def test_broadcast_zero_stride_inputs(rng):
    row = make(rng, (1, 5), np.float64)
    a = np.broadcast_to(row, (7, 5))  # zero row stride, read-only
    b = make(rng, (5, 3), np.float64)
    d = fusemath.matmul(a, b)
    np.testing.assert_allclose(d, np.asarray(a) @ b, rtol=1e-12, atol=1e-12)


def test_non_numpy_inputs_return_numpy(rng):
    import array

    a = array.array("d", rng.standard_normal(6).tolist())  # 1-D buffer-protocol object
    b = make(rng, (6, 3), np.float64)
    d = fusemath.matmul(a, b)
    assert isinstance(d, np.ndarray)
    np.testing.assert_allclose(d, np.asarray(a) @ b, rtol=1e-12, atol=1e-12)
    m = memoryview(make(rng, (4, 6), np.float64))
    d = fusemath.matmul(m, b)
    np.testing.assert_allclose(d, np.asarray(m) @ b, rtol=1e-12, atol=1e-12)


class DLPackOnly:
    """An array known only through DLPack (like a CPU torch tensor)."""

    def __init__(self, x):
        self._x = x

    def __dlpack__(self, *args, **kwargs):
        return self._x.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._x.__dlpack_device__()


def test_dlpack_inputs(rng):
    a = make(rng, (5, 4), np.float32, "T")
    b = make(rng, (4, 6), np.float32)
    bias = make(rng, (6,), np.float32)
    d = fusemath.matmul(DLPackOnly(a), DLPackOnly(b), bias=DLPackOnly(bias), epilogue="relu")
    assert isinstance(d, np.ndarray)
    _, ref, scale = reference(a, b, bias=bias, act="relu")
    assert_close(d, ref, scale, np.float32, 4)


def test_num_threads_settings_give_same_result(rng, restore_threads):
    a = make(rng, (200, 64), np.float64)
    b = make(rng, (64, 150), np.float64)
    bias = make(rng, (150,), np.float64)
    fusemath.set_num_threads(1)
    assert fusemath.get_num_threads() == 1
    d1 = fusemath.matmul(a, b, bias=bias, epilogue="gelu")
    fusemath.set_num_threads(2)
    assert fusemath.get_num_threads() == 2
    d2 = fusemath.matmul(a, b, bias=bias, epilogue="gelu", options={"num_threads": 2, "panel_rows": 32})
    d3 = fusemath.matmul(a, b, bias=bias, epilogue="gelu", options=fusemath.MatmulOptions(num_threads=1))
    _, ref, scale = reference(a, b, bias=bias, act="gelu")
    for d in (d1, d2, d3):
        assert_close(d, ref, scale, np.float64, 64)


def test_execution_cpu_explicit(rng):
    a = make(rng, (5, 4), np.float64)
    b = make(rng, (4, 3), np.float64)
    for execution in ("cpu", "auto", None):
        np.testing.assert_allclose(fusemath.matmul(a, b, execution=execution), a @ b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", REAL_DTYPES)
def test_aux_with_1d_operands(rng, dtype):
    a = make(rng, (7,), dtype)
    b = make(rng, (2, 7, 20), dtype)
    bias = make(rng, (20,), dtype)
    d, aux = fusemath.matmul(a, b, bias=bias, epilogue="gelu_aux_bias")
    pre, ref, scale = reference(a, b, bias=bias, act="gelu")
    assert d.shape == (2, 20) and aux["gelu_aux"].shape == (2, 20)
    assert_close(d, ref, scale, dtype, 7)
    assert_close(aux["gelu_aux"], pre, scale, dtype, 7, what="gelu aux")
    d, aux = fusemath.matmul(a, b, bias=bias, epilogue=np.int64(fusemath.Epilogue.RELU_AUX_BIAS))
    mask = aux["relu_aux"]
    assert mask.shape == (2, 16), "the M axis of a 1-D a is dropped from the mask as from d"
    sure = np.abs(pre) > 2 * tolerance(dtype, 7, scale, pre)
    np.testing.assert_array_equal(unpack_relu_mask(mask, 20)[sure], (pre > 0)[sure])
    # 1-D b: N == 1, the mask keeps its byte axis
    a2 = make(rng, (5, 7), dtype)
    b2 = make(rng, (7,), dtype)
    d, aux = fusemath.matmul(a2, b2, epilogue="relu_aux")
    assert d.shape == (5,) and aux["relu_aux"].shape == (5, 16)
    pre2 = wide(a2) @ wide(b2)
    bits = unpack_relu_mask(aux["relu_aux"], 1)[:, 0]
    sure2 = np.abs(pre2) > 1e-3
    np.testing.assert_array_equal(bits[sure2], (pre2 > 0)[sure2])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_alpha_zero_reads_neither_operand(dtype):
    """alpha = 0 as BLAS defines it: D = act(beta * c + bias) without reading a and b, whatever
    their layout (OpenBLAS's small-matrix kernels formed the product, so inf in b gave NaN for
    C-ordered operands and 0 for Fortran-ordered ones)."""
    a = np.ones((2, 2), dtype)
    b = np.ones((2, 3), dtype)
    b[0, 1] = np.inf
    for bb in (b, np.asfortranarray(b), b.T.copy().T):
        np.testing.assert_array_equal(fusemath.matmul(a, bb, alpha=0.0), np.zeros((2, 3), dtype))
    c = np.full((2, 3), 2.0, dtype)
    bias = np.ones(3, dtype)
    act = "relu" if np.dtype(dtype).kind == "f" else None  # complex types take no activation
    got = fusemath.matmul(a, b, c, alpha=0.0, beta=0.5, bias=bias, epilogue=act)
    np.testing.assert_array_equal(got, np.full((2, 3), 2.0, dtype))


def test_out_subclass_is_returned_itself():
    """out= is returned as given, as NumPy does: an ndarray subclass (np.matrix, a masked array,
    one of the caller's own) stays that object."""
    class Tagged(np.ndarray):
        pass

    for out in (np.zeros((2, 2)).view(Tagged), np.ma.zeros((2, 2))):
        got = fusemath.matmul(np.ones((2, 3)), np.ones((3, 2)), out=out)
        assert got is out
        np.testing.assert_array_equal(np.asarray(out), np.full((2, 2), 3.0))
