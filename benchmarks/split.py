#!/usr/bin/env python3
"""Split execution (execution="best" giving part of a batch to the CPU and the rest to the GPU at once)
against forced cpu, forced cuda (the copies to the GPU and back included) and best without split
(FUSEMATH_SPLIT=off), NumPy data, side by side. Families: batched f32 matmul + bias (batch, 512, 512) @
(512, 512), batched c64 FFT (batch, 4096) over the last axis, standard_normal f32 fills of n values
(portable: the same values on both devices); sizes where the CPU and the GPU with its copies are within
about 3x (docs/performance.md's dispatch table). The profile comes from fusemath.calibrate(quick=True) in
this process, handed to two child processes (FUSEMATH_SPLIT is read at import): one times cpu, cuda and
best, the other best with split off. The target (issue 29): split >= 1.3x faster than the better single
device where best splits. Writes split.json into --out-dir. Without a GPU: "no GPU: skipped", exit 0.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SIZES = {"matmul": [8, 16, 32, 64, 128],          # batch of 512 x 512 products
         "fft": [256, 1024, 4096, 16384],         # transforms of 4096 points
         "rng": [1 << 22, 1 << 24, 1 << 26, 1 << 27]}  # f32 values


def make_call(op, mode, n, rng, cp):
    """-> (call returning a NumPy result, describe() of the plan or "")."""
    import numpy as np
    import fusemath
    import fusemath.fft
    import fusemath.random
    ex = "best" if mode.startswith("best") else mode
    if op == "matmul":
        a = rng.standard_normal((n, 512, 512), dtype=np.float32)
        b = rng.standard_normal((512, 512), dtype=np.float32)
        bias = rng.standard_normal(512, dtype=np.float32)
        mm = fusemath.Matmul(a, b, options={"execution": ex})
        mm.plan(epilogue="bias", bias=bias)
        return mm.execute, mm.describe()
    if op == "fft":
        x = (rng.standard_normal((n, 4096)) + 1j * rng.standard_normal((n, 4096))).astype(np.complex64)
        f = fusemath.fft.FFT(x, axes=-1, execution=ex)
        f.plan(effort="estimate")
        return f.execute, f.describe()
    g = fusemath.random.default_rng(7, device=ex)
    if ex == "cuda":
        g.standard_normal(n, dtype=np.float32)
        return (lambda: cp.asnumpy(g.standard_normal(n, dtype=np.float32))), g.describe()
    g.standard_normal(n, dtype=np.float32)  # (describe() tells the last draw's plan)
    return (lambda: g.standard_normal(n, dtype=np.float32)), g.describe()


def child(args) -> int:
    """Time the modes for every op and size under this process's FUSEMATH_SPLIT; JSON rows on stdout."""
    import numpy as np
    import fusemath
    import fusemath.wisdom
    from crossover import per_call
    fusemath.wisdom.load(args.wisdom)
    cp = None
    if "cuda" in args.modes.split(","):
        import cupy as cp
    rows = []
    for op in args.ops.split(","):
        for n in SIZES[op]:
            row, first = {"op": op, "n": n}, None
            for mode in args.modes.split(","):
                call, desc = make_call(op, mode, n, np.random.default_rng(args.seed), cp)
                out = np.asarray(call())
                if first is None:
                    first = out
                else:  # the same operands (one seed): every mode's result must agree with the first's
                    scale = float(np.abs(first).max()) or 1.0
                    row[mode + "_err"] = float(np.abs(out - first).max()) / scale
                del out
                t = per_call(call, lambda: None, args.budget)
                row[mode] = t["ms"]
                row[mode + "_spread"] = t["spread"]
                row[mode + "_plan"] = desc
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    print(json.dumps(rows))
    return 0


