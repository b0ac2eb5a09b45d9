"""One rank of tests/python/test_distributed_gpu.py's runs (mpirun -np N python mpi_dist_gpu_worker.py WHAT):
fusemath.distributed.FFT on GPU ranks (WHAT "pencil": decomposition="pencil", every grid of the size) (CuPy arrays, or torch CUDA tensors where CuPy is missing), every
rank on cuda:(rank % GPUs), so that 2 ranks on a one-GPU machine share it (the staged exchange).

Every rank makes the same global array; its block goes to the GPU, is transformed, comes back, and the
blocks gathered from every rank are compared with numpy.fft of the whole array in float64 (relative
max error <= 1e-5 f32 / 1e-12 f64). Error cases must raise the same exception on every rank, and a
rank left waiting would hang: the pytest side kills the run after a timeout. Exits 1 on a failure."""
import sys

import numpy as np

import fusemath
import fusemath.distributed as fd

from mpi_worker_common import check, comm, finish, gather, raises, rank, rel_err, size

CPU = "--cpu" in sys.argv[2:]  # the same cases on CPU ranks (NumPy): a check of this worker's references


def _arrays():
    """to_gpu, to_host and the number of GPUs (CuPy, else torch; NumPy with --cpu)"""
    if CPU:
        return np.ascontiguousarray, (lambda a: a), size
    try:
        import cupy as cp
    except ImportError:
        cp = None
    if cp is not None:
        n = cp.cuda.runtime.getDeviceCount()
        cp.cuda.Device(rank % n).use()
        return cp.asarray, cp.asnumpy, n
    import torch
    n = torch.cuda.device_count()
    torch.cuda.set_device(rank % n)
    return (lambda a: torch.from_numpy(np.ascontiguousarray(a)).cuda()), (lambda a: a.cpu().numpy()), n


to_gpu, to_host, NGPU = _arrays()


def global_array(shape, dtype, seed=1234):
    rng = np.random.default_rng(seed)  # the same on every rank
    real = np.dtype(dtype).kind == "f"
    g = rng.standard_normal(shape) + (0 if real else 1j * rng.standard_normal(shape))
    return g.astype(dtype)


def block(g, kind, layout="slab"):
    loc, off = fd.local_shape(g.shape if kind != "c2r" else g.shape, comm, kind=kind, layout=layout)
    return g[off[0]:off[0] + loc[0]] if layout == "slab" else g.swapaxes(0, 1)[off[0]:off[0] + loc[0]].copy()


