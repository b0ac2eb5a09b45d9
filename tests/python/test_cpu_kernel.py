"""fusemath's own small-k GEMM kernel (cpu_strategy="kernel", auto for k <= 384 and on AVX-512): results
against the float64 reference in every layout, forward epilogue, with beta*C (also in place)
and batched B, answers that do not
depend on the threads or the panels, NaN/inf as the cblas tiles give them, and clear
refusals of what it does not compute. It is the "gemmkernel" backend, offered before "openblas":
FUSEMATH_BACKEND forces either, FUSEMATH_LOG=plan says why it declines, autotune times both
backends' candidates; FUSEMATH_CPU_KERNEL(_KC) are read when a context is created (so in a fresh
process here)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import fusemath
from mmref import LAYOUTS, MAX_SLOPE, activation, assert_close, make, reference, unpack_relu_mask

KERNEL = fusemath.MatmulOptions(cpu_strategy="kernel", num_threads=2)


def _variant():
    """The kernel variant this CPU runs ("avx512", "avx2" or "generic"): auto never takes generic."""
    with fusemath.Matmul(np.ones((4, 4), np.float32), np.ones((4, 4), np.float32), options=KERNEL) as mm:
        mm.plan()
        return mm.describe().split(" kernel=")[1].split()[0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("la", LAYOUTS)
@pytest.mark.parametrize("lb", LAYOUTS)
@pytest.mark.parametrize("m,n,k", [(37, 45, 13), (9, 100, 1), (130, 33, 70)])
def test_layouts_match_reference(rng, dtype, la, lb, m, n, k):
    """A is read through its strides and B packed from its strides: no copy of either."""
    a = make(rng, (m, k), dtype, la)
    b = make(rng, (k, n), dtype, lb)
    bias = make(rng, (n,), dtype, "strided")
    with fusemath.Matmul(a, b, alpha=-0.5, options=KERNEL) as mm:
        mm.plan(epilogue="bias+relu", bias=bias)
        assert " kernel=" in mm.describe() and "copies=a" not in mm.describe(), mm.describe()
        _, ref, scale = reference(a, b, alpha=-0.5, bias=bias, act="relu")
        assert_close(mm.execute(), ref, scale, dtype, k)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("act", ["relu", "gelu", "sigmoid", "tanh", "silu", None])
@pytest.mark.parametrize("with_bias", [True, False])
def test_forward_epilogues_match_reference(rng, dtype, act, with_bias):
    m, n, k = 203, 290, 64  # n: nine strips of 32 and a partial one
    a, b = make(rng, (m, k), dtype), make(rng, (k, n), dtype)
    bias = make(rng, (n,), dtype) if with_bias else None
    words = (["bias"] if with_bias else []) + ([act] if act else [])
    epilogue = "+".join(words) or None
    d = fusemath.matmul(a, b, bias=bias, epilogue=epilogue, options=KERNEL)
    _, pre, scale = reference(a, b, bias=bias)
    ref = activation(act, pre) if act else pre
    assert_close(d, ref, scale * MAX_SLOPE[act], dtype, k)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_aux_outputs(rng, dtype):
    """relu's mask and gelu's input come from the slab pass after the kernel."""
    m, n, k = 70, 301, 40
    a, b, bias = make(rng, (m, k), dtype), make(rng, (k, n), dtype), make(rng, (n,), dtype)
    pre, ref, scale = reference(a, b, bias=bias, act="relu")
    with fusemath.Matmul(a, b, options=KERNEL) as mm:
        mm.plan(epilogue="relu_aux_bias", bias=bias)
        d, aux = mm.execute()
        mask = aux["relu_aux"]
        assert_close(d, ref, scale, dtype, k)
        clear = np.abs(pre) > 1e-3 * scale
        assert np.array_equal(unpack_relu_mask(mask, n)[clear], (pre > 0)[clear])
    with fusemath.Matmul(a, b, options=KERNEL) as mm:
        mm.plan(epilogue="gelu_aux_bias", bias=bias)
        d, aux = mm.execute()
        assert_close(aux["gelu_aux"], pre, scale, dtype, k, "gelu input")
        assert_close(d, activation("gelu", pre), scale * MAX_SLOPE["gelu"], dtype, k)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batched_with_one_b(rng, dtype):
    """A batched, B shared (2-D): one packed B for every batch; the bias per batch entry."""
    a = make(rng, (3, 2, 41, 30), dtype)
    b = make(rng, (30, 77), dtype, "T")
    bias = make(rng, (3, 2, 77), dtype)
    with fusemath.Matmul(a, b, options=KERNEL) as mm:
        mm.plan(epilogue="bias+gelu", bias=bias)
        assert "b=packed" in mm.describe(), mm.describe()
        d = mm.execute()
    _, ref, scale = reference(a, b, bias=bias[..., None, :], act="gelu")
    assert_close(d, ref, scale * MAX_SLOPE["gelu"], dtype, 30)


def test_answer_does_not_depend_on_threads_or_panels(rng):
    """Every element is summed over k in order by one thread: bit-identical for any split."""
    a, b, bias = make(rng, (1000, 96), np.float32), make(rng, (96, 200), np.float32), make(rng, (200,), np.float32)
    outs = []
    for threads, panel in [(1, 0), (2, 0), (3, 16), (2, 1000), (4, 7)]:
        opts = fusemath.MatmulOptions(cpu_strategy="kernel", num_threads=threads, panel_rows=panel)
        outs.append(fusemath.matmul(a, b, bias=bias, epilogue="bias+relu", options=opts))
    for o in outs[1:]:
        assert np.array_equal(o, outs[0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nan_and_inf_as_the_tiles_give_them(rng, dtype):
    """relu(NaN) = 0 and inf * 0 = NaN in both strategies: the same answers, bit for bit in
    where NaN and inf stand."""
    a, b, bias = make(rng, (40, 16), dtype), make(rng, (16, 50), dtype), make(rng, (50,), dtype)
    a[3, 5] = np.nan
    a[7, :] = np.inf
    b[:, 9] = 0  # inf * 0 in row 7, column 9
    a[11, 2] = -np.inf
    for epilogue in ("bias+relu", "bias"):
        got = fusemath.matmul(a, b, bias=bias, epilogue=epilogue, options=KERNEL)
        want = fusemath.matmul(a, b, bias=bias, epilogue=epilogue, options={"cpu_strategy": "tiles"})
        assert np.array_equal(np.isnan(got), np.isnan(want)), epilogue
        assert np.array_equal(np.isinf(got), np.isinf(want)), epilogue
        fin = np.isfinite(want)
        _, ref, scale = reference(np.nan_to_num(a, posinf=0, neginf=0, nan=0), b, bias=bias,
                                  act="relu" if "relu" in epilogue else None)
        rows_clean = np.ones(40, bool)
        rows_clean[[3, 7, 11]] = False
        assert_close(got[rows_clean], ref[rows_clean], scale[rows_clean], dtype, 16)
        assert np.isfinite(got[rows_clean]).all() and fin[rows_clean].all()
    relu = fusemath.matmul(a, b, bias=bias, epilogue="bias+relu", options=KERNEL)
    assert (relu[3] == 0).all()  # NaN row: relu gives 0, as max(x, 0) with x > 0 false


def test_auto_picks_it_for_one_k_block_and_on_avx512(rng):
    """k <= 384 (one k block): always the kernel. Longer k: the kernel only where its variant
    measured at OpenBLAS's speed there (AVX-512), else cblas tiles."""
    variant = _variant()
    vector, avx512 = variant != "generic", variant == "avx512"
    a32 = make(rng, (512, 64), np.float32)
    with fusemath.Matmul(a32, make(rng, (64, 256), np.float32)) as mm:
        mm.plan(epilogue="relu")
        assert (" kernel=" in mm.describe()) == vector, mm.describe()
    with fusemath.Matmul(make(rng, (512, 384), np.float32), make(rng, (384, 256), np.float32)) as mm:
        mm.plan(epilogue="relu")
        assert (" kernel=" in mm.describe()) == vector and " kc=" not in mm.describe(), mm.describe()
    with fusemath.Matmul(make(rng, (512, 385), np.float32), make(rng, (385, 256), np.float32)) as mm:
        mm.plan(epilogue="relu")
        assert (" kernel=" in mm.describe()) == avx512, mm.describe()
    with fusemath.Matmul(make(rng, (64, 8), np.complex64), make(rng, (8, 64), np.complex64)) as mm:
        mm.plan()
        assert " kernel=" not in mm.describe()
    with fusemath.Matmul(a32, make(rng, (64, 256), np.float32), options={"cpu_strategy": "tiles"}) as mm:
        mm.plan(epilogue="relu")
        assert " kernel=" not in mm.describe()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("lc", ["C", "F", "strided"])
