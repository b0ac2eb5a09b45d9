"""fusemath.matmul and fusemath.Matmul as drop-ins for np.matmul: every case is compared with
np.matmul on the same inputs (its result dtype, its values: exact for integers and bool, float64
for floats) or with the error NumPy raises for it."""
import re

import numpy as np
import pytest

import fusemath
import fusemath.fft

INTS = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]


def full_range(rng, shape, dtype):
    """Random values over the whole range of an integer dtype (products and sums wrap)."""
    if dtype == np.bool_:
        return rng.random(shape) < 0.3
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


def same_as_numpy(got, a, b, **kw):
    want = np.matmul(a, b, **kw)
    assert np.asarray(got).dtype == want.dtype, (np.asarray(got).dtype, want.dtype)
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:  # against float64 / complex128 arithmetic, at the result's precision
        ref = np.matmul(np.asarray(a).astype(np.complex128 if want.dtype.kind == "c" else np.float64),
                        np.asarray(b).astype(np.complex128 if want.dtype.kind == "c" else np.float64))
        tol = 1e-12 if np.finfo(want.dtype).bits >= 64 else 1e-5 if np.finfo(want.dtype).bits >= 32 else 1e-2
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * max(1.0, np.abs(ref).max(initial=0.0)))


# -- 1. promotion, lists, 0-d operands ---------------------------------------------------------
@pytest.mark.parametrize("da,db", [(np.float32, np.float64), (np.float16, np.float32), (np.float32, np.complex64),
                                   (np.int64, np.float32), (np.int32, np.float64), (np.bool_, np.int8),
                                   (np.uint8, np.int8), (np.float64, np.complex64), (np.int8, np.uint64),
                                   (np.int16, np.float16), (np.bool_, np.float32), (np.uint32, np.int64)])
def test_mixed_dtypes_promote_as_numpy(rng, da, db):
    a = (rng.standard_normal((5, 7)) * 4).astype(da)
    b = (rng.standard_normal((2, 7, 3)) * 4).astype(db)
    for x, y in ((a, b), (b.swapaxes(-1, -2), a.T)):
        same_as_numpy(fusemath.matmul(x, y), x, y)
        same_as_numpy(fusemath.Matmul(x, y).execute(), x, y)
    a_before = a.copy()
    fusemath.matmul(a, b)
    np.testing.assert_array_equal(a, a_before)  # the operand that needed a cast was copied, not changed


def test_promoted_planner_sees_later_changes(rng):
    a = rng.standard_normal((4, 6)).astype(np.float32)
    b = rng.standard_normal((6, 3))
    mm = fusemath.Matmul(a, b)  # a is used through a float64 copy
    a[...] = rng.standard_normal((4, 6))
    same_as_numpy(mm.execute(), a, b)


def test_promoted_planner_resets_operands_of_the_callers_dtype(rng):
    a = rng.standard_normal((4, 6)).astype(np.float32)
    b = rng.standard_normal((6, 3))
    mm = fusemath.Matmul(a, b)
    a2 = rng.standard_normal((4, 6)).astype(np.float32)
    mm.reset_operands(a=a2)  # float32 as the a it was made with: used through a float64 copy again
    same_as_numpy(mm.execute(), a2, b)
    a2[...] = 1
    same_as_numpy(mm.execute(), a2, b)
    with pytest.raises(fusemath.DtypeError, match="a has dtype int32, the plan was made for float64"):
        mm.reset_operands(a=a2.astype(np.int32))


def test_c_and_bias_take_part_in_the_promotion(rng):
    a = rng.standard_normal((4, 6)).astype(np.float32)
    b = rng.standard_normal((6, 3)).astype(np.float32)
    c = rng.standard_normal((4, 3))
    bias = (rng.standard_normal(3) + 1j).astype(np.complex64)
    d = fusemath.matmul(a, b, c)
    assert d.dtype == (a @ b + c).dtype
    np.testing.assert_allclose(d, a.astype(np.float64) @ b + c, rtol=1e-5)
    d = fusemath.matmul(a, b, bias=bias)
    assert d.dtype == (a @ b + bias).dtype
    np.testing.assert_allclose(d, a.astype(np.float64) @ b + bias, rtol=1e-5)


