"""fusemath.Matmul: plan once, execute many times."""
import re

import numpy as np
import pytest

import fusemath
from mmref import call_matmul, DTYPES, REAL_DTYPES, assert_close, make, reference, tolerance, unpack_relu_mask


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["C", "F", "T", "strided", "neg"])
def test_plan_execute_matches_reference(rng, dtype, layout):
    a = make(rng, (2, 12, 7), dtype, layout)
    b = make(rng, (7, 10), dtype, layout)
    c = make(rng, (12, 10), dtype)
    mm = fusemath.Matmul(a, b, c, alpha=2.0, beta=-1.0)
    mm.plan()
    d1 = mm.execute()
    d2 = mm.execute()
    assert d1 is not d2 and not np.shares_memory(d1, d2), "each execute returns a new array"
    _, ref, scale = reference(a, b, c, alpha=2.0, beta=-1.0)
    assert_close(d1, ref, scale, dtype, 7)
    np.testing.assert_array_equal(d1, d2)
    mm.free()


@pytest.mark.parametrize("dtype", REAL_DTYPES)
@pytest.mark.parametrize("epilogue,act,key", [
    ("relu", "relu", None), ("gelu", "gelu", None), ("bias+relu", "relu", None),
    ("RELU_AUX_BIAS", "relu", "relu_aux"), ("GELU_AUX_BIAS", "gelu", "gelu_aux"), ("gelu_aux", "gelu", "gelu_aux"),
])
def test_plan_epilogues(rng, dtype, epilogue, act, key):
    a = make(rng, (20, 9), dtype)
    b = make(rng, (9, 140), dtype)
    bits = fusemath._fusemath.epilogue_parse(epilogue)
    bias = make(rng, (140,), dtype) if bits & fusemath.Epilogue.BIAS else None
    with fusemath.Matmul(a, b) as mm:
        mm.plan(epilogue, bias)
        assert mm.epilogue == fusemath.Epilogue(bits)
        result = mm.execute()
    pre, ref, scale = reference(a, b, bias=bias, act=act)
    if key is None:
        d = result
    else:
        d, aux = result
        assert list(aux) == [key]
        if key == "gelu_aux":
            assert_close(aux[key], pre, scale, dtype, 9, what="gelu aux")
        else:
            bits_got = unpack_relu_mask(aux[key], 140)
            sure = np.abs(pre) > 2 * tolerance(dtype, 9, scale, pre)
            np.testing.assert_array_equal(bits_got[sure], (pre > 0)[sure])
    assert_close(d, ref, scale, dtype, 9)


def test_nvmath_spellings(rng):
    a = make(rng, (6, 5), np.float32)
    b = make(rng, (5, 4), np.float32)
    bias = make(rng, (4,), np.float32)
    mm = fusemath.Matmul(a, b)
    mm.plan(epilog=fusemath.Epilogue.RELU_BIAS, epilog_inputs={"bias": bias})
    _, ref, scale = reference(a, b, bias=bias, act="relu")
    assert_close(mm.execute(), ref, scale, np.float32, 5)
    mm.plan(epilog="GELU_AUX_BIAS", epilog_inputs={"bias": bias})
    d, aux = mm.execute()
    assert set(aux) == {"gelu_aux"}
    with pytest.raises(ValueError, match="epilog_inputs"):
        mm.plan(epilog="bias", epilog_inputs={"gamma": bias})
    with pytest.raises(TypeError, match="either"):
        mm.plan("relu", epilog="relu")
    assert fusemath.MatmulEpilog is fusemath.Epilogue


def test_execute_before_plan_uses_defaults(rng):
    a = make(rng, (4, 3), np.float64)
    b = make(rng, (3, 2), np.float64)
    mm = fusemath.Matmul(a, b)
    assert "not planned" in mm.describe()
    assert mm.backend is None
    np.testing.assert_allclose(mm.execute(), a @ b, rtol=1e-12, atol=1e-12)
    assert mm.backend == "openblas"
    assert mm.epilogue == fusemath.Epilogue.DEFAULT


