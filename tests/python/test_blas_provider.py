"""Which OpenBLAS the CPU backends call (backends/cpu/blas_provider.c): FUSEMATH_BLAS, the offered
scipy-openblas32 library, describe() and fusemath.blas_info(). The choice is made once per process,
so each case runs in a child process."""
import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import fusemath

# A child: the chosen BLAS, and cblas-tiles products of every BLAS dtype checked against NumPy in
# double precision (relative error), with the plans' describe() text.
_CHILD = r"""
import json, numpy as np, fusemath
rng = np.random.default_rng(7)
out = {"info": fusemath.blas_info(), "err": {}, "describe": []}
for dt in (np.float32, np.float64, np.complex64, np.complex128):
    a = rng.standard_normal((130, 70)).astype(dt); b = rng.standard_normal((70, 90)).astype(dt)
    if np.dtype(dt).kind == "c":
        a = a + 1j * rng.standard_normal(a.shape).astype(dt); b = b + 1j * rng.standard_normal(b.shape).astype(dt)
    m = fusemath.Matmul(a, b, options={"cpu_strategy": "tiles"}); m.plan()
    d = m.execute()
    ref = a.astype(np.complex128) @ b.astype(np.complex128)
    out["err"][np.dtype(dt).name] = float(abs(d - ref).max() / abs(ref).max())
    out["describe"].append(m.describe())
print(json.dumps(out))
"""
_TOL = {"float32": 1e-5, "complex64": 1e-5, "float64": 1e-13, "complex128": 1e-13}


def _child(**env):
    full = {**os.environ, **env}
    for k, v in env.items():
        if v is None:
            full.pop(k, None)
    return subprocess.run([sys.executable, "-c", _CHILD], env=full, capture_output=True, text=True, timeout=300)


def _products_right(r):
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    for name, err in res["err"].items():
        assert err < _TOL[name], (name, err, res["info"])
    return res


def _wheel_blas():
    try:
        import scipy_openblas32 as s
    except ImportError:
        return None
    return f"{s.get_lib_dir()}/lib{s.get_library()}.so"


def test_default_is_described():
    res = _products_right(_child(FUSEMATH_BLAS=None))
    info = res["info"]
    assert info.startswith("OpenBLAS ") and ", core " in info, info
    core = info.split(", core ")[1].split(",")[0]
    assert all(f" blas=" in d and d.endswith(f"/{core}") for d in res["describe"]), res["describe"]


def test_system_keeps_the_linked_library():
    res = _products_right(_child(FUSEMATH_BLAS="system"))
    assert "linked" in res["info"], res["info"]


def test_generic_kernels_are_named():
    # OPENBLAS_CORETYPE=Prescott makes the linked OpenBLAS run its generic kernels, as Debian 12's
    # 0.3.21 does on CPUs newer than itself: the products stay right and the info says so.
    res = _products_right(_child(FUSEMATH_BLAS="system", OPENBLAS_CORETYPE="Prescott"))
    assert "core Prescott" in res["info"] and "generic kernels" in res["info"], res["info"]


def test_explicit_path_is_used():
    path = _wheel_blas()
    if path is None:
        pytest.skip("scipy-openblas32 is not installed (scripts/setup.sh installs it where pip can reach PyPI)")
    res = _products_right(_child(FUSEMATH_BLAS=path))
    assert "FUSEMATH_BLAS" in res["info"] and "linked" not in res["info"], res["info"]
    import scipy_openblas32 as s
    version = s.get_openblas_config().split()[1]
    assert all(f"blas={version}/" in d for d in res["describe"]), (version, res["describe"])


@pytest.mark.parametrize("kind", ["missing", "not_blas", "ilp64"])
def test_unusable_path_fails_at_import(kind, tmp_path):
    if kind == "missing":
        path = str(tmp_path / "no_such_library.so")
    elif kind == "not_blas":
        path = glob.glob(os.path.join(os.path.dirname(fusemath.__file__), "_fusemath*.so"))[0]
    else:  # NumPy's own OpenBLAS is ILP64 (64-bit integers, "64_" symbol suffix): not taken
        libs = glob.glob(os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs", "libscipy_openblas64_*"))
        if not libs:
            pytest.skip("this NumPy bundles no scipy-openblas64 library")
        path = libs[0]
    r = _child(FUSEMATH_BLAS=path)
    assert r.returncode != 0
    assert "FUSEMATH_BLAS" in r.stderr and path in r.stderr and "expected the path of an OpenBLAS library" in r.stderr
