"""Every epilogue chain of docs/epilogues.md on NumPy data, against the float64 reference
of mmref.chain_reference: forward activations (sigmoid, tanh, silu, clamp, + aux), the
per-column scale, drelu / dgelu (+ bgrad) fed by a forward call's aux, bgrada / bgradb,
nvmath-python's names and result keys, batch shapes, 1-D operands, the planner, and the
errors. Runs on the CPU backend (OpenBLAS)."""
import re

import numpy as np
import pytest

import fusemath
from mmref import (
    call_matmul,
    DTYPES,
    REAL_DTYPES,
    assert_within,
    chain_reference,
    gelu_grad_limits,
    make,
    tolerance,
    unpack_relu_mask,
)

C = fusemath._fusemath
E = fusemath.Epilogue


def _scale_dtype(dtype):
    return np.float64 if np.dtype(dtype) == np.float64 else np.float32


def _unpack(result, key):
    assert isinstance(result, tuple) and len(result) == 2, f"expected (d, {{{key!r}: ...}})"
    d, extra = result
    assert list(extra) == [key], f"result keys {list(extra)}, expected [{key!r}]"
    return d, extra[key]


# ---------------------------------------------------------------------------
# Forward activations
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", REAL_DTYPES)
@pytest.mark.parametrize("act", ["sigmoid", "tanh", "silu", "clamp"])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("with_aux", [False, True])
def test_forward_activations(rng, dtype, act, with_bias, with_aux):
    a = make(rng, (2, 17, 9), dtype)
    b = make(rng, (9, 150), dtype, "F")
    c = make(rng, (17, 150), dtype)
    bias = make(rng, (150,), dtype) if with_bias else None
    clamp = (-0.5, 0.75) if act == "clamp" else None
    name = act + ("_aux" if with_aux else "")
    result = fusemath.matmul(a, b, c, alpha=0.5, beta=-1.5, bias=bias, epilogue=name, clamp=clamp)
    ref = chain_reference(a, b, c, alpha=0.5, beta=-1.5, bias=bias, act=act, clamp=clamp)
    if with_aux:
        d, aux = _unpack(result, f"{act}_aux")
        assert aux.dtype == np.dtype(dtype) and aux.shape == (2, 17, 150)
        assert_within(aux, ref["pre"], ref["d_err"], dtype, 9, what=f"{act} aux")
    else:
        d = result
    assert isinstance(d, np.ndarray) and d.dtype == np.dtype(dtype) and d.shape == (2, 17, 150)
    assert_within(d, ref["d"], ref["d_err"], dtype, 9, what=act)


@pytest.mark.parametrize("dtype", REAL_DTYPES)
def test_clamp_forms(rng, dtype):
    a = make(rng, (12, 5), dtype)
    b = make(rng, (5, 7), dtype)
    ref = chain_reference(a, b, act="clamp", clamp=(-1.0, 0.5))["d"]
    for kwargs in ({"clamp": (-1.0, 0.5)}, {"epilogue": "clamp", "clamp": [-1, 0.5]},
                   {"epilogue": E.CLAMP, "clamp": (np.float32(-1.0), 0.5)}):
        d = fusemath.matmul(a, b, **kwargs)
        np.testing.assert_allclose(d, ref, rtol=1e-5, atol=1e-5)
        assert d.max() <= 0.5 and d.min() >= -1.0
    # degenerate interval: everything is lo
    np.testing.assert_array_equal(fusemath.matmul(a, b, clamp=(2.0, 2.0)), np.full((12, 7), 2.0, dtype))


# ---------------------------------------------------------------------------
# Scale
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", REAL_DTYPES)
@pytest.mark.parametrize("chain,act,aux_key", [
    ("scale", None, None), ("scale+bias", None, None), ("scale+bias+relu", "relu", None),
    ("scale+gelu+aux", "gelu", "gelu_aux"), ("scale+sigmoid", "sigmoid", None), ("SCALE_TANH_AUX", "tanh", "tanh_aux"),
])
@pytest.mark.parametrize("batched_vectors", [False, True])
def test_scale_chains(rng, dtype, chain, act, aux_key, batched_vectors):
    a = make(rng, (3, 20, 8), dtype)
    b = make(rng, (3, 8, 40), dtype, "T")
    vshape = (3, 40) if batched_vectors else (40,)
    scale = make(rng, vshape, _scale_dtype(dtype))
    bias = make(rng, vshape, dtype) if "bias" in chain else None
    result = fusemath.matmul(a, b, alpha=2.0, bias=bias, epilogue=chain, epilog_inputs={"scale": scale})
    ref = chain_reference(a, b, alpha=2.0, bias=bias, scale=scale, act=act)
    if aux_key:
        d, aux = _unpack(result, aux_key)
        assert_within(aux, ref["pre"], ref["d_err"], dtype, 8, what="aux")
    else:
        d = result
    assert_within(d, ref["d"], ref["d_err"], dtype, 8, what=chain)


