"""Split execution (execution="best" giving part of a batch to the CPU and the rest to the GPU at once,
core/src/split.c) from Python, on NumPy data. FUSEMATH_SPLIT is read when the library's context is made
(at import), so each case runs in a child process with its own cache directory (the calibrated profile
goes there). The decision's arithmetic and the driver are tests/c/test_split.c (no GPU needed) and
tests/c/test_split_gpu.c (a made-up profile that always splits); here the machine's own quick profile
decides, the results are compared with NumPy's (float64 for matmul), and at least one of the batched
problems must have been split (or the model never predicts a split on this machine: the failure says so,
with every plan's describe())."""
import json
import os
import subprocess
import sys
import textwrap

import pytest


def child(code: str, split: str | None, cache_dir: str):
    env = dict(os.environ, FUSEMATH_CACHE_DIR=cache_dir)
    env.pop("FUSEMATH_SPLIT", None)
    if split is not None:
        env["FUSEMATH_SPLIT"] = split
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=900)


def test_bad_setting_names_the_variable(tmp_path):
    r = child("import fusemath", "sometimes", str(tmp_path))
    assert r.returncode != 0 and "FUSEMATH_SPLIT" in r.stderr and "'auto' or 'off'" in r.stderr


def test_best_on_the_cpu_only_never_splits(tmp_path):
    # without a GPU there is nothing to split with; with one, off keeps every plan on one device
    r = child("""
        import numpy as np, fusemath as fm
        rng = np.random.default_rng(1)
        a = rng.standard_normal((6, 33, 20)).astype(np.float32)
        b = rng.standard_normal((20, 17)).astype(np.float32)
        mm = fm.Matmul(a, b, options={"execution": "best"}); mm.plan()
        d = mm.execute()
        print("best=split" in mm.describe(), bool(np.abs(d - a.astype(np.float64) @ b).max() < 1e-4))
    """, "off", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "True"]


SPLIT_CASES = """
    import json, numpy as np, fusemath as fm, fusemath.fft, fusemath.random
    fm.calibrate(quick=True, progress=False)
    rng = np.random.default_rng(3)
    rows = []
    for batch in (16, 64, 192):  # f32 matmul + bias + relu, (batch, 256, 256) @ (256, 256)
        a = rng.standard_normal((batch, 256, 256), dtype=np.float32)
        b = rng.standard_normal((256, 256), dtype=np.float32)
        bias = rng.standard_normal(256, dtype=np.float32)
        mm = fm.Matmul(a, b, options={"execution": "best"}); mm.plan(epilogue="relu", bias=bias)
        d = mm.execute()
        ref = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias, 0)
        rows.append({"case": f"matmul {batch}", "describe": mm.describe(),
                     "err": float(np.abs(d - ref).max() / np.abs(ref).max())})
    for t in (16, 64, 256):  # c64 FFT of (t, 2^16), the last axis
        x = (rng.standard_normal((t, 1 << 16)) + 1j * rng.standard_normal((t, 1 << 16))).astype(np.complex64)
        f = fm.fft.FFT(x, axes=-1, execution="best"); f.plan(effort="estimate")
        y = f.execute()
        ref = np.fft.fft(x.astype(np.complex128), axis=-1)
        rows.append({"case": f"fft {t}", "describe": f.describe(),
                     "err": float(np.abs(y - ref).max() / np.abs(ref).max())})
    for n in (1 << 22, 1 << 26):  # standard normal f32: best's values are the cpu's, bit for bit
        x = fm.random.default_rng(11, device="best").standard_normal(n, dtype=np.float32)
        y = fm.random.default_rng(11, device="cpu").standard_normal(n, dtype=np.float32)
        rows.append({"case": f"rng {n}", "describe": "", "err": 0.0 if np.array_equal(x, y) else 1.0})
    print(json.dumps(rows))
"""


TOL = {"matmul": 1e-4, "fft": 1e-5, "rng": 0.0}  # of the largest value; RNG bit for bit


@pytest.mark.gpu
def test_best_split_matches_numpy(tmp_path):
    r = child(SPLIT_CASES, None, str(tmp_path))
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout.strip().splitlines()[-1])
    for row in rows:
        assert row["err"] <= TOL[row["case"].split()[0]], row
    splits = [row for row in rows if "best=split" in row["describe"]]
    assert splits, "the quick profile predicted no split for any case:\n" + "\n".join(
        f"{row['case']}: {row['describe']}" for row in rows)


@pytest.mark.gpu
def test_split_off_plans_one_device(tmp_path):
    r = child(SPLIT_CASES, "off", str(tmp_path))
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout.strip().splitlines()[-1])
    assert all("best=split" not in row["describe"] and row["err"] <= TOL[row["case"].split()[0]] for row in rows), rows
