#!/usr/bin/env python3
"""Distributed benchmark (issue 30): fusemath.distributed on CPU ranks against the engines called directly.

  python benchmarks/distributed.py [--quick] [--nps 1,2,4] [--rounds 5] [--effort measure] [--out PATH]
  python benchmarks/distributed.py --model [--calibration results/distributed-*.json]
  python benchmarks/distributed.py --gpu [--nps 2] [--gpu-shapes 256,512] [--exchange auto|nccl|mpi|staged]

--gpu: the GPU ranks (benchmarks/dist_gpu_worker.py under mpirun, NCCL_NVLS_ENABLE=0, FUSEMATH_DIST_EXCHANGE
= --exchange): c64 forward 256^3 and 512^3, slab and transposed outputs, a fused chain, the rank's local cuFFT
stage alone and one GPU's fusemath.fft of the whole array; two ranks share a one-GPU machine (the staged
exchange), one GPU per rank where there are enough (nvidia-h200-x2: NCCL). "no GPU: skipped" without one.

For each np it runs itself under ``mpirun -np <np>`` (``--worker``); in those ranks, in paired rounds (the
order rotated each round), it times on the same local data:
  FFT, complex64 forward, 3-D 256^3 and 2-D 8192^2 (--quick: 64^3 and 1024^2):
    fusemath          fusemath.distributed.FFT(...).plan(effort) .execute(x, out=y), slab -> slab
    fftw_mpi          fftwf_mpi_plan_many_dft with the same flags (effort | FFTW_DESTROY_INPUT), fftwf_execute
                      only (benchmarks/dist_bare.c, loaded with ctypes; its destroyed input refilled untimed)
    fusemath_T / fftw_mpi_T   the same with the output transposed (FFTW_MPI_TRANSPOSED_OUT: one all-to-all fewer)
    fusemath_ow, fusemath_T_ow  plan(overwrite_input=True): FFTW-MPI on the caller's blocks, no copy (the input
                      refilled untimed, as FFTW-MPI's)
    fusemath_chain    fusemath slab -> slab with prolog {scale, multiply} and epilog {scale, multiply}
    fusemath_pencil   3-D: decomposition="pencil" on MPI_Dims_create's P1 x P2 grid, z-pencil -> z-pencil (4
                      all-to-alls); fusemath_pencil_T: -> x-pencil (2)
    mpi4py_fft        mpi4py_fft.PFFT(comm, shape, slab=True, planner_effort) .forward(u, uh): its slab
                      decomposition (input along axis 0, output along axis 1); "not installed" where it is not
  ScaLAPACK, float64 (n = 2048, --quick 512, 64 x 64 blocks, the near-square grid): fusemath.distributed.matmul
    vs pdgemm_, fusemath.distributed.solve (16 right-hand sides, overwrite) vs pdgesv_, on the same local blocks.
  the exchange: MPI_Alltoall (mpi4py, numpy buffers) of several sizes, for the alpha-beta model (--model).
Every call is timed on each rank between a barrier and its return; a call's time is the maximum over ranks;
per implementation the median of a round's calls, per pair the median (and min, max) of the rounds' ratios.
The outputs are checked first (fusemath against FFTW-MPI's on the same block, relative error <= 1e-5;
the products / solutions by a residual on rank 0). JSON: benchmarks/results/distributed-<tag>-<date>.json
with the machine (CPU model, ISA flags, BLAS core), np, and whether the ranks oversubscribe the cores.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_common import REPO_ROOT, command_line, err, machine, versions, write_json  # noqa: E402

SIZES = {"fft3d": (256, 256, 256), "fft2d": (8192, 8192), "gemm": 2048, "gesv": 2048}
MID = {"fft3d": (128, 128, 128), "fft2d": (2048, 2048), "gemm": 1024, "gesv": 1024}
QUICK = {"fft3d": (64, 64, 64), "fft2d": (1024, 1024), "gemm": 512, "gesv": 512}
BLOCK = 64


def isa() -> list:
    """The vector ISA flags of /proc/cpuinfo (avx2, avx512f, ...)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    want = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512dq", "avx512bw", "avx512vl", "amx_tile")
                    have = set(line.split(":", 1)[1].split())
                    return [w for w in want if w in have]
    except OSError:
        pass
    return []


def blas_core() -> str:
    """openblas_get_corename of the OpenBLAS fusemath links, as fusemath.blas_info() says it ("... core X, ...")."""
    try:
        import fusemath
        info = str(fusemath.blas_info())
    except Exception as exc:  # pragma: no cover - depends on the build
        return err(exc)
    words = info.replace(",", " ").split()
    return words[words.index("core") + 1] if "core" in words[:-1] else info


