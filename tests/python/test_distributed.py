"""fusemath.distributed under mpirun -np 1..4 (oversubscribed on the 2-core CI machine): each test
launches tests/python/mpi_dist_worker.py on that many ranks with a timeout, so that a deadlock fails
instead of hanging. The worker compares every rank's blocks, gathered, with numpy.fft on the whole
array, and checks that the bad inputs raise the same error on every rank.

The pytest process itself never imports mpi4py's MPI (that would initialize MPI here)."""
import pytest

from mpi_launch import MARKS, run

pytestmark = MARKS


def mpirun(np_, what):
    run(np_, "mpi_dist_worker.py", [what], f"mpi_dist_worker {what} on {np_} ranks: ")  # SKIPPED: no ScaLAPACK


# what each worker run checks, by its WHAT (mpi_dist_worker.py)
RUNS = {
    "transforms": "c2c / r2c and back against numpy.fft, both out layouts, overwrite_input",
    "chains": "prolog / epilog with scale, each rank's multiply block and conj, c2c / r2c / c2r, 2-D / 3-D",
    "errors": "the FFTs' bad input fails on every rank",
    "scalapack": "matmul with its epilogues, solve, cholesky and cho_solve against NumPy on the gathered matrices",
    "scalapack_errors": "the ScaLAPACK functions' bad input fails on every rank",
}


@pytest.mark.parametrize("np_", [1, 2, 3, 4])
@pytest.mark.parametrize("what", list(RUNS))
def test_worker_on_ranks(what, np_):
    mpirun(np_, what)