@pytest.mark.parametrize("act", ["relu", "gelu"])
def test_beta_c(rng, dtype, lc, act):
    """beta*C is added in registers (C read through its strides), before bias and activation."""
    m, n, k = 77, 100, 24
    a, b, bias = make(rng, (m, k), dtype), make(rng, (k, n), dtype), make(rng, (n,), dtype)
    c = make(rng, (m, n), dtype, lc)
    with fusemath.Matmul(a, b, c, alpha=1.5, beta=-0.75, options=KERNEL) as mm:
        mm.plan(epilogue=f"bias+{act}", bias=bias)
        assert " kernel=" in mm.describe()
        _, ref, scale = reference(a, b, c, alpha=1.5, beta=-0.75, bias=bias, act=act)
        assert_close(mm.execute(), ref, scale * MAX_SLOPE[act], dtype, k)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_beta_c_in_place(rng, dtype):
    """D is C's memory: each block of C is read before that block of D is stored."""
    m, n, k = 150, 70, 33
    a, b, bias = make(rng, (m, k), dtype), make(rng, (k, n), dtype), make(rng, (n,), dtype)
    c = make(rng, (m, n), dtype)
    _, ref, scale = reference(a, b, c, beta=0.5, bias=bias, act="relu")
    with fusemath.Matmul(a, b, c, beta=0.5, options=KERNEL) as mm:
        mm.plan(epilogue="bias+relu", bias=bias)
        got = mm.execute(out=c)
        assert got is c
    assert_close(c, ref, scale, dtype, k)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batched_with_b_per_batch(rng, dtype):
    """One packed B per batch entry, B transposed in memory."""
    a = make(rng, (4, 53, 20), dtype, "strided")
    b = make(rng, (4, 20, 45), dtype, "T")
    bias = make(rng, (45,), dtype)
    with fusemath.Matmul(a, b, options=KERNEL) as mm:
        mm.plan(epilogue="bias+relu", bias=bias)
        assert "b=per_item" in mm.describe(), mm.describe()
        d = mm.execute()
    _, ref, scale = reference(a, b, bias=bias, act="relu")
    assert_close(d, ref, scale, dtype, 20)