def test_operands_are_referenced_not_copied(rng):
    a = make(rng, (5, 4), np.float64)
    b = make(rng, (4, 3), np.float64)
    mm = fusemath.Matmul(a, b)
    mm.plan()
    a[...] = 2.0  # in-place change is seen by the next execute
    np.testing.assert_allclose(mm.execute(), a @ b, rtol=1e-12, atol=1e-12)
    # the Matmul keeps its operands alive
    import weakref

    holder = make(rng, (5, 4), np.float64)
    ref_a = weakref.ref(holder)
    mm2 = fusemath.Matmul(holder, b)
    expected = holder @ b
    del holder
    assert ref_a() is not None
    np.testing.assert_allclose(mm2.execute(), expected, rtol=1e-12, atol=1e-12)
    mm2.free()
    assert ref_a() is None, "free() drops the operand references"


@pytest.mark.parametrize("dtype", DTYPES)
def test_reset_operands(rng, dtype):
    a = make(rng, (8, 6), dtype, "T")
    b = make(rng, (6, 5), dtype)
    c = make(rng, (8, 5), dtype)
    bias = make(rng, (5,), dtype)
    mm = fusemath.Matmul(a, b, c, beta=0.5)
    mm.plan(bias=bias)
    first = mm.execute()
    for _ in range(3):
        a2 = make(rng, (8, 6), dtype, "T")
        b2 = make(rng, (6, 5), dtype)
        c2 = make(rng, (8, 5), dtype)
        bias2 = make(rng, (5,), dtype)
        mm.reset_operands(a=a2, b=b2, c=c2, bias=bias2)
        _, ref, scale = reference(a2, b2, c2, beta=0.5, bias=bias2)
        assert_close(mm.execute(), ref, scale, dtype, 6)
    mm.reset_operands(b=b)  # partial reset keeps the others
    _, ref, scale = reference(a2, b, c2, beta=0.5, bias=bias2)
    assert_close(mm.execute(), ref, scale, dtype, 6)
    _, ref0, scale0 = reference(a, b, c, beta=0.5, bias=bias)
    assert_close(first, ref0, scale0, dtype, 6)


def test_reset_operands_1d(rng):
    a = make(rng, (6,), np.float64)
    b = make(rng, (3, 6, 4), np.float64)
    mm = fusemath.Matmul(a, b)
    np.testing.assert_allclose(mm.execute(), a @ b, rtol=1e-12, atol=1e-12)
    a2 = make(rng, (6,), np.float64)
    mm.reset_operands(a=a2)
    d = mm.execute()
    assert d.shape == (3, 4)
    np.testing.assert_allclose(d, a2 @ b, rtol=1e-12, atol=1e-12)
    v = fusemath.Matmul(a, a2).execute()
    assert np.isscalar(v) or np.ndim(v) == 0
    np.testing.assert_allclose(v, a @ a2, rtol=1e-12)


def test_reset_operands_mismatch(rng):
    a = make(rng, (8, 6), np.float32)
    b = make(rng, (6, 5), np.float32)
    mm = fusemath.Matmul(a, b)
    mm.plan()
    with pytest.raises(ValueError, match=re.escape("a has shape (8, 7), the plan was made for (8, 6)")):
        mm.reset_operands(a=make(rng, (8, 7), np.float32))
    with pytest.raises(fusemath.DtypeError, match="b has dtype float64, the plan was made for float32"):
        mm.reset_operands(b=make(rng, (6, 5), np.float64))
    with pytest.raises(ValueError, match="a has strides .* the plan was made for"):
        mm.reset_operands(a=make(rng, (8, 6), np.float32, "F"))
    with pytest.raises(ValueError, match="c cannot be reset"):
        mm.reset_operands(c=make(rng, (8, 5), np.float32))
    with pytest.raises(ValueError, match="bias cannot be reset"):
        mm.reset_operands(bias=make(rng, (5,), np.float32))
    with pytest.raises(TypeError, match="a must be an array"):
        mm.reset_operands(a="x")
    with pytest.raises(fusemath.ShapeError, match=re.escape("a has shape (1, 1), the plan was made for")):
        mm.reset_operands(a=[[1.0]])  # a list is an array as np.asarray makes it
    # a failed reset changes nothing (all-or-nothing)
    with pytest.raises(ValueError):
        mm.reset_operands(a=make(rng, (8, 6), np.float32), b=make(rng, (6, 4), np.float32))
    np.testing.assert_allclose(mm.execute(), a @ b, rtol=1e-5, atol=1e-5)


