"""GPU random-number fills side by side (issue 27's GPU table): fusemath (portable mode: the rngkernel
backend; curand mode: libcurand's device generator) against CuPy's Generator and torch's in-place
fills, on 2^28 float32 and 2^27 float64 values (--log2 to change), preallocated outputs, one device.

Each round times every contestant once (CUDA events around `reps` calls, reps sized to >= 2 ms),
contestants in a rotating order; reported: the median ms per fill over the rounds, TB/s written,
and per fusemath entry the paired median ratio to the fastest peer. normal / uniform is the
"normal within 1.15x of uniform" target. JSON under benchmarks/results/ (rng_gpu-<date>-<host>.json).

    python benchmarks/rng_gpu.py [--log2 28] [--rounds 15] [--out PATH]
"""
import argparse
import datetime
import os
import socket
import statistics
import sys

from bench_common import REPO_ROOT, command_line, err, machine, paired, versions, write_json


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2", type=int, default=28, help="float32 values = 2^log2, float64 = 2^(log2 - 1)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import cupy as cp
    import numpy as np

    import fusemath.random as fr
    try:
        import torch
    except Exception:
        torch = None

    def timed(fn, reps):
        s = cp.cuda.get_current_stream()
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record(s)
        for _ in range(reps):
            fn()
        e1.record(s)
        e1.synchronize()
        return cp.cuda.get_elapsed_time(e0, e1) / reps

    def reps_for(fn):
        fn()
        ms = timed(fn, 3)
        return max(3, int(2.0 / max(ms, 1e-3)))

    cases = []
    for dtype, n in (("float32", 1 << args.log2), ("float64", 1 << (args.log2 - 1))):
        out = cp.empty(n, dtype=dtype)
        tout = torch.empty(n, dtype=getattr(torch, dtype), device="cuda") if torch else None
        crng = cp.random.default_rng(1)
        for dist in ("uniform", "normal", "exponential", "lognormal"):
            calls = {}
            for mode in ("portable", "curand"):
                if mode == "curand" and dist == "exponential":
                    continue
                g = fr.default_rng(1, device="cuda", mode=mode)
                f = {"uniform": lambda g=g: g.random(dtype=dtype, out=out),
                     "normal": lambda g=g: g.standard_normal(dtype=dtype, out=out),
                     "exponential": lambda g=g: g.standard_exponential(dtype=dtype, out=out),
                     "lognormal": lambda g=g: g.lognormal(0.0, 1.0, dtype=dtype, out=out)}[dist]
                if mode == "curand" and dtype == "float64":  # a run of f64 calls from 0: no replay
                    f = (lambda g=g, f=f: (setattr(g, "state", {"seed": 1, "position": 0}), f()))
                calls[f"fusemath {mode}"] = f
            if dist == "uniform":
                calls["cupy Generator"] = lambda: crng.random(n, dtype=dtype, out=out)
            elif dist == "normal":
                calls["cupy Generator"] = lambda: crng.standard_normal(n, dtype=dtype, out=out)
            elif dist == "exponential":
                calls["cupy Generator"] = lambda: crng.standard_exponential(n, dtype=dtype, out=out)
            if tout is not None:
                t = {"uniform": lambda: tout.uniform_(), "normal": lambda: tout.normal_(),
                     "exponential": lambda: tout.exponential_(), "lognormal": lambda: tout.log_normal_()}[dist]
                calls["torch"] = t
            row = {"dtype": dtype, "n": n, "distribution": dist, "ms": {}, "errors": {}}
            times = {k: [] for k in calls}
            reps = {}
            for k, fn in list(calls.items()):
                try:
                    reps[k] = reps_for(fn)
                except Exception as exc:
                    row["errors"][k] = err(exc)
                    calls.pop(k)
                    times.pop(k)
            names = list(calls)
            for r in range(args.rounds):
                for k in names[r % len(names):] + names[:r % len(names)]:
                    times[k].append(timed(calls[k], reps[k]))
            bytes_ = n * np.dtype(dtype).itemsize
            for k, ts in times.items():
                med = statistics.median(ts)
                row["ms"][k] = {"median": med, "tb_per_s": bytes_ / med / 1e9, "rounds": ts}
            peers = [k for k in times if not k.startswith("fusemath")]
            for k in times:
                if k.startswith("fusemath") and peers:
                    best = min(peers, key=lambda p: statistics.median(times[p]))
                    row["ms"][k]["vs_" + best] = paired(times[k], times[best])
            cases.append(row)
            line = "  ".join(f"{k} {v['median']:.3f} ms ({v['tb_per_s']:.2f} TB/s)" for k, v in row["ms"].items())
            print(f"{dtype} 2^{n.bit_length() - 1} {dist}: {line}", flush=True)
    for dtype in ("float32", "float64"):
        for mode in ("portable", "curand"):
            u = [c for c in cases if c["dtype"] == dtype and c["distribution"] == "uniform"]
            z = [c for c in cases if c["dtype"] == dtype and c["distribution"] == "normal"]
            k = f"fusemath {mode}"
            if u and z and k in u[0]["ms"] and k in z[0]["ms"]:
                print(f"{dtype} {mode}: normal / uniform = {paired(z[0]['ms'][k]['rounds'], u[0]['ms'][k]['rounds']):.3f}")
    now = datetime.datetime.now(datetime.timezone.utc)
    path = args.out or os.path.join(REPO_ROOT, "benchmarks", "results",
                                    f"rng_gpu-{now:%Y%m%d}-{socket.gethostname().split('.')[0]}.json")
    write_json(path, {"benchmark": "rng_gpu", "date": now.isoformat(), "command": command_line(),
                      "machine": machine(gpu=True), "versions": versions("numpy", "cupy", "torch", "fusemath"),
                      "cases": cases})
    print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
