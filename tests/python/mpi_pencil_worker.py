"""One rank of tests/python/test_distributed_pencil.py's runs (mpirun -np N python mpi_pencil_worker.py WHAT).

Pencil-decomposed 3-D FFTs (fusemath.distributed.FFT(..., decomposition="pencil", grid=...)): every
rank makes the same global array, transforms its block, and the blocks gathered from all ranks (each
at its 3-D offset) are compared with numpy.fft.fftn / rfftn / irfftn of the whole array (float64
reference; relative max error <= 1e-5 f32 / 1e-12 f64). The error cases must raise the same
exception on every rank. Exits 1 (printing what failed) on any failure.
"""
import sys

import numpy as np

import fusemath
import fusemath.distributed as fd
from mpi_worker_common import check, comm, finish, raises, rel_err, size


def grids():
    """None (MPI_Dims_create's) and every P1 x P2 of this size."""
    return [None] + [(p, size // p) for p in range(1, size + 1) if size % p == 0]


def gather(block, offset, global_shape):
    out = np.zeros(global_shape, np.complex128)
    for blk, off in comm.allgather((block, offset)):
        out[tuple(slice(o, o + n) for o, n in zip(off, blk.shape))] = blk
    return out


def cut(g, loc, off):
    return g[tuple(slice(o, o + n) for o, n in zip(off, loc))]


def tol_of(dtype):
    return 1e-5 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-12


def forward_case(shape, kind, dtype, layout_out, grid):
    rng = np.random.default_rng(4321)
    real = np.dtype(dtype).kind == "f"
    g = (rng.standard_normal(shape) + (0 if real else 1j * rng.standard_normal(shape))).astype(dtype)
    loc, off = fd.local_shape(shape, comm, kind=kind, decomposition="pencil", grid=grid)
    x = np.ascontiguousarray(cut(g, loc, off))
    with fd.FFT(x, comm, global_shape=shape, kind=kind, layout_out=layout_out, decomposition="pencil",
                grid=grid) as f:
        f.plan(norm="ortho")
        d = f.describe()
        check("decomposition=pencil" in d and (grid is None or f"grid={grid[0]}x{grid[1]}" in d), f"describe: {d}")
        y = f.execute()
        check(y.shape == f.out_local_shape and y.dtype == f.out_dtype, f"out {y.shape} {y.dtype}")
        lo, oo = fd.local_shape(shape, comm, kind=kind, which="out", layout=layout_out, decomposition="pencil",
                                grid=grid)
        check(lo == f.out_local_shape and oo == f.out_offset, f"local_shape(out) {lo} {oo} vs the plan's")
        ref = (np.fft.rfftn if real else np.fft.fftn)(g.astype(np.float64 if real else np.complex128), norm="ortho")
        e = rel_err(gather(y, f.out_offset, ref.shape), ref)
        check(e <= tol_of(dtype), f"{d}: relative error {e:.3g}")
    # the inverse from that layout back to z-pencils gives the input back
    inv_kind = "c2r" if real else "c2c"
    with fd.FFT(y, comm, global_shape=ref.shape, kind=inv_kind, n=shape[-1] if real else None,
                direction="inverse", layout_in=layout_out, decomposition="pencil", grid=grid) as f:
        f.plan(norm="ortho")
        z = f.execute()
        check(f.out_offset == off and f.out_local_shape == loc, f"inverse blocks {f.out_offset} vs {off}")
        e = rel_err(gather(z, f.out_offset, shape), g.astype(np.complex128))
        check(e <= tol_of(dtype), f"{f.describe()}: inverse relative error {e:.3g}")


def transforms():
    for grid in grids():
        for dtype in (np.complex64, np.complex128):
            for layout in ("slab", "transposed"):
                forward_case((6, 5, 7), "c2c", dtype, layout, grid)
        for dtype in (np.float32, np.float64):
            for layout in ("slab", "transposed"):
                forward_case((5, 6, 8), "r2c", dtype, layout, grid)
        forward_case((1, 3, 5), "c2c", np.complex128, "transposed", grid)  # n0 < P1: empty blocks
        forward_case((2, 7, 3), "r2c", np.float64, "slab", grid)


def chains():
    rng = np.random.default_rng(99)
    for grid in grids():
        for dtype, layout in ((np.complex128, "slab"), (np.complex64, "transposed"), (np.complex128, "transposed")):
            shape = (5, 4, 6)
            g = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
            pro = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
            epi = rng.standard_normal(shape).astype(np.float32 if dtype == np.complex64 else np.float64)
            pro, epi, g = comm.bcast((pro, epi, g))
            loc, off = fd.local_shape(shape, comm, decomposition="pencil", grid=grid)
            lo, oo = fd.local_shape(shape, comm, which="out", layout=layout, decomposition="pencil", grid=grid)
            x = np.ascontiguousarray(cut(g, loc, off))
            with fd.FFT(x, comm, global_shape=shape, layout_out=layout, decomposition="pencil", grid=grid) as f:
                f.plan(prolog={"scale": 0.5, "multiply": np.ascontiguousarray(cut(pro, loc, off)), "conj": True},
                       epilog={"multiply": np.ascontiguousarray(cut(epi, lo, oo)), "scale": 2.0}, norm="forward")
                y = f.execute()
                ref = np.fft.fftn(np.conj(g.astype(np.complex128) * 0.5 * pro), norm="forward") * epi * 2.0
                e = rel_err(gather(y, f.out_offset, shape), ref)
                check(e <= tol_of(dtype), f"{f.describe()}: chains relative error {e:.3g}")


def errors():
    x2 = np.zeros(fd.local_shape((6, 5), comm)[0], np.complex128)
    raises("2-D pencil", fusemath.NotSupportedError, "3-D only",
           lambda: fd.FFT(x2, comm, global_shape=(6, 5), decomposition="pencil").plan())
    raises("2-D pencil local_shape", fusemath.NotSupportedError, "3-D only",
           lambda: fd.local_shape((6, 5), comm, decomposition="pencil"))
    x3 = np.zeros(fd.local_shape((6, 5, 4), comm, decomposition="pencil")[0], np.complex128)
    raises("grid product", ValueError, "P1 x P2",
           lambda: fd.FFT(x3, comm, global_shape=(6, 5, 4), decomposition="pencil", grid=(size, 2)))
    raises("grid type", TypeError, "pair", lambda: fd.local_shape((6, 5, 4), comm, decomposition="pencil", grid=3))
    raises("grid with slab", ValueError, "grid = (1, ",
           lambda: fd.FFT(np.zeros(fd.local_shape((6, 5, 4), comm)[0], np.complex128), comm, global_shape=(6, 5, 4),
                          grid=(1, size)))
    raises("grid negative", ValueError, ">= 1",
           lambda: fd.FFT(x3, comm, global_shape=(6, 5, 4), decomposition="pencil", grid=(-1, -size)))
    raises("grid float", TypeError, "pair (P1, P2) of ints",
           lambda: fd.local_shape((6, 5, 4), comm, decomposition="pencil", grid=(1.0, size)))
    raises("grid comm", TypeError, "mpi4py communicator",
           lambda: fd.FFT(x3, 0, global_shape=(6, 5, 4), decomposition="pencil", grid=(1, size)))
    raises("decomposition name", ValueError, "decomposition",
           lambda: fd.FFT(x3, comm, global_shape=(6, 5, 4), decomposition="cube"))
    wrong = np.zeros((6, 5, 4 if size > 1 else 3), np.complex128)
    raises("wrong block", fusemath.ShapeError, "pencil decomposition",
           lambda: fd.FFT(wrong, comm, global_shape=(6, 5, 4), decomposition="pencil").plan())
    # overwrite_input is ignored: the input is kept
    g = np.arange(6 * 5 * 4, dtype=np.complex128).reshape(6, 5, 4)
    loc, off = fd.local_shape(g.shape, comm, decomposition="pencil")
    x = np.ascontiguousarray(cut(g, loc, off))
    keep = x.copy()
    with fd.FFT(x, comm, global_shape=g.shape, decomposition="pencil") as f:
        f.plan(overwrite_input=True).execute(x)
    check(np.array_equal(x, keep), "overwrite_input changed the input of a pencil transform")


_WHAT = {"transforms": transforms, "chains": chains, "errors": errors}
_WHAT[sys.argv[1]]()
finish(f"mpi_pencil_worker {sys.argv[1]}")
