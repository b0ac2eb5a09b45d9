"""fusemath.distributed's pencil decompositions (FFT(..., decomposition="pencil", grid=...)) under
mpirun -np 1..4 (oversubscribed on the 2-core CI machine): each test launches
tests/python/mpi_pencil_worker.py on that many ranks with a timeout, so that a deadlock fails instead
of hanging. The worker compares every rank's blocks, gathered at their 3-D offsets, with numpy.fft
on the whole array for every grid of the size, and checks that the bad inputs raise the same error
on every rank.

The pytest process itself never imports mpi4py's MPI (that would initialize MPI here)."""
import importlib.util
import os
import shutil
import signal
import subprocess
import sys

import pytest

import fusemath

HERE = os.path.dirname(os.path.abspath(__file__))
MPIRUN = shutil.which("mpirun") or shutil.which("mpiexec")
LIB = os.path.join(os.path.dirname(fusemath.__file__), "libfusemath_mpi.so")
TIMEOUT_S = 180

pytestmark = [
    pytest.mark.skipif(MPIRUN is None, reason="no mpirun (apt-get install openmpi-bin; scripts/setup.sh does)"),
    pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None, reason="no mpi4py (scripts/setup.sh installs it)"),
    pytest.mark.skipif(not os.path.exists(LIB), reason="fusemath built without MPI (no libfusemath_mpi.so)"),
]


def mpirun(np_, what):
    version = subprocess.run([MPIRUN, "--version"], capture_output=True, text=True)
    # Open MPI's: more ranks than cores, and CI runs as root
    flags = ["--oversubscribe", "--allow-run-as-root"] if "Open MPI" in version.stdout + version.stderr else []
    cmd = [MPIRUN, *flags, "-np", str(np_), sys.executable, os.path.join(HERE, "mpi_pencil_worker.py"), what]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # mpirun and its ranks: the session started for them
        out, _ = proc.communicate()
        pytest.fail(f"{' '.join(cmd)} did not finish in {TIMEOUT_S} s (a deadlock?); its output:\n{out[-4000:]}")
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{out[-8000:]}"
    assert f"mpi_pencil_worker {what} on {np_} ranks: OK" in out, out[-4000:]


@pytest.mark.parametrize("np_", [1, 2, 3, 4])
def test_pencil_transforms_match_numpy(np_):
    """c2c / r2c forward to z- and x-pencils and the inverse (c2c / c2r) back, f32 / f64, every grid."""
    mpirun(np_, "transforms")


@pytest.mark.parametrize("np_", [1, 2, 3, 4])
def test_pencil_chains_with_multiply_arrays_match_numpy(np_):
    mpirun(np_, "chains")


@pytest.mark.parametrize("np_", [1, 2, 3, 4])
def test_pencil_bad_input_fails_on_every_rank(np_):
    mpirun(np_, "errors")
