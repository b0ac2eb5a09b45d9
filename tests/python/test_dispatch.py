"""execution="best": results equal to the plain call's, describe() saying the choice, the bad inputs,
fusemath.calibrate (stopped by an exception, then whole), the saved profile read by a later process,
a damaged or foreign one ignored with a RuntimeWarning. Calibration runs in child processes with a
cache directory of their own, so this process's profile (and the user's cache) stay as they are."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fusemath as fm


def child(code: str, cache: str, env_extra=None):
    env = dict(os.environ, FUSEMATH_CACHE_DIR=str(cache), **(env_extra or {}))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=600)


def test_best_gives_the_plain_results(rng):
    a = rng.standard_normal((96, 80)).astype(np.float32)
    b = rng.standard_normal((80, 64)).astype(np.float32)
    bias = rng.standard_normal(64).astype(np.float32)
    np.testing.assert_array_equal(fm.matmul(a, b, bias=bias, epilogue="relu", execution="best"),
                                  fm.matmul(a, b, bias=bias, epilogue="relu"))
    ref = np.maximum(a.astype(np.float64) @ b + bias, 0)
    np.testing.assert_allclose(fm.matmul(a, b, bias=bias, epilogue="relu", execution="best"), ref, rtol=1e-4,
                               atol=1e-4)
    x = rng.standard_normal(1000) + 1j * rng.standard_normal(1000)
    np.testing.assert_allclose(fm.fft.fft(x, execution="best"), np.fft.fft(x), rtol=1e-12, atol=1e-10)
    m = rng.standard_normal((50, 50)) + 50 * np.eye(50)
    rhs = rng.standard_normal((50, 3))
    np.testing.assert_allclose(m @ fm.linalg.solve(m, rhs, execution="best"), rhs, rtol=1e-10, atol=1e-10)
    g, h = fm.random.default_rng(7, device="best"), fm.random.default_rng(7)
    np.testing.assert_array_equal(g.standard_normal(1000), h.standard_normal(1000))
    assert g.device == "best"


def test_describe_says_how_best_chose(rng):
    a = rng.standard_normal((64, 64)).astype(np.float32)
    mm = fm.Matmul(a, a, options=fm.MatmulOptions(execution="best"))
    mm.plan()
    text = mm.describe()
    assert " best=cpu predicted cpu " in text, text  # a 64^3 product stays with its NumPy data
    if fm.cuda_device_count() == 0:
        assert "cuda n/a" in text, text
    plain = fm.Matmul(a, a)
    plain.plan()
    assert "best=" not in plain.describe()


def test_bad_execution_values(rng):
    a = np.ones((4, 4), np.float32)
    with pytest.raises(ValueError, match="'bestest' is not one of"):
        fm.matmul(a, a, execution="bestest")
    with pytest.raises(fm.UnavailableError, match="device_id = 9"):
        fm.matmul(a, a, options=fm.MatmulOptions(execution="best", device_id=9))
    with pytest.raises(ValueError, match="execution"):
        fm.linalg.solve(np.eye(2), np.ones(2), execution="gpu")
    with pytest.raises(ValueError, match="'best'"):
        fm.random.default_rng(1, device="fastest")


def test_calibrate_stopped_then_whole(tmp_path):
    r = child("""
        import fusemath as fm
        calls = []
        def stop(fraction, what):
            calls.append(what)
            if len(calls) == 2:
                raise KeyboardInterrupt
        try:
            fm.calibrate(progress=stop)
        except KeyboardInterrupt:
            print("interrupted after", len(calls))
        print(fm.machine_profile().splitlines()[0])
        text = fm.calibrate(progress=False)
        print(text.splitlines()[0])
        print("curves", sum(line.startswith("curve ") for line in text.splitlines()))
    """, tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "interrupted after 2"
    assert lines[1].startswith("profile: builtin")
    assert lines[2].startswith("profile: calibrated ")
    assert int(lines[3].split()[1]) >= 5  # matmul f32/f64, fft, rng f32/f64, solve on the cpu
    assert (tmp_path / "machine-profile").is_file()

    # a later process reads it; a damaged one is ignored with a warning, at import
    r = child("import fusemath as fm; print(fm.machine_profile().splitlines()[0])", tmp_path)
    assert "loaded from" in r.stdout and "machine-profile" in r.stdout, r.stdout + r.stderr
    data = (tmp_path / "machine-profile").read_bytes()
    (tmp_path / "machine-profile").write_bytes(data.replace(b"curve matmul", b"curve matmux", 1))
    r = child("import fusemath as fm; print(fm.machine_profile().splitlines()[0])", tmp_path)
    assert r.returncode == 0
    assert "RuntimeWarning" in r.stderr and "corrupt" in r.stderr, r.stderr
    assert r.stdout.startswith("profile: builtin")


def test_wisdom_file_carries_the_profile(tmp_path):
    wisdom = tmp_path / "w.txt"
    r = child(f"""
        import fusemath as fm
        fm.calibrate(progress=False)
        fm.wisdom.save({str(wisdom)!r})
    """, tmp_path / "a")
    assert r.returncode == 0, r.stderr
    r = child(f"""
        import fusemath as fm
        fm.wisdom.load({str(wisdom)!r})
        print(fm.machine_profile().splitlines()[0])
    """, tmp_path / "b")
    assert r.returncode == 0, r.stderr
    assert "loaded from" in r.stdout and "w.txt" in r.stdout, r.stdout
    # from another machine: its fingerprint differs (the checksum made right again)
    text = wisdom.read_text()
    head, _, rest = text.partition("blob profile ")
    length, _, body = rest.partition("\n")
    prof = body[:int(length)]
    lines = [("fingerprint fusemath 0.0.0 elsewhere" if ln.startswith("fingerprint ") else ln)
             for ln in prof.split("\n") if not ln.startswith("checksum ")]
    core = "\n".join(lines).rstrip("\n") + "\n"
    h = 0xcbf29ce484222325
    for ch in core.encode():
        h = ((h ^ ch) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    foreign = core + f"checksum {h:016x}\n"
    wisdom.write_text(head + f"blob profile {len(foreign)}\n" + foreign + body[int(length):])
    r = child(f"""
        import warnings, fusemath as fm
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            fm.wisdom.load({str(wisdom)!r})
        print([str(x.message) for x in w])
        print(fm.machine_profile().splitlines()[0])
    """, tmp_path / "c")
    assert r.returncode == 0, r.stderr
    assert "another machine" in r.stdout and "profile: builtin" in r.stdout, r.stdout


def test_environment_makes_best_the_default(tmp_path):
    r = child("""
        import numpy as np, fusemath as fm
        mm = fm.Matmul(np.ones((8, 8), np.float32), np.ones((8, 8), np.float32)); mm.plan()
        print(mm.describe())
    """, tmp_path, {"FUSEMATH_EXECUTION": "best"})
    assert r.returncode == 0, r.stderr
    assert " best=cpu " in r.stdout
    r = child("import fusemath", tmp_path, {"FUSEMATH_EXECUTION": "fast"})
    assert r.returncode != 0 and "FUSEMATH_EXECUTION" in r.stderr


@pytest.mark.gpu
def test_best_moves_a_large_product_to_the_gpu(tmp_path):
    # the built-in model: a 4096^3 f32 product of NumPy data goes to the GPU, a 64^3 one stays
    r = child("""
        import numpy as np, fusemath as fm
        rng = np.random.default_rng(3)
        for n in (64, 4096):
            a = rng.standard_normal((n, n)).astype(np.float32)
            mm = fm.Matmul(a, a, options=fm.MatmulOptions(execution="best")); mm.plan()
            d = mm.execute()
            x = rng.standard_normal(n).astype(np.float32)
            err = np.abs(d @ x - a @ (a @ x)).max() / np.abs(a @ (a @ x)).max()
            print(n, type(d).__name__, "best=cuda" in mm.describe(), err < 1e-3)
    """, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["64 ndarray False True", "4096 ndarray True True"], r.stdout


@pytest.mark.gpu
def test_best_with_gpu_operands_and_a_refusing_device(tmp_path):
    # CuPy operands give CuPy results whichever device runs them; RNG integers, which have no GPU
    # kernel, fall back to the cpu when best picks the GPU (describe() of the plan says so)
    r = child("""
        import numpy as np, cupy as cp, fusemath as fm
        rng = np.random.default_rng(5)
        x = rng.standard_normal((512, 512)) + 1j * rng.standard_normal((512, 512))
        y = fm.fft.fft2(cp.asarray(x), execution="best")
        print(type(y).__module__.split(".")[0], np.allclose(cp.asnumpy(y), np.fft.fft2(x), rtol=1e-10, atol=1e-8))
        a = rng.standard_normal((300, 300)) + 20 * np.eye(300)
        b = rng.standard_normal((300, 4))
        xs = fm.linalg.solve(cp.asarray(a), cp.asarray(b), execution="best")
        print(type(xs).__module__.split(".")[0], np.allclose(a @ cp.asnumpy(xs), b, rtol=1e-10, atol=1e-10))
        g, h = fm.random.default_rng(9, device="best"), fm.random.default_rng(9)
        n = 1 << 24
        print(np.array_equal(g.integers(0, 1000, size=n), h.integers(0, 1000, size=n)),
              np.array_equal(g.standard_normal(n, dtype=np.float32), h.standard_normal(n, dtype=np.float32)))
    """, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:3] == ["cupy True", "cupy True", "True True"], r.stdout


@pytest.mark.gpu
def test_calibrate_measures_the_gpu(tmp_path):
    r = child("""
        import fusemath as fm
        text = fm.calibrate(progress=False)
        lines = text.splitlines()
        print(sum(ln.startswith("curve ") and " cuda " in ln for ln in lines),
              [ln for ln in lines if ln.startswith("copy h2d")][0])
    """, tmp_path)
    assert r.returncode == 0, r.stderr
    count, _, copy = r.stdout.strip().partition(" ")
    assert int(count) >= 5, r.stdout  # matmul f32/f64, fft, rng f32/f64, solve on the GPU
    assert copy != "copy h2d 1e-05 5e+09", r.stdout  # measured, not the placeholder
