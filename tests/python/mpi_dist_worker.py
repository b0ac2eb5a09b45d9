"""One rank of tests/python/test_distributed.py's runs (mpirun -np N python mpi_dist_worker.py WHAT).

Every rank makes the same global array, transforms its block with fusemath.distributed, and the
blocks gathered from all ranks are compared with numpy.fft on the whole array (float64 reference;
relative max error <= 1e-5 f32 / 1e-12 f64). The error cases must raise the same exception on
every rank. Exits 1 (printing what failed) on any failure.
"""
import sys

import numpy as np
from mpi4py import MPI

import fusemath
import fusemath.distributed as fd

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


def transform_case(shape, kind, dtype, layout_out, comm=comm):
    rng = np.random.default_rng(1234)  # the same global array on every rank
    real = np.dtype(dtype).kind == "f"
    g = rng.standard_normal(shape) + (0 if real else 1j * rng.standard_normal(shape))
    g = g.astype(dtype)
    loc, off = fd.local_shape(shape, comm, kind=kind)
    x = g[off[0]:off[0] + loc[0]]
    tol = 1e-5 if dtype in (np.float32, np.complex64) else 1e-12
    scale = 0.5 - 0.25j if not real else 0.5
    with fd.FFT(x, comm, global_shape=shape, kind=kind, layout_out=layout_out) as f:
        f.plan(norm="ortho", epilog={"scale": scale}, prolog={"scale": 2.0})
        check(f"ranks={comm.size}" in f.describe(), f"describe: {f.describe()}")
        y = f.execute()
        check(y.dtype == f.out_dtype and y.shape == f.out_local_shape, f"out {y.dtype} {y.shape}")
        ref = (np.fft.rfftn if kind == "r2c" else np.fft.fftn)(g.astype(np.complex128 if not real else np.float64),
                                                                norm="ortho") * 2.0 * scale
        if layout_out == "transposed":
            ref = ref.swapaxes(0, 1)
        e = rel_err(gather(y, f.out_offset[0], ref.shape, comm), ref)
        check(e <= tol, f"{f.describe()}: relative error {e:.3g} > {tol}")
        # the inverse from that layout gives the input back
        inv_kind = "c2r" if kind == "r2c" else "c2c"
        gshape = shape[:-1] + (shape[-1] // 2 + 1,) if kind == "r2c" else shape
        with fd.FFT(y, comm, global_shape=gshape, kind=inv_kind, direction="inverse", layout_in=layout_out,
                    n=shape[-1] if kind == "r2c" else None) as b:
            b.plan(norm="ortho", epilog={"conj": True} if not real else None)
            z = b.execute()
            back = gather(z, b.out_offset[0], shape, comm) / (2.0 * np.conj(scale))  # conj(2 s g)
            want = g if real else np.conj(g)
            e = rel_err(back, want.astype(np.complex128))
            check(e <= tol, f"{b.describe()}: round trip relative error {e:.3g} > {tol}")
            z2 = b.execute(y, out=np.empty_like(z))  # the same again into a given out
            check(np.array_equal(z, z2), "execute(out=) differs")


def transforms():
    for shape in ((10, 6), (5, 6, 4), (3, 8), (6, 5, 9)):
        for kind, dtypes in (("c2c", (np.complex64, np.complex128)), ("r2c", (np.float32, np.float64))):
            for dtype in dtypes:
                for layout in ("slab", "transposed"):
                    transform_case(shape, kind, dtype, layout)
    transform_case((4, 6), "c2c", np.complex128, "slab", comm=MPI.COMM_SELF)  # one rank, each on its own


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


def errors():
    shape = (8, 6)
    loc, off = fd.local_shape(shape, comm)
    x = np.zeros(loc, np.complex128)
    last = rank == size - 1
    bad = np.zeros((loc[0] + (1 if last else 0), loc[1]), np.complex128)
    raises("local shape", fusemath.ShapeError, "does not tile",
           lambda: fd.FFT(bad, comm, global_shape=shape).plan())
    if size > 1:
        raises("global shape", ValueError, "disagree on n[1]",
               lambda: fd.FFT(x, comm, global_shape=(8, 7 if last else 6)).plan())
        xd = x.astype(np.complex64) if last else x
        raises("dtype", ValueError, "disagree on dtype", lambda: fd.FFT(xd, comm, global_shape=shape).plan())
        sub = comm.Split(rank % 2, rank)
        inter = sub.Create_intercomm(0, comm, 1 - rank % 2 if size > 1 else 0, 7)
        raises("inter-communicator", ValueError, "inter-communicator",
               lambda: fd.FFT(x, inter, global_shape=shape).plan())
        inter.Free()
        sub.Free()
    w = np.ones(6)
    raises("multiply epilog", fusemath.NotSupportedError, "not implemented",
           lambda: fd.FFT(x, comm, global_shape=shape).plan(epilog={"multiply": w} if last else None))
    raises("transposed real side", ValueError, "real side",
           lambda: fd.FFT(x.real.copy(), comm, global_shape=shape, layout_in="transposed").plan())
    raises("1-D", fusemath.NotSupportedError, "2 or 3 dimensions",
           lambda: fd.FFT(np.zeros(4, np.complex128), comm, global_shape=(4 * size,)).plan())
    # front-end checks, local and the same on every rank
    raises("layout", ValueError, "layout_out", lambda: fd.FFT(x, comm, global_shape=shape, layout_out="pencil"))
    raises("decomposition", ValueError, "pencils", lambda: fd.FFT(x, comm, global_shape=shape, decomposition="pencil"))
    raises("comm", TypeError, "mpi4py communicator", lambda: fd.FFT(x, 0, global_shape=shape).plan())
    raises("dtype int", fusemath.DtypeError, "int64", lambda: fd.FFT(x.real.astype(np.int64), comm, global_shape=shape))
    raises("axes", ValueError, "every axis", lambda: fd.FFT(x, comm, global_shape=shape, axes=(1,)))
    # a bad argument on the last rank only: every rank raises (none is left waiting in a collective)
    raises("decomposition on one rank", ValueError, "pencils",
           lambda: fd.FFT(x, comm, global_shape=shape, decomposition="pencil" if last else "slab").plan())
    raises("a length-1 second axis", fusemath.NotSupportedError, "n[1] = 1",
           lambda: fd.FFT(np.zeros((fd.local_shape((5, 1, 3), comm)[0]), np.complex128), comm,
                          global_shape=(5, 1, 3)).plan())
    with fd.FFT(x, comm, global_shape=shape) as f:
        raises("effort on one rank", ValueError, "effort",
               lambda: f.plan(effort="bogus" if last else "estimate"))
        raises("prolog on one rank", Exception, "scale",
               lambda: f.plan(prolog={"scale": "x"} if last else None))
        f.plan()
        raises("out shape", fusemath.ShapeError, "out must be", lambda: f.execute(out=np.empty((1, 1), np.complex128)))
        raises("out shape on one rank", fusemath.ShapeError, "out must be",
               lambda: f.execute(out=np.empty((1, 1) if last else loc, np.complex128)))
        raises("x_local dtype on one rank", fusemath.DtypeError, "x_local has dtype",
               lambda: f.execute(x.astype(np.complex64) if last else x))
        check(np.array_equal(f.execute(), np.zeros(loc, np.complex128)), "zeros")
    raises("closed", fusemath.InvalidStateError, "plan() first", lambda: f.execute())


{"transforms": transforms, "errors": errors}[sys.argv[1]]()
bad = comm.allgather(failures)
if rank == 0:
    for f in (f for per in bad for f in per):
        print(f)
    print(f"mpi_dist_worker {sys.argv[1]} on {size} ranks: {'FAILED' if any(bad) else 'OK'}")
sys.exit(1 if any(bad) else 0)