def test_free_and_context_manager(rng):
    a = make(rng, (4, 4), np.float32)
    with fusemath.Matmul(a, a) as mm:
        mm.plan("relu")
        assert "relu" in mm.describe()
    for call in (mm.execute, mm.plan, mm.describe, mm.autotune, lambda: mm.reset_operands(a=a),
                 lambda: mm.epilogue, lambda: mm.result_shape, lambda: mm.backend):
        with pytest.raises(fusemath.InvalidStateError, match="freed"):
            call()
    with pytest.raises(RuntimeError):
        mm.execute()
    mm.free()  # idempotent
    assert "freed" in repr(mm)


def test_describe_and_backend(rng):
    a = make(rng, (64, 32), np.float32)
    b = make(rng, (32, 48), np.float32)
    bias = make(rng, (48,), np.float32)
    mm = fusemath.Matmul(a, b)
    mm.plan(epilogue="relu", bias=bias)
    text = mm.describe()
    # fusemath's own GEMM kernel (the gemmkernel backend) where auto gives it the product (AVX2, AVX-512)
    backend = "gemmkernel" if " kernel=" in text else "openblas"
    assert text.startswith(f"matmul cpu/{backend} f32") and "64x48x32" in text and "bias+relu" in text
    assert mm.backend == backend
    assert "Matmul" in repr(mm)


def test_autotune(rng):
    a = make(rng, (256, 64), np.float32)
    b = make(rng, (64, 96), np.float32)
    bias = make(rng, (96,), np.float32)
    mm = fusemath.Matmul(a, b)
    mm.plan(epilogue="bias+relu", bias=bias)
    assert mm.autotune(iterations=2) is mm
    _, ref, scale = reference(a, b, bias=bias, act="relu")
    assert_close(mm.execute(), ref, scale, np.float32, 64)
    assert "bias+relu" in mm.describe()
    with pytest.raises(ValueError, match="iterations"):
        mm.autotune(iterations=0)
    with pytest.raises(TypeError, match="iterations"):
        mm.autotune(iterations="3")
    # autotune before plan plans with defaults
    mm2 = fusemath.Matmul(a, b)
    mm2.autotune()
    assert_close(mm2.execute(), reference(a, b)[1], reference(a, b)[2], np.float32, 64)


def test_replan_changes_epilogue(rng):
    a = make(rng, (6, 5), np.float64)
    b = make(rng, (5, 4), np.float64)
    bias = make(rng, (4,), np.float64)
    mm = fusemath.Matmul(a, b)
    mm.plan("relu")
    np.testing.assert_allclose(mm.execute(), np.maximum(a @ b, 0), rtol=1e-12, atol=1e-12)
    mm.plan(bias=bias)
    np.testing.assert_allclose(mm.execute(), a @ b + bias, rtol=1e-12, atol=1e-12)
    mm.plan()
    np.testing.assert_allclose(mm.execute(), a @ b, rtol=1e-12, atol=1e-12)


def test_options_forms(rng):
    a = make(rng, (5, 4), np.float64)
    b = make(rng, (4, 3), np.float64)
    for options in (None, {"num_threads": 1}, fusemath.MatmulOptions(execution="cpu", panel_rows=2),
                    {"execution": "cpu", "device_id": 0, "num_threads": 2, "panel_rows": 0}):
        mm = fusemath.Matmul(a, b, options=options)
        np.testing.assert_allclose(mm.execute(), a @ b, rtol=1e-12, atol=1e-12)
    with pytest.raises(TypeError, match="unknown option"):
        fusemath.Matmul(a, b, options={"threads": 2})