def test_a_python_number_c_is_weak_as_in_numpy(rng):
    a = rng.standard_normal((4, 6)).astype(np.float32)
    b = rng.standard_normal((6, 3)).astype(np.float32)
    for c in (1.5, 2, np.float64(1.5)):
        want = a @ b + c  # NumPy 2: a Python number keeps float32, a NumPy float64 widens
        for d in (fusemath.matmul(a, b, c), fusemath.Matmul(a, b, c).execute()):
            assert d.dtype == want.dtype, (c, d.dtype)
            np.testing.assert_allclose(d, want, rtol=1e-5)


def test_sequences_are_arrays_as_np_asarray_makes_them():
    a = [[1, 2, 3], [4, 5, 6]]
    b = ((1.5,), (2,), (-1,))
    for x, y in ((a, b), (a, np.ones(3, np.float32)), ([1, 2, 3], a[::-1] + [[7, 8, 9]]), ([True, False], [[1, 2], [3, 4]])):
        same_as_numpy(fusemath.matmul(x, y), x, y)
    assert fusemath.matmul([1, 2], [3, 4]) == np.matmul([1, 2], [3, 4]) == 11  # 1-D @ 1-D: a scalar
    same_as_numpy(fusemath.Matmul(a, b).execute(), a, b)
    with pytest.raises(ValueError):  # ragged: NumPy's own refusal
        np.asarray([[1, 2], [3]])
    with pytest.raises(ValueError):
        fusemath.matmul([[1, 2], [3]], [[1], [2]])


@pytest.mark.parametrize("scalar", [2, 2.5, 1j, True, np.float64(2), np.int32(3), np.array(2.0)])
def test_0d_operands_are_refused_as_numpy_refuses_them(scalar):
    m = np.ones((2, 2))
    for args, name in (((scalar, m), "a"), ((m, scalar), "b")):
        with pytest.raises(ValueError):
            np.matmul(*args)
        with pytest.raises(ValueError, match=f"{name} is 0-d"):
            fusemath.matmul(*args)
        with pytest.raises(ValueError, match=f"{name} is 0-d"):
            fusemath.Matmul(*args)


# -- 2. integers and bool: exact, in NumPy's result dtype ---------------------------------------
@pytest.mark.parametrize("dtype", INTS + [np.bool_])
def test_integer_and_bool_matmul_is_exact(rng, dtype):
    a = full_range(rng, (3, 5, 33), dtype)
    b = full_range(rng, (33, 4), dtype)
    same_as_numpy(fusemath.matmul(a, b), a, b)
    same_as_numpy(fusemath.matmul(b.T, a.swapaxes(1, 2)), b.T, a.swapaxes(1, 2))  # transposed views
    same_as_numpy(fusemath.matmul(a[:, ::2, ::-3], b[::-3, 1:]), a[:, ::2, ::-3], b[::-3, 1:])  # strided
    same_as_numpy(fusemath.matmul(a[0, 0], b), a[0, 0], b)  # 1-D a
    same_as_numpy(fusemath.matmul(a, b[:, 0]), a, b[:, 0])  # 1-D b
    same_as_numpy(fusemath.matmul(a[:, :, :0], b[:0]), a[:, :, :0], b[:0])  # k = 0: zeros
    assert fusemath.matmul(a[0, 0], b[:, 0]) == np.matmul(a[0, 0], b[:, 0])
    mm = fusemath.Matmul(a, b)
    same_as_numpy(mm.execute(), a, b)
    out = np.empty((3, 5, 4), dtype)
    assert mm.execute(out=out) is out
    same_as_numpy(out, a, b)
    assert "cpu/intgemm" in mm.describe()


def test_integer_matmul_wraps_as_numpy(rng):
    a = np.full((2, 300), 127, np.int8)
    same_as_numpy(fusemath.matmul(a, a.T), a, a.T)  # 300 * 127^2 wraps modulo 2^8
    u = np.full((1, 3), 2**63 + 5, np.uint64)
    same_as_numpy(fusemath.matmul(u, u.T), u, u.T)
    s = np.array([[np.iinfo(np.int64).min, -1]], np.int64)
    same_as_numpy(fusemath.matmul(s, s.T), s, s.T)
    nz = np.array([[2, 0]], np.uint8).view(np.bool_)  # a bool byte other than 1 is true, as in NumPy
    same_as_numpy(fusemath.matmul(nz, nz.T), nz, nz.T)


