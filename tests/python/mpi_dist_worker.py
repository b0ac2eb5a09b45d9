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

from mpi_worker_common import check, comm, finish, gather, raises, rank, rel_err, size


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
        # overwrite_input: FFTW-MPI may run on x itself (a copy fewer); the result is the same
        with fd.FFT(x.copy(), comm, global_shape=shape, kind=kind, layout_out=layout_out) as f2:
            f2.plan(norm="ortho", overwrite_input=True)
            y2 = f2.execute(x.copy())
            want = ref / (2.0 * scale)
            e = rel_err(gather(y2, f2.out_offset[0], want.shape, comm), want)
            check(e <= tol, f"overwrite_input {f2.describe()}: relative error {e:.3g} > {tol}")


def transforms():
    for shape in ((10, 6), (5, 6, 4), (3, 8), (6, 5, 9)):
        for kind, dtypes in (("c2c", (np.complex64, np.complex128)), ("r2c", (np.float32, np.float64))):
            for dtype in dtypes:
                for layout in ("slab", "transposed"):
                    transform_case(shape, kind, dtype, layout)
    transform_case((4, 6), "c2c", np.complex128, "slab", comm=MPI.COMM_SELF)  # one rank, each on its own


def chain_case(shape, kind, dtype, layout, pro_complex, epi_complex, comm=comm):
    """prolog {"scale", "multiply", "conj"} and epilog {"multiply", "scale", "conj"} with each rank's blocks of
    global arrays P (input's shape) and E (output's, in the output's layout) vs NumPy on the whole arrays."""
    rng = np.random.default_rng(99)
    cdt = np.result_type(dtype, np.complex64)
    rdt = np.finfo(dtype).dtype
    tol = 1e-5 if rdt == np.float32 else 1e-12
    c2r, r2c = kind == "c2r", kind == "r2c"
    half = shape[:-1] + (shape[-1] // 2 + 1,)
    in_shape, out_shape = (half, shape) if c2r else (shape, half if r2c else shape)

    def arr(s, cplx):
        a = 0.5 + rng.random(s) + (1j * rng.standard_normal(s) if cplx else 0)
        return a.astype(cdt if cplx else rdt)
    P, E = arr(in_shape, pro_complex), arr(out_shape, epi_complex)
    sp, se = (1.5, 0.5) if (r2c or c2r) else (1.5 - 0.5j, 0.5 + 0.25j)
    pconj, econj = not (r2c or c2r), not c2r  # conj on complex data only
    if c2r:  # x = H / (sp P): the prolog makes the Hermitian spectrum H of the real r
        r = rng.standard_normal(shape)
        g = (np.fft.rfftn(r) / (sp * P)).astype(dtype)
        pconj = False
    else:
        g = (rng.standard_normal(shape) + (0 if r2c else 1j * rng.standard_normal(shape))).astype(dtype)
    lin, offin = fd.local_shape(in_shape, comm, kind=kind, which="in", layout=layout if c2r else "slab",
                                n=shape[-1] if c2r else None)
    lout, offout = fd.local_shape(in_shape, comm, kind=kind, which="out", layout="slab" if c2r else layout,
                                  n=shape[-1] if c2r else None)
    Pl = P.swapaxes(0, 1) if c2r and layout == "transposed" else P
    El = E.swapaxes(0, 1) if not c2r and layout == "transposed" else E
    gl = g.swapaxes(0, 1) if c2r and layout == "transposed" else g
    x = np.ascontiguousarray(gl[offin[0]:offin[0] + lin[0]])
    pblk = np.ascontiguousarray(Pl[offin[0]:offin[0] + lin[0]])
    eblk = np.ascontiguousarray(El[offout[0]:offout[0] + lout[0]])
    kw = dict(layout_in=layout) if c2r else dict(layout_out=layout)
    with fd.FFT(x, comm, global_shape=in_shape, kind=kind, direction="inverse" if c2r else "forward",
                n=shape[-1] if c2r else None, **kw) as f:
        f.plan(norm="ortho", prolog={"scale": sp, "multiply": pblk, "conj": pconj},
               epilog={"multiply": eblk, "scale": se, "conj": econj})
        check("multiply" in f.describe(), f"describe: {f.describe()}")
        y = f.execute()
        pre = g.astype(np.complex128) * sp * P
        pre = np.conj(pre) if pconj else pre
        if c2r:
            ref = np.fft.irfftn(pre, s=shape, norm="ortho")
        else:
            ref = (np.fft.rfftn(pre.real) if r2c else np.fft.fftn(pre)) * (1 / np.sqrt(np.prod(shape)))
        ref = ref * se * E
        ref = np.conj(ref) if econj else ref
        if not c2r and layout == "transposed":
            ref = ref.swapaxes(0, 1)
        e = rel_err(gather(y, f.out_offset[0], ref.shape, comm), ref)
        check(e <= tol, f"{f.describe()}: relative error {e:.3g} > {tol} vs NumPy")
        eblk *= 2  # the arrays are read at every execute
        e = rel_err(gather(f.execute(), f.out_offset[0], ref.shape, comm), 2 * ref)
        check(e <= tol, f"{f.describe()}: after changing the epilog array: relative error {e:.3g} > {tol}")


def chains():
    for shape in ((10, 6), (5, 6, 4), (3, 8), (6, 5, 9)):
        for kind, dtypes in (("c2c", (np.complex64, np.complex128)), ("r2c", (np.float32, np.float64)),
                             ("c2r", (np.complex64, np.complex128))):
            for dtype in dtypes:
                for layout in ("slab", "transposed"):
                    pc, ec = (kind != "r2c", kind != "c2r")
                    chain_case(shape, kind, dtype, layout, pc and shape[0] % 2 == 0, ec and len(shape) == 3)
    chain_case((4, 6), "c2c", np.complex128, "slab", True, True, comm=MPI.COMM_SELF)
    # bad arrays, on the last rank only: every rank raises the same error
    shape = (8, 6)
    loc, _ = fd.local_shape(shape, comm)
    x = np.zeros(loc, np.complex128)
    last = rank == size - 1
    with fd.FFT(x, comm, global_shape=shape) as f:
        raises("multiply shape", fusemath.ShapeError, "expected this rank's input block",
               lambda: f.plan(prolog={"multiply": np.ones((loc[0] + 1 if last else loc[0], 6))}))
        raises("multiply broadcast", fusemath.ShapeError, "do not broadcast",
               lambda: f.plan(epilog={"multiply": np.ones(6) if last else np.ones(loc)}))
        raises("multiply dtype", fusemath.DtypeError, "expected f64 or c128",
               lambda: f.plan(prolog={"multiply": np.ones(loc, np.float32 if last else np.float64)}))
        raises("multiply int", fusemath.DtypeError, "i64",
               lambda: f.plan(prolog={"multiply": np.ones(loc, np.int64)}))
        raises("multiply list", TypeError, "NumPy array",
               lambda: f.plan(prolog={"multiply": [1.0] * 6 if last else np.ones(loc)}))
        if loc[0] > 1 or size == 1:
            raises("multiply strided", fusemath.InvalidArgumentError, "C-contiguous",
                   lambda: f.plan(prolog={"multiply": np.ones((loc[0], 12))[:, ::2]}))
        raises("callback on cpu ranks", fusemath.NotSupportedError, "not implemented",
               lambda: f.plan(epilog={"source": "x", "name": "f"} if last else None))
        f.plan(prolog={"multiply": np.full(loc, 2.0)})  # after the failures, a good plan runs
        y = gather(f.execute(np.ones(loc, np.complex128)), f.out_offset[0], shape)
        want = np.zeros(shape, np.complex128)
        want[0, 0] = 2 * 48
        check(rel_err(y, want) <= 1e-12, "good plan after the failures")
        # a big-endian multiply array runs from a native copy, which follows the caller's array
        big = np.full(loc, 2.0, dtype=">f8")
        f.plan(prolog={"multiply": big})
        big *= 3
        y = gather(f.execute(np.ones(loc, np.complex128)), f.out_offset[0], shape)
        want[0, 0] = 6 * 48
        check(rel_err(y, want) <= 1e-12, "a big-endian multiply array changed after plan() is read at execute")
    # overwrite_input destroys the input: execute() without x_local (the constructor's array) is refused
    g = np.arange(np.prod(shape), dtype=np.complex128).reshape(shape)
    row0 = fd.local_shape(shape, comm)[1][0]
    xs = g[row0:row0 + loc[0]]
    with fd.FFT(xs.copy(), comm, global_shape=shape) as f:
        f.plan(overwrite_input=True)
        raises("overwrite_input without x_local", ValueError, "x_local is required", lambda: f.execute())
        for _ in range(2):  # twice, each with a fresh input: both right
            y = gather(f.execute(xs.copy()), f.out_offset[0], shape)
            check(rel_err(y, np.fft.fftn(g)) <= 1e-12, "overwrite_input with x_local each call")


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
    raises("multiply epilog of the wrong shape", fusemath.ShapeError, "output block",
           lambda: fd.FFT(x, comm, global_shape=shape).plan(epilog={"multiply": np.ones(6) if last else np.ones(loc)}))
    raises("transposed real side", ValueError, "real side",
           lambda: fd.FFT(x.real.copy(), comm, global_shape=shape, layout_in="transposed").plan())
    raises("1-D", fusemath.NotSupportedError, "2 or 3 dimensions",
           lambda: fd.FFT(np.zeros(4, np.complex128), comm, global_shape=(4 * size,)).plan())
    # front-end checks, local and the same on every rank
    raises("layout", ValueError, "layout_out", lambda: fd.FFT(x, comm, global_shape=shape, layout_out="pencil"))
    raises("decomposition", ValueError, "decomposition", lambda: fd.FFT(x, comm, global_shape=shape, decomposition="cube"))
    raises("comm", TypeError, "mpi4py communicator", lambda: fd.FFT(x, 0, global_shape=shape).plan())
    raises("dtype int", fusemath.DtypeError, "int64", lambda: fd.FFT(x.real.astype(np.int64), comm, global_shape=shape))
    raises("axes", ValueError, "every axis", lambda: fd.FFT(x, comm, global_shape=shape, axes=(1,)))
    # a bad argument on the last rank only: every rank raises (none is left waiting in a collective)
    raises("decomposition on one rank", ValueError, "decomposition",
           lambda: fd.FFT(x, comm, global_shape=shape, decomposition="cube" if last else "slab").plan())
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


# ---- ScaLAPACK: matmul / solve / cholesky on block-cyclic matrices ----
def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


ACTS = {None: lambda x: x, "relu": lambda x: np.maximum(x, 0), "gelu": gelu, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
        "tanh": np.tanh, "silu": lambda x: x / (1 + np.exp(-x))}


def rel(a, b):
    return np.abs(a - b).max() / max(np.abs(b).max(), 1e-300)


def spread(g, lay, comm=comm):
    """scatter from rank 0 (the others pass None: only the root's matrix counts)."""
    return fd.scatter(g if comm.rank == 0 else None, comm, lay)


def matmul_case(m, k, n, blocks, dtype, epilogue, alpha, beta, with_bias, comm=comm):
    rng = np.random.default_rng(7)
    ga, gb, gc = (rng.standard_normal(s) for s in ((m, k), (k, n), (m, n)))
    bias = rng.standard_normal(n) if with_bias else None
    ba, bb = blocks
    la, lb = fd.Layout((m, k), comm, block=ba), fd.Layout((k, n), comm, block=bb)
    ld = la.with_shape((m, n), block=(la.block[0], lb.block[1]))
    a, b = spread(ga.astype(dtype), la, comm), spread(gb.astype(dtype), lb, comm)
    c = spread(gc.astype(dtype), ld, comm) if beta else None
    check(a.flags.f_contiguous and a.shape == la.local_shape and a.dtype == dtype, f"scatter: {a.shape} {a.dtype}")
    d = fd.matmul(a, b, comm, layout=(la, lb), c=c, alpha=alpha, beta=beta, epilogue=epilogue,
                  bias=None if bias is None else bias.astype(dtype))
    check(d.shape == ld.local_shape and d.dtype == dtype, f"matmul out {d.shape} {d.dtype}")
    got = fd.gather(d, comm, ld)
    if comm.rank == 0:
        x = alpha * ga.astype(dtype).astype(np.float64) @ gb.astype(dtype).astype(np.float64)
        x = x + (beta * gc.astype(dtype) if beta else 0) + (bias.astype(dtype) if with_bias else 0)
        want = ACTS[epilogue](x)
        tol = 1e-12 if dtype == np.float64 else 1e-5
        e = rel(got, want)
        check(e <= tol, f"matmul {m}x{k}x{n} {np.dtype(dtype)} {epilogue} blocks {blocks}: rel error {e:.3g} > {tol}")


def residual_ratio(ga, x, gb):
    eps = np.finfo(x.dtype).eps
    r = ga @ x.astype(np.float64) - gb
    return np.abs(r).sum(1).max() / (len(ga) * np.abs(ga).sum(1).max() * np.abs(x).sum(1).max() * eps)


def solve_case(n, nrhs, block, dtype, comm=comm):
    rng = np.random.default_rng(11)
    ga, gb = rng.standard_normal((n, n)), rng.standard_normal((n, nrhs))
    ga, gb = ga.astype(dtype).astype(np.float64), gb.astype(dtype).astype(np.float64)
    la, lb = fd.Layout((n, n), comm, block=block), fd.Layout((n, nrhs), comm, block=block)
    a, b = spread(ga.astype(dtype), la, comm), spread(gb.astype(dtype), lb, comm)
    a0 = a.copy()
    x = fd.solve(a, b, comm, layout=(la, lb))
    check(np.array_equal(a, a0), "solve changed a (overwrite_a=False)")
    got = fd.gather(x, comm, lb)
    if comm.rank == 0:
        q = residual_ratio(ga, got, gb)
        check(q < 30, f"solve n={n} {np.dtype(dtype)}: residual ratio {q:.3g} >= 30")


def cholesky_case(n, nrhs, block, dtype, upper):
    rng = np.random.default_rng(13)
    m = rng.standard_normal((n, n))
    ga = (m @ m.T / n + np.eye(n)).astype(dtype).astype(np.float64)
    gb = rng.standard_normal((n, nrhs)).astype(dtype).astype(np.float64)
    la, lb = fd.Layout((n, n), comm, block=block), fd.Layout((n, nrhs), comm, block=block)
    a, b = spread(ga.astype(dtype), la), spread(gb.astype(dtype), lb)
    f = fd.cholesky(a, comm, layout=la, upper=upper)
    got = fd.gather(f, comm, la)
    x = fd.gather(fd.cho_solve((f, not upper), b, comm, layout=(la, lb)), comm, lb)
    if rank == 0:
        ref = np.linalg.cholesky(ga)
        tol = 1e-10 if dtype == np.float64 else 1e-4
        e = rel(got, ref.T if upper else ref)
        check(e <= tol, f"cholesky n={n} {np.dtype(dtype)} upper={upper}: rel error {e:.3g} vs numpy > {tol}")
        q = residual_ratio(ga, x, gb)
        check(q < 30, f"cho_solve n={n} {np.dtype(dtype)} upper={upper}: residual ratio {q:.3g} >= 30")


def fftw_mpi_available():
    """False (and a SKIPPED line) where libfusemath_mpi was built without FFTW-MPI (CPU ranks' FFTs unavailable)."""
    try:
        fd.FFT(np.zeros((size, 2), np.complex64)[:1], comm, global_shape=(size, 2)).plan().close()
        return True
    except fusemath.UnavailableError as e:
        if rank == 0:
            print(f"mpi_dist_worker {sys.argv[1]} on {size} ranks: SKIPPED ({e})")
        return False
    except Exception:  # noqa: BLE001 - the cases themselves report anything else
        return True


def scalapack_available():
    try:
        fd.Grid(comm).close()
        return True
    except fusemath.UnavailableError as e:
        if rank == 0:
            print(f"mpi_dist_worker {sys.argv[1]} on {size} ranks: SKIPPED ({e})")
        return False


def scalapack():
    for dtype in (np.float64, np.float32):
        matmul_case(37, 23, 29, (8, 8), dtype, "gelu", 0.7, 0.3, True)
        matmul_case(20, 30, 10, ((5, 7), (7, 4)), dtype, "relu", -1.5, 0.0, False)
        matmul_case(16, 9, 24, (64, 64), dtype, None, 1.0, 0.0, True)
        solve_case(60, 3, 8, dtype)
        cholesky_case(45, 2, 8, dtype, False)
        cholesky_case(45, 2, 8, dtype, True)
    matmul_case(33, 17, 41, (6, 6), np.float64, "silu", 1.0, 1.0, True)
    matmul_case(25, 19, 27, (4, 4), np.float64, "sigmoid", 2.0, 0.0, False)
    solve_case(150, 4, 16, np.float64)
    solve_case(9, 1, 4, np.float64, comm=MPI.COMM_SELF)  # one rank, each on its own
    # a 1 x size grid of one's own; the indices of the local rows / columns are the library's
    with fd.Grid(comm, (1, size)) as g:
        lay = fd.Layout((30, 22), comm, block=(4, 3), grid=g)
        check(g.shape == (1, size) and g.coords == (0, rank), f"grid {g}")
        from fusemath._dist_scalapack import _global_index
        for axis, idx in ((0, lay.rows), (1, lay.cols)):
            mine = [_global_index(lay, axis, i) for i in range(len(idx))]
            check(list(idx) == mine, f"axis {axis}: {list(idx)} != the library's {mine}")
        g2 = np.arange(30 * 22, dtype=np.float64).reshape(30, 22)
        back = fd.gather(fd.scatter(g2, comm, lay), comm, lay)
        check(rank != 0 or np.array_equal(back, g2), "scatter then gather is not the identity")


def scalapack_errors():
    last = rank == size - 1
    lay = fd.Layout((24, 24), comm, block=4)
    lb = fd.Layout((24, 3), comm, block=4)
    rng = np.random.default_rng(3)
    a = fd.scatter(rng.standard_normal((24, 24)), comm, lay)
    b = fd.scatter(rng.standard_normal((24, 3)), comm, lb)
    wrong = a[:-1] if rank == 0 else a  # rank 0 holds block (0, 0): a row fewer there
    raises("wrong local shape", fusemath.ShapeError, "local block", lambda: fd.solve(wrong, b, comm, layout=(lay, lb)))
    l5 = fd.Layout((24, 3), comm, block=(5, 3))
    b5 = fd.scatter(np.ones((24, 3)), comm, l5)
    raises("mismatched layouts", ValueError, "mismatched layouts", lambda: fd.solve(a, b5, comm, layout=(lay, l5)))
    with fd.Grid(comm) as own:
        other = fd.Layout((24, 3), comm, block=4, grid=own)
        raises("different grids", ValueError, "different grids", lambda: fd.solve(a, b, comm, layout=(lay, other)))
    sing = fd.scatter(np.diag([2.0] * 5 + [0.0] + [2.0] * 18), comm, lay)
    raises("singular", fusemath.LinAlgError, "U[5, 5]", lambda: fd.solve(sing, b, comm, layout=(lay, lb)))
    neg = fd.scatter(np.diag([3.0] * 3 + [-1.0] + [3.0] * 20), comm, lay)
    raises("not SPD", fusemath.LinAlgError, "leading minor of order 4", lambda: fd.cholesky(neg, comm, layout=lay))
    raises("block -3", ValueError, "block sizes", lambda: fd.Layout((10, 10), comm, block=-3))
    raises("block on one rank", ValueError, "block sizes", lambda: fd.Layout((10, 10), comm, block=-3 if last else 4))
    raises("block type", TypeError, "pair of ints", lambda: fd.Layout((10, 10), comm, block="x"))
    raises("grid shape", ValueError, "exactly", lambda: fd.Grid(comm, (size + 1, 1)))
    raises("a None", TypeError, "NumPy array", lambda: fd.solve(None, b, comm, layout=(lay, lb)))
    raises("a None on one rank", TypeError, "NumPy array",
           lambda: fd.solve(None if last else a, b, comm, layout=(lay, lb)))
    raises("int dtype", fusemath.DtypeError, "float32 or float64",
           lambda: fd.solve(a.astype(np.int64), b, comm, layout=(lay, lb)))
    raises("mixed dtypes", fusemath.DtypeError, "expected the same",
           lambda: fd.solve(a.astype(np.float32), b, comm, layout=(lay, lb)))
    if size > 1:
        raises("dtype on one rank", ValueError, "disagree on dtype",
               lambda: fd.solve(a.astype(np.float32) if last else a, b.astype(np.float32) if last else b, comm,
                                layout=(lay, lb)))
    raises("bias length", fusemath.ShapeError, "bias has shape",
           lambda: fd.matmul(a, b, comm, layout=(lay, lb), bias=np.ones(4)))
    raises("dropout", fusemath.NotSupportedError, "not implemented",
           lambda: fd.matmul(a, b, comm, layout=(lay, lb), epilogue="relu+dropout"))
    raises("epilogue name", ValueError, "", lambda: fd.matmul(a, b, comm, layout=(lay, lb), epilogue="bogus"))
    raises("beta without c", ValueError, "c is NULL", lambda: fd.matmul(a, b, comm, layout=(lay, lb), beta=1.0))
    raises("layout type", TypeError, "tuple of", lambda: fd.matmul(a, b, comm, layout=lay))
    raises("comm", TypeError, "mpi4py communicator", lambda: fd.solve(a, b, 0, layout=(lay, lb)))
    raises("upper", TypeError, "upper must be a bool", lambda: fd.cholesky(a, comm, layout=lay, upper="yes"))
    raises("scatter shape", fusemath.ShapeError, "layout's is",
           lambda: fd.scatter(np.zeros((5, 5)) if rank == 0 else None, comm, lay))
    raises("gather shape on one rank", fusemath.ShapeError, "this rank's block",
           lambda: fd.gather(np.zeros((1, 1)) if last else a, comm, lay))
    # the failures left nothing behind: a good call still works
    x = fd.gather(fd.solve(fd.scatter(np.eye(24) * 2, comm, lay), b, comm, layout=(lay, lb)), comm, lb)
    full_b = fd.gather(b, comm, lb)
    check(rank != 0 or np.allclose(x, full_b / 2, rtol=1e-14, atol=0), "solve after the failures")


_WHAT = {"transforms": transforms, "chains": chains, "errors": errors, "scalapack": scalapack, "scalapack_errors": scalapack_errors}
if sys.argv[1].startswith("scalapack") and not scalapack_available():
    sys.exit(0)
if sys.argv[1] in ("transforms", "chains", "errors") and not fftw_mpi_available():
    sys.exit(0)
_WHAT[sys.argv[1]]()
finish(f"mpi_dist_worker {sys.argv[1]}")
