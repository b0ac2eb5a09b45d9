#!/usr/bin/env python3
"""One rank of benchmarks/distributed.py --gpu (mpirun -np N python dist_gpu_worker.py --json PATH ...):
fusemath.distributed.FFT on GPU ranks, complex64 forward 3-D, each rank on cuda:(rank % GPUs) (two ranks on
a one-GPU machine share it: the staged exchange), CuPy arrays (torch where CuPy is missing is not done here).

Timed per shape, in paired rounds (order rotated), each call between a barrier and a device synchronize,
its time the maximum over ranks, per round the median of the round's calls:
  dist_slab     FFT(x, comm, global_shape).plan() .execute(x, out=y)        slab -> slab (two exchanges)
  dist_T        the same with layout_out="transposed"                       (one exchange)
  dist_chain    dist_slab with prolog {scale, multiply} and epilog {scale, multiply} (each rank's blocks)
  dist_pencil   decomposition="pencil" on MPI_Dims_create's grid, z-pencils in and out (np >= 2)
  local_fft     the first stage alone: fusemath.fft over axes (1, 2) of the rank's slab (its local cuFFT)
  pack_est, staged_exchange_est   estimates of the other stages outside the library: every peer's column
                block of the slab copied contiguous (CuPy), and the slab's bytes device -> pinned host,
                MPI_Alltoall (even splits only), pinned host -> device (one exchange; the slab output makes two)
  one_gpu       (np = 1 only, and on rank 0 otherwise: the rank alone) fusemath.fft over all three axes of the
                whole global array on one GPU: what the distributed transform is compared with
The results of dist_slab and dist_pencil are checked against one_gpu's slab of the same global array (the largest difference
over the largest value of the whole output, <= 1e-4, f32 over 512^3). Figures to compare with (../shared/GPU-MACHINE.md, nvidia-h200-x2, local cuFFT + NCCL
all-to-all): 0.37 / 2.09 / 15.8 ms at 256^3 / 512^3 / 1024^3 on 2 GPUs against 0.24 / 1.83 / 14.8 ms on one."""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

import fusemath
import fusemath.distributed as fd

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size


