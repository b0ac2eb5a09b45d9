"""CUDA on demand (core/src/cuda_module.c, docs/design.md "CUDA on demand"): libfusemath.so links no
CUDA library; the CUDA backends live in libfusemath_cuda.so next to it, loaded only where a driver sees a
device (or where FUSEMATH_CUDA_MODULE names it). Each case runs in a fresh interpreter (the module is
loaded once per process), computes CPU matmul and FFT against NumPy and reads /proc/self/maps."""

import json
import os
import pathlib
import subprocess
import sys

import fusemath
import numpy as np
import pytest

PKG = pathlib.Path(fusemath.__file__).parent
MODULE = PKG / "libfusemath_cuda.so"
# The build's default (FUSEMATH_WITH_CUDA=AUTO) builds the module wherever the toolkit is installed.
TOOLKIT = pathlib.Path("/usr/local/cuda/include/cuda_runtime.h").exists()

PROBE = r"""
import json, numpy as np, fusemath
rng = np.random.default_rng(3)
a, b = rng.standard_normal((9, 5)), rng.standard_normal((5, 4))
x = rng.standard_normal(16) + 1j * rng.standard_normal(16)
out = {"mm": float(np.abs(fusemath.matmul(a, b) - a @ b).max()),
       "fft": float(np.abs(fusemath.fft.fft(x) - np.fft.fft(x)).max()),
       "backends": [list(i) for i in fusemath.backends()], "count": fusemath.cuda_device_count()}
# this process's peak (VmHWM: ru_maxrss would count the parent's memory, kept across vfork + exec)
out["peak_kib"] = int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1])
try:
    fusemath.matmul(a, b, execution="cuda")
    out["gpu_error"] = None
except fusemath.UnavailableError as e:
    out["gpu_error"] = str(e)
maps = open("/proc/self/maps").read()
out["cuda_libs"] = sorted({l.rsplit("/", 1)[-1] for l in maps.splitlines()
                           if any(n in l for n in ("/libcudart", "/libcublas", "/libcufft", "/libnvrtc"))})
print(json.dumps(out))
"""


def _probe(**env):
    e = {k: v for k, v in os.environ.items() if k != "FUSEMATH_CUDA_MODULE"}
    e.update(env)
    r = subprocess.run([sys.executable, "-c", PROBE], env=e, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["mm"] < 1e-12 and out["fft"] < 1e-12, out  # the CPU works whatever happened to CUDA
    return out


def _rows(out):
    return {name: (device, available, why) for name, device, available, why in out["backends"]}


def _assert_absent(out, reason):
    rows = _rows(out)
    assert rows.get("cuda", (None, True, ""))[:2] == ("cuda", False) and reason in rows["cuda"][2], rows
    assert not {"cublaslt", "cufft", "fftkernel", "rngkernel", "curand", "cusolver"} & set(rows), rows
    assert out["count"] == 0 and out["cuda_libs"] == [], out
    assert out["gpu_error"] and reason in out["gpu_error"], out


def _readelf_needed(path):
    r = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True)
    return [line.split("[", 1)[1].rstrip("]") for line in r.stdout.splitlines() if "(NEEDED)" in line]


def test_libfusemath_needs_no_cuda_library():
    needed = _readelf_needed(PKG / "libfusemath.so")
    assert needed and not [n for n in needed if n.startswith(("libcu", "libnvrtc", "libnvJitLink"))], needed
    assert MODULE.exists() == TOOLKIT, f"{MODULE} exists: {MODULE.exists()}, toolkit installed: {TOOLKIT}"
    if MODULE.exists():  # the module is what needs them (and the check above can tell)
        assert any(n.startswith("libcudart") for n in _readelf_needed(MODULE)), _readelf_needed(MODULE)


def test_missing_module_leaves_a_cpu_context_that_says_why():
    path = "/nonexistent/libfusemath_cuda.so"
    _assert_absent(_probe(FUSEMATH_CUDA_MODULE=path), f"libfusemath_cuda.so: {path}: cannot open shared")


def test_not_a_module_is_refused():
    _assert_absent(_probe(FUSEMATH_CUDA_MODULE=str(PKG / "libfusemath.so")), "is not the CUDA module")


def test_default_loads_the_module_only_with_a_device():
    out = _probe()
    rows = _rows(out)
    if out["count"] == 0:  # no driver or no device: nothing of CUDA is mapped, and little memory
        why = rows["cuda"][2]
        assert any(t in why for t in ("no NVIDIA driver", "no CUDA device", "built without")), rows
        _assert_absent(out, rows["cuda"][2])
        assert out["peak_kib"] < 100 * 1024, out["peak_kib"]  # issue 26's target (it was 280 MiB)
    else:  # the GPU machine: the module's rows, as when they were built in
        assert rows["cublaslt"][:2] == ("cuda", True) and "cuda" not in rows, rows
        assert "libcudart.so.13" in out["cuda_libs"] or any("cudart" in n for n in out["cuda_libs"]), out


@pytest.mark.skipif(not MODULE.exists(), reason="a build without the CUDA toolkit has no module to force")
def test_forced_module_loads_without_a_device():
    out = _probe(FUSEMATH_CUDA_MODULE=str(MODULE))
    if "fm_hide_cuda" in os.environ.get("LD_AUDIT", ""):  # .ci/run: the CUDA libraries cannot be found
        _assert_absent(out, "cannot open shared object file")
        return
    rows = _rows(out)
    cuda_rows = ["cublaslt", "cufft", "fftkernel", "rngkernel", "curand", "cusolver"]
    assert [n for n in rows if rows[n][0] == "cuda"] == cuda_rows, rows
    assert all(rows[n][1] == (out["count"] > 0) for n in cuda_rows), rows
    assert any("cudart" in n for n in out["cuda_libs"]), out  # the maps check sees a loaded module