def test_large_integer_matmul_on_threads(rng):
    a = full_range(rng, (300, 200), np.int32)
    b = full_range(rng, (200, 250), np.int32)
    same_as_numpy(fusemath.matmul(a, b), a, b)
    mm = fusemath.Matmul(a, b, options={"num_threads": 2})
    same_as_numpy(mm.execute(), a, b)
    assert "threads=2" in mm.describe()


def test_integer_matmul_refuses_what_it_does_not_define():
    a = np.ones((3, 4), np.int32)
    b = np.ones((4, 5), np.int32)
    for kw, what in (({"epilogue": "relu"}, "relu"), ({"bias": np.ones(5, np.int32)}, "bias"),
                     ({"c": np.ones((3, 5), np.int32)}, "c"), ({"alpha": 2}, "alpha = 2")):
        with pytest.raises(fusemath.NotSupportedError, match=f"(?s){re.escape(what)}.*int32"):
            fusemath.matmul(a, b, **kw)
    with pytest.raises(fusemath.NotSupportedError, match="relu.*bool"):
        fusemath.Matmul(a.astype(bool), b.astype(bool)).plan("relu")


def test_float16_matmul_is_numpys(rng):
    """float16 on the cpu: computed through float32 and rounded once, as NumPy's float16 matmul is,
    so the bits equal NumPy's here; transposed, broadcast and planned forms; epilogues in float32."""
    a = rng.standard_normal((3, 64, 200)).astype(np.float16)
    b = rng.standard_normal((48, 200)).astype(np.float16).T  # a transposed view
    bias = rng.standard_normal(48).astype(np.float16)
    want = a @ b
    got = fusemath.matmul(a, b)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, want)
    wide = np.maximum(a.astype(np.float32) @ b.astype(np.float32) + bias.astype(np.float32), 0)
    # the reference's float32 product is NumPy's BLAS's, whose summation order may differ from the library's
    # (another OpenBLAS core, e.g. the scipy-openblas32 wheel's): a float32 sum a few ulps apart can round
    # to the neighbouring float16, so the fused form is held to 1 float16 ulp
    np.testing.assert_array_max_ulp(fusemath.matmul(a, b, bias=bias, epilogue="relu+bias"), wide.astype(np.float16),
                                    maxulp=1)
    with fusemath.Matmul(a, b) as mm:
        mm.plan()
        assert "cpu/halfgemm" in mm.describe()
        np.testing.assert_array_equal(mm.execute(), want)
    assert fusemath.matmul(a, b.astype(np.float32)).dtype == np.float32  # promotes as NumPy
    with pytest.raises(fusemath.NotSupportedError, match="float16 with epilogue 'gelu\\+aux'"):
        fusemath.matmul(a, b, epilogue="gelu+aux")


@pytest.mark.gpu
def test_integer_matmul_on_the_gpu_is_not_supported():
    a = np.ones((3, 4), np.int32)
    with pytest.raises(fusemath.NotSupportedError, match="int32 on device cuda:0"):
        fusemath.matmul(a, a.T.copy(), execution="cuda")
    with pytest.raises(fusemath.NotSupportedError, match="bool on device cuda:0"):
        fusemath.Matmul(a.astype(bool), a.T.astype(bool), options={"execution": "cuda"}).execute()


def test_float_fast_path_is_kept(rng):
    a = rng.standard_normal((8, 8)).astype(np.float32)
    same_as_numpy(fusemath.matmul(a, a), a, a)
    assert "intgemm" not in fusemath.Matmul(a, a).plan().describe()


# -- 3. out= of another dtype --------------------------------------------------------------------
@pytest.mark.parametrize("dt,out_dt", [(np.float32, np.float64), (np.float64, np.float32), (np.int64, np.float64),
                                       (np.int32, np.int8), (np.bool_, np.int64), (np.float32, np.complex128),
                                       (np.int8, np.float16)])
