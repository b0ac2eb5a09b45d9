"""fusemath.distributed's pencil decompositions (FFT(..., decomposition="pencil", grid=...)) under
mpirun -np 1..4 (oversubscribed on the 2-core CI machine): each test launches
tests/python/mpi_pencil_worker.py on that many ranks with a timeout, so that a deadlock fails instead
of hanging. The worker compares every rank's blocks, gathered at their 3-D offsets, with numpy.fft
on the whole array for every grid of the size, and checks that the bad inputs raise the same error
on every rank.

The pytest process itself never imports mpi4py's MPI (that would initialize MPI here)."""
import pytest

from mpi_launch import MARKS, run

pytestmark = MARKS


def mpirun(np_, what):
    run(np_, "mpi_pencil_worker.py", [what], f"mpi_pencil_worker {what} on {np_} ranks: ")


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