def test_scale_implies_the_scale_bit(rng):
    a = make(rng, (6, 4), np.float32)
    b = make(rng, (4, 5), np.float32)
    scale = make(rng, (5,), np.float32)
    d = fusemath.matmul(a, b, epilog_inputs={"scale": scale})
    ref = chain_reference(a, b, scale=scale)
    assert_within(d, ref["d"], ref["d_err"], np.float32, 4)


# ---------------------------------------------------------------------------
# drelu / dgelu, fed by the forward call's aux
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", REAL_DTYPES)
@pytest.mark.parametrize("bgrad", [False, True])
@pytest.mark.parametrize("batch", [(), (3,), (2, 1)])
def test_drelu_from_forward_mask(rng, dtype, bgrad, batch):
    m, k, n, k2 = 19, 6, 140, 11
    x = make(rng, batch + (m, k), dtype)
    w = make(rng, (k, n), dtype)
    b0 = make(rng, (n,), dtype)
    h, mask = _unpack(fusemath.matmul(x, w, bias=b0, epilogue="relu_aux"), "relu_aux")
    assert mask.dtype == np.uint8 and mask.shape == batch + (m, C.relu_mask_row_bytes(n))
    fwd = chain_reference(x, w, bias=b0, act="relu")
    sure = np.abs(fwd["pre"]) > 2 * tolerance(dtype, k, fwd["d_err"], fwd["pre"])
    np.testing.assert_array_equal(unpack_relu_mask(mask, n)[sure], (fwd["pre"] > 0)[sure])

    g = make(rng, batch + (m, k2), dtype)
    w2t = make(rng, (k2, n), dtype, "F")
    c = make(rng, (m, n), dtype)
    name = "DRELU_BGRAD" if bgrad else "DRELU"
    result = fusemath.matmul(g, w2t, c, alpha=1.5, beta=0.5, epilogue=name, epilog_inputs={"relu_aux": mask})
    ref = chain_reference(g, w2t, c, alpha=1.5, beta=0.5, drelu_mask=unpack_relu_mask(mask, n),
                          bgrad="bgrad" if bgrad else None)
    if bgrad:
        d, bg = _unpack(result, "drelu_bgrad")
        assert bg.dtype == np.dtype(dtype) and bg.shape == batch + (n,)
        assert_within(bg, ref["bgrad"], ref["bgrad_err"], dtype, k2 + m, what="drelu bgrad")
    else:
        d = result
    assert d.shape == batch + (m, n)
    assert_within(d, ref["d"], ref["d_err"], dtype, k2, what="drelu")
    # where the mask is 0, D is exactly 0
    assert np.all(d[~unpack_relu_mask(mask, n)] == 0)


@pytest.mark.parametrize("dtype", REAL_DTYPES)
@pytest.mark.parametrize("bgrad", [False, True])
@pytest.mark.parametrize("batch", [(), (2,)])
def test_dgelu_from_forward_aux(rng, dtype, bgrad, batch):
    m, k, n, k2 = 13, 7, 33, 5
    x = make(rng, batch + (m, k), dtype)
    w = make(rng, (k, n), dtype)
    b0 = make(rng, (n,), dtype)
    h, pre = _unpack(fusemath.matmul(x, w, bias=b0, epilogue="GELU_AUX_BIAS"), "gelu_aux")
    g = make(rng, batch + (m, k2), dtype, "T" if batch else "C")
    w2t = make(rng, (k2, n), dtype)
    name = E.DGELU_BGRAD if bgrad else E.DGELU
    result = fusemath.matmul(g, w2t, epilogue=name, epilog_inputs={"gelu_aux": pre})
    ref = chain_reference(g, w2t, dgelu_x=pre, bgrad="bgrad" if bgrad else None)
    if bgrad:
        d, bg = _unpack(result, "dgelu_bgrad")
        assert bg.shape == batch + (n,)
        assert_within(bg, ref["bgrad"], ref["bgrad_err"], dtype, k2 + m, what="dgelu bgrad")
    else:
        d = result
    assert_within(d, ref["d"], ref["d_err"], dtype, k2, what="dgelu")