def test_out_of_another_dtype_casts_as_numpy(rng, dt, out_dt):
    a = (rng.standard_normal((2, 4, 6)) * 3).astype(dt)
    b = (rng.standard_normal((6, 5)) * 3).astype(dt)
    want = np.matmul(a, b, out=np.empty((2, 4, 5), out_dt))
    for run in (lambda o: fusemath.matmul(a, b, out=o), lambda o: fusemath.Matmul(a, b).execute(out=o)):
        out = np.full((2, 4, 5), 7, out_dt)
        assert run(out) is out
        np.testing.assert_allclose(out, want, rtol=2e-3 if out_dt == np.float16 else 1e-5)


@pytest.mark.parametrize("dt,out_dt", [(np.float64, np.int64), (np.complex64, np.float32), (np.float32, np.bool_),
                                       (np.int64, np.bool_)])
def test_uncastable_out_is_numpys_type_error(dt, out_dt):
    a, b, out = np.ones((3, 4), dt), np.ones((4, 2), dt), np.zeros((3, 2), out_dt)
    with pytest.raises(TypeError) as numpy_error:
        np.matmul(a, b, out=out)
    for run in (lambda: fusemath.matmul(a, b, out=out), lambda: fusemath.Matmul(a, b).execute(out=out)):
        with pytest.raises(fusemath.DtypeError) as ours:
            run()
        assert str(ours.value).startswith(str(numpy_error.value)), (str(ours.value), str(numpy_error.value))
    assert (out == 0).all()


def test_int_into_narrower_int_out_wraps_as_numpy(rng):
    a = full_range(rng, (3, 4), np.int64)
    b = full_range(rng, (4, 2), np.int64)
    want = np.matmul(a, b, out=np.empty((3, 2), np.int8))
    out = np.empty((3, 2), np.int8)
    fusemath.matmul(a, b, out=out)
    np.testing.assert_array_equal(out, want)


def test_cast_out_keeps_its_checks():
    a = np.ones((3, 4), np.float32)
    with pytest.raises(fusemath.ShapeError, match=re.escape("out has shape (3, 3), expected (3, 5)")):
        fusemath.matmul(a, np.ones((4, 5), np.float32), out=np.zeros((3, 3)))
    ro = np.zeros((3, 5))
    ro.flags.writeable = False
    with pytest.raises(fusemath.InvalidArgumentError, match="out is read-only"):
        fusemath.matmul(a, np.ones((4, 5), np.float32), out=ro)


# -- 4. out= aliasing an input -------------------------------------------------------------------
def test_out_aliasing_an_input_computes_through_a_temporary(rng):
    big = rng.standard_normal((8, 4))
    cases = [("out=a", None, lambda a, b: a), ("out=b", None, lambda a, b: b),
             ("reversed view of b", None, lambda a, b: b[::-1]), ("transposed a", None, lambda a, b: a.T),
             ("shifted over a", big[:4], lambda a, b: big[2:6])]
    for label, a, make_out in cases:
        a = rng.standard_normal((4, 4)) if a is None else a
        b = rng.standard_normal((4, 4))
        want = np.matmul(a, b)
        out = make_out(a, b)
        assert fusemath.matmul(a, b, out=out) is out, label
        np.testing.assert_allclose(out, want, rtol=1e-12, err_msg=label)


def test_out_overlapping_c_or_bias(rng):
    a, b = rng.standard_normal((4, 6)), rng.standard_normal((6, 4))
    c = rng.standard_normal((4, 4))
    want = a @ b + c
    out = c.T  # not c's layout: the library refuses, the front end goes through a temporary
    assert fusemath.matmul(a, b, c, out=out) is out
    np.testing.assert_allclose(out, want, rtol=1e-12)
    buf = rng.standard_normal(4 + 16)
    bias, out = buf[:4], buf[2:18].reshape(4, 4)
    want = a @ b + bias
    assert fusemath.matmul(a, b, bias=bias, out=out) is out
    np.testing.assert_allclose(out, want, rtol=1e-12)
    c = rng.standard_normal((4, 4))
    want = a @ b + c
    assert fusemath.matmul(a, b, c, out=c) is c  # exactly c: in place, no temporary needed
    np.testing.assert_allclose(c, want, rtol=1e-12)


