#!/usr/bin/env python3
"""GPU dense-solver benchmark (issue 28): fusemath.linalg (cuSOLVER) against torch.linalg and CuPy.

fp64, n = 1024, 4096, 8192 with 16 right-hand sides: solve, cholesky, qr (reduced), eigh (n <= 4096),
svd (n = 1024); the factor-once Solver's solve of a new right-hand side against a fresh solve at
n = 4096; batched float32 10000 x 32x32, 1000 x 128x128, 100 x 512x512: solve, cholesky, eigh, inv
against torch; refine="fp32" against torch's fp64 solve at n = 8192, 16384. Every result is checked (residual) before it is timed; CUDA-event timing on each
library's current stream, paired rounds with the order rotated, medians and the per-round ratio
spread. Skips cleanly (exit 0, a line saying why) without a GPU or without torch / CuPy.
JSON: benchmarks/results/solve_gpu-<machine>-<date>.json.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

from bench_common import command_line, err, machine, paired, versions, write_json

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1024,4096,8192")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=3, help="calls per timing (their mean)")
    p.add_argument("--skip-batched", action="store_true")
    p.add_argument("--skip-refine", action="store_true")
    p.add_argument("--machine-tag", default=platform.node() or "host")
    p.add_argument("--out", default=None)
    return p.parse_args(argv)


def event_ms(torch, fn, reps):
    """Mean ms per call of fn over reps calls, CUDA events on torch's current stream (CuPy and fusemath
    run on the same legacy default stream unless told otherwise)."""
    fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / reps


def residual_ok(torch, a, x, b, tol):
    r = torch.linalg.matrix_norm(a @ x - b, ord=1) / (torch.linalg.matrix_norm(a, ord=1) *
                                                     torch.linalg.matrix_norm(x, ord=1) * a.shape[-1])
    return bool((r < tol).all())


def cases_fp64(torch, cp, fl, sizes):
    """(name, n, {library: fn}) with each fn's result checked once."""
    out = []
    g = torch.Generator(device="cuda").manual_seed(28)
    for n in sizes:
        a = torch.randn(n, n, dtype=torch.float64, device="cuda", generator=g)
        spd = a @ a.T + n * torch.eye(n, dtype=torch.float64, device="cuda")
        b = torch.randn(n, 16, dtype=torch.float64, device="cuda", generator=g)
        sym = (a + a.T) / 2
        ca, cspd, cb, csym = (cp.from_dlpack(t) for t in (a, spd, b, sym)) if cp else (None,) * 4
        x = fl.solve(a, b)
        assert residual_ok(torch, a, x, b, 30 * 2.2e-16), f"fusemath solve n={n}: residual too large"
        row = {"solve": {"fusemath": lambda a=a, b=b: fl.solve(a, b),
                         "torch": lambda a=a, b=b: torch.linalg.solve(a, b),
                         "cupy": lambda a=ca, b=cb: cp.linalg.solve(a, b)},
               "cholesky": {"fusemath": lambda s=spd: fl.cholesky(s),
                            "torch": lambda s=spd: torch.linalg.cholesky(s),
                            "cupy": lambda s=cspd: cp.linalg.cholesky(s)},
               "qr": {"fusemath": lambda a=a: fl.qr(a),
                      "torch": lambda a=a: torch.linalg.qr(a),
                      "cupy": lambda a=ca: cp.linalg.qr(a)}}
        if n <= 4096:
            row["eigh"] = {"fusemath": lambda s=sym: fl.eigh(s), "torch": lambda s=sym: torch.linalg.eigh(s),
                           "cupy": lambda s=csym: cp.linalg.eigh(s)}
        if n <= 1024:
            row["svd"] = {"fusemath": lambda a=a: fl.svd(a, full_matrices=False),
                          "torch": lambda a=a: torch.linalg.svd(a, full_matrices=False),
                          "cupy": lambda a=ca: cp.linalg.svd(a, full_matrices=False)}
        for name, fns in row.items():
            if cp is None:
                fns.pop("cupy")
            out.append((name, n, fns))
        if n == 4096:  # factor once, solve a new right-hand side
            s = fl.Solver(a, kind="lu").factor()
            x = s.solve(b)
            assert residual_ok(torch, a, x, b, 30 * 2.2e-16), "Solver.solve n=4096: residual too large"
            out.append(("solver_solve_vs_fresh", n, {"fusemath": lambda s=s, b=b: s.solve(b),
                                                     "fresh_solve": lambda a=a, b=b: fl.solve(a, b)}))
    return out