@pytest.mark.parametrize("case,match", [
    ("complex", "f32 and f64 only"),
    ("dgelu", "backward activation"),
    ("alpha0", "alpha != 0"),
])
def test_forced_kernel_refuses_with_a_reason(rng, case, match):
    dtype = np.complex64 if case == "complex" else np.float32
    a, b = make(rng, (6, 4), dtype), make(rng, (4, 5), dtype)
    kw, plan_kw = {}, {}
    if case == "alpha0":
        kw = {"alpha": 0.0}
    if case == "dgelu":
        plan_kw = {"epilog": "DGELU", "epilog_inputs": {"gelu_aux": make(rng, (6, 5), dtype)}}
    with fusemath.Matmul(a, b, options={"cpu_strategy": "kernel"}, **kw) as mm:
        with pytest.raises(fusemath.NotSupportedError, match=f"cpu_strategy 'kernel'.*{match}"):
            mm.plan(**plan_kw)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [385, 777])
def test_long_k_in_blocks(rng, dtype, k):
    """k > 384 is summed in blocks of 256: beta*C (here D's own memory) joins the first block,
    bias and relu the last, and the compute-bound tiles are handed out dynamically."""
    m, n = 300, 520
    a, b, bias = make(rng, (m, k), dtype, "F"), make(rng, (k, n), dtype), make(rng, (n,), dtype)
    c = make(rng, (m, n), dtype)
    _, ref, scale = reference(a, b, c, alpha=0.5, beta=-2.0, bias=bias, act="relu")
    opts = fusemath.MatmulOptions(cpu_strategy="kernel", num_threads=3)
    with fusemath.Matmul(a, b, c, alpha=0.5, beta=-2.0, options=opts) as mm:
        mm.plan(epilogue="bias+relu", bias=bias)
        assert "tiles=dynamic" in mm.describe() and "kc=256" in mm.describe(), mm.describe()
        mm.execute(out=c)
    assert_close(c, ref, scale, dtype, k)
    _, ref, scale = reference(a, b, bias=bias, act="gelu")
    with fusemath.Matmul(a, b, options=opts) as mm:
        mm.plan(epilogue="gelu_aux_bias", bias=bias)
        d, aux = mm.execute()
    assert_close(d, ref, scale * MAX_SLOPE["gelu"], dtype, k)
    assert_close(aux["gelu_aux"], _, scale, dtype, k, "gelu input")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias_layout", ["C", "strided", None])
