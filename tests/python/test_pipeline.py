"""Pipelined host<->GPU transfers (FUSEMATH_PIPELINE, core/src/pipeline.c) from Python: NumPy operands
computed on the GPU in chunks. The setting is read when the library's context is made (at import),
so every case runs in a child process with FUSEMATH_PIPELINE=on (every problem that splits is cut:
small odd sizes run with a remainder chunk). References are NumPy's, in float64 for matmul.
RNG blocks are checked bit for bit against the CPU fill in tests/c/test_pipeline_gpu.c (a NumPy out
of a GPU generator is refused in Python, so no RNG call here reaches the pipeline)."""
import os
import subprocess
import sys
import textwrap

import pytest


def child(code: str, pipeline: str):
    env = dict(os.environ, FUSEMATH_PIPELINE=pipeline)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=600)


def test_bad_setting_names_the_variable():
    r = child("import fusemath", "sometimes")
    assert r.returncode != 0 and "FUSEMATH_PIPELINE" in r.stderr and "'auto', 'on' or 'off'" in r.stderr


def test_cpu_calls_are_unchanged():
    # nothing moves to a GPU: "on" changes no plan of a cpu call, and its results are the plain ones
    r = child("""
        import numpy as np, fusemath as fm
        rng = np.random.default_rng(1)
        a, b = rng.standard_normal((37, 29)).astype(np.float32), rng.standard_normal((29, 45)).astype(np.float32)
        mm = fm.Matmul(a, b); mm.plan(epilogue="relu")
        print("pipelined" in mm.describe(), "staged" in mm.describe())
        print(np.abs(mm.execute() - np.maximum(a.astype(np.float64) @ b, 0)).max() < 1e-4)
    """, "on")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False", "True"]


@pytest.mark.gpu
def test_matmul_pipelined_matches_float64():
    r = child("""
        import numpy as np, fusemath as fm
        rng = np.random.default_rng(2)
        m, k, n = 1037, 257, 301
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        bias = rng.standard_normal(n).astype(np.float32)
        mm = fm.Matmul(a, b, options={"execution": "cuda"}); mm.plan(epilogue="relu", bias=bias)
        print(mm.describe())
        d = mm.execute()
        ref = np.maximum(a.astype(np.float64) @ b + bias, 0)
        scale = np.abs(a).astype(np.float64) @ np.abs(b) + np.abs(bias)
        print("close", bool(np.all(np.abs(d - ref) <= 2e-3 * scale + 1e-5)), type(d).__name__)
    """, "on")
    assert r.returncode == 0, r.stderr
    assert "pipelined chunks=8 (130 of 1037, last 127)" in r.stdout, r.stdout
    assert "close True ndarray" in r.stdout, r.stdout


@pytest.mark.gpu
def test_strided_host_operands():
    # a row slice (rows with gaps between them) is pipelined: its chunks' spans are copied gaps and all;
    # a transposed view (column-major) cannot be cut into row panels and is staged whole
    r = child("""
        import numpy as np, fusemath as fm
        rng = np.random.default_rng(3)
        big = rng.standard_normal((2 * 403, 80)).astype(np.float32)
        b = rng.standard_normal((64, 96)).astype(np.float32)
        cols = rng.standard_normal((64, 403)).astype(np.float32)  # .T: a (403, 64) view, column-major
        for name, a in (("slice", big[::2, :64]), ("transposed", cols.T)):
            mm = fm.Matmul(a, b, options={"execution": "cuda"}); mm.plan()
            d = mm.execute()
            ref = a.astype(np.float64) @ b
            ok = np.all(np.abs(d - ref) <= 2e-3 * (np.abs(a).astype(np.float64) @ np.abs(b)) + 1e-5)
            print(name, "pipelined chunks=" in mm.describe(), "not pipelined" in mm.describe(), bool(ok))
    """, "on")
    assert r.returncode == 0, r.stderr
    assert "slice True False True" in r.stdout, r.stdout
    assert "transposed False True True" in r.stdout, r.stdout


@pytest.mark.gpu
def test_fft_batch_slabs_match_numpy():
    r = child("""
        import numpy as np, fusemath as fm, fusemath.fft
        rng = np.random.default_rng(4)
        x = (rng.standard_normal((13, 4096)) + 1j * rng.standard_normal((13, 4096))).astype(np.complex64)
        y = fusemath.fft.fft(x, execution="cuda")
        ref = np.fft.fft(x.astype(np.complex128))
        print("fft", type(y).__name__, float(np.abs(y - ref).max() / np.abs(ref).max()) < 1e-5)
        out = np.zeros_like(x)  # out= the same: a NumPy array written chunk by chunk
        f = fusemath.fft.FFT(x, axes=-1, execution="cuda"); f.plan()
        f.execute(out=out)
        print("out", bool(np.array_equal(out, y)), "pipelined chunks=7 (2 of 13, last 1)" in f.describe())
        # over axis 0 the batch is the columns (interleaved): staged whole, still right
        z = fusemath.fft.fft(x.T.copy(), axis=0, execution="cuda")
        print("axis0", float(np.abs(z - np.fft.fft(x.T.astype(np.complex128), axis=0)).max() / np.abs(ref).max()) < 1e-5)
    """, "on")
    assert r.returncode == 0, r.stderr
    assert "fft ndarray True" in r.stdout and "out True True" in r.stdout and "axis0 True" in r.stdout, r.stdout