@pytest.mark.parametrize("dtype", REAL_DTYPES)
@pytest.mark.parametrize("kind", ["drelu", "dgelu"])
@pytest.mark.parametrize("bgrad", [False, True])
def test_backward_aux_broadcast_over_the_batch(rng, dtype, kind, bgrad):
    """One relu mask / gelu input (a stride-0 view) serves every batch: it is read, not
    written, so a repeated input is fine (the forward aux, an output, must stay distinct)."""
    m, n, k2 = 9, 21, 5
    g = make(rng, (3, m, k2), dtype)
    w2t = make(rng, (k2, n), dtype)
    if kind == "drelu":
        one = rng.integers(0, 256, (1, m, C.relu_mask_row_bytes(n)), dtype=np.uint8)
        aux = np.broadcast_to(one, (3,) + one.shape[1:])
        ref = chain_reference(g, w2t, drelu_mask=unpack_relu_mask(np.ascontiguousarray(aux), n),
                              bgrad="bgrad" if bgrad else None)
    else:
        aux = np.broadcast_to(make(rng, (1, m, n), dtype), (3, m, n))
        ref = chain_reference(g, w2t, dgelu_x=np.ascontiguousarray(aux), bgrad="bgrad" if bgrad else None)
    assert aux.strides[0] == 0
    name = kind.upper() + ("_BGRAD" if bgrad else "")
    result = fusemath.matmul(g, w2t, epilogue=name, epilog_inputs={f"{kind[1:]}_aux": aux})
    d, bg = _unpack(result, f"{kind}_bgrad") if bgrad else (result, None)
    assert_within(d, ref["d"], ref["d_err"], dtype, k2, what=f"{kind} with a broadcast aux")
    if bgrad:
        assert_within(bg, ref["bgrad"], ref["bgrad_err"], dtype, k2 + m, what=f"{kind} bgrad, broadcast aux")
    mm = fusemath.Matmul(g, w2t)  # the planner takes it too
    mm.plan(epilog=name, epilog_inputs={f"{kind[1:]}_aux": aux})
    got = mm.execute()
    assert_within(got[0] if bgrad else got, ref["d"], ref["d_err"], dtype, k2, what=f"planned {kind}")


def test_forward_aux_output_must_not_repeat(rng):
    """The aux of a forward chain is an OUTPUT (here the gelu input, through the C entry
    point): memory that repeats over the batch stays refused, two batches would write it."""
    a, b = make(rng, (2, 3, 4), np.float32), make(rng, (4, 5), np.float32)
    d = np.empty((2, 3, 5), np.float32)
    base = np.empty((3, 5), np.float32)
    aux = np.lib.stride_tricks.as_strided(base, shape=(2, 3, 5), strides=(0,) + base.strides)  # writable, repeats
    with pytest.raises(fusemath.AliasError, match="aux overlaps itself"):
        call_matmul(a, b, d=d, aux=aux, epilogue=int(C.EPILOGUE_GELU | C.EPILOGUE_AUX))


# ---------------------------------------------------------------------------
# bgrada / bgradb
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("which", ["bgrada", "bgradb"])
@pytest.mark.parametrize("shape_a,shape_b", [((12, 7), (7, 9)), ((3, 1, 12, 7), (4, 7, 9)), ((2, 12, 7), (7, 9))])
def test_bgrad_of_an_input(rng, dtype, which, shape_a, shape_b):
    a = make(rng, shape_a, dtype, "T")
    b = make(rng, shape_b, dtype)
    d, bg = _unpack(fusemath.matmul(a, b, alpha=0.5, epilogue=which.upper()), which)
    ref = chain_reference(a, b, alpha=0.5, bgrad=which)
    batch = np.broadcast_shapes(shape_a[:-2], shape_b[:-2])
    assert bg.dtype == np.dtype(dtype) and bg.shape == batch + ((12,) if which == "bgrada" else (9,))
    assert_within(d, ref["d"], ref["d_err"], dtype, 7)
    assert_within(bg, ref["bgrad"], ref["bgrad_err"], dtype, 12, what=which)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_bias_with_c(rng, dtype):
    a = make(rng, (2, 6, 5), dtype)
    b = make(rng, (5, 7), dtype)
    c = make(rng, (6, 7), dtype)
    bias = make(rng, (2, 7), dtype)
    d = fusemath.matmul(a, b, c, alpha=1 - 2j, beta=0.5j, bias=bias)
    ref = chain_reference(a, b, c, alpha=1 - 2j, beta=0.5j, bias=bias)
    assert_within(d, ref["d"], ref["d_err"], dtype, 5)