@pytest.mark.parametrize("batched_b", [False, True])
def test_small_b_read_in_place(rng, dtype, bias_layout, batched_b):
    """A small row-major B whose width is a multiple of the strip (64 columns) is read in place
    (describe: b=direct), rows padded, a batch of them too; with a unit-stride or a strided
    (packed) bias."""
    k, n = 24, 64
    a = make(rng, (3, 45, k), dtype)
    base = make(rng, ((3,) if batched_b else ()) + (k, n + 7), dtype)
    b = base[..., :n]  # row stride n + 7, unit column stride
    bias = None if bias_layout is None else make(rng, (n,), dtype, bias_layout)
    epilogue = "relu" if bias is None else "bias+relu"
    with fusemath.Matmul(a, b, options=KERNEL) as mm:
        mm.plan(epilogue=epilogue, bias=bias)
        assert "b=direct" in mm.describe(), mm.describe()
        d = mm.execute()
    _, ref, scale = reference(a, b, bias=bias, act="relu")
    assert_close(d, ref, scale, dtype, k)


@pytest.mark.parametrize("shape,kernel", [
    ((None, 32, 512, 64), False),   # packing B over 32 rows does not pay: cblas tiles
    ((None, 64, 512, 64), True),
    ((4, 16, 512, 64), True),       # one B for the batch: packed once over 4 x 16 rows
    (("b", 64, 512, 64), True),     # a B per batch entry, 64 KiB: packed per item
    (("b", 64, 2048, 128), False),  # ... 1 MiB per item: cblas tiles
    ((None, 8, 64, 64), True),      # 16 KiB B read in place: no packing to pay for
])
def test_auto_packs_b_only_where_it_pays(rng, shape, kernel):
    batch, m, n, k = shape
    a = make(rng, ((4,) if batch else ()) + (m, k), np.float32)
    b = make(rng, ((4,) if batch == "b" else ()) + (k, n), np.float32)
    vector = _variant() != "generic"
    with fusemath.Matmul(a, b) as mm:
        mm.plan(epilogue="relu")
        assert (" kernel=" in mm.describe()) == (kernel and vector), mm.describe()
        _, ref, scale = reference(a, b, act="relu")
        assert_close(mm.execute(), ref, scale, np.float32, k)


def _run(code, **env):
    """code in a fresh process (the variables are read when its context is created): stdout, stderr."""
    full = dict(os.environ, **env)
    r = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout, r.stderr


_DESCRIBE = """
import sys
import numpy as np, fusemath
m, n, k, strategy = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
a, b = np.ones((m, k), np.float32), np.ones((k, n), np.float32)
with fusemath.Matmul(a, b, options={"cpu_strategy": strategy}) as mm:
    try:
        mm.plan(epilogue="relu")
        print(mm.backend, "|", mm.describe())
        assert np.array_equal(mm.execute(), np.full((m, n), k, np.float32))
    except fusemath.NotSupportedError as e:
        print("refused |", e)
"""