# ---------------------------------------------------------------- the ranks (--worker)
class Timer:
    """Per-call times (max over ranks) of the named implementations, in rotated paired rounds."""

    def __init__(self, comm, budget):
        self.comm, self.budget = comm, budget

    def one(self, fn):
        from mpi4py import MPI
        t = fn()
        return self.comm.allreduce(t, op=MPI.MAX)

    def round(self, fn):
        """the median of the calls of one round: at least one, about `budget` seconds"""
        times, spent = [], 0.0
        while not times or spent < self.budget:
            t = self.one(fn)
            times.append(t)
            spent += t
            if len(times) >= 50:
                break
        return statistics.median(times)

    def rounds(self, impls: dict, rounds: int) -> dict:
        names = list(impls)
        out = {k: [] for k in names}
        for k in names:  # a warm-up call each (plans made, pages touched)
            self.one(impls[k])
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for k in order:
                out[k].append(self.round(impls[k]))
        return out


def _bare():
    path = os.path.join(REPO_ROOT, "build", "benchmarks", "dist_bare.so")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found: cmake -S . -B build -DFUSEMATH_BUILD_BENCHMARKS=ON && "
                                "cmake --build build --target dist_bare")
    lib = ctypes.CDLL(path)
    from mpi4py import MPI
    comm_t = ctypes.c_void_p if MPI._sizeof(MPI.Comm) == ctypes.sizeof(ctypes.c_void_p) else ctypes.c_int
    for name, res, args in (
            ("bare_fft_setup", ctypes.c_int, [ctypes.c_int, comm_t, ctypes.c_int, ctypes.POINTER(ctypes.c_long),
                                              ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]),
            ("bare_fft_execute", ctypes.c_double, [ctypes.c_int]),
            ("bare_fft_output", ctypes.c_long, [ctypes.c_int, ctypes.c_void_p]),
            ("bare_fft_destroy", None, [ctypes.c_int]),
            ("bare_sl_grid", ctypes.c_int, [comm_t, ctypes.c_int, ctypes.c_int]),
            ("bare_sl_destroy", None, []),
            ("bare_pdgemm", ctypes.c_double, [ctypes.c_int, ctypes.c_int] + [ctypes.c_void_p] * 3),
            ("bare_pdgesv", ctypes.c_double, [ctypes.c_int] * 3 + [ctypes.c_void_p] * 2 + [ctypes.POINTER(ctypes.c_int)])):
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    lib.comm = lambda c: comm_t(MPI._handleof(c))
    return lib


def _ratios(times, a, b):
    r = [x / y for x, y in zip(times[a], times[b]) if y > 0]
    return {"median": statistics.median(r), "min": min(r), "max": max(r)} if r else None


