"""The plan cache's byte cap (fusemath.set_cache_max_bytes, FUSEMATH_CACHE_MAX_MB), clear_cache returning
the memory, and FUSEMATH_LOG=plan lines as records of the "fusemath" logger (a child process, since the
variable is read when the module creates its context)."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import fusemath
import fusemath.fft as ff


@pytest.fixture
def restore_cap():
    cap = fusemath.set_cache_max_bytes(1 << 40)
    yield cap
    fusemath.set_cache_max_bytes(cap)


def _rss_mib():
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS")) / 1024


def test_byte_cap_bounds_the_cache_and_results_stay_right(restore_cap, rng):
    assert restore_cap == 256 << 20  # the documented default (FUSEMATH_CACHE_MAX_MB unset)
    fusemath.clear_cache()
    cap = 2 << 20
    assert fusemath.set_cache_max_bytes(cap) == 1 << 40
    x = rng.standard_normal(3000) + 1j * rng.standard_normal(3000)
    for n in range(1500, 1800):
        y = ff.fft(x[:n])
        assert fusemath.cache_bytes() <= cap
    np.testing.assert_allclose(y, np.fft.fft(x[:n]), rtol=1e-12, atol=1e-9 * n)
    assert 0 < fusemath.cache_size() < 300  # the oldest went
    fusemath.set_cache_max_bytes(0)  # only the newest stays
    assert fusemath.cache_size() <= 1
    fusemath.clear_cache()
    assert fusemath.cache_size() == 0 and fusemath.cache_bytes() == 0


def test_clear_cache_returns_the_memory(restore_cap):
    """Plans of 400 lengths hold tens of MiB; clear_cache gives most of it back to the system."""
    fusemath.clear_cache()
    x = np.ones(20000, np.complex128)
    before = _rss_mib()
    for n in range(12000, 12400):
        ff.fft(x[:n])
    held = fusemath.cache_bytes() / 2**20
    grown = _rss_mib() - before
    assert held > 10 and grown > 0.5 * held, (held, grown)  # the footprint estimate is of the right size
    fusemath.clear_cache()
    assert _rss_mib() - before < 0.25 * grown, (grown, _rss_mib() - before)


@pytest.mark.parametrize("bad, exc, text", [(-1, fusemath.InvalidArgumentError, "max_bytes = -1, expected >= 0"),
                                            ("64", TypeError, "max_bytes must be an int"),
                                            (2**70, ValueError, "max_bytes is out of range")])
def test_bad_cap(restore_cap, bad, exc, text):
    with pytest.raises(exc, match=text):
        fusemath.set_cache_max_bytes(bad)
    assert fusemath.set_cache_max_bytes(1 << 40) == 1 << 40  # unchanged by the refused call


def _child(code, **env):
    r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, **env), capture_output=True, text=True,
                       timeout=300)
    return r.returncode, r.stdout, r.stderr


def test_cache_cap_from_the_environment():
    rc, out, _ = _child("import fusemath; print(fusemath.set_cache_max_bytes(0))", FUSEMATH_CACHE_MAX_MB="3")
    assert rc == 0 and out.strip() == str(3 << 20), out
    rc, _, err = _child("import fusemath", FUSEMATH_CACHE_MAX_MB="lots")
    assert rc != 0 and "FUSEMATH_CACHE_MAX_MB = 'lots': expected an integer" in err, err


def test_plan_log_goes_through_logging():
    """pytest with caplog in a process with FUSEMATH_LOG=plan (tests/python/logging_child.py)."""
    child = os.path.join(os.path.dirname(__file__), "logging_child.py")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", child],
                       env=dict(os.environ, FUSEMATH_LOG="plan"), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and re.search(r"\b3 passed", r.stdout) and "warning" not in r.stdout, r.stdout + r.stderr


def test_plan_log_without_a_handler_stays_on_stderr():
    rc, out, err = _child("import numpy as np, fusemath; fusemath.matmul(np.ones((3, 5)), np.ones((5, 2)))",
                          FUSEMATH_LOG="plan")
    assert rc == 0 and "fusemath[plan] matmul cpu/" in err and "(chosen)" in err, err