def _describe(m, n, k, strategy="auto", **env):
    full = dict(os.environ, **env)
    r = subprocess.run([sys.executable, "-c", _DESCRIBE, str(m), str(n), str(k), strategy], env=full,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    backend, text = r.stdout.strip().split(" | ", 1)
    return backend, text, r.stderr


def test_backend_name_in_describe(rng):
    """Kernel plans are the gemmkernel backend's ("matmul cpu/gemmkernel ..."), cblas plans openblas's."""
    vector = _variant() != "generic"
    a, b = make(rng, (130, 64), np.float32), make(rng, (64, 257), np.float32)
    for strategy, backend in [("kernel", "gemmkernel"), ("tiles", "openblas"), ("blas_threads", "openblas"),
                              ("auto", "gemmkernel" if vector else "openblas")]:
        with fusemath.Matmul(a, b, options=fusemath.MatmulOptions(cpu_strategy=strategy, num_threads=2)) as mm:
            mm.plan(epilogue="relu")
            assert mm.backend == backend and mm.describe().startswith(f"matmul cpu/{backend} f32 "), mm.describe()
            assert (" kernel=" in mm.describe()) == (backend == "gemmkernel"), mm.describe()
            _, ref, scale = reference(a, b, act="relu")
            assert_close(mm.execute(), ref, scale, np.float32, 64)


def test_settings_are_read_at_context_creation():
    """FUSEMATH_CPU_KERNEL caps the variant, FUSEMATH_CPU_KERNEL_KC sets the k block: both taken by the
    context when it is created (here: a fresh process)."""
    backend, text, _ = _describe(40, 64, 700, "kernel", FUSEMATH_CPU_KERNEL="generic", FUSEMATH_CPU_KERNEL_KC="7")
    assert backend == "gemmkernel" and "kernel=generic" in text and " kc=7" in text, text
    backend, text, _ = _describe(40, 64, 700, "kernel", FUSEMATH_CPU_KERNEL_KC="0")
    assert backend == "gemmkernel" and " kc=" not in text, text
    backend, text, _ = _describe(40, 64, 700, "kernel", FUSEMATH_CPU_KERNEL_KC="junk")
    assert " kc=256" in text, text


def test_forced_backends_and_the_plan_log():
    """FUSEMATH_BACKEND=openblas: OpenBLAS only, never the kernel; =gemmkernel: the kernel only, by the
    same rules (what auto leaves to cblas is refused with the kernel's reason, which FUSEMATH_LOG=plan
    shows when openblas takes the product)."""
    vector = _variant() != "generic"
    backend, text, _ = _describe(130, 257, 64, FUSEMATH_BACKEND="openblas")
    assert backend == "openblas" and " kernel=" not in text, text
    backend, text, _ = _describe(130, 257, 64, "kernel", FUSEMATH_BACKEND="openblas")
    assert backend == "refused" and "openblas: cpu_strategy 'kernel'" in text, text
    backend, text, _ = _describe(130, 257, 64, FUSEMATH_BACKEND="gemmkernel")
    assert backend == ("gemmkernel" if vector else "refused"), text
    backend, text, _ = _describe(32, 512, 64, FUSEMATH_BACKEND="gemmkernel")
    assert backend == "refused" and "gemmkernel: auto leaves 32 rows to cblas" in text, text
    backend, text, _ = _describe(32, 512, 64, "kernel", FUSEMATH_BACKEND="gemmkernel")
    assert backend == "gemmkernel", text
    backend, text, log = _describe(32, 512, 64, FUSEMATH_LOG="plan")
    assert backend == "openblas", text
    assert "matmul/gemmkernel: not applicable: auto leaves 32 rows to cblas" in log, log


_AUTO_F64 = """
import numpy as np, fusemath
out = [fusemath.blas_info()]
for k in (512, 2048):
    with fusemath.Matmul(np.ones((256, k)), np.ones((k, 256)), options={"num_threads": 2}) as mm:
        mm.plan(epilogue="relu")
        out.append(mm.backend)
print("|".join(out))
"""


@pytest.mark.parametrize("blas", ["auto", "system"])
def test_auto_f64_large_k_goes_to_a_good_blas(blas):
    """auto's f64 choice (measured on the H200 host at 2 threads, docs/design.md): the AVX-512
    kernel up to k = 1024, cblas beyond, where OpenBLAS knows the CPU; every k to the kernel while
    the chosen OpenBLAS runs its generic kernels (3x slower)."""
    if _variant() != "avx512":
        pytest.skip("the f64 rule is the AVX-512 variant's")
    info, at512, at2048 = _run(_AUTO_F64, FUSEMATH_BLAS=blas)[0].strip().split("|")
    assert at512 == "gemmkernel", info
    generic = "generic kernels" in info and "offered" not in info
    assert at2048 == ("gemmkernel" if generic else "openblas"), info


def test_forced_kernel_stops_planning():
    """cpu_strategy='kernel' on a product it does not compute: the gemmkernel backend's error ends the
    planning (openblas is never asked)."""
    code = """
import numpy as np, fusemath
a = np.ones((6, 4), np.complex64)
try:
    fusemath.matmul(a, a.T.copy(), options={"cpu_strategy": "kernel"})
except fusemath.NotSupportedError as e:
    print(e)
"""
    out, log = _run(code, FUSEMATH_LOG="plan")
    assert out.startswith("fusemath.matmul: gemmkernel: cpu_strategy 'kernel'") and "openblas" not in out, out
    assert "matmul/openblas" not in log, log


def test_autotune_times_both_backends():
    """Autotune's candidates: the cblas tiles from openblas, the kernel from gemmkernel (only where it
    computes the product); the winner's answer is right."""
    code = """
import numpy as np, fusemath
for dtype in (np.float32, np.complex64):
    a, b = np.ones((256, 64), dtype), np.ones((64, 96), dtype)
    with fusemath.Matmul(a, b) as mm:
        mm.autotune(iterations=1)
        assert np.array_equal(mm.execute(), np.full((256, 96), 64, dtype))
        print(mm.backend)
"""
    out, log = _run(code, FUSEMATH_LOG="plan")
    f32, c64 = log.split(" c64 ", 1)
    assert "autotune: matmul cpu/openblas f32" in f32 and "autotune: matmul cpu/gemmkernel f32" in f32, log
    assert "autotune: matmul cpu/gemmkernel" not in c64 and "autotune: matmul cpu/openblas c64" in c64, log
    assert out.split()[1] == "openblas", out