def test_construction_errors(rng):
    a = make(rng, (5, 4), np.float32)
    with pytest.raises(ValueError, match="shape"):
        fusemath.Matmul(a, make(rng, (3, 3), np.float32))
    with pytest.raises(TypeError, match="b must be an array"):
        fusemath.Matmul(a, None)
    b = make(rng, (4, 3), np.float32)
    mm = fusemath.Matmul(a, b)
    with pytest.raises(ValueError, match="bias has length 2"):
        mm.plan(bias=make(rng, (2,), np.float32))
    with pytest.raises(ValueError, match="bias"):
        mm.plan("bias+relu")
    with pytest.raises(ValueError, match="nope"):
        mm.plan("nope")
    # after failed plans the object still works
    np.testing.assert_allclose(mm.execute(), a @ b, rtol=1e-5, atol=1e-5)


def test_low_level_plan_execute_raw_pointers(rng):
    C = fusemath._fusemath
    a = make(rng, (6, 5), np.float32)
    b = make(rng, (5, 4), np.float32)
    d = np.empty((6, 4), np.float32)
    plan = call_matmul(a, b, d=d, plan=True)
    assert isinstance(plan, fusemath.Plan) and plan.op == "matmul" and plan.backend == "openblas"
    assert "matmul" in repr(plan)
    plan.execute(C.data_ptr(a), C.data_ptr(b), None, None, C.data_ptr(d), 0)
    np.testing.assert_allclose(d, a @ b, rtol=1e-5, atol=1e-5)
    # bad pointer arguments never crash
    with pytest.raises(ValueError, match="address of 'a'"):
        plan.execute(2**80, C.data_ptr(b), None, None, C.data_ptr(d), None)
    with pytest.raises(ValueError, match="address of 'b'"):
        plan.execute(C.data_ptr(a), -1, None, None, C.data_ptr(d), None)
    with pytest.raises(TypeError, match="address of 'd'"):
        plan.execute(C.data_ptr(a), C.data_ptr(b), None, None, "0x1234", None)
    with pytest.raises(TypeError, match="6 addresses"):
        plan.execute(1, 2, 3)
    with pytest.raises(ValueError, match="c was not planned"):
        plan.execute(C.data_ptr(a), C.data_ptr(b), C.data_ptr(a), None, C.data_ptr(d), None)
    with pytest.raises(ValueError, match="d is NULL"):
        plan.execute(C.data_ptr(a), C.data_ptr(b), None, None, None, None)
    with pytest.raises(ValueError, match="stream"):
        plan.execute(C.data_ptr(a), C.data_ptr(b), None, None, C.data_ptr(d), None, -5)
    with pytest.raises(TypeError):
        fusemath.Plan()
    plan.free()
    assert plan.freed
    with pytest.raises(fusemath.InvalidStateError, match="freed"):
        plan.execute(C.data_ptr(a), C.data_ptr(b), None, None, C.data_ptr(d), None)
    with pytest.raises(fusemath.InvalidStateError):
        plan.describe()
    assert "freed" in repr(plan)


def test_execute_does_not_keep_the_out_array_alive():
    """execute(out=o) remembers o's identity to skip re-validating it, but holds no reference:
    a large result array the caller drops is freed at once, not when the Matmul is freed
    (before, the runner kept the last out= alive)."""
    import weakref

    mm = fusemath.Matmul(np.ones((8, 8)), np.ones((8, 8)))
    mm.plan()
    o = np.zeros((8, 8))
    mm.execute(out=o)
    mm.execute(out=o)  # the cached path
    gone = weakref.ref(o)
    del o
    assert gone() is None
    o2 = np.zeros((8, 8))  # a new array, perhaps at the old one's address: validated and used
    assert (mm.execute(out=o2) == 8).all()
    mm.free()