def fft_case(comm, bare, shape, effort, rounds, budget):
    import numpy as np
    import fusemath.distributed as fd
    from mpi4py import MPI
    rng = np.random.default_rng(comm.rank + 1)
    loc, off = fd.local_shape(shape, comm)
    x = (rng.standard_normal(loc) + 1j * rng.standard_normal(loc)).astype(np.complex64)
    plans, impls, outs = {}, {}, {}
    grid = tuple(MPI.Compute_dims(comm.size, 2))  # the pencils' P1 x P2 (MPI_Dims_create's, P1 >= P2)
    if len(shape) == 3:
        lp = fd.local_shape(shape, comm, decomposition="pencil", grid=grid)[0]
        xp = (rng.standard_normal(lp) + 1j * rng.standard_normal(lp)).astype(np.complex64)

    def fm(name, layout, chains, overwrite=False, pencil=False):
        xx = xp if pencil else x
        kw = {"decomposition": "pencil", "grid": grid} if pencil else {}
        f = fd.FFT(xx, comm, global_shape=shape, layout_out=layout, **kw)
        xin = np.empty_like(xx) if overwrite else xx  # refilled (untimed) before each call, as FFTW's input
        if overwrite:
            f.plan(effort=effort, overwrite_input=True)
        elif chains:
            lo = fd.local_shape(shape, comm, which="out")[0]
            pro = (0.5 + rng.random(loc)).astype(np.float32)
            epi = (0.5 + rng.random(lo)).astype(np.complex64)
            f.plan(effort=effort, prolog={"scale": 0.5, "multiply": pro}, epilog={"scale": 2.0, "multiply": epi})
        else:
            f.plan(effort=effort)
        y = np.empty(f.out_local_shape, np.complex64)
        plans[name], outs[name] = f, y

        def call():
            if overwrite:
                xin[...] = xx
            comm.Barrier()
            t0 = time.perf_counter()
            f.execute(xin, out=y)
            return time.perf_counter() - t0
        impls[name] = call

    fm("fusemath", "slab", False)
    fm("fusemath_T", "transposed", False)
    fm("fusemath_ow", "slab", False, overwrite=True)
    fm("fusemath_T_ow", "transposed", False, overwrite=True)
    fm("fusemath_chain", "slab", True)
    if len(shape) == 3:  # pencils: the core's 1-D FFTs + 4 (slab out) or 2 (transposed out) all-to-alls
        fm("fusemath_pencil", "slab", False, pencil=True)
        fm("fusemath_pencil_T", "transposed", False, pencil=True)
    n_c = (ctypes.c_long * len(shape))(*shape)
    checks = {}
    for slot, (name, t) in enumerate((("fftw_mpi", 0), ("fftw_mpi_T", 1))):
        st = bare.bare_fft_setup(slot, bare.comm(comm), len(shape), n_c, 0, t, 1 if effort != "estimate" else 0,
                                 x.ctypes.data)
        if comm.allreduce(st, op=MPI.MIN) != 0:
            raise RuntimeError(f"FFTW-MPI planned nothing for {shape}")
        impls[name] = (lambda s: lambda: bare.bare_fft_execute(s))(slot)
        # the check: fusemath's output equals FFTW-MPI's on the same block
        ref = outs["fusemath_T" if t else "fusemath"]
        plans["fusemath_T" if t else "fusemath"].execute(x, out=ref)
        impls[name]()
        got = np.empty_like(ref)
        bare.bare_fft_output(slot, got.ctypes.data)
        num = comm.allreduce(float(np.abs(got - ref).max(initial=0)), op=MPI.MAX)
        den = comm.allreduce(float(np.abs(ref).max(initial=0)), op=MPI.MAX)
        checks[name] = num / max(den, 1e-300)
    times = Timer(comm, budget).rounds(impls, rounds)
    for name in plans:
        plans[name].close()
    for slot in (0, 1):
        bare.bare_fft_destroy(slot)
    row = {"shape": list(shape), "dtype": "complex64", "effort": effort, "local_in": list(loc),
           "check_rel_err_vs_fftw_mpi": checks, "times_s": times,
           "median_s": {k: statistics.median(v) for k, v in times.items()},
           "ratios": {f"{a}/{b}": _ratios(times, a, b) for a, b in
                      (("fusemath", "fftw_mpi"), ("fusemath_T", "fftw_mpi_T"), ("fusemath_ow", "fftw_mpi"),
                       ("fusemath_T_ow", "fftw_mpi_T"), ("fusemath_chain", "fusemath"),
                       ("fusemath_pencil", "fusemath"), ("fusemath_pencil_T", "fusemath_T")) if a in times}}
    if len(shape) == 3:
        row["pencil_grid"] = list(grid)
    return row


def m4_case(comm, shape, effort, rounds, budget):
    """mpi4py-fft's slab PFFT, in ranks of its own: its extension links libfftw3f_threads, fusemath
    libfftw3f_omp, and with both in one process a later fftwf_mpi_plan_many_dft returned NULL here."""
    import numpy as np
    try:
        from mpi4py_fft import PFFT, newDistArray
    except ImportError as exc:
        return {"shape": list(shape), "error": f"not installed ({err(exc)})"}
    axes = tuple(range(len(shape)))
    effort_flag = {"estimate": "FFTW_ESTIMATE", "measure": "FFTW_MEASURE", "patient": "FFTW_PATIENT"}[effort]
    try:
        pf = PFFT(comm, shape, axes=axes, dtype=np.complex64, slab=True, planner_effort=effort_flag)
    except TypeError:
        pf = PFFT(comm, shape, axes=axes, dtype=np.complex64, slab=True)
        effort_flag = "its default"
    rng = np.random.default_rng(comm.rank + 1)
    u = newDistArray(pf, False)
    u[:] = (rng.standard_normal(u.shape) + 1j * rng.standard_normal(u.shape)).astype(np.complex64)
    uh = newDistArray(pf, True)

    def call():
        comm.Barrier()
        t0 = time.perf_counter()
        pf.forward(u, uh, normalize=False)
        return time.perf_counter() - t0
    times = Timer(comm, budget).rounds({"mpi4py_fft": call}, rounds)["mpi4py_fft"]
    return {"shape": list(shape), "planner_effort": effort_flag, "local_in": list(u.shape),
            "local_out": list(uh.shape), "times_s": times, "median_s": statistics.median(times)}


