"""What the MPI workers (mpi_dist_worker.py, mpi_dist_gpu_worker.py) share: this rank's failures and
check(), blocks gathered from every rank, the relative error, raises() (the same exception on every
rank) and finish(), one verdict for all ranks: the pytest side reads its last line."""
import sys

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
failures = []


def check(cond, what):
    if not cond:
        failures.append(f"rank {rank}: {what}")


def gather(block, offset0, global_shape, comm=comm):
    """The global array (in the block's storage order) from every rank's block along axis 0."""
    out = np.zeros(global_shape, np.complex128)
    for blk, off in comm.allgather((block, offset0)):
        out[off:off + blk.shape[0]] = blk
    return out


def rel_err(a, b):
    return np.abs(a - b).max() / max(np.abs(b).max(), 1e-300)


def raises(what, exc, needle, fn):
    """fn() must raise exc with needle in its message; the same on every rank."""
    got = "no exception"
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - compared below
        got = type(e).__name__
        check(isinstance(e, exc), f"{what}: {type(e).__name__}: {e}")
        check(needle in str(e), f"{what}: message {str(e)!r} lacks {needle!r}")
    names = comm.allgather(got)
    check(len(set(names)) == 1 and names[0] != "no exception", f"{what}: the ranks raised {names}")


def finish(label):
    """Every rank's failures printed by rank 0, then "<label> on <size> ranks: OK" (or FAILED); exits 1
    on every rank where any rank failed."""
    bad = comm.allgather(failures)
    if rank == 0:
        for f in (f for per in bad for f in per):
            print(f)
        print(f"{label} on {size} ranks: {'FAILED' if any(bad) else 'OK'}")
    sys.exit(1 if any(bad) else 0)