def test_planned_execute_into_an_input(rng):
    a, b = rng.standard_normal((5, 5)), rng.standard_normal((5, 5))
    mm = fusemath.Matmul(a, b)
    want = a @ b
    assert mm.execute(out=b) is b
    np.testing.assert_allclose(b, want, rtol=1e-12)
    want = a @ b  # b now holds the last product: the next execute reads it
    assert mm.execute(out=a) is a
    np.testing.assert_allclose(a, want, rtol=1e-12)


def test_integer_out_aliasing_an_input(rng):
    a = full_range(rng, (4, 4), np.int16)
    want = np.matmul(a, a)
    assert fusemath.matmul(a, a, out=a) is a
    np.testing.assert_array_equal(a, want)


# -- 5. np.matrix ----------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix's own
def test_matrix_inputs_give_an_ndarray():
    """Documented: fusemath computes on the matrix's data and returns an ndarray (np.matmul
    returns an np.matrix); the values are np.matmul's."""
    m = np.matrix([[1.0, 2.0], [3.0, 4.0]])
    d = fusemath.matmul(m, m)
    assert type(d) is np.ndarray
    np.testing.assert_array_equal(d, np.asarray(np.matmul(m, m)))
    assert type(fusemath.Matmul(m, m).execute()) is np.ndarray


# -- 6. robustness: memory, error classes, limits ----------------------------------------------------
def test_allocation_failures_are_fusemaths_out_of_memory_error():
    tall, wide = np.ones((2**19, 1), np.int8), np.ones((1, 2**21), np.int8)
    for run in (lambda: fusemath.matmul(tall, wide), lambda: fusemath.Matmul(tall, wide).execute(),
                lambda: fusemath.matmul(tall, wide.astype(np.float32)),  # promoted
                lambda: fusemath.matmul(tall.astype(np.float32), wide.astype(np.float32),
                                        out=np.empty((1, 1), np.float64))):
        with pytest.raises(fusemath.OutOfMemoryError):
            run()
    huge = np.broadcast_to(np.float32(1), (2**20, 2**20))  # its float64 copy cannot be made
    with pytest.raises(fusemath.OutOfMemoryError, match="float64 copy"):
        fusemath.matmul(huge, np.ones((2**20, 1)))
    with pytest.raises(MemoryError):
        fusemath.Matmul(huge, np.ones((2**20, 1)))


def test_wrong_dtype_out_and_operands_are_one_class_everywhere():
    x = np.ones(8, complex)
    cases = [lambda: fusemath.matmul(np.ones((2, 2), complex), np.ones((2, 2), complex), out=np.zeros((2, 2))),
             lambda: fusemath.Matmul(np.ones((2, 2), complex), np.ones((2, 2), complex)).execute(out=np.zeros((2, 2))),
             lambda: fusemath.fft.fft(x, out=np.zeros(8)),
             lambda: fusemath.fft.FFT(x).plan().execute(out=np.zeros(8)),
             lambda: fusemath.Matmul(np.ones((2, 2)), np.ones((2, 2))).reset_operands(a=np.ones((2, 2), np.float32)),
             lambda: fusemath.fft.FFT(x).reset_operand(np.ones(8, np.complex64))]
    for run in cases:
        with pytest.raises(fusemath.DtypeError):
            run()


def test_num_threads_limit_is_stated():
    a = np.ones((4, 4))
    for n in (4097, 10**5, 2**31, 2**40):
        with pytest.raises(fusemath.InvalidArgumentError, match="4096"):
            fusemath.matmul(a, a, options={"num_threads": n})
        with pytest.raises(fusemath.InvalidArgumentError, match="4096"):
            fusemath.fft.fft(np.ones(8), execution={"name": "cpu", "num_threads": n})


class _DLPackOnly:
    """A host array seen only through DLPack (the extension's DLPack dtype table)."""

    def __init__(self, x):
        self.x = x

    def __dlpack__(self, **kw):
        return self.x.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.x.__dlpack_device__()


@pytest.mark.parametrize("dtype", [np.int16, np.uint16, np.uint64, np.bool_])
def test_new_integer_dtypes_through_dlpack(rng, dtype):
    a, b = full_range(rng, (3, 4), dtype), full_range(rng, (4, 2), dtype)
    same_as_numpy(fusemath.matmul(_DLPackOnly(a), _DLPackOnly(b)), a, b)