def test_execute_out_changed_in_place_is_validated_again():
    """execute(out=o) caches o's validation; a NumPy array reshaped, retyped or resized in place
    afterwards is checked again (a resize that kept the address once made the next call write
    the full result into a one-element buffer)."""
    mm = fusemath.Matmul(np.ones((64, 64)), np.ones((64, 64)))
    mm.plan()
    o = np.zeros((64, 64))
    assert mm.execute(out=o) is o and (o == 64).all()
    o.shape = (32, 128)
    with pytest.raises(fusemath.ShapeError, match=r"out has shape \(32, 128\), expected \(64, 64\)"):
        mm.execute(out=o)
    o.shape = (64, 64)
    o[...] = 0
    assert (mm.execute(out=o) == 64).all()  # back to its planned shape: accepted again
    o.dtype = np.float32  # now (64, 128): a float32 out would take the float64 result, but not that shape
    with pytest.raises(fusemath.ShapeError, match=r"out has shape \(64, 128\), expected \(64, 64\)"):
        mm.execute(out=o)
    o = np.zeros((64, 64))
    mm.execute(out=o)
    o.resize((1,), refcheck=False)
    with pytest.raises(fusemath.ShapeError, match=r"out has shape \(1,\)"):
        mm.execute(out=o)
    t = np.zeros((64, 64)).T  # same shape, not C-contiguous
    with pytest.raises(ValueError, match="C-contiguous"):
        mm.execute(out=t)


def test_planner_sees_in_place_changes_of_copied_operands():
    """A big-endian or misaligned operand is computed from a native, aligned copy; the planner
    refreshes that copy before every execute, so it sees in-place changes of the caller's array
    like any other operand (it used to keep computing from the first copy)."""
    a = np.arange(12.0).reshape(4, 3).astype(">f8")
    b = np.ones((3, 2))
    mm = fusemath.Matmul(a, b)
    mm.plan()
    np.testing.assert_array_equal(mm.execute(), a.astype(np.float64) @ b)
    a[...] = 0
    np.testing.assert_array_equal(mm.execute(), np.zeros((4, 2)))
    raw = np.zeros(8 * 6 + 8, np.uint8)
    m = raw[1:1 + 48].view(np.float64).reshape(3, 2)  # misaligned
    assert not m.flags.aligned
    m[...] = 2.0
    mm.reset_operands(a=np.ones((4, 3)), b=m)
    np.testing.assert_array_equal(mm.execute(), np.full((4, 2), 6.0))
    m[...] = 3.0
    np.testing.assert_array_equal(mm.execute(), np.full((4, 2), 9.0))


def test_planner_refreshes_views_of_copied_operands():
    """A 1-D operand is promoted to a view (x[None, :]) and a lower-rank c is broadcast: the
    planner holds a view of the native copy, which must follow the caller's array too; and a
    misaligned Fortran-order operand keeps its order in the copy (reset_operands compares it
    with the plan's layout)."""
    a = np.array([1.0, 2.0, 3.0], ">f8")
    mm = fusemath.Matmul(a, np.ones((3, 2)))
    mm.plan()
    np.testing.assert_array_equal(mm.execute(), [6.0, 6.0])
    a[...] = 0
    np.testing.assert_array_equal(mm.execute(), [0.0, 0.0])
    c = np.array([10.0, 20.0], ">f8")
    mm = fusemath.Matmul(np.ones((2, 3)), np.ones((3, 2)), c)
    mm.plan()
    np.testing.assert_array_equal(mm.execute(), [[13.0, 23.0], [13.0, 23.0]])
    c[...] = 0
    np.testing.assert_array_equal(mm.execute(), np.full((2, 2), 3.0))
    f_order = np.ones((4, 3), order="F")
    raw = np.zeros(97, np.uint8)
    am = raw[1:].view(np.float64).reshape(3, 4).T  # misaligned, Fortran order like f_order
    am[...] = 2.0
    mm = fusemath.Matmul(f_order, np.ones((3, 5)))
    mm.plan()
    mm.reset_operands(a=am)
    np.testing.assert_array_equal(mm.execute(), np.full((4, 5), 6.0))


