"""The dropout matmul epilogue (``epilogue="relu+dropout"``, ``dropout=(p, generator)``) and its
backward (``"ddropout"``), against an unfused float64 reference whose mask is recomputed from the
generator's own raw words (``Generator.random_raw``): element e of D is kept iff word
position + e >= round(p * 2**32)."""
import math
import pickle
import threading

import numpy as np
import pytest

import fusemath
from fusemath.random import Generator


def _thr(p):
    return int(math.floor(p * 2.0 ** 32 + 0.5))


def _words(seed, position, n):
    g = Generator(seed)
    g.advance(position)
    return g.random_raw(n)


def _reference(a, b, bias, p, seed, position, relu=True):
    x = np.matmul(a.astype(np.float64), b.astype(np.float64))
    if bias is not None:
        x = x + bias
    pre = x > 0
    if relu:
        x = np.maximum(x, 0)
    keep = (_words(seed, position, x.size).astype(np.uint64) >= _thr(p)).reshape(x.shape)
    return np.where(keep, x / (1.0 - p), 0.0), keep, pre


def _unpack(mask, n):
    return np.unpackbits(mask, axis=-1, bitorder="little")[..., :n].astype(bool)


def _tol(dt, k):
    return 8 * (k + 2) * np.finfo(dt).eps


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("p", [0.0, 0.25, 0.9])
@pytest.mark.parametrize("shape", [(37, 131, 19), (2, 17, 33, 9), (1, 300, 7)])
def test_forward_against_reference(dtype, p, shape):
    rng = np.random.default_rng(1)
    *batch, m, n, k = shape
    a = rng.standard_normal((*batch, m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    bias = rng.standard_normal(n).astype(dtype)
    g = Generator(0xDEADBEEFCAFEF00D)
    g.advance(12345)  # a position that is not a multiple of 4
    d, extra = fusemath.matmul(a, b, bias=bias, epilogue="relu+dropout+aux", dropout=(p, g))
    ref, keep, pre = _reference(a, b, bias, p, 0xDEADBEEFCAFEF00D, 12345)
    np.testing.assert_allclose(d, ref, rtol=_tol(dtype, k), atol=_tol(dtype, k))
    assert np.all(d[~keep] == 0)
    mask = extra["dropout_aux"]
    assert mask.dtype == np.uint8 and mask.shape == (*batch, m, fusemath._fusemath.relu_mask_row_bytes(n))
    np.testing.assert_array_equal(_unpack(mask, n), keep & pre)
    assert g.state["position"] == 12345 + d.size


def test_generator_advances_and_calls_chain():
    """Two calls in a row use consecutive words: the same as one call on the stacked batch."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((2, 20, 5))
    b = rng.standard_normal((5, 24))
    whole = fusemath.matmul(a, b, epilogue="dropout", dropout=(0.5, Generator(7)))
    g = Generator(7)
    halves = [fusemath.matmul(a[i], b, epilogue="dropout", dropout=(0.5, g)) for i in range(2)]
    np.testing.assert_array_equal(np.stack(halves), whole)
    assert g.state["position"] == whole.size


def test_keep_fraction_and_scale():
    a = np.ones((400, 1), np.float32)
    b = np.ones((1, 500), np.float32)
    for p in (0.1, 0.5, 0.8):
        d = fusemath.matmul(a, b, epilogue="dropout", dropout=(p, Generator(11)))
        kept = np.count_nonzero(d)
        n = d.size
        assert abs(kept - n * (1 - p)) < 6 * math.sqrt(n * p * (1 - p))
        assert np.all(d[d != 0] == np.float32(1.0 / (1.0 - p)))  # 1/(1-p) rounded once to float32


def test_thread_counts_and_strategies_give_the_same_mask():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((130, 40)), rng.standard_normal((40, 70))
    masks = []
    for opts in ({"num_threads": 1}, {"num_threads": 2}, {"cpu_strategy": "tiles", "panel_rows": 3},
                 {"cpu_strategy": "kernel"}, {"cpu_strategy": "blas_threads"}):
        _, extra = fusemath.matmul(a, b, epilogue="dropout+aux", dropout=(0.3, Generator(5)), options=opts)
        masks.append(extra["dropout_aux"])
    for m in masks[1:]:
        np.testing.assert_array_equal(m, masks[0])


def test_backward_is_the_mask_times_scale():
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((45, 13)), rng.standard_normal((13, 70))
    p = 0.4
    _, extra = fusemath.matmul(a, b, epilogue="relu+dropout+aux", dropout=(p, Generator(9)))
    mask = extra["dropout_aux"]
    ga, gb = rng.standard_normal((45, 13)), rng.standard_normal((13, 70))
    keep = _unpack(mask, 70)
    want = np.where(keep, (ga @ gb) / (1 - p), 0.0)
    d = fusemath.matmul(ga, gb, epilogue="ddropout", dropout=p, epilog_inputs={"dropout_aux": mask})
    np.testing.assert_allclose(d, want, rtol=1e-12, atol=1e-12)
    d2, extra2 = fusemath.matmul(ga, gb, epilogue="ddropout_bgrad", dropout=p, epilog_inputs={"dropout_aux": mask})
    np.testing.assert_allclose(d2, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(extra2["ddropout_bgrad"], want.sum(axis=0), rtol=1e-10, atol=1e-10)


def test_float16_cpu_dropout_and_ddropout():
    """float16 on the CPU (through float32, rounded once): dropout and ddropout against the float64
    reference (the scale rounded to float32, as the epilogue computes it); the chains with a second
    output are NotSupportedError naming the dtype and the chain."""
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((29, 40)).astype(np.float16), rng.standard_normal((40, 131)).astype(np.float16)
    p, s = 0.3, float(np.float32(1 / (1 - 0.3)))
    x = a.astype(np.float64) @ b.astype(np.float64)
    tol = 44 * 2.0 ** -24 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))) * s
    d = fusemath.matmul(a, b, epilogue="relu+dropout", dropout=(p, Generator(21).advance(7)))
    assert d.dtype == np.float16
    keep = (_words(21, 7, x.size).astype(np.uint64) >= _thr(p)).reshape(x.shape)
    want = np.where(keep, np.maximum(x, 0) * s, 0.0)
    assert np.all(np.abs(d.astype(np.float64) - want) <= tol + 2.0 ** -11 * np.abs(want) + 2.0 ** -24)
    assert np.all(d[~keep] == 0) and 0.6 < keep.mean() < 0.8
    mask = np.packbits(rng.random((29, 256)) < 0.5, axis=-1, bitorder="little")  # (29, 32) = relu mask rows
    bits = _unpack(mask, 131)
    g = fusemath.matmul(a, b, epilogue="ddropout", dropout=p, epilog_inputs={"dropout_aux": mask})
    want = np.where(bits, x * s, 0.0)
    assert g.dtype == np.float16
    assert np.all(np.abs(g.astype(np.float64) - want) <= tol + 2.0 ** -11 * np.abs(want) + 2.0 ** -24)
    assert np.all(g[~bits] == 0)
    with pytest.raises(fusemath.NotSupportedError, match="float16 with epilogue 'dropout\\+aux'"):
        fusemath.matmul(a, b, epilogue="dropout+aux", dropout=(p, Generator(21)))
    with pytest.raises(fusemath.NotSupportedError, match="float16 with epilogue 'ddropout\\+bgrad'"):
        fusemath.matmul(a, b, epilogue="ddropout_bgrad", dropout=p, epilog_inputs={"dropout_aux": mask})


def test_planner_draws_per_execute():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((30, 8)), rng.standard_normal((8, 40))
    g = Generator(21)
    mm = fusemath.Matmul(a, b).plan(epilogue="relu+dropout", dropout=(0.5, g))
    d1, d2 = mm.execute(), mm.execute()
    r1, _, _ = _reference(a, b, None, 0.5, 21, 0)
    r2, _, _ = _reference(a, b, None, 0.5, 21, d1.size)
    np.testing.assert_allclose(d1, r1, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(d2, r2, rtol=1e-12, atol=1e-12)
    assert g.state["position"] == 2 * d1.size
    out = np.empty((30, 40))
    assert mm.execute(out=out) is out
    mm.free()


def test_planner_dropout_follows_copied_operands_and_casts_out():
    """A DROPOUT plan's execute sees in-place changes to an operand that runs from a copy
    (big-endian here), as other plans' do, and casts into an out= of another dtype as they do."""
    a = np.arange(12.0, dtype=">f8").reshape(4, 3)
    b = np.ones((3, 5))
    mm = fusemath.Matmul(a, b).plan(epilogue="dropout", dropout=(0.0, Generator(3)))
    d1 = mm.execute().copy()
    a[...] = 2 * a
    np.testing.assert_array_equal(mm.execute(), 2 * d1)
    g = Generator(4)
    mm = fusemath.Matmul(np.asarray(a, np.float64), b).plan(epilogue="dropout", dropout=(0.5, g))
    out = np.empty((4, 5), np.float32)
    assert mm.execute(out=out) is out
    ref, _, _ = _reference(np.asarray(a, np.float64), b, None, 0.5, 4, 0, relu=False)
    np.testing.assert_array_equal(out, ref.astype(np.float32))
    assert g.state["position"] == out.size


def test_position_past_2_63_is_refused_and_does_not_advance():
    a, b = np.ones((4, 3)), np.ones((3, 5))
    g = Generator(1).advance((1 << 63) - 5)
    with pytest.raises(ValueError, match="dropout position"):
        fusemath.matmul(a, b, epilogue="dropout", dropout=(0.5, g))
    assert g.state["position"] == (1 << 63) - 5
    g = Generator(1).advance((1 << 63) - 21)  # the last of d's 20 words is 2^63 - 2
    fusemath.matmul(a, b, epilogue="dropout", dropout=(0.5, g))
    assert g.state["position"] == (1 << 63) - 1


def test_threads_sharing_a_generator_get_distinct_masks():
    a, b = np.ones((64, 1)), np.ones((1, 64))
    g = Generator(3)
    res = [None] * 8

    def work(i):
        res[i] = fusemath.matmul(a, b, epilogue="dropout", dropout=(0.5, g))

    ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert g.state["position"] == 8 * 64 * 64
    got = sorted(tuple((r != 0).ravel()) for r in res)
    want = sorted(tuple((_words(3, i * 4096, 4096) >= _thr(0.5))) for i in range(8))
    assert got == want


def test_pickled_generator_repeats_the_mask():
    a, b = np.ones((10, 1)), np.ones((1, 10))
    g = Generator(8)
    g.advance(3)
    g2 = pickle.loads(pickle.dumps(g))
    np.testing.assert_array_equal(fusemath.matmul(a, b, epilogue="dropout", dropout=(0.5, g)),
                                  fusemath.matmul(a, b, epilogue="dropout", dropout=(0.5, g2)))


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5, float("nan"), float("inf")])
def test_bad_probability(p):
    a = np.ones((2, 2))
    with pytest.raises(ValueError, match=r"dropout.*0 <= p < 1"):
        fusemath.matmul(a, a, epilogue="relu+dropout", dropout=(p, Generator(1)))
    with pytest.raises(ValueError, match="dropout"):
        fusemath.matmul(a, a, epilogue="ddropout", dropout=p,
                        epilog_inputs={"dropout_aux": np.zeros((2, 16), np.uint8)})