def transform_case(shape, kind, dtype, layout_out):
    """forward (with prolog scale + epilog scale, ortho) against numpy, then the inverse from that layout."""
    real = np.dtype(dtype).kind == "f"
    g = global_array(shape, dtype)
    tol = 1e-5 if dtype in (np.float32, np.complex64) else 1e-12
    x = to_gpu(block(g, kind))
    scale = 0.5 if real else 0.5 - 0.25j
    with fd.FFT(x, comm, global_shape=shape, kind=kind, layout_out=layout_out) as f:
        f.plan(norm="ortho", prolog={"scale": 2.0}, epilog={"scale": scale})
        d = f.describe()
        check(CPU or (d.startswith("dist_fft cuda:") and "exchange=" in d), f"describe: {d}")
        if NGPU < size and not CPU:  # ranks share a GPU: auto / staged take an MPI path (nccl is refused there)
            check(size == 1 or "exchange=staged" in d or "exchange=mpi-cuda-aware" in d, f"shared GPU: {d}")
        y = f.execute()
        check(type(y) is type(x), f"execute returned {type(y).__name__}, not {type(x).__name__}")
        check(tuple(y.shape) == f.out_local_shape, f"out shape {tuple(y.shape)} != {f.out_local_shape}")
        ref = (np.fft.rfftn if kind == "r2c" else np.fft.fftn)(g.astype(np.float64 if real else np.complex128),
                                                                norm="ortho") * 2.0 * scale
        if layout_out == "transposed":
            ref = ref.swapaxes(0, 1)
        yh = to_host(y)
        e = rel_err(gather(yh, f.out_offset[0], ref.shape), ref)
        check(e <= tol, f"{d}: relative error {e:.3g} > {tol}")
        inv_kind = "c2r" if kind == "r2c" else "c2c"
        gshape = shape[:-1] + (shape[-1] // 2 + 1,) if kind == "r2c" else shape
        with fd.FFT(y, comm, global_shape=gshape, kind=inv_kind, direction="inverse", layout_in=layout_out,
                    n=shape[-1] if kind == "r2c" else None) as b:
            b.plan(norm="ortho", epilog=None if real else {"conj": True})
            z = to_host(b.execute())
            back = gather(z, b.out_offset[0], shape) / (2.0 * np.conj(scale))
            want = g if real else np.conj(g)
            e = rel_err(back, want.astype(np.complex128))
            check(e <= tol, f"{b.describe()}: round trip relative error {e:.3g} > {tol}")
        # the CPU ranks' blocks are the same (local_shape does not depend on the device)
        check(f.out_local_shape == fd.local_shape(shape, comm, kind=kind, which="out", layout=layout_out)[0],
              "out_local_shape differs from local_shape(which='out')")


def chain_case(shape, kind, dtype, layout_out):
    """multiply arrays (each rank's blocks, on the GPU) in the prolog and the epilog, conj, backward norm."""
    real = np.dtype(dtype).kind == "f"
    cdt = np.complex64 if dtype in (np.float32, np.complex64) else np.complex128
    rdt = np.float32 if cdt == np.complex64 else np.float64
    g = global_array(shape, dtype, seed=7)
    tol = 1e-5 if rdt == np.float32 else 1e-12
    w = global_array(shape, rdt, seed=8) + 2  # a real window on the input
    oshape = shape[:-1] + (shape[-1] // 2 + 1,) if kind == "r2c" else shape
    m = global_array(oshape, cdt, seed=9)     # a complex filter on the output
    mo = m.swapaxes(0, 1) if layout_out == "transposed" else m
    loc_o, off_o = fd.local_shape(shape, comm, kind=kind, which="out", layout=layout_out)
    x = to_gpu(block(g, kind))
    wl = to_gpu(block(w, kind))
    ml = to_gpu(np.ascontiguousarray(mo[off_o[0]:off_o[0] + loc_o[0]]))
    with fd.FFT(x, comm, global_shape=shape, kind=kind, layout_out=layout_out) as f:
        f.plan(prolog={"multiply": wl, "scale": 1.5}, epilog={"multiply": ml, "conj": True})
        y = to_host(f.execute())
        ref = np.conj((np.fft.rfftn if kind == "r2c" else np.fft.fftn)(
            g.astype(np.float64 if real else np.complex128) * w * 1.5) * m)
        if layout_out == "transposed":
            ref = ref.swapaxes(0, 1)
        e = rel_err(gather(y, f.out_offset[0], ref.shape), ref)
        check(e <= tol, f"chains {f.describe()}: relative error {e:.3g} > {tol}")
    if kind == "c2c":  # an inverse from the slab: the prolog multiply in the pack, the epilog in the core's plan
        with fd.FFT(x, comm, global_shape=shape, kind="c2c", direction="inverse") as b:
            b.plan(prolog={"multiply": wl}, epilog={"multiply": to_gpu(block(w, kind)), "scale": 3.0})
            z = to_host(b.execute())
            ref = np.fft.ifftn(g.astype(np.complex128) * w) * w * 3.0
            e = rel_err(gather(z, b.out_offset[0], shape), ref)
            check(e <= tol, f"inverse chains {b.describe()}: relative error {e:.3g} > {tol}")


def gpu():
    for shape in ((8, 6), (12, 10, 6), (7, 5, 9)):
        for dtype in (np.complex64, np.complex128, np.float32, np.float64):
            kind = "c2c" if np.dtype(dtype).kind == "c" else "r2c"
            for layout_out in ("slab", "transposed"):
                transform_case(shape, kind, dtype, layout_out)
    for shape in ((8, 6), (6, 8, 10)):
        for dtype in (np.complex64, np.float64):
            kind = "c2c" if np.dtype(dtype).kind == "c" else "r2c"
            for layout_out in ("slab", "transposed"):
                chain_case(shape, kind, dtype, layout_out)


def gpu_errors():
    shape = (8, 6, 4)
    g = global_array(shape, np.complex64)
    xb = block(g, "c2c")
    # a CUDA array on rank 0, NumPy on the others: every rank fails, none waits
    x = to_gpu(xb) if rank == 0 else xb
    if not CPU:
        raises("mixed devices", fusemath.InvalidArgumentError, "disagree on where the data lives",
               lambda: fd.FFT(x, comm, global_shape=shape).plan())
    # mismatched global shapes
    bad = (8, 6, 4) if rank == 0 else (8, 6, 6)
    xg = to_gpu(block(global_array(bad, np.complex64), "c2c"))
    raises("shapes", fusemath.InvalidArgumentError, "disagree on n[2]",
           lambda: fd.FFT(xg, comm, global_shape=bad).plan())
    # a block that does not tile the global array
    wrong = to_gpu(np.zeros((1,) + shape[1:], np.complex64))
    if size > 1:
        raises("tiling", fusemath.ShapeError, "does not tile", lambda: fd.FFT(wrong, comm, global_shape=shape).plan())
    # a host multiply array with device data
    xd = to_gpu(xb)
    if not CPU:
        raises("host multiply array", TypeError, "must be a", lambda: fd.FFT(xd, comm, global_shape=shape).plan(
            prolog={"multiply": np.ones(xb.shape, np.float32)}))


def pencil_grids():
    """None (MPI_Dims_create's) and every P1 x P2 of this size."""
    return [None] + [(p, size // p) for p in range(1, size + 1) if size % p == 0]


def gather3(blk, offset, global_shape):
    """the global array from every rank's block at its 3-D offset (pencils split two axes)"""
    out = np.zeros(global_shape, np.complex128)
    for b, off in comm.allgather((blk, tuple(offset))):
        out[tuple(slice(o, o + n) for o, n in zip(off, b.shape))] = b
    return out


def cut(g, loc, off):
    return np.ascontiguousarray(g[tuple(slice(o, o + n) for o, n in zip(off, loc))])


def pencil_case(shape, kind, dtype, layout_out, grid, chains=False):
    """decomposition="pencil" on GPU ranks: forward (z-pencil in) to either layout, then the inverse back;
    chains: a real multiply window in the prolog and a complex filter + conj in the epilog, on the GPU."""
    real = np.dtype(dtype).kind == "f"
    rdt = np.float32 if dtype in (np.float32, np.complex64) else np.float64
    cdt = np.complex64 if rdt == np.float32 else np.complex128
    g = global_array(shape, dtype, seed=11)
    tol = 1e-5 if rdt == np.float32 else 1e-12
    pen = dict(decomposition="pencil", grid=grid)
    loc, off = fd.local_shape(shape, comm, kind=kind, **pen)
    lo, oo = fd.local_shape(shape, comm, kind=kind, which="out", layout=layout_out, **pen)
    oshape = shape[:-1] + (shape[-1] // 2 + 1,) if real else shape
    w = global_array(shape, rdt, seed=12) + 2
    m = global_array(oshape, cdt, seed=13)
    x = to_gpu(cut(g, loc, off))
    with fd.FFT(x, comm, global_shape=shape, kind=kind, layout_out=layout_out, **pen) as f:
        if chains:
            f.plan(prolog={"multiply": to_gpu(cut(w, loc, off)), "scale": 1.5},
                   epilog={"multiply": to_gpu(cut(m, lo, oo)), "conj": True})
        else:
            f.plan(norm="ortho")
        d = f.describe()
        check(CPU or (d.startswith("dist_fft cuda:") and "decomposition=pencil" in d and " exchange=" in d and
                      (grid is None or f"grid={grid[0]}x{grid[1]}" in d)), f"describe: {d}")
        y = f.execute()
        check(type(y) is type(x), f"execute returned {type(y).__name__}, not {type(x).__name__}")
        check(tuple(y.shape) == f.out_local_shape and f.out_local_shape == lo and f.out_offset == oo,
              f"out {tuple(y.shape)} {f.out_local_shape} {f.out_offset} vs local_shape {lo} {oo}")
        xin = g.astype(np.float64 if real else np.complex128)
        fft = np.fft.rfftn if real else np.fft.fftn
        ref = np.conj(fft(xin * w * 1.5) * m) if chains else fft(xin, norm="ortho")
        yh = to_host(y)
        e = rel_err(gather3(yh, oo, ref.shape), ref)
        check(e <= tol, f"{d}: relative error {e:.3g} > {tol}")
    if chains:
        return
    inv_kind = "c2r" if real else "c2c"
    with fd.FFT(y, comm, global_shape=oshape, kind=inv_kind, n=shape[-1] if real else None, direction="inverse",
                layout_in=layout_out, **pen) as b:
        b.plan(norm="ortho")
        z = to_host(b.execute())
        check(b.out_offset == off and b.out_local_shape == loc, f"inverse blocks {b.out_offset} vs {off}")
        e = rel_err(gather3(z, off, shape), g.astype(np.complex128))
        check(e <= tol, f"{b.describe()}: round trip relative error {e:.3g} > {tol}")


def pencil():
    for grid in pencil_grids():
        for dtype in (np.complex64, np.complex128, np.float32, np.float64):
            kind = "c2c" if np.dtype(dtype).kind == "c" else "r2c"
            for layout_out in ("slab", "transposed"):
                pencil_case((6, 5, 8) if kind == "r2c" else (6, 5, 7), kind, dtype, layout_out, grid)
        pencil_case((1, 3, 5), "c2c", np.complex128, "transposed", grid)  # n0 < P1: empty blocks
    for dtype in (np.complex64, np.float64):
        kind = "c2c" if np.dtype(dtype).kind == "c" else "r2c"
        for layout_out in ("slab", "transposed"):
            pencil_case((5, 6, 4), kind, dtype, layout_out, None, chains=True)


def nccl_shared():
    """FUSEMATH_DIST_EXCHANGE=nccl with ranks sharing a GPU: refused on every rank, naming the MPI paths."""
    shape = (8, 6, 4)
    x = to_gpu(block(global_array(shape, np.complex64), "c2c"))
    raises("nccl on a shared GPU", fusemath.NotSupportedError, "share one GPU, which NCCL refuses",
           lambda: fd.FFT(x, comm, global_shape=shape).plan())
    raises("nccl on a shared GPU (the suggestion)", fusemath.NotSupportedError, "FUSEMATH_DIST_EXCHANGE=mpi",
           lambda: fd.FFT(x, comm, global_shape=shape).plan())


_WHAT = {"gpu": gpu, "gpu_errors": gpu_errors, "nccl_shared": nccl_shared, "pencil": pencil}
if CPU and sys.argv[1] != "pencil":  # CPU ranks' slabs need FFTW-MPI in libfusemath_mpi (pencils do not)
    try:
        fd.FFT(np.zeros((size, 2), np.complex64)[:1], comm, global_shape=(size, 2)).plan().close()
    except fusemath.UnavailableError as e:
        if rank == 0:
            print(f"mpi_dist_gpu_worker {sys.argv[1]} --cpu on {size} ranks: SKIPPED ({e})")
        sys.exit(0)
_WHAT[sys.argv[1]]()
finish(f"mpi_dist_gpu_worker {sys.argv[1]}{' --cpu' if CPU else ''}")