# ---------------------------------------------------------------------------
# Names, keys, shapes
# ---------------------------------------------------------------------------
def test_epilogue_enum_has_every_chain():
    for name, bits in [("SIGMOID", C.EPILOGUE_SIGMOID), ("TANH", C.EPILOGUE_TANH), ("SILU", C.EPILOGUE_SILU),
                       ("CLAMP", C.EPILOGUE_CLAMP), ("DRELU", C.EPILOGUE_DRELU), ("DGELU", C.EPILOGUE_DGELU),
                       ("BGRAD", C.EPILOGUE_BGRAD), ("BGRADA", C.EPILOGUE_BGRADA), ("BGRADB", C.EPILOGUE_BGRADB),
                       ("SCALE", C.EPILOGUE_SCALE)]:
        assert int(getattr(E, name)) == bits
    assert E.DRELU_BGRAD == E.DRELU | E.BGRAD and E.DGELU_BGRAD == E.DGELU | E.BGRAD
    for text, bits in {"DRELU_BGRAD": E.DRELU_BGRAD, "dgelu+bgrad": E.DGELU_BGRAD, "BGRADA": E.BGRADA,
                       "bgradb": E.BGRADB, "sigmoid_aux_bias": E.SIGMOID | E.AUX | E.BIAS,
                       "scale+bias+silu": E.SCALE | E.BIAS | E.SILU, "CLAMP": E.CLAMP}.items():
        assert E.parse(text) == bits
        assert E.parse(E(bits).canonical_name) == bits
    with pytest.raises(ValueError, match="drelu"):
        E.parse("drelu+relu")
    with pytest.raises(ValueError, match="bgrad"):
        E.parse("bgrad")