def run_child(split, modes, args, wisdom):
    env = dict(os.environ, FUSEMATH_SPLIT=split, PYTHONUNBUFFERED="1")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--wisdom", wisdom, "--modes", modes, "--ops",
           args.ops, "--budget", str(args.budget), "--seed", str(args.seed)]
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(f"split child ({split}) failed with {r.returncode}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", default=os.path.join(os.getcwd(), "fusemath-bench"))
    p.add_argument("--ops", default="matmul,fft,rng")
    p.add_argument("--budget", type=float, default=0.5, help="seconds of timed calls per point and mode")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--wisdom", help=argparse.SUPPRESS)
    p.add_argument("--modes", default="cpu,cuda,best", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args)
    import fusemath
    import fusemath.wisdom
    from bench_common import machine, write_json
    if fusemath.cuda_device_count() < 1:
        print("split: no GPU: skipped")
        return 0
    os.makedirs(args.out_dir, exist_ok=True)
    t0 = time.perf_counter()
    fusemath.calibrate(quick=True, progress=False)
    wisdom = os.path.join(args.out_dir, "split-profile.wisdom")
    fusemath.wisdom.save(wisdom)
    print(f"split: calibrate(quick=True) took {time.perf_counter() - t0:.1f} s\n{fusemath.machine_profile()}")
    auto = run_child("auto", "cpu,cuda,best", args, wisdom)
    off = run_child("off", "best", args, wisdom)
    rows = []
    for a, o in zip(auto, off):
        row = dict(a, best_nosplit=o["best"], best_nosplit_plan=o["best_plan"], best_nosplit_spread=o["best_spread"])
        better = min(row["cpu"], row["cuda"])
        row["cpu_over_cuda"] = row["cpu"] / row["cuda"]
        row["split"] = "best=split" in row["best_plan"]
        tol = 0.0 if row["op"] == "rng" else 1e-4  # the portable RNG is bit-identical across devices
        row["wrong"] = [m for m in ("cuda", "best") if row.get(m + "_err", 0.0) > tol] + \
            (["best(off)"] if o.get("best_err", 0.0) > tol else [])
        row["better_over_best"] = better / row["best"]  # > 1: best is faster than either device alone
        row["nosplit_over_best"] = row["best_nosplit"] / row["best"]
        rows.append(row)
        print(f"  {row['op']:6} n={row['n']:9d}  cpu {row['cpu']:9.3f} ms  cuda {row['cuda']:9.3f} ms  "
              f"best(off) {row['best_nosplit']:9.3f} ms  best {row['best']:9.3f} ms  "
              f"{ {True: 'split', False: 'one device', None: 'split unknown'}[row['split']]}: "
              f"{row['better_over_best']:.2f}x the better device"
              + (f"  WRONG RESULT ({', '.join(row['wrong'])} differ from the cpu's beyond tolerance)" if row["wrong"]
                 else ""), flush=True)
    split_rows = [r for r in rows if r["split"]]
    wrong = [f"{r['op']} n={r['n']}" for r in rows if r["wrong"]]
    res = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "machine": machine(gpu=True),
           "threads": fusemath.get_num_threads(), "profile": fusemath.machine_profile(),
           "command": " ".join(["benchmarks/split.py"] + sys.argv[1:]), "rows": rows,
           "split_min_gain": min((r["better_over_best"] for r in split_rows), default=None),
           "target": "split >= 1.3x faster than the better single device where best splits",
           "wrong_results": wrong,
           "method": "cpu, cuda and best (FUSEMATH_SPLIT=auto) in one child process, best with FUSEMATH_SPLIT=off in "
                     "a second one after it (not interleaved); every mode's result against the first mode's (cpu)"}
    write_json(os.path.join(args.out_dir, "split.json"), res)
    print(f"split: {len(split_rows)} of {len(rows)} cases split; smallest gain over the better device "
          f"{res['split_min_gain']}; wrote {args.out_dir}/split.json ({time.perf_counter() - t0:.0f} s)")
    if wrong:
        print(f"split: WRONG RESULTS in {', '.join(wrong)}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
