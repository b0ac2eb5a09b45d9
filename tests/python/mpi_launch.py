"""What the mpirun-driven test files (test_distributed*.py) share: where mpirun and libfusemath_mpi are, the
skip marks without them, and run(): one worker under mpirun with a timeout (a deadlock fails instead of
hanging CI), its verdict line read: "<head>OK" passes, "<head>SKIPPED" skips, anything else fails."""
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

MARKS = [
    pytest.mark.skipif(MPIRUN is None, reason="no mpirun (apt-get install openmpi-bin; scripts/setup.sh does)"),
    pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None, reason="no mpi4py (scripts/setup.sh installs it)"),
    pytest.mark.skipif(not os.path.exists(LIB), reason="fusemath built without MPI (no libfusemath_mpi.so)"),
]


def run(np_, worker, args, head, timeout_s=180, env=None):
    """mpirun -np np_ python <worker> <args>; env: variables handed to every rank (Open MPI: -x each)."""
    version = subprocess.run([MPIRUN, "--version"], capture_output=True, text=True)
    openmpi = "Open MPI" in version.stdout + version.stderr
    flags = ["--oversubscribe", "--allow-run-as-root"] if openmpi else []  # more ranks than cores; CI is root
    for k in (env or {}) if openmpi else ():
        flags += ["-x", k]
    cmd = [MPIRUN, *flags, "-np", str(np_), sys.executable, os.path.join(HERE, worker), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env=dict(os.environ, **(env or {})))
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # mpirun and its ranks: the session started for them
        out, _ = proc.communicate()
        pytest.fail(f"{' '.join(cmd)} did not finish in {timeout_s} s (a deadlock?); its output:\n{out[-4000:]}")
    shown = " ".join(f"{k}={v}" for k, v in (env or {}).items())
    assert proc.returncode == 0, f"{shown} {' '.join(cmd)} exited {proc.returncode}:\n{out[-8000:]}"
    if head + "SKIPPED" in out:
        pytest.skip(out[out.index(head + "SKIPPED"):].splitlines()[0])
    assert head + "OK" in out, out[-4000:]