def test_bad_arguments():
    a = np.ones((2, 2))
    with pytest.raises(ValueError, match=r"needs dropout=\(p, generator\)"):
        fusemath.matmul(a, a, epilogue="relu+dropout")
    with pytest.raises(TypeError, match="fusemath.random.Generator"):
        fusemath.matmul(a, a, epilogue="relu+dropout", dropout=(0.5, None))
    with pytest.raises(TypeError, match="fusemath.random.Generator"):
        fusemath.matmul(a, a, epilogue="relu+dropout", dropout=(0.5, np.random.default_rng(0)))
    with pytest.raises(TypeError, match="dropout"):
        fusemath.matmul(a, a, epilogue="relu+dropout", dropout="half")
    with pytest.raises(TypeError, match="real number"):
        fusemath.matmul(a, a, epilogue="relu+dropout", dropout=("0.5", Generator(1)))
    with pytest.raises(ValueError, match="has no dropout"):
        fusemath.matmul(a, a, epilogue="relu", dropout=(0.5, Generator(1)))
    with pytest.raises(ValueError, match="has no dropout"):
        fusemath.matmul(a, a, dropout=0.5)
    with pytest.raises(fusemath.NotSupportedError, match="portable"):
        fusemath.matmul(a, a, epilogue="dropout", dropout=(0.5, Generator(1, mode="curand")))
    with pytest.raises(ValueError, match="dropout_aux"):
        fusemath.matmul(a, a, epilogue="ddropout", dropout=0.5)
    with pytest.raises(ValueError, match="takes no generator"):
        fusemath.matmul(a, a, epilogue="ddropout", dropout=(0.5, Generator(1)),
                        epilog_inputs={"dropout_aux": np.zeros((2, 16), np.uint8)})
    with pytest.raises(fusemath.NotSupportedError, match="dropout"):
        fusemath.matmul(a, a, epilogue="gelu+dropout+aux", dropout=(0.5, Generator(1)))
    with pytest.raises(TypeError, match="uint8"):
        fusemath.matmul(a, a, epilogue="ddropout", dropout=0.5, epilog_inputs={"dropout_aux": np.zeros((2, 2))})
    with pytest.raises(TypeError):
        fusemath.matmul(a.astype(np.complex128), a, epilogue="dropout", dropout=(0.5, Generator(1)))
    g = Generator(1)
    g.free()
    with pytest.raises(fusemath.InvalidStateError):
        fusemath.matmul(a, a, epilogue="dropout", dropout=(0.5, g))
    g = Generator(1)
    with pytest.raises(ValueError):  # a refused call leaves the generator where it was
        fusemath.matmul(a, np.ones((3, 2)), epilogue="dropout", dropout=(0.5, g))
    assert g.state["position"] == 0


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_gpu_mask_matches_cpu(dtype):
    """The keep mask (dropout+aux) bit for bit against the raw words and the CPU's bytes, padding
    included; relu+dropout+aux: AND the relu bit (which may differ only where the pre-activation
    is within rounding of 0); values against the float64 reference; ddropout on the GPU."""
    cp = pytest.importorskip("cupy")
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA device")
    except cp.cuda.runtime.CUDARuntimeError:
        pytest.skip("no CUDA device")
    rng = np.random.default_rng(6)
    host = dtype != "float16"  # the CPU has no float16 aux epilogues
    for (m, n, k) in ((37, 131, 19), (256, 1000, 64), (3, 5, 2)):
        a = rng.standard_normal((m, k)).astype(dtype)
        b = rng.standard_normal((k, n)).astype(dtype)
        bias = rng.standard_normal(n).astype(dtype)
        ga, gb, gbias = cp.asarray(a), cp.asarray(b), cp.asarray(bias)
        tol = 2e-2 if dtype == "float16" else _tol(np.dtype(dtype), k) * 4
        for p in (0.0, 0.3, 0.9):
            # the pure keep mask: exactly the words' on both devices
            dg, eg = fusemath.matmul(ga, gb, epilogue="dropout+aux", dropout=(p, Generator(99).advance(5)))
            mask_g = cp.asnumpy(eg["dropout_aux"])
            ref, keep, pre = _reference(a, b, None, p, 99, 5, relu=False)
            np.testing.assert_array_equal(_unpack(mask_g, n), keep)
            if host:
                _, ec = fusemath.matmul(a, b, epilogue="dropout+aux", dropout=(p, Generator(99).advance(5)))
                np.testing.assert_array_equal(mask_g, ec["dropout_aux"])  # padding bytes too
            np.testing.assert_allclose(cp.asnumpy(dg).astype(np.float64), ref, rtol=tol, atol=tol)
            assert np.all(cp.asnumpy(dg)[~keep] == 0)
            # bias+relu+dropout+aux: relu bit AND keep
            dr, er = fusemath.matmul(ga, gb, bias=gbias, epilogue="relu+dropout+aux",
                                     dropout=(p, Generator(99).advance(5)))
            ref, keep, pre = _reference(a, b, bias, p, 99, 5)
            x = np.matmul(a.astype(np.float64), b.astype(np.float64)) + bias
            bits = _unpack(cp.asnumpy(er["dropout_aux"]), n)
            differ = bits != (keep & pre)
            assert not np.any(differ & ~(keep & (np.abs(x) <= 4 * tol * (1 + np.abs(x)))))
            np.testing.assert_allclose(cp.asnumpy(dr).astype(np.float64), ref, rtol=tol, atol=tol)
            assert np.all(cp.asnumpy(dr)[~keep] == 0)
            # without aux: the same zeros
            dn = fusemath.matmul(ga, gb, bias=gbias, epilogue="relu+dropout", dropout=(p, Generator(99).advance(5)))
            np.testing.assert_array_equal(cp.asnumpy(dn) == 0, cp.asnumpy(dr) == 0)
            # the backward with the GPU's mask
            gd = fusemath.matmul(ga, gb, epilogue="ddropout", dropout=p, epilog_inputs={"dropout_aux": er["dropout_aux"]})
            want = np.where(bits, np.matmul(a.astype(np.float64), b.astype(np.float64)) / (1 - p), 0.0)
            np.testing.assert_allclose(cp.asnumpy(gd).astype(np.float64), want, rtol=tol, atol=tol)