def scalapack_case(comm, bare, n, rounds, budget):
    import numpy as np
    import fusemath.distributed as fd
    from mpi4py import MPI
    rng = np.random.default_rng(30)
    la = fd.Layout((n, n), comm, block=BLOCK)
    lb = la.with_shape((n, 16), block=BLOCK)
    nprow, npcol = la.grid.shape
    if comm.allreduce(bare.bare_sl_grid(bare.comm(comm), nprow, npcol), op=MPI.MIN) != 0:
        raise RuntimeError("BLACS grid")
    g = rng.standard_normal((n, n)) + n * np.eye(n) if comm.rank == 0 else None  # well conditioned
    a = fd.scatter(g, comm, la)
    bm = fd.scatter(rng.standard_normal((n, n)) if comm.rank == 0 else None, comm, la)
    rhs = fd.scatter(rng.standard_normal((n, 16)) if comm.rank == 0 else None, comm, lb)
    c = np.empty_like(a, order="F")
    a2, b2 = np.empty_like(a, order="F"), np.empty_like(rhs, order="F")
    info = ctypes.c_int(0)

    def fm_gemm():
        comm.Barrier()
        t0 = time.perf_counter()
        fd.matmul(a, bm, comm, layout=(la, la))
        return time.perf_counter() - t0

    def sl_gemm():
        return bare.bare_pdgemm(n, BLOCK, a.ctypes.data, bm.ctypes.data, c.ctypes.data)

    def fm_gesv():
        a2[...], b2[...] = a, rhs  # untimed: solve overwrites them
        comm.Barrier()
        t0 = time.perf_counter()
        fd.solve(a2, b2, comm, layout=(la, lb), overwrite_a=True, overwrite_b=True)
        return time.perf_counter() - t0

    def sl_gesv():
        a2[...], b2[...] = a, rhs
        return bare.bare_pdgesv(n, 16, BLOCK, a2.ctypes.data, b2.ctypes.data, ctypes.byref(info))

    # checks: the products agree, the solve's residual is small
    d = fd.matmul(a, bm, comm, layout=(la, la))
    sl_gemm()
    gemm_err = comm.allreduce(float(np.abs(d - c).max(initial=0)), op=MPI.MAX) / n
    x = fd.solve(a, rhs, comm, layout=(la, lb))
    ga, gx, gb = fd.gather(a, comm, la), fd.gather(x, comm, lb), fd.gather(rhs, comm, lb)
    resid = float(np.abs(ga @ gx - gb).max() / (np.abs(ga).max() * np.abs(gx).max() * n)) if comm.rank == 0 else None
    tm = Timer(comm, budget)
    gemm = tm.rounds({"fusemath": fm_gemm, "scalapack": sl_gemm}, rounds)
    gesv = tm.rounds({"fusemath": fm_gesv, "scalapack": sl_gesv}, rounds)
    bare.bare_sl_destroy()
    out = {}
    for name, t, extra in (("pdgemm", gemm, {"max_abs_diff_over_n": gemm_err}),
                           ("pdgesv", gesv, {"residual_ratio_rank0": resid, "nrhs": 16})):
        out[name] = dict(n=n, block=BLOCK, grid=[nprow, npcol], times_s=t,
                         median_s={k: statistics.median(v) for k, v in t.items()},
                         ratio=_ratios(t, "fusemath", "scalapack"), **extra)
    return out


def exchange_case(comm, rounds):
    """MPI_Alltoall of b bytes per peer message, several b: the data for the alpha-beta fit."""
    import numpy as np
    rows = []
    p = comm.size
    for per_msg in (1 << 10, 1 << 13, 1 << 16, 1 << 19, 1 << 22):
        send = np.ones(per_msg * p, np.uint8)
        recv = np.empty_like(send)

        def call():
            comm.Barrier()
            t0 = time.perf_counter()
            comm.Alltoall(send, recv)
            return time.perf_counter() - t0
        t = Timer(comm, 0.02).rounds({"alltoall": call}, rounds)["alltoall"]
        rows.append({"bytes_per_message": per_msg, "messages_per_rank": p - 1, "median_s": statistics.median(t),
                     "times_s": t})
    return rows


def worker(args) -> int:
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    sizes = {"quick": QUICK, "mid": MID, "full": SIZES}["quick" if args.quick else args.size]
    res = {"np": comm.size, "fft": [], "scalapack": None, "exchange": None, "errors": []}
    try:
        bare = _bare()
    except Exception as exc:
        bare = None
        res["errors"].append(err(exc))
    for key in ("fft3d", "fft2d"):
        if key not in args.cases or (bare is None and not args.m4):
            continue
        try:
            if args.m4:
                res["fft"].append(m4_case(comm, sizes[key], args.effort, args.rounds, args.budget))
            else:
                res["fft"].append(fft_case(comm, bare, sizes[key], args.effort, args.rounds, args.budget))
        except Exception as exc:
            res["errors"].append(f"{key}: {err(exc)}")
        if comm.rank == 0:
            print(f"np={comm.size} {key} done", flush=True)
    if bare is not None and "scalapack" in args.cases and not args.m4:
        try:
            res["scalapack"] = scalapack_case(comm, bare, sizes["gemm"], args.rounds, args.budget)
        except Exception as exc:
            res["errors"].append(f"scalapack: {err(exc)}")
    if comm.size > 1 and "exchange" in args.cases and not args.m4:
        res["exchange"] = exchange_case(comm, args.rounds)
    if comm.rank == 0:
        with open(args.json, "w") as f:
            json.dump(res, f, default=str)
    return 0



