"""GPU tests: the same problems with execution="cuda", checked against the NumPy reference.
Marked gpu: skipped (see conftest.py) when fusemath.cuda_device_count() == 0."""
import numpy as np
import pytest

import fusemath
from mmref import assert_close, make, reference, tolerance, unpack_relu_mask

pytestmark = pytest.mark.gpu


def _has_cuda_matmul_backend():
    return any(b.device == "cuda" and b.available for b in fusemath.backends())


# The cuBLASLt matmul backend arrives with the GPU matmul issue; until a cuda backend is
# registered, these tests have nothing to run against and say so instead of failing.
needs_cuda_matmul = pytest.mark.skipif(not _has_cuda_matmul_backend(),
                                       reason="no cuda matmul backend registered yet (GPU matmul issue)")


def test_gpu_is_detected():
    # Marked gpu: runs only where a GPU is visible, and then the library must see it too.
    assert fusemath.cuda_device_count() >= 1


@pytest.mark.skipif(_has_cuda_matmul_backend(), reason="a cuda matmul backend exists")
def test_cuda_execution_without_backend_is_a_clear_error(rng):
    a = make(rng, (8, 4), np.float32)
    b = make(rng, (4, 5), np.float32)
    with pytest.raises(fusemath.NotSupportedError, match="cuda"):
        fusemath.matmul(a, b, execution="cuda")


@needs_cuda_matmul
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_cuda_execution_matches_reference(rng, dtype):
    a = make(rng, (3, 65, 33), dtype, "T")
    b = make(rng, (33, 47), dtype)
    c = make(rng, (65, 47), dtype)
    d = fusemath.matmul(a, b, c, alpha=0.5, beta=2.0, execution="cuda")
    _, ref, scale = reference(a, b, c, alpha=0.5, beta=2.0)
    assert_close(d, ref, scale, dtype, 33)


@needs_cuda_matmul
def test_cuda_float16(rng):
    a = make(rng, (64, 32), np.float16)
    b = make(rng, (32, 48), np.float16)
    d = fusemath.matmul(a, b, execution="cuda")
    assert d.dtype == np.float16
    _, ref, scale = reference(a, b)
    assert_close(d, ref, scale, np.float16, 32)


@needs_cuda_matmul
@pytest.mark.parametrize("epilogue,act", [("bias+relu", "relu"), ("bias+gelu", "gelu"),
                                          ("RELU_AUX_BIAS", "relu"), ("GELU_AUX_BIAS", "gelu")])
def test_cuda_epilogues_match_cpu_semantics(rng, epilogue, act):
    a = make(rng, (96, 40), np.float32)
    b = make(rng, (40, 200), np.float32)
    bias = make(rng, (200,), np.float32)
    result = fusemath.matmul(a, b, bias=bias, epilogue=epilogue, execution="cuda")
    pre, ref, scale = reference(a, b, bias=bias, act=act)
    if "AUX" in epilogue:
        d, aux = result
        if act == "relu":
            sure = np.abs(pre) > 2 * tolerance(np.float32, 40, scale, pre)
            np.testing.assert_array_equal(unpack_relu_mask(aux["relu_aux"], 200)[sure], (pre > 0)[sure])
        else:
            assert_close(aux["gelu_aux"], pre, scale, np.float32, 40, what="gelu aux")
    else:
        d = result
    assert_close(d, ref, scale, np.float32, 40)


@needs_cuda_matmul
def test_cuda_planned_matmul(rng):
    a = make(rng, (128, 64), np.float32)
    b = make(rng, (64, 32), np.float32)
    with fusemath.Matmul(a, b, options={"execution": "cuda"}) as mm:
        mm.plan(epilogue="relu")
        assert "cuda" in mm.describe()
        for _ in range(3):
            _, ref, scale = reference(a, b, act="relu")
            assert_close(mm.execute(), ref, scale, np.float32, 64)
