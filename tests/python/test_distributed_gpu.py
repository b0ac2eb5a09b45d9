"""fusemath.distributed on GPU ranks under mpirun (tests/python/mpi_dist_gpu_worker.py): 2-D and 3-D
c2c / r2c / c2r, f32 / f64, slab and transposed outputs, fused prolog / epilog with each rank's
multiply blocks, against numpy.fft of the gathered global array; error cases raised on every rank; pencil
decompositions (3-D, every grid of the size, both layouts, the inverse back, chains on the GPU).
Two ranks share the one GPU of a one-GPU machine (the staged exchange); with two GPUs or more the
NCCL exchange runs too. NCCL_NVLS_ENABLE=0 in every rank's environment (never NVLink multicast).
Marked gpu: skipped without a CUDA device. Every run has a timeout, so a rank left waiting fails."""
import importlib.util

import pytest

import fusemath
from mpi_launch import MARKS, run

HAVE_ARRAYS = any(importlib.util.find_spec(m) is not None for m in ("cupy", "torch"))

pytestmark = MARKS
on_gpu = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_ARRAYS, reason="neither CuPy nor torch is installed")]


def mpirun(np_, what, exchange, *extra):
    """SKIPPED: CPU ranks without FFTW-MPI"""
    run(np_, "mpi_dist_gpu_worker.py", [what, *extra],
        f"mpi_dist_gpu_worker {what}{' --cpu' if extra else ''} on {np_} ranks: ", timeout_s=300,
        env={"NCCL_NVLS_ENABLE": "0", "FUSEMATH_DIST_EXCHANGE": exchange})


def exchanges():
    ex = ["auto", "staged"]
    if fusemath.cuda_device_count() >= 2:
        ex.append("nccl")
    return ex


@pytest.mark.parametrize("np_", [1, 2])
@pytest.mark.parametrize("exchange", exchanges())
@on_gpu[0]
@on_gpu[1]
def test_gpu_ranks_match_numpy(np_, exchange):
    mpirun(np_, "gpu", exchange)


@pytest.mark.parametrize("np_", [1, 2, 4])  # 4: a 2 x 2 grid, both a row and a column exchange
@pytest.mark.parametrize("exchange", exchanges())
@on_gpu[0]
@on_gpu[1]
def test_gpu_rank_pencils_match_numpy(np_, exchange):
    if exchange == "nccl" and np_ > fusemath.cuda_device_count():
        pytest.skip("nccl needs a GPU per rank (ranks sharing one are refused)")
    mpirun(np_, "pencil", exchange)


@pytest.mark.parametrize("np_", [2, 4])
def test_gpu_pencil_worker_cases_on_cpu_ranks(np_):
    """The pencil cases with NumPy blocks (CPU ranks): the worker's references and 3-D gathers are right on any
    machine (skipped, as the slab one is, where the worker's --cpu probe finds no FFTW-MPI)."""
    mpirun(np_, "pencil", "auto", "--cpu")


@pytest.mark.parametrize("exchange", exchanges())
@on_gpu[0]
@on_gpu[1]
def test_gpu_rank_errors_on_every_rank(exchange):
    mpirun(2, "gpu_errors", exchange)


@on_gpu[0]
@on_gpu[1]
@pytest.mark.skipif(fusemath.cuda_device_count() >= 2, reason="needs ranks sharing a GPU (a one-GPU machine)")
def test_nccl_refused_where_ranks_share_a_gpu():
    mpirun(2, "nccl_shared", "nccl")


@pytest.mark.parametrize("np_", [2, 3])
def test_gpu_worker_cases_on_cpu_ranks(np_):
    """The worker's cases with NumPy blocks (CPU ranks): its references and blocks are right on any machine."""
    mpirun(np_, "gpu", "auto", "--cpu")