# ---------------------------------------------------------------- the alpha-beta model (--model)
# T_exchange = sum over the messages one rank sends of (alpha + bytes / beta): a slab FFT's all-to-all on
# p ranks, each holding L = S / p bytes, is p - 1 messages of L / p bytes. A slab FFT to a transposed output
# is local 2-D (or 1-D) FFTs + one all-to-all + local 1-D FFTs; restored to slabs, a second all-to-all.
# GPU figures (../shared/GPU-MACHINE.md, nvidia-h200-x2, 2026-11-29): NCCL all-to-all alpha ~55 us,
# beta ~340 GB/s per direction over NVLink; one H200's cuFFT c64 3-D at 256^3 / 512^3 / 1024^3:
# 0.24 / 1.83 / 14.8 ms; the 2-GPU slab FFT measured there: 0.37 / 2.09 / 15.8 ms; device copy 4.2 TB/s.
GPU = {"alpha_s": 55e-6, "beta_Bps": 340e9, "copy_Bps": 4.2e12,
       "cufft_1gpu_s": {256: 0.24e-3, 512: 1.83e-3, 1024: 14.8e-3},
       "slab_2gpu_measured_s": {256: 0.37e-3, 512: 2.09e-3, 1024: 15.8e-3}}
# Assumed, not measured (no multi-node machine has been lent): 8 GPUs a node on NVSwitch (each GPU's NVLink
# beta as measured on 2), nodes joined by one 400 Gb/s InfiniBand NDR HCA per GPU (DGX / HGX H200 style):
# beta 40 GB/s effective of the 50 GB/s line rate, alpha 20 us a message through NCCL's network proxy.
IB = {"gpus_per_node": 8, "alpha_s": 20e-6, "beta_Bps": 40e9, "line_rate": "400 Gb/s NDR per GPU"}


def exchange_s(p, local_bytes, alpha, beta, per_node=None, alpha_far=None, beta_far=None):
    """one all-to-all: each rank sends p - 1 messages of local_bytes / p (those beyond its node at the far
    alpha, beta when per_node is given); the sum of (alpha + bytes / beta) over them."""
    m = local_bytes / p
    near = p - 1 if per_node is None else min(p, per_node) - 1
    far = (p - 1) - near
    t = near * (alpha + m / beta)
    if far:
        t += far * (alpha_far + m / beta_far)
    return t


def gpu_fft_s(n, p, exchanges=1):
    """predicted 3-D c64 slab FFT of n^3 on p GPUs: local cuFFT (one GPU's time / p), a packing pass of the
    local block (read + write at the copy rate) per exchange, and the exchanges."""
    total = 8 * n ** 3
    local = GPU["cufft_1gpu_s"][n] / p
    if p == 1:
        return {"local_s": local, "pack_s": 0.0, "exchange_s": 0.0, "total_s": local}
    lb = total / p
    pack = exchanges * 2 * lb / GPU["copy_Bps"]
    far = {} if p <= IB["gpus_per_node"] else dict(per_node=IB["gpus_per_node"], alpha_far=IB["alpha_s"],
                                                   beta_far=IB["beta_Bps"])
    ex = exchanges * exchange_s(p, lb, GPU["alpha_s"], GPU["beta_Bps"], **far)
    return {"local_s": local, "pack_s": pack, "exchange_s": ex, "total_s": local + pack + ex}


def fit_alpha_beta(rows):
    """least squares of T / (p - 1) = alpha + b / beta over (p, b, T) rows, relative to each T (the sizes
    span 4 decades), alpha >= 0 (refit through the origin when the free fit goes negative) -> (alpha, beta)"""
    import numpy as np
    y = np.array([t / (p - 1) for p, b, t in rows])
    b = np.array([float(b) for p, b, t in rows])
    a = np.stack([np.ones_like(b), b], 1) / y[:, None]
    (alpha, inv_beta), *_ = np.linalg.lstsq(a, np.ones_like(y), rcond=None)
    if alpha < 0:
        alpha, inv_beta = 0.0, float(np.sum(b / y) / np.sum((b / y) ** 2))
    return float(alpha), float(1 / inv_beta) if inv_beta > 0 else float("inf")