def test_execute_out_errors_match_the_stateless_call():
    """Matmul.execute(out=) refuses what fusemath.matmul(out=) refuses, with the same classes
    and naming out (not the C slot d, not builtin exception types)."""
    a = np.ones((4, 4))
    mm = fusemath.Matmul(a, np.ones((4, 4)))
    mm.plan()
    ro = np.zeros((4, 4))
    ro.flags.writeable = False
    raw = np.zeros(8 * 16 + 8, np.uint8)
    misaligned = raw[1:129].view(np.float64).reshape(4, 4)
    ro32 = np.zeros((4, 4), np.float32)
    ro32.flags.writeable = False
    cases = [(ro, fusemath.InvalidArgumentError, "out is read-only"),
             (ro32, fusemath.InvalidArgumentError, "out is read-only"),
             (misaligned, fusemath.InvalidArgumentError, "out at 0x"),
             (np.zeros((4, 4), np.int64), fusemath.DtypeError, "Cannot cast ufunc 'matmul' output")]
    for out, exc, text in cases:
        with pytest.raises(exc, match=re.escape(text)):
            mm.execute(out=out)
        with pytest.raises(exc, match=re.escape(text)):
            fusemath.matmul(a, np.ones((4, 4)), out=out)
    for out in (np.zeros((4, 4), ">f8"), np.zeros((4, 4), np.float32)):  # as NumPy: through a temporary
        assert mm.execute(out=out) is out and (out == 4).all()
        out[...] = 0
        assert fusemath.matmul(a, np.ones((4, 4)), out=out) is out and (out == 4).all()
    x = np.ones((4, 4))
    assert fusemath.Matmul(x, np.ones((4, 4))).execute(out=x) is x and (x == 4).all()  # out = a: as well
    x[...] = 1
    assert fusemath.matmul(x, x, out=x) is x and (x == 4).all()
    o = np.zeros((4, 4))
    mm.execute(out=o)
    o.flags.writeable = False  # made read-only after it passed once
    with pytest.raises(fusemath.InvalidArgumentError, match="out is read-only"):
        mm.execute(out=o)


def test_more_than_eight_dimensions():
    for call in (lambda: fusemath.matmul(np.ones((1,) * 7 + (2, 3)), np.ones((3, 2))),
                 lambda: fusemath.Matmul(np.ones((1,) * 7 + (2, 3)), np.ones((3, 2)))):
        with pytest.raises(fusemath.ShapeError, match="a has 9 dimensions; at most 8"):
            call()


def test_execute_out_of_another_element_type_names_it():
    mm = fusemath.Matmul(np.ones((4, 4)), np.ones((4, 4)))
    mm.plan()
    with pytest.raises(fusemath.DtypeError, match=re.escape("from dtype('float64') to dtype('bool')")):
        mm.execute(out=np.zeros((4, 4), bool))
    with pytest.raises(fusemath.InvalidArgumentError, match="out has element format .*, expected f64"):
        mm.execute(out=np.zeros((4, 4), "S8"))
    raw = np.zeros(16 * 16 + 16, np.uint8)
    z = raw[8:8 + 256].view(np.complex128).reshape(4, 4)  # 8-byte aligned: NumPy's aligned complex128
    mz = fusemath.Matmul(np.ones((4, 4), complex), np.ones((4, 4), complex))
    mz.plan()
    assert mz.execute(out=z) is z and (z == 4).all()


def test_reset_layout_message_explains_a_copy():
    raw = np.zeros(8 * 24 + 8, np.uint8)
    m = raw[1:1 + 192].view(np.float64).reshape(4, 6)[:, ::2]  # misaligned and strided: used through a copy
    mm = fusemath.Matmul(m, np.ones((3, 2)))
    mm.plan()
    with pytest.raises(fusemath.InvalidArgumentError, match="compact native copy"):
        mm.reset_operands(a=np.ones((4, 6))[:, ::2])
