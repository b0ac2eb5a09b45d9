"""The CPU strategy option: every strategy gives the float64 reference, bad names are refused."""
import numpy as np
import pytest

import fusemath
from mmref import assert_close, make, reference


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


def test_auto_threads_big_products_through_blas_only_on_the_pool(rng):
    """With an OpenBLAS that hands its threads to fusemath's pool (scipy-openblas's threads
    callback: describe() says on_pool), the heuristic lets OpenBLAS thread big compute-bound
    products and folds bias + activation into one pass after it; with the system OpenBLAS it
    keeps the tiles. Skinny products stay on tiles either way. Results against float64."""
    a = make(rng, (600, 520), np.float64)
    b = make(rng, (520, 610), np.float64)
    bias = make(rng, (610,), np.float64)
    with fusemath.Matmul(a, b, options=fusemath.MatmulOptions(cpu_strategy="blas_threads", num_threads=2)) as mm:
        mm.plan(epilogue="bias+relu", bias=bias)
        on_pool = " on_pool " in mm.describe()
    _, ref, scale = reference(a, b, bias=bias, act="relu")
    with fusemath.Matmul(a, b, options=fusemath.MatmulOptions(num_threads=2)) as mm:
        mm.plan(epilogue="bias+relu", bias=bias)
        desc = mm.describe()
        assert ("blas_threads=600x610 on_pool" in desc) == on_pool, desc
        assert ("passes=2 " if on_pool else "passes=1 ") in desc, desc
        assert_close(mm.execute(), ref, scale, np.float64, 520)
    s = make(rng, (4096, 64), np.float64)
    t = make(rng, (64, 512), np.float64)
    with fusemath.Matmul(s, t, options=fusemath.MatmulOptions(num_threads=2)) as mm:
        mm.plan(epilogue="bias+relu", bias=bias[:512])
        assert "panel=" in mm.describe(), mm.describe()