def cases_refine(torch, fl, sizes=(8192, 16384)):
    """refine='fp32' (cusolverDnIRSXgesv) against torch.linalg.solve in fp64; its residual must be within
    10x of the plain fp64 LU's (target: >= 2x faster than torch)."""
    out = []
    g = torch.Generator(device="cuda").manual_seed(30)
    for n in sizes:
        a = torch.randn(n, n, dtype=torch.float64, device="cuda", generator=g) + 3 * n ** 0.5 * torch.eye(
            n, dtype=torch.float64, device="cuda")
        b = torch.randn(n, 16, dtype=torch.float64, device="cuda", generator=g)

        def res(x, a=a, b=b):
            return float(torch.linalg.matrix_norm(a @ x - b, ord=1) / (torch.linalg.matrix_norm(a, ord=1) *
                                                                       torch.linalg.matrix_norm(x, ord=1)))
        r_ir, r_lu = res(fl.solve(a, b, refine="fp32")), res(torch.linalg.solve(a, b))
        assert r_ir <= 10 * max(r_lu, 1e-300), f"refine n={n}: residual {r_ir} vs the fp64 LU's {r_lu}"
        out.append(("solve_refine_fp32", n, {"fusemath": lambda a=a, b=b: fl.solve(a, b, refine="fp32"),
                                              "torch": lambda a=a, b=b: torch.linalg.solve(a, b)}))
    return out


def cases_batched(torch, fl):
    out = []
    g = torch.Generator(device="cuda").manual_seed(29)
    for count, n in ((10000, 32), (1000, 128), (100, 512)):
        a = torch.randn(count, n, n, dtype=torch.float32, device="cuda", generator=g)
        spd = a @ a.transpose(-1, -2) + n * torch.eye(n, device="cuda")
        b = torch.randn(count, n, 1, dtype=torch.float32, device="cuda", generator=g)
        sym = (a + a.transpose(-1, -2)) / 2
        x = fl.solve(spd, b)
        assert residual_ok(torch, spd, x, b, 30 * 1.2e-7), f"fusemath batched solve {count}x{n}: residual"
        tag = f"{count}x{n}x{n}"
        out += [("batched_solve", tag, {"fusemath": lambda s=spd, b=b: fl.solve(s, b),
                                        "torch": lambda s=spd, b=b: torch.linalg.solve(s, b)}),
                ("batched_cholesky", tag, {"fusemath": lambda s=spd: fl.cholesky(s),
                                           "torch": lambda s=spd: torch.linalg.cholesky(s)}),
                ("batched_eigh", tag, {"fusemath": lambda s=sym: fl.eigh(s),
                                       "torch": lambda s=sym: torch.linalg.eigh(s)}),
                ("batched_inv", tag, {"fusemath": lambda s=spd: fl.inv(s),
                                      "torch": lambda s=spd: torch.linalg.inv(s)})]
    return out


def main(argv=None) -> int:
    args = parse_args(argv if argv is not None else sys.argv[1:])
    try:
        import torch

        import fusemath
        import fusemath.linalg as fl
    except Exception as exc:
        print(f"solve_gpu: skipped: {err(exc)}")
        return 0
    if fusemath.cuda_device_count() == 0 or not torch.cuda.is_available():
        print("solve_gpu: skipped: no GPU")
        return 0
    try:
        import cupy as cp
    except Exception as exc:  # torch alone then
        print(f"solve_gpu: CuPy not timed: {err(exc)}")
        cp = None
    cases = cases_fp64(torch, cp, fl, [int(s) for s in args.sizes.split(",")])
    if not args.skip_refine:
        cases += cases_refine(torch, fl)
    if not args.skip_batched:
        cases += cases_batched(torch, fl)
    results = []
    for name, size, fns in cases:
        libs = list(fns)
        times = {lib: [] for lib in libs}
        for rnd in range(args.rounds):
            order = libs[rnd % len(libs):] + libs[:rnd % len(libs)]
            for lib in order:
                try:
                    times[lib].append(event_ms(torch, fns[lib], args.reps))
                except Exception as exc:
                    times[lib] = err(exc)
                    break
        row = {"routine": name, "size": size, "ms": {}, "ratio_vs": {}}
        for lib in libs:
            row["ms"][lib] = statistics.median(times[lib]) if isinstance(times[lib], list) and times[lib] else times[lib]
        for lib in libs[1:]:
            if isinstance(times["fusemath"], list) and isinstance(times[lib], list):
                rs = [x / y for x, y in zip(times["fusemath"], times[lib]) if y > 0]
                row["ratio_vs"][lib] = {"median": paired(times["fusemath"], times[lib]), "min": min(rs), "max": max(rs)}
        print(f"{name:24s} {str(size):14s} " + "  ".join(
            f"{k}={v:.3f}ms" if isinstance(v, float) else f"{k}: {v}" for k, v in row["ms"].items()), flush=True)
        results.append(row)
    out = {"benchmark": "solve_gpu", "date": time.strftime("%Y-%m-%d %H:%M:%S"), "command": command_line(),
           "machine": dict(machine(gpu=True), tag=args.machine_tag), "rounds": args.rounds, "reps": args.reps,
           "versions": versions("numpy", "torch", "cupy-cuda12x", "cupy-cuda13x", "fusemath"),
           "timing": "CUDA events around reps calls on the current stream, median over rounds",
           "results": results}
    path = args.out or os.path.join(HERE, "results",
                                    f"solve_gpu-{args.machine_tag}-{time.strftime('%Y-%m-%d')}.json")
    write_json(path, out)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