def test_result_keys_follow_nvmath(rng):
    a = make(rng, (8, 4), np.float64)
    b = make(rng, (4, 16), np.float64)
    mask = np.full((8, 16), 0xFF, np.uint8)
    pre = make(rng, (8, 16), np.float64)
    cases = [
        ("RELU_AUX", {}, "relu_aux"), ("GELU_AUX", {}, "gelu_aux"), ("sigmoid_aux", {}, "sigmoid_aux"),
        ("tanh_aux", {}, "tanh_aux"), ("silu_aux", {}, "silu_aux"), ("clamp_aux", {"clamp": (0, 1)}, "clamp_aux"),
        ("DRELU_BGRAD", {"epilog_inputs": {"relu_aux": mask}}, "drelu_bgrad"),
        ("DGELU_BGRAD", {"epilog_inputs": {"gelu_aux": pre}}, "dgelu_bgrad"),
        ("BGRADA", {}, "bgrada"), ("BGRADB", {}, "bgradb"),
    ]
    for name, kwargs, key in cases:
        result = fusemath.matmul(a, b, epilog=name, **kwargs)
        _unpack(result, key)
    # chains without a second result return the array alone
    for name, kwargs in [("DRELU", {"epilog_inputs": {"relu_aux": mask}}), ("DGELU", {"epilog_inputs": {"gelu_aux": pre}}),
                         ("SIGMOID", {}), ("scale", {"epilog_inputs": {"scale": np.ones(16)}})]:
        assert isinstance(fusemath.matmul(a, b, epilog=name, **kwargs), np.ndarray), name
    # an all-ones mask makes drelu the plain product
    np.testing.assert_allclose(fusemath.matmul(a, b, epilog="DRELU", epilog_inputs={"relu_aux": mask}), a @ b,
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", REAL_DTYPES)
def test_one_d_operands(rng, dtype):
    a = make(rng, (7,), dtype)
    b = make(rng, (2, 7, 20), dtype)
    d, bg = _unpack(fusemath.matmul(a, b, epilogue="bgradb"), "bgradb")
    assert d.shape == (2, 20) and bg.shape == (2, 20)
    ref = chain_reference(a, b, bgrad="bgradb")
    assert_within(bg, ref["bgrad"], ref["bgrad_err"], dtype, 7)
    d, bg = _unpack(fusemath.matmul(a, b, epilogue="bgrada"), "bgrada")
    assert bg.shape == (2, 1), "bgrada has length M = 1 for a 1-D a (gradients keep the promoted length)"
    np.testing.assert_allclose(bg[:, 0], np.full(2, a.astype(np.float64).sum()), rtol=1e-5)
    # a relu mask of a 1-D a drops the M axis (as d does) and feeds drelu back
    h, mask = _unpack(fusemath.matmul(a, b, epilogue="relu_aux"), "relu_aux")
    assert mask.shape == (2, 16)
    g = make(rng, (5,), dtype)
    w2t = make(rng, (2, 5, 20), dtype)
    d, bg = _unpack(fusemath.matmul(g, w2t, epilogue="drelu_bgrad", epilog_inputs={"relu_aux": mask}), "drelu_bgrad")
    ref = chain_reference(g, w2t, drelu_mask=unpack_relu_mask(mask, 20), bgrad="bgrad")
    assert d.shape == (2, 20) and bg.shape == (2, 20)
    assert_within(d, ref["d"], ref["d_err"], dtype, 5)
    assert_within(bg, ref["bgrad"], ref["bgrad_err"], dtype, 6)
    # gelu aux of a 1-D b
    a2 = make(rng, (6, 7), dtype)
    b2 = make(rng, (7,), dtype)
    _, pre = _unpack(fusemath.matmul(a2, b2, epilogue="gelu_aux"), "gelu_aux")
    assert pre.shape == (6,)
    d = fusemath.matmul(a2, b2, epilogue="dgelu", epilog_inputs={"gelu_aux": pre})
    ref = chain_reference(a2, b2, dgelu_x=pre)
    assert_within(d, ref["d"], ref["d_err"], dtype, 7)


# ---------------------------------------------------------------------------
# Planner
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", REAL_DTYPES)
def test_planner_forward_then_backward(rng, dtype):
    m, k, n, k2 = 24, 10, 36, 8
    x = make(rng, (m, k), dtype)
    w = make(rng, (k, n), dtype)
    b0 = make(rng, (n,), dtype)
    with fusemath.Matmul(x, w) as fwd:
        fwd.plan(epilog="RELU_AUX_BIAS", epilog_inputs={"bias": b0})
        h, mask = _unpack(fwd.execute(), "relu_aux")
    g = make(rng, (m, k2), dtype)
    w2t = make(rng, (k2, n), dtype)
    mm = fusemath.Matmul(g, w2t)
    mm.plan(epilog=E.DRELU_BGRAD, epilog_inputs={"relu_aux": mask})
    assert mm.epilogue == E.DRELU_BGRAD and "drelu" in mm.describe()
    d, bg = _unpack(mm.execute(), "drelu_bgrad")
    ref = chain_reference(g, w2t, drelu_mask=unpack_relu_mask(mask, n), bgrad="bgrad")
    assert_within(d, ref["d"], ref["d_err"], dtype, k2)
    assert_within(bg, ref["bgrad"], ref["bgrad_err"], dtype, k2 + m)
    # a new mask through reset_operands
    mask2 = np.ascontiguousarray(mask[::-1])
    mm.reset_operands(epilog_inputs={"relu_aux": mask2})
    d, bg = _unpack(mm.execute(), "drelu_bgrad")
    ref = chain_reference(g, w2t, drelu_mask=unpack_relu_mask(mask2, n), bgrad="bgrad")
    assert_within(d, ref["d"], ref["d_err"], dtype, k2)
    # into a given result array (no allocation for d; bgrad is still new)
    buf = np.empty((m, n), dtype)
    d2, extra = mm.execute(out=buf)
    assert d2 is buf
    np.testing.assert_array_equal(buf, d)
    mm.autotune(iterations=1)
    d3, _ = mm.execute(out=buf)
    assert_within(d3, ref["d"], ref["d_err"], dtype, k2)
    with pytest.raises(ValueError, match="relu_aux has shape"):
        mm.reset_operands(epilog_inputs={"relu_aux": mask[:5]})
    with pytest.raises(ValueError, match="gelu_aux cannot be reset"):
        mm.reset_operands(epilog_inputs={"gelu_aux": h})
    mm.free()


@pytest.mark.parametrize("dtype", REAL_DTYPES)
def test_planner_scale_clamp_and_bgrad(rng, dtype):
    a = make(rng, (2, 9, 6), dtype)
    b = make(rng, (6, 11), dtype)
    scale = make(rng, (11,), _scale_dtype(dtype))
    mm = fusemath.Matmul(a, b)
    mm.plan(epilogue="scale+clamp+aux", epilog_inputs={"scale": scale}, clamp=(-0.25, 0.5))
    d, pre = _unpack(mm.execute(), "clamp_aux")
    ref = chain_reference(a, b, scale=scale, act="clamp", clamp=(-0.25, 0.5))
    assert_within(d, ref["d"], ref["d_err"], dtype, 6)
    assert_within(pre, ref["pre"], ref["d_err"], dtype, 6)
    scale2 = make(rng, (11,), _scale_dtype(dtype))
    mm.reset_operands(epilog_inputs={"scale": scale2})
    ref = chain_reference(a, b, scale=scale2, act="clamp", clamp=(-0.25, 0.5))
    assert_within(mm.execute()[0], ref["d"], ref["d_err"], dtype, 6)
    mm.plan("BGRADB")
    d, bg = _unpack(mm.execute(), "bgradb")
    assert bg.shape == (2, 11)
    ref = chain_reference(a, b, bgrad="bgradb")
    assert_within(bg, ref["bgrad"], ref["bgrad_err"], dtype, 6)


def test_execute_out_validation(rng):
    a = make(rng, (5, 4), np.float32)
    b = make(rng, (4, 3), np.float32)
    mm = fusemath.Matmul(a, b)
    out = np.zeros((5, 3), np.float32)
    assert mm.execute(out=out) is out
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    assert mm.execute(out=out) is out  # cached validation
    with pytest.raises(fusemath.ShapeError, match=re.escape("out has shape (3, 5), expected (5, 3)")):
        mm.execute(out=np.zeros((3, 5), np.float32))
    with pytest.raises(fusemath.DtypeError, match="Cannot cast ufunc 'matmul' output"):
        mm.execute(out=np.zeros((5, 3), np.int32))
    wide = np.zeros((5, 3))  # another dtype NumPy casts into: through a temporary
    assert mm.execute(out=wide) is wide
    np.testing.assert_allclose(wide, a @ b, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="C-contiguous"):
        mm.execute(out=np.zeros((3, 5), np.float32).T)
    ro = np.zeros((5, 3), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        mm.execute(out=ro)
    a3 = a[:, :3].copy()
    mm2 = fusemath.Matmul(a3, np.eye(3, dtype=np.float32))
    want = a3.copy()
    assert mm2.execute(out=a3) is a3  # out = a: through a temporary, as NumPy
    np.testing.assert_array_equal(a3, want)


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------
def f64(*shape):
    return np.ones(shape)


def test_missing_and_misplaced_epilogue_inputs():
    a, b = f64(4, 3), f64(3, 20)
    with pytest.raises(ValueError, match="relu_aux"):
        fusemath.matmul(a, b, epilogue="drelu")
    with pytest.raises(ValueError, match="gelu_aux"):
        fusemath.matmul(a, b, epilogue="DGELU_BGRAD")
    with pytest.raises(ValueError, match="gelu_aux"):
        fusemath.matmul(a, b, epilogue="drelu", epilog_inputs={"relu_aux": np.zeros((4, 16), np.uint8),
                                                                 "gelu_aux": f64(4, 20)})
    with pytest.raises(ValueError, match="relu_aux.*DRELU"):
        fusemath.matmul(a, b, epilogue="relu", epilog_inputs={"relu_aux": np.zeros((4, 16), np.uint8)})
    with pytest.raises(ValueError, match="unknown epilog_inputs.*'gamma'"):
        fusemath.matmul(a, b, epilog_inputs={"gamma": f64(20)})
    with pytest.raises(TypeError, match="epilog_inputs must be a dict"):
        fusemath.matmul(a, b, epilog_inputs=[f64(20)])
    with pytest.raises(ValueError, match="scale"):
        fusemath.matmul(a, b, epilogue="scale")
    with pytest.raises(ValueError, match=re.escape("clamp=(lo, hi)")):
        fusemath.matmul(a, b, epilogue="clamp")
    with pytest.raises(ValueError, match="lo <= hi"):
        fusemath.matmul(a, b, clamp=(1.0, 0.0))
    with pytest.raises(TypeError, match="clamp"):
        fusemath.matmul(a, b, clamp=3.0)
    with pytest.raises(ValueError, match="two activations"):
        fusemath.matmul(a, b, epilogue="relu", clamp=(0, 1))
    with pytest.raises(ValueError, match="bias"):  # drelu takes no bias
        fusemath.matmul(a, b, bias=f64(20), epilogue="drelu", epilog_inputs={"relu_aux": np.zeros((4, 16), np.uint8)})
    with pytest.raises(TypeError, match="either"):
        fusemath.matmul(a, b, bias=f64(20), epilog_inputs={"bias": f64(20)})
    with pytest.raises(TypeError, match="either epilogue or epilog"):
        fusemath.matmul(a, b, epilogue="relu", epilog="relu")


def test_wrong_shapes_and_dtypes_of_epilogue_inputs():
    a, b = f64(2, 4, 3), f64(3, 20)
    good_mask = np.zeros((2, 4, 16), np.uint8)
    with pytest.raises(fusemath.ShapeError, match=re.escape("relu_aux has shape (4, 16), expected (2, 4, 16)")):
        fusemath.matmul(a, b, epilogue="drelu", epilog_inputs={"relu_aux": good_mask[0]})
    with pytest.raises(fusemath.ShapeError, match="relu_aux has shape"):
        fusemath.matmul(a, b, epilogue="drelu", epilog_inputs={"relu_aux": np.zeros((2, 4, 20), np.uint8)})
    with pytest.raises(fusemath.DtypeError, match="relu_aux has dtype float64, expected uint8"):
        fusemath.matmul(a, b, epilogue="drelu", epilog_inputs={"relu_aux": good_mask.astype(np.float64)})
    with pytest.raises(fusemath.DtypeError, match="gelu_aux has dtype float32"):
        fusemath.matmul(a, b, epilogue="dgelu", epilog_inputs={"gelu_aux": np.zeros((2, 4, 20), np.float32)})
    with pytest.raises(fusemath.ShapeError, match="gelu_aux has shape"):
        fusemath.matmul(a, b, epilogue="dgelu", epilog_inputs={"gelu_aux": f64(4, 20)})
    with pytest.raises(fusemath.DtypeError, match="scale has dtype float32"):
        fusemath.matmul(a, b, epilog_inputs={"scale": np.ones(20, np.float32)})
    with pytest.raises(fusemath.ShapeError, match="scale has length 3"):
        fusemath.matmul(a, b, epilog_inputs={"scale": f64(3)})
    f32 = np.ones((4, 3), np.float32), np.ones((3, 5), np.float32)
    with pytest.raises(fusemath.DtypeError, match="scale has dtype float64"):
        fusemath.matmul(*f32, epilog_inputs={"scale": np.ones(5)})
    z = np.ones((3, 3), np.complex64)
    for chain, kwargs in [("sigmoid", {}), ("scale", {"epilog_inputs": {"scale": np.ones(3, np.float32)}}),
                          ("drelu", {"epilog_inputs": {"relu_aux": np.zeros((3, 16), np.uint8)}}),
                          ("clamp", {"clamp": (0, 1)})]:
        with pytest.raises(TypeError, match="complex"):
            fusemath.matmul(z, z, epilogue=chain, **kwargs)
    # nothing leaks into the next call
    np.testing.assert_allclose(fusemath.matmul(a, b, epilogue="bgradb")[1]["bgradb"], np.full((2, 20), 3.0))


def test_planner_errors(rng):
    a = make(rng, (4, 3), np.float32)
    b = make(rng, (3, 8), np.float32)
    mm = fusemath.Matmul(a, b)
    with pytest.raises(ValueError, match="relu_aux"):
        mm.plan(epilog="DRELU")
    with pytest.raises(ValueError, match="unknown epilog_inputs"):
        mm.plan(epilog="bias", epilog_inputs={"beta": np.ones(8, np.float32)})
    with pytest.raises(ValueError, match="scale cannot be reset"):
        mm.reset_operands(epilog_inputs={"scale": np.ones(8, np.float32)})
    with pytest.raises(ValueError, match="unknown epilog_inputs"):
        mm.reset_operands(epilog_inputs={"gamma": np.ones(8, np.float32)})
    np.testing.assert_allclose(mm.execute(), a @ b, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------
# Options and stream arguments (the GPU ones are accepted and checked here too)
# ---------------------------------------------------------------------------
def test_compute_option(rng):
    a = make(rng, (6, 5), np.float32)
    b = make(rng, (5, 4), np.float32)
    assert fusemath.MatmulOptions().compute == "default"
    for options in ({"compute": "tf32"}, fusemath.MatmulOptions(compute="TF32"), {"compute": "default"}):
        # the CPU backend computes float32 in float32 whatever the option says
        np.testing.assert_allclose(fusemath.matmul(a, b, options=options), a @ b, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(fusemath.Matmul(a, b, options=options).execute(), a @ b, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="compute 'fast'"):
        fusemath.matmul(a, b, options={"compute": "fast"})
    with pytest.raises(ValueError, match="tf32.*f64"):
        fusemath.matmul(a.astype(np.float64), b.astype(np.float64), options={"compute": "tf32"})


def test_stream_arguments_on_host_data(rng):
    import types

    a = make(rng, (6, 5), np.float64)
    b = make(rng, (5, 4), np.float64)

    class Proto:
        def __cuda_stream__(self):
            return (0, 0)

    mm = fusemath.Matmul(a, b)
    for s in (None, 0, types.SimpleNamespace(ptr=0), types.SimpleNamespace(cuda_stream=0), Proto()):
        np.testing.assert_allclose(fusemath.matmul(a, b, stream=s), a @ b, rtol=1e-12)
        np.testing.assert_allclose(mm.execute(stream=s), a @ b, rtol=1e-12)
    for bad in ("s", 1.5, -1, types.SimpleNamespace(ptr="x")):
        with pytest.raises((TypeError, ValueError), match="stream"):
            mm.execute(stream=bad)


def test_epilogue_argument_types():
    a, b = f64(3, 4), f64(4, 5)
    fusemath.matmul(a, b, bias=f64(5), epilogue=1)  # int bits work (and are cached) ...
    for bad in (True, 1.0, 1.5, [1]):  # ... bool and float never alias them
        with pytest.raises(TypeError, match="epilogue"):
            fusemath.matmul(a, b, bias=f64(5), epilogue=bad)
    np.testing.assert_allclose(fusemath.matmul(a, b, epilogue=np.uint32(E.RELU)), np.maximum(a @ b, 0))


def test_relu_aux_with_zero_columns():
    """N = 0: the relu mask has rows of 0 bytes, whatever row stride NumPy gives them."""
    import fusemath
    a = np.ones((3, 4), np.float32)
    b = np.ones((4, 0), np.float32)
    d, aux = fusemath.matmul(a, b, epilogue="relu_aux")
    assert d.shape == (3, 0)
    assert aux["relu_aux"].shape[0] == 3 and aux["relu_aux"].size == 0


@pytest.mark.parametrize("dtype,xs", [(np.float32, [1e19, 2e19, -2e19, 3e38, 9.5, -9.5, 0.3, np.inf, -np.inf]),
                                      (np.float64, [1e154, 2e154, -2e154, 1e300, 9.5, -9.5, 0.3, np.inf, -np.inf])])
def test_dgelu_at_huge_activation_inputs(dtype, xs):
    """gelu'(x) tends to 1 (x >> 0) and 0 (x << 0); where x*x overflows the dtype the formula gave
    0 * inf = NaN (found by a review). Finite inputs give the limit; NaN stays NaN; moderate inputs
    match the formula evaluated in float64."""
    xs = np.array(xs, np.float64)
    aux = np.array([np.append(xs, np.nan)], dtype)
    a, b = np.ones((1, 1), dtype), np.ones((1, aux.shape[1]), dtype)
    d, extra = fusemath.matmul(a, b, epilogue="dgelu+bgrad", epilog_inputs={"gelu_aux": aux})
    want = gelu_grad_limits(xs)
    tol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(d[0, :-1], want, rtol=tol, atol=tol)
    np.testing.assert_allclose(extra["dgelu_bgrad"][:-1], want, rtol=tol, atol=tol)
    assert np.isnan(d[0, -1]) and np.isnan(extra["dgelu_bgrad"][-1])