def timed(fn, sync, budget, min_calls=3):
    """median seconds of fn over about `budget` seconds (each call: barrier, call, sync; max over ranks)"""
    times, spent = [], 0.0
    while len(times) < min_calls or spent < budget:
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        sync()
        t = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        times.append(t)
        spent += t
        if len(times) >= 200:
            break
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--shapes", default="256,512")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--budget", type=float, default=0.3)
    args = ap.parse_args()
    import cupy as cp

    ngpu = cp.cuda.runtime.getDeviceCount()
    cp.cuda.Device(rank % ngpu).use()
    sync = cp.cuda.Device().synchronize
    out = {"np": size, "gpus": ngpu, "ranks_per_gpu": -(-size // ngpu), "rows": [], "errors": []}
    for n in (int(v) for v in args.shapes.split(",")):
        shape = (n, n, n)
        try:
            out["rows"].append(one_shape(cp, shape, sync, args))
        except Exception as exc:  # noqa: BLE001 - recorded, the next shape still runs
            out["errors"].append(f"{shape}: {type(exc).__name__}: {exc}")
        cp.get_default_memory_pool().free_all_blocks()
    if rank == 0:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


def field(cp, shape, lo, hi, off=(0, 0), loc=None):
    """rows [lo, hi) of a deterministic complex64 global array (the same values on every rank), axes 1 and 2
    from off for loc values (default: whole)"""
    loc = loc or shape[1:]
    i0 = cp.arange(lo, hi, dtype=cp.float32)[:, None, None]
    i1 = cp.arange(off[0], off[0] + loc[0], dtype=cp.float32)[None, :, None]
    i2 = cp.arange(off[1], off[1] + loc[1], dtype=cp.float32)[None, None, :]
    ph = 0.37 * i0 + 1.3 * i1 * i1 / shape[1] + 0.11 * i2 + 0.05 * i0 * i2 / shape[2]
    return (cp.cos(ph) + 1j * cp.sin(1.7 * ph + 0.3 * i1)).astype(cp.complex64)


def one_shape(cp, shape, sync, args):
    from fusemath.fft import FFT as SerialFFT

    loc, off = fd.local_shape(shape, comm)
    x = field(cp, shape, off[0], off[0] + loc[0])
    win = cp.broadcast_to(cp.hanning(shape[0]).astype(cp.float32)[off[0]:off[0] + loc[0], None, None], loc).copy()
    row = {"shape": list(shape), "local": list(loc)}
    pencil = size > 1
    if pencil:
        ploc, poff = fd.local_shape(shape, comm, decomposition="pencil")
        px = field(cp, shape, poff[0], poff[0] + ploc[0], poff[1:], ploc[1:])
        fp = fd.FFT(px, comm, global_shape=shape, decomposition="pencil")
        fp.plan()
        py = cp.empty(fp.out_local_shape, cp.complex64)
        pout = fd.local_shape(shape, comm, which="out", decomposition="pencil")
        row["pencil_local"] = list(ploc)
    with fd.FFT(x, comm, global_shape=shape) as fs, fd.FFT(x, comm, global_shape=shape, layout_out="transposed") as ft, \
            fd.FFT(x, comm, global_shape=shape) as fc:
        fs.plan()
        ft.plan()
        filt = cp.full(loc, 0.5 + 0.25j, cp.complex64)  # the slab output block: the input's
        fc.plan(prolog={"scale": 2.0, "multiply": win}, epilog={"scale": 0.5, "multiply": filt})
        ys, yt, yc = (cp.empty(f.out_local_shape, cp.complex64) for f in (fs, ft, fc))
        row["describe"] = {"dist_slab": fs.describe(), "dist_T": ft.describe(), "dist_chain": fc.describe()}
        fs.execute(x, out=ys)
        if pencil:
            row["describe"]["dist_pencil"] = fp.describe()
            fp.execute(px, out=py)
        sync()
        # the check: each rank's block against the one-GPU transform of the whole array (one rank at a time)
        num = den = pnum = 0.0  # the largest difference over the largest value of the whole output (a rank's
        for r in range(size):  # own block's largest can be far below the peak, which inflated a per-block ratio)
            if r == rank and loc[0] > 0:
                full = field(cp, shape, 0, shape[0])
                ref = SerialFFT(full, axes=(0, 1, 2))
                ref.plan(effort="estimate")
                whole = ref.execute()
                mine = whole[off[0]:off[0] + loc[0]]
                num, den = float(cp.abs(ys - mine).max()), float(cp.abs(mine).max())
                if pencil:
                    (pl, po) = pout
                    blk = whole[po[0]:po[0] + pl[0], po[1]:po[1] + pl[1], po[2]:po[2] + pl[2]]
                    pnum = float(cp.abs(py - blk).max()) if blk.size else 0.0
                    del blk
                del full, ref, mine, whole
                cp.get_default_memory_pool().free_all_blocks()
            comm.Barrier()
        peak = max(comm.allreduce(den, op=MPI.MAX), 1e-30)
        row["rel_err_vs_one_gpu"] = comm.allreduce(num, op=MPI.MAX) / peak
        if pencil:
            row["pencil_rel_err_vs_one_gpu"] = comm.allreduce(pnum, op=MPI.MAX) / peak
        local_plan = SerialFFT(x, axes=(1, 2))
        local_plan.plan(effort="estimate")
        # the stages' costs, estimated outside the library: a pack (every peer's column block copied
        # contiguous) and the staged exchange of the slab's bytes (device -> host, MPI_Alltoall, host -> device)
        bounds = comm.allgather(fd.local_shape(shape, comm, which="out", layout="transposed"))
        pinned = [cp.cuda.alloc_pinned_memory(x.nbytes) for _ in range(2)]  # as the library stages: pinned
        host_s, host_r = (np.frombuffer(m, np.complex64, x.size).reshape(x.shape) for m in pinned)
        back = cp.empty_like(x)

        def pack():
            for (lt, ot) in bounds:
                if lt[0]:
                    x[:, ot[0]:ot[0] + lt[0]].copy()

        def staged():
            x.get(out=host_s)
            if size > 1 and x.size % size == 0:
                comm.Alltoall(host_s, host_r)
            back.set(host_r)
        cases = {"dist_slab": lambda: fs.execute(x, out=ys), "dist_T": lambda: ft.execute(x, out=yt),
                 "dist_chain": lambda: fc.execute(x, out=yc), "local_fft": lambda: local_plan.execute(),
                 "pack_est": pack, "staged_exchange_est": staged}
        if pencil:
            cases["dist_pencil"] = lambda: fp.execute(px, out=py)
        per = {k: [] for k in cases}
        names = list(cases)
        for r in range(args.rounds):
            for k in names[r % len(names):] + names[:r % len(names)]:
                per[k].append(timed(cases[k], sync, args.budget))
        row["median_s"] = {k: statistics.median(v) for k, v in per.items()}
        row["pinned_estimate"] = True
        if pencil:
            fp.close()
        row["ratios"] = {"dist_chain/dist_slab": statistics.median(c / s for c, s in zip(per["dist_chain"],
                                                                                      per["dist_slab"]))}
        t = None  # the one-GPU transform of the whole array, on rank 0 alone (the others wait)
        if rank == 0:
            full = field(cp, shape, 0, shape[0])
            one = SerialFFT(full, axes=(0, 1, 2))
            one.plan(effort="estimate")
            out1 = cp.empty_like(full)
            ts = []
            for _ in range(max(10, 4 * args.rounds)):
                t0 = time.perf_counter()
                one.execute(out=out1)
                sync()
                ts.append(time.perf_counter() - t0)
            t = statistics.median(ts)
            del full, one, out1
            cp.get_default_memory_pool().free_all_blocks()
        row["median_s"]["one_gpu"] = comm.bcast(t, root=0)
    return row


if __name__ == "__main__":
    main()
