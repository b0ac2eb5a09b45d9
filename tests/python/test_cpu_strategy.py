"""The CPU strategy option: every strategy gives the float64 reference, bad names are refused."""
import numpy as np
import pytest

import fusemath
from mmref import assert_close, make, reference, unpack_relu_mask


@pytest.mark.parametrize("strategy", ["auto", "tiles", "blas_threads"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("epilogue,act", [("bias+relu", "relu"), ("bias+gelu", "gelu"), ("bias", None)])
def test_strategies_match_reference(rng, strategy, dtype, epilogue, act):
    a = make(rng, (130, 70), dtype)
    b = make(rng, (70, 260), dtype)
    bias = make(rng, (260,), dtype)
    opts = fusemath.MatmulOptions(cpu_strategy=strategy, num_threads=2)
    with fusemath.Matmul(a, b, options=opts) as mm:
        mm.plan(epilogue=epilogue, bias=bias)
        if strategy == "blas_threads":
            assert "blas_threads=" in mm.describe()
        # cblas is the openblas backend; auto may give the product to the own kernel (gemmkernel)
        assert mm.backend == ("gemmkernel" if " kernel=" in mm.describe() else "openblas"), mm.describe()
        assert strategy == "auto" or mm.backend == "openblas", mm.describe()
        assert mm.describe().startswith(f"matmul cpu/{mm.backend} "), mm.describe()
        _, ref, scale = reference(a, b, bias=bias, act=act)
        assert_close(mm.execute(), ref, scale, dtype, 70)
    d = fusemath.matmul(a, b, bias=bias, epilogue=epilogue, options={"cpu_strategy": strategy})
    assert_close(d, ref, scale, dtype, 70)


@pytest.mark.parametrize("bad", ["fast", "", 2, None])
def test_unknown_strategy_is_refused(rng, bad):
    a = make(rng, (4, 3), np.float32)
    b = make(rng, (3, 5), np.float32)
    with pytest.raises(ValueError, match="cpu_strategy"):
        fusemath.matmul(a, b, options={"cpu_strategy": bad})


@pytest.mark.parametrize("m,rows", [(10000, 125), (8192, 128)])
def test_panels_shared_evenly_over_the_threads(rng, m, rows):
    """Memory-bound products are cut into row panels shared out statically over the threads:
    a panel count that is not a multiple of the threads is spread over the next one (10000 rows
    on 16 threads: 80 panels of 125, not 65 of 156 with one thread doing a fifth); the result
    against the float64 reference."""
    a = make(rng, (m, 64), np.float32)
    b = make(rng, (64, 256), np.float32)
    bias = make(rng, (256,), np.float32)
    with fusemath.Matmul(a, b, options=fusemath.MatmulOptions(num_threads=16)) as mm:
        mm.plan(epilogue="bias+relu", bias=bias)
        assert f"panel={rows}x256 threads=16" in mm.describe(), mm.describe()
        _, ref, scale = reference(a, b, bias=bias, act="relu")
        assert_close(mm.execute(), ref, scale, np.float32, 64)



@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_blas_threads_folds_bias_into_the_activation_pass(rng, dtype):
    """cpu_strategy='blas_threads' with bias + relu and no C: the GEMM runs with beta = 0 and one
    pass adds the bias and activates, in row blocks of 64 KiB (a few rows when n is wide), so
    describe() counts 2 passes; D and the relu mask match the tiles plan and the float64 reference."""
    a = make(rng, (37, 16), dtype)
    b = make(rng, (16, 2048), dtype)
    bias = make(rng, (2048,), dtype)
    outs = {}
    for strategy in ("blas_threads", "tiles"):
        with fusemath.Matmul(a, b, options=fusemath.MatmulOptions(cpu_strategy=strategy, num_threads=2)) as mm:
            mm.plan(epilogue="relu_aux", bias=bias)
            if strategy == "blas_threads":
                assert "passes=2 blas_threads=" in mm.describe(), mm.describe()
            outs[strategy] = mm.execute()
    pre, ref, scale = reference(a, b, bias=bias)
    assert_close(outs["blas_threads"][0], np.maximum(ref, 0), scale, dtype, 16)
    mask = outs["blas_threads"][1]["relu_aux"]
    np.testing.assert_array_equal(mask, outs["tiles"][1]["relu_aux"])
    bits = np.unpackbits(mask, axis=1, bitorder="little")[:, :2048].astype(bool)
    clear = np.abs(ref) > 1e-3 * np.abs(ref).max()  # signs that rounding cannot flip
    np.testing.assert_array_equal(bits[clear], (ref > 0)[clear])


def wide_of(x):
    return np.asarray(x, np.float64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dynamic_tiles_match_reference(rng, dtype):
    """Compute-bound products with room for four tiles of >= 256 x 256 per thread hand the
    tiles out dynamically (describe() says tiles=dynamic): bias + relu with its mask, beta * C
    with C = D's memory (per-thread scratch panels), and drelu + bgrad (per-panel column sums,
    reduced in panel order) against the float64 reference; the same plan twice gives the same
    bias gradient bit for bit whichever thread ran which tile."""
    m, k, n = 1024, 256, 1024
    a, b = make(rng, (m, k), dtype), make(rng, (k, n), dtype)
    bias = make(rng, (n,), dtype)
    opts = fusemath.MatmulOptions(num_threads=4, cpu_strategy="tiles")  # auto may pick the own kernel
    with fusemath.Matmul(a, b, options=opts) as mm:
        mm.plan(epilogue="relu_aux", bias=bias)
        assert "panel=256x256 threads=4 tiles=dynamic" in mm.describe(), mm.describe()
        d, aux = mm.execute()
    pre, ref, scale = reference(a, b, bias=bias)
    assert_close(d, np.maximum(ref, 0), scale, dtype, k)
    np.testing.assert_array_equal(unpack_relu_mask(aux["relu_aux"], n), (d > 0))

    c = make(rng, (m, n), dtype)
    want_c, ref_c, scale_c = reference(a, b, c=c.copy(), alpha=0.5, beta=2.0, bias=bias, act="gelu")
    with fusemath.Matmul(a, b, c, alpha=0.5, beta=2.0, options=opts) as mm:
        mm.plan(epilogue="bias+gelu", bias=bias)
        assert "tiles=dynamic" in mm.describe(), mm.describe()
        got = mm.execute(out=c)  # D is C's memory
    assert got is c
    assert_close(c, ref_c, scale_c, dtype, k)

    # a per-column scale with C = D's memory: each GEMM goes to its thread's scratch panel first
    c2 = make(rng, (m, n), dtype)
    sc = make(rng, (n,), dtype)
    ref_s = (wide_of(a) @ wide_of(b)) * wide_of(sc) + 2.0 * wide_of(c2) + wide_of(bias)
    scale_s = (np.abs(wide_of(a)) @ np.abs(wide_of(b))) * np.abs(wide_of(sc)) + 2 * np.abs(wide_of(c2))
    with fusemath.Matmul(a, b, c2, beta=2.0, options=opts) as mm:
        mm.plan(epilogue="bias", bias=bias, epilog_inputs={"scale": sc})
        assert "tiles=dynamic" in mm.describe(), mm.describe()
        assert mm.execute(out=c2) is c2
    assert_close(c2, ref_s, scale_s, dtype, k)

    mask = np.packbits(rng.random((m, n)) > 0.5, axis=-1, bitorder="little")
    with fusemath.Matmul(a, b, options=opts) as mm:
        mm.plan(epilogue="drelu+bgrad", epilog_inputs={"relu_aux": mask})
        assert "tiles=dynamic" in mm.describe(), mm.describe()
        d1, g1 = mm.execute()
        d2, g2 = mm.execute()
    keep = unpack_relu_mask(mask, n)
    _, ref_d, scale_d = reference(a, b)
    assert_close(d1, np.where(keep, ref_d, 0), scale_d, dtype, k)
    assert_close(g1["drelu_bgrad"], np.where(keep, ref_d, 0).sum(axis=0), np.abs(scale_d).sum(axis=0), dtype, k + m)
    np.testing.assert_array_equal(g1["drelu_bgrad"], g2["drelu_bgrad"])
    np.testing.assert_array_equal(d1, d2)
