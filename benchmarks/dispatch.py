#!/usr/bin/env python3
"""Cost-aware dispatch (execution="best") against forced devices, NumPy data, side by side in one run.

Per family and size: forced cpu, forced cuda (the copies to the GPU and back included), "best" from the
built-in model (no profile) and "best" from a profile measured first by fusemath.calibrate(quick=True)
(its time is recorded too). Families: matmul + bias + relu f32 (n x n x n), fft2 c64 (n x n),
standard_normal f32 (n x n values, portable mode: the same values on both devices) and solve f64 (n x n,
16 right-hand sides). The target (issue 29): "best" within 1.10x of the better forced device at every size.
Writes dispatch.json into --out-dir.
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

import numpy as np

import fusemath
import fusemath.fft
import fusemath.linalg
import fusemath.random

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import machine, write_json  # noqa: E402
from crossover import per_call  # noqa: E402

SIZES = {"matmul": [64, 128, 256, 384, 512, 768, 1024, 2048, 4096],
         "fft": [64, 128, 256, 512, 768, 1024, 1536, 2048, 4096],
         "rng": [64, 128, 256, 512, 1024, 2048, 4096, 8192],
         "solve": [64, 128, 256, 512, 1024, 2048, 3072, 4096]}
MODES = ("cpu", "cuda", "best-builtin", "best")


def make_call(op, mode, n, rng, cp):
    """-> (call returning a NumPy result, describe() of the plan or None)."""
    ex = "best" if mode.startswith("best") else mode
    if op == "matmul":
        a, b, bias = (rng.standard_normal(s, dtype=np.float32) for s in ((n, n), (n, n), (n,)))
        mm = fusemath.Matmul(a, b, options={"execution": ex})
        mm.plan(epilogue="relu", bias=bias)
        return mm.execute, mm.describe()
    if op == "fft":
        x = (rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n))).astype(np.complex64)
        return (lambda: fusemath.fft.fft2(x, execution=ex)), None
    if op == "rng":
        g = fusemath.random.default_rng(int(rng.integers(1 << 62)), device="best" if ex == "best" else ex)
        if ex == "cuda":
            return (lambda: cp.asnumpy(g.standard_normal((n, n), dtype=np.float32))), None
        return (lambda: g.standard_normal((n, n), dtype=np.float32)), None
    a = rng.standard_normal((n, n)) + n ** 0.5 * np.eye(n)
    b = rng.standard_normal((n, 16))
    return (lambda: fusemath.linalg.solve(a, b, execution=ex)), None


def sweep(op, sizes, budget, seed, cp, calibrated):
    rng, rows = np.random.default_rng(seed), []
    for n in sizes:
        row = {"n": n}
        for mode in MODES:
            if mode == "best-builtin":
                fusemath._C.profile_clear()
            elif mode == "best":
                fusemath.wisdom.load(calibrated)  # the measured profile back
            call, desc = make_call(op, mode, n, rng, cp)
            call()
            t = per_call(call, lambda: None, budget if n <= 1024 else 0.6 * budget)
            row[mode] = t["ms"]
            row[mode + "_spread"] = t["spread"]
            if desc:
                row[mode + "_plan"] = desc
        better = min(row["cpu"], row["cuda"])
        row["best_over_better"] = row["best"] / better
        row["builtin_over_better"] = row["best-builtin"] / better
        rows.append(row)
        print(f"  {op:6} n={n:5d}  cpu {row['cpu']:9.3f} ms  cuda {row['cuda']:9.3f} ms  "
              f"best {row['best']:9.3f} ms ({row['best_over_better']:.2f}x)  builtin {row['best-builtin']:9.3f} ms "
              f"({row['builtin_over_better']:.2f}x)", flush=True)
    return rows


def overhead(rounds: int, calls: int) -> dict:
    """Per-call cost of "best" over the location rule (auto) on NumPy data, paired rounds, the order
    alternating: stateless matmul 64x64 f32, stateless fft of 1024 c128, a planned matmul's execute."""
    import statistics
    a = np.ones((64, 64), np.float32)
    x = np.ones(1024, np.complex128)
    plans = {}
    for ex in ("auto", "best"):
        mm = fusemath.Matmul(a, a, options={"execution": ex})
        mm.plan()
        plans[ex] = mm
    cases = {"matmul_stateless": lambda ex: (lambda: fusemath.matmul(a, a, execution=ex)),
             "fft_stateless": lambda ex: (lambda: fusemath.fft.fft(x, execution=ex)),
             "matmul_planned": lambda ex: plans[ex].execute}
    res = {}
    for name, make in cases.items():
        diffs, per = [], {"auto": [], "best": []}
        for r in range(rounds):
            t = {}
            for ex in (("auto", "best") if r % 2 == 0 else ("best", "auto")):
                fn = make(ex)
                fn()
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                t[ex] = (time.perf_counter() - t0) / calls * 1e6
                per[ex].append(t[ex])
            diffs.append(t["best"] - t["auto"])
        q = statistics.quantiles(diffs, n=4)
        res[name] = {"auto_us": statistics.median(per["auto"]), "best_us": statistics.median(per["best"]),
                     "best_minus_auto_us": statistics.median(diffs), "quartiles_us": [q[0], q[2]]}
        print(f"  {name:18} auto {res[name]['auto_us']:7.2f} us  best {res[name]['best_us']:7.2f} us  "
              f"best - auto {res[name]['best_minus_auto_us']:+.3f} us (quartiles {q[0]:+.3f} .. {q[2]:+.3f})")
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", default=os.path.join(os.getcwd(), "fusemath-bench"))
    p.add_argument("--ops", default="matmul,fft,rng,solve")
    p.add_argument("--budget", type=float, default=0.3, help="seconds of timed calls per point and mode")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--overhead", action="store_true", help="only the per-call cost of best over auto (no GPU needed)")
    p.add_argument("--rounds", type=int, default=21)
    args = p.parse_args(argv)
    if args.overhead:
        res = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "machine": machine(),
               "threads": fusemath.get_num_threads(), "profile": fusemath.machine_profile().partition("\n")[0],
               "command": " ".join(["benchmarks/dispatch.py"] + sys.argv[1:]),
               "overhead": overhead(args.rounds, 20000)}
        write_json(os.path.join(args.out_dir, "dispatch_overhead.json"), res)
        return 0
    if fusemath.cuda_device_count() < 1:
        print("dispatch: needs a GPU (fusemath.cuda_device_count() = 0)")
        return 0
    import cupy as cp
    os.makedirs(args.out_dir, exist_ok=True)
    t0 = time.perf_counter()
    fusemath.calibrate(quick=True, progress=False)
    calibrate_s = time.perf_counter() - t0
    calibrated = os.path.join(args.out_dir, "dispatch-profile.wisdom")
    fusemath.wisdom.save(calibrated)
    print(f"dispatch: calibrate(quick=True) took {calibrate_s:.1f} s\n{fusemath.machine_profile()}")
    res = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
           "machine": machine(gpu=True), "threads": fusemath.get_num_threads(), "calibrate_quick_s": calibrate_s,
           "profile": fusemath.machine_profile(), "command": " ".join(["benchmarks/dispatch.py"] + sys.argv[1:]),
           "ops": {}}
    for op in [o for o in SIZES if o in args.ops.split(",")]:
        res["ops"][op] = sweep(op, SIZES[op], args.budget, args.seed, cp, calibrated)
        worst = max(r["best_over_better"] for r in res["ops"][op])
        print(f"{op}: best / better device, worst over sizes: {worst:.2f}x (target <= 1.10)")
        write_json(os.path.join(args.out_dir, "dispatch.json"), res)  # after each family: a timeout keeps them
    print(f"dispatch: wrote {args.out_dir}/dispatch.json ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