def cpu_model(cal):
    """alpha, beta fitted on the calibration's MPI_Alltoall rows; its FFTs predicted from the np = 1 time
    and compared with the measured ones"""
    rows = [(run["np"], e["bytes_per_message"], e["median_s"]) for run in cal["runs"]
            if run.get("exchange") and not run.get("oversubscribed") for e in run["exchange"]]
    if not rows:
        return {"error": "the calibration file has no exchange rows (np >= 2, not oversubscribed)"}
    alpha, beta = fit_alpha_beta(rows)
    fit = [{"np": p, "bytes_per_message": b, "measured_s": t, "model_s": (p - 1) * (alpha + b / beta)}
           for p, b, t in rows]
    one = {tuple(r["shape"]): r["median_s"] for run in cal["runs"] if run["np"] == 1 for r in run.get("fft", [])}
    checks = []
    for run in cal["runs"]:
        p = run["np"]
        for r in run.get("fft", []):
            shape = tuple(r["shape"])
            if p == 1 or shape not in one:
                continue
            lb = 8 * _prod(shape) / p  # complex64 bytes a rank holds
            for name, ex in (("fusemath", 2), ("fusemath_T", 1)):
                if name in r["median_s"] and name in one[shape]:
                    pred = one[shape][name] / p + ex * exchange_s(p, lb, alpha, beta)
                    checks.append({"np": p, "shape": list(shape), "impl": name, "measured_s": r["median_s"][name],
                                   "model_s": pred, "oversubscribed": run.get("oversubscribed")})
    return {"alpha_s": alpha, "beta_Bps": beta, "fit": fit, "fft_checks": checks,
            "machine": cal.get("machine", {}).get("cpu_model"), "calibration_date": cal.get("date")}


def _prod(v):
    k = 1
    for x in v:
        k *= x
    return k


def model_main(calibration) -> int:
    import glob
    out = {"model": "T_exchange = sum over messages (alpha + bytes / beta)", "gpu": GPU, "ib_assumed": IB,
           "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    lines = ["GPU, 2 H200s measured (GPU-MACHINE.md) vs the model (one exchange, transposed output):"]
    out["gpu_check"] = []
    for n in (256, 512, 1024):
        m = gpu_fft_s(n, 2)
        meas = GPU["slab_2gpu_measured_s"][n]
        out["gpu_check"].append({"n": n, "measured_s": meas, **m})
        lines.append(f"  {n}^3: measured {meas * 1e3:.2f} ms, model {m['total_s'] * 1e3:.2f} ms (local "
                     f"{m['local_s'] * 1e3:.2f} + pack {m['pack_s'] * 1e3:.2f} + exchange {m['exchange_s'] * 1e3:.2f})")
    out["gpu_1024"] = []
    lines.append("1024^3 c64 slab FFT predicted (ms): GPUs | local | pack | exchange | total (transposed out) | "
                 "total (restored: 2 exchanges)")
    for p in (1, 2, 4, 8, 64):
        m, m2 = gpu_fft_s(1024, p), gpu_fft_s(1024, p, exchanges=2)
        out["gpu_1024"].append({"gpus": p, "transposed_out": m, "restored": m2})
        lines.append(f"  {p:3d} | {m['local_s'] * 1e3:6.2f} | {m['pack_s'] * 1e3:5.2f} | {m['exchange_s'] * 1e3:6.2f} | "
                     f"{m['total_s'] * 1e3:6.2f} | {m2['total_s'] * 1e3:6.2f}")
    if calibration is None:
        found = sorted(glob.glob(os.path.join(HERE, "results", "distributed-*.json")))
        calibration = found[-1] if found else None
    if calibration:
        with open(calibration) as f:
            cpu = cpu_model(json.load(f))
        cpu["calibration"] = os.path.relpath(calibration, REPO_ROOT)
        out["cpu"] = cpu
        if "alpha_s" in cpu:
            lines.append(f"CPU ({cpu['machine']}, {cpu['calibration']}): alpha {cpu['alpha_s'] * 1e6:.2f} us, "
                         f"beta {cpu['beta_Bps'] / 1e9:.2f} GB/s from {len(cpu['fit'])} MPI_Alltoall sizes")
            for c in cpu["fft_checks"]:
                lines.append(f"  np={c['np']} {'x'.join(map(str, c['shape']))} {c['impl']}: measured "
                             f"{c['measured_s'] * 1e3:.2f} ms, model {c['model_s'] * 1e3:.2f} ms"
                             f"{' (oversubscribed)' if c['oversubscribed'] else ''}")
    print("\n".join(lines))
    path = os.path.join(HERE, "results", f"distributed_model-{time.strftime('%Y-%m-%d')}.json")
    write_json(path, out)
    print(f"wrote {path}")
    return 0


# ---------------------------------------------------------------- the driver
def mpirun_cmd(np_: int) -> list:
    exe = shutil.which("mpirun") or shutil.which("mpiexec")
    if exe is None:
        raise SystemExit("no mpirun (apt-get install openmpi-bin)")
    v = subprocess.run([exe, "--version"], capture_output=True, text=True)
    flags = ["--oversubscribe", "--allow-run-as-root"] if "Open MPI" in v.stdout + v.stderr else []
    return [exe, *flags, "-np", str(np_)]


def table(out) -> str:
    lines = []
    for run in out["runs"]:
        for row in run.get("fft", []):
            m = row["median_s"]
            cells = " ".join(f"{k} {v * 1e3:8.2f} ms" for k, v in m.items())
            rat = " ".join(f"{k} {v['median']:.3f} [{v['min']:.3f}, {v['max']:.3f}]" for k, v in row["ratios"].items()
                           if v)
            lines.append(f"np={run['np']} fft {'x'.join(map(str, row['shape']))}: {cells}\n    {rat}")
        for name, row in (run.get("scalapack") or {}).items():
            lines.append(f"np={run['np']} {name} n={row['n']}: fusemath {row['median_s']['fusemath'] * 1e3:.2f} ms, "
                         f"scalapack {row['median_s']['scalapack'] * 1e3:.2f} ms, ratio {row['ratio']['median']:.3f} "
                         f"[{row['ratio']['min']:.3f}, {row['ratio']['max']:.3f}]")
        for e in run.get("errors", []):
            lines.append(f"np={run['np']} error: {e}")
    return "\n".join(lines)


def launch(np_, args, env, extra) -> dict:
    """one mpirun of the worker; its JSON (or the error it died of)"""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tf:
        path = tf.name
    cmd = mpirun_cmd(np_) + [sys.executable, os.path.abspath(__file__), "--worker", "--json", path,
                             "--effort", args.effort, "--rounds", str(args.rounds), "--budget", str(args.budget),
                             "--cases", args.cases, "--size", "quick" if args.quick else args.size] + extra
    return run_worker(cmd, env, path, np_, args.timeout)


def run_worker(cmd, env, path, np_, timeout) -> dict:
    """run one mpirun command whose rank 0 writes JSON to path; that JSON (or the error it died of)"""
    print(" ".join(cmd), flush=True)
    p = None
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        tail = (p.stderr or p.stdout)[-1500:] if p is not None else ""
        return {"np": np_, "errors": [f"worker failed: {err(exc)} {tail}"]}
    finally:
        if os.path.exists(path):
            os.unlink(path)


def driver(args) -> int:
    import fusemath
    cores = len(os.sched_getaffinity(0))
    out = {"benchmark": "distributed", "date": time.strftime("%Y-%m-%d %H:%M:%S"), "command": command_line(),
           "machine": dict(machine(), tag=args.machine_tag, isa=isa(), blas_core=blas_core(),
                           blas=fusemath.blas_info()),
           "versions": versions("numpy", "mpi4py", "mpi4py-fft"), "effort": args.effort,
           "size": "quick" if args.quick else args.size, "sizes": {"quick": QUICK, "mid": MID, "full": SIZES}[
               "quick" if args.quick else args.size],
           "method": "paired rounds in the same ranks (order rotated per round); a call's time is the max over "
                     "ranks between a barrier and its return; per round the median of >= 1 calls (about --budget "
                     "s); ratios: median [min, max] over rounds; OMP / OpenBLAS / fusemath threads 1 per rank; "
                     "mpirun's default binding", "runs": []}
    out["mpi"] = subprocess.run(mpirun_cmd(1)[:1] + ["--version"], capture_output=True, text=True).stdout.split("\n")[0]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", FUSEMATH_NUM_THREADS="1")
    suffix = "" if args.size == "full" and not args.quick else "-quick" if args.quick else "-" + args.size
    path = args.out or os.path.join(HERE, "results", f"distributed-{args.machine_tag}-{time.strftime('%Y-%m-%d')}"
                                    f"{suffix}.json")
    for np_ in (int(v) for v in args.nps.split(",")):
        t0 = time.time()
        run = launch(np_, args, env, [])
        fft_cases = ",".join(c for c in args.cases.split(",") if c.startswith("fft"))
        if fft_cases and not args.no_mpi4py_fft:  # mpi4py-fft in ranks of its own (m4_case says why)
            m4 = launch(np_, argparse.Namespace(**dict(vars(args), cases=fft_cases)), env, ["--m4"])
            run["errors"] = run.get("errors", []) + [f"mpi4py-fft: {e}" for e in m4.get("errors", [])]
            for row, mrow in zip(run.get("fft", []), m4.get("fft", [])):
                row["mpi4py_fft"] = mrow
                if "median_s" in mrow:  # separate processes: medians compared, not paired rounds
                    row["median_s"]["mpi4py_fft"] = mrow["median_s"]
                    for a in ("fusemath", "fusemath_T"):
                        row["ratios"][f"{a}/mpi4py_fft (unpaired)"] = {
                            "median": row["median_s"][a] / mrow["median_s"], "min": min(row["times_s"][a]) /
                            max(mrow["times_s"]), "max": max(row["times_s"][a]) / min(mrow["times_s"])}
        run["oversubscribed"] = np_ > cores
        run["cores"] = cores
        run["wall_s"] = round(time.time() - t0, 1)
        out["runs"].append(run)
        print(table({"runs": [run]}), flush=True)
        write_json(path, out)  # after each np: a run cut short keeps what it measured
    print(f"wrote {path}")
    return 0


def gpu_driver(args) -> int:
    """--gpu: dist_gpu_worker.py's rows for each np; JSON benchmarks/results/distributed-gpu-<tag>-<date>.json"""
    import fusemath
    ngpu = fusemath.cuda_device_count()
    if ngpu == 0:
        print("distributed --gpu: no GPU: skipped")
        return 0
    out = {"benchmark": "distributed-gpu", "date": time.strftime("%Y-%m-%d %H:%M:%S"), "command": command_line(),
           "machine": dict(machine(gpu=True), tag=args.machine_tag), "versions": versions("numpy", "mpi4py", "cupy"),
           "exchange": args.exchange, "gpus": ngpu,
           "method": "paired rounds (order rotated); a call's time is the max over ranks between a barrier and a "
                     "device synchronize; per round the median over about --budget s; one_gpu on rank 0 alone",
           "reference_ms_h200_x2": {"note": "../shared/GPU-MACHINE.md: local cuFFT + NCCL all-to-all, 2 GPUs vs 1",
                                    "2gpu": {"256": 0.37, "512": 2.09, "1024": 15.8},
                                    "1gpu": {"256": 0.24, "512": 1.83, "1024": 14.8}}, "runs": []}
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", FUSEMATH_DIST_EXCHANGE=args.exchange)
    for np_ in (int(v) for v in (args.nps if args.nps != "1,2,4" else "2").split(",")):
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tf:
            path = tf.name
        base = mpirun_cmd(np_)
        ompi = ["-x", "NCCL_NVLS_ENABLE", "-x", "FUSEMATH_DIST_EXCHANGE"] if "--oversubscribe" in base else []
        cmd = base + ompi + [sys.executable,
                                 os.path.join(HERE, "dist_gpu_worker.py"), "--json", path, "--shapes", args.gpu_shapes,
                                 "--rounds", str(args.rounds), "--budget", str(args.budget)]
        run = run_worker(cmd, env, path, np_, args.timeout)
        out["runs"].append(run)
        for row in run.get("rows", []):
            m = row["median_s"]
            print(f"np={np_} gpus={run.get('gpus')} {'x'.join(map(str, row['shape']))}: "
                  + " ".join(f"{k} {v * 1e3:.3f} ms" for k, v in m.items() if v is not None)
                  + f" err {row.get('rel_err_vs_one_gpu', float('nan')):.2e} | {row['describe']['dist_slab']}")
        for e in run.get("errors", []):
            print(f"np={np_} error: {e}")
    path = args.out or os.path.join(HERE, "results", f"distributed-gpu-{args.machine_tag}-{time.strftime('%Y-%m-%d')}"
                                    f"-np{args.nps.replace(',', '_')}-{args.exchange}.json")
    write_json(path, out)
    print(f"wrote {path}")
    bad = [r for run in out["runs"] for r in run.get("rows", []) if not r.get("rel_err_vs_one_gpu", 1) <= 1e-4]
    return 1 if bad or any(run.get("errors") for run in out["runs"]) else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes (a 2-core machine): --size quick")
    p.add_argument("--size", default="full", choices=("quick", "mid", "full"),
                   help="full: the issue's (256^3, 8192^2, n = 2048); mid: 128^3, 2048^2, 1024; quick: 64^3, 1024^2, 512")
    p.add_argument("--nps", default="1,2,4")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--budget", type=float, default=0.2, help="seconds of calls per implementation and round")
    p.add_argument("--effort", default="measure", choices=("estimate", "measure", "patient"))
    p.add_argument("--cases", default="fft3d,fft2d,scalapack,exchange")
    p.add_argument("--machine-tag", default=platform.node() or "host")
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--no-mpi4py-fft", action="store_true", help="skip mpi4py-fft's runs")
    p.add_argument("--out", default=None)
    p.add_argument("--gpu", action="store_true", help="the GPU ranks (dist_gpu_worker.py): see the module's doc")
    p.add_argument("--gpu-shapes", default="256,512", help="--gpu: cube edges")
    p.add_argument("--exchange", default="auto", choices=("auto", "nccl", "mpi", "staged"),
                   help="--gpu: FUSEMATH_DIST_EXCHANGE for the ranks")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--json", help=argparse.SUPPRESS)
    p.add_argument("--m4", action="store_true", help=argparse.SUPPRESS)  # worker: mpi4py-fft only
    p.add_argument("--model", action="store_true", help="the alpha-beta model of the exchange (dist_model.py)")
    p.add_argument("--calibration", default=None, help="--model: a distributed-*.json to fit the CPU alpha, beta on")
    args = p.parse_args()
    if args.model:
        return model_main(args.calibration)
    if args.gpu:
        return gpu_driver(args)
    return worker(args) if args.worker else driver(args)


if __name__ == "__main__":
    sys.exit(main())
