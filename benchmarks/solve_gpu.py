#!/usr/bin/env python3
"""GPU dense-solver benchmark (issue 28): fusemath.linalg (cuSOLVER) against torch.linalg and CuPy.

fp64, n = 1024, 4096, 8192 with 16 right-hand sides: solve, cholesky, qr (reduced), eigh (n <= 4096),
svd (n = 1024); the factor-once Solver's solve of a new right-hand side against a fresh solve at
n = 4096; batched float32 10000 x 32x32, 1000 x 128x128, 100 x 512x512: solve, cholesky, eigh, inv
against torch; refine = "off", "auto", "fp32", "tf32", "bf16", "fp16" against torch's fp64 solve at n = 8192, 16384
(each refined answer's residual checked within 10x of the fp64 LU's). Every result is checked (residual) before it
is timed; CUDA-event timing on each
library's current stream, paired rounds with the order rotated, medians and the per-round ratio
spread. Skips cleanly (exit 0, a line saying why) without a GPU or without torch / CuPy.
JSON: benchmarks/results/solve_gpu-<machine>-<date>.json.

--routines solve_refine,batched_eigh,solver_solve_vs_fresh runs only the rows whose routine name starts with one of
those; --irs gmres|classical|classical-gmres|gmres-gmres sets FUSEMATH_SOLVE_IRS (the refinement solver) and
--eig-batched auto|syevj|xsyev|loop FUSEMATH_SOLVE_EIG_BATCHED (eigh of a batch) for the run; both are in the JSON.
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
    p.add_argument("--routines", default="", help="comma-separated prefixes of the rows to run (default: all)")
    p.add_argument("--refine-sizes", default="8192,16384")
    p.add_argument("--irs", default="", help="FUSEMATH_SOLVE_IRS for this run: gmres (default), classical, "
                   "classical-gmres, gmres-gmres")
    p.add_argument("--eig-batched", default="", help="FUSEMATH_SOLVE_EIG_BATCHED for this run: auto, syevj, xsyev, "
                   "loop")
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
            x2 = s.solve(b, transpose=True)
            assert residual_ok(torch, a.T, x2, b, 30 * 2.2e-16), "Solver.solve(transpose) n=4096: residual too large"
            out.append(("solver_solve_vs_fresh", n, {"fusemath": lambda s=s, b=b: s.solve(b),
                                                     "fresh_solve": lambda a=a, b=b: fl.solve(a, b),
                                                     "fresh_solve_off": lambda a=a, b=b: fl.solve(a, b, refine="off")}))
    return out


REFINES = ("off", "auto", "fp32", "tf32", "bf16", "fp16")


def cases_refine(torch, fl, sizes=(8192, 16384)):
    """Every refine choice (cusolverDnIRSXgesv from fp32 / tf32 / bf16 / fp16, auto, and off: the plain fp64 LU)
    against torch.linalg.solve in fp64; each residual must be within 10x of the plain fp64 LU's (target: >= 2x
    faster than torch). A choice whose residual is not is reported as an error row, not timed."""
    out = []
    g = torch.Generator(device="cuda").manual_seed(30)
    for n in sizes:
        a = torch.randn(n, n, dtype=torch.float64, device="cuda", generator=g) + 3 * n ** 0.5 * torch.eye(
            n, dtype=torch.float64, device="cuda")
        b = torch.randn(n, 16, dtype=torch.float64, device="cuda", generator=g)

        def res(x, a=a, b=b):
            return float(torch.linalg.matrix_norm(a @ x - b, ord=1) / (torch.linalg.matrix_norm(a, ord=1) *
                                                                       torch.linalg.matrix_norm(x, ord=1)))
        r_lu = res(torch.linalg.solve(a, b))
        for rf in REFINES:
            try:
                r_ir = res(fl.solve(a, b, refine=rf))
            except Exception as exc:  # an error row for this choice; the others still run
                print(f"refine={rf:5s} n={n}: {type(exc).__name__}: {exc}", flush=True)
                out.append((f"solve_refine_{rf}", n, {"fusemath": _failing(f"{type(exc).__name__}: {exc}"),
                                                      "torch": lambda a=a, b=b: torch.linalg.solve(a, b)}))
                continue
            ok = r_ir <= 10 * max(r_lu, 1e-300)
            print(f"refine={rf:5s} n={n}: residual {r_ir:.3e} (torch fp64 LU {r_lu:.3e}){'' if ok else ' NOT within 10x'}",
                  flush=True)
            fns = {"fusemath": lambda a=a, b=b, rf=rf: fl.solve(a, b, refine=rf),
                   "torch": lambda a=a, b=b: torch.linalg.solve(a, b)}
            if not ok:
                fns["fusemath"] = _failing(f"residual {r_ir:.3e} not within 10x of the fp64 LU's {r_lu:.3e}")
            out.append((f"solve_refine_{rf}", n, fns))
    return out


def _failing(why):
    def fn():
        raise AssertionError(why)
    return fn


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
        w, v = fl.eigh(sym)  # the batched eigensolver (table in cusolver_batched.c) checked by its residual
        nrm = torch.linalg.matrix_norm
        r = nrm(sym @ v - v * w[..., None, :], ord=1) / (n * nrm(sym, ord=1) * 1.2e-7)
        assert bool((r < 30).all()), f"fusemath batched eigh {count}x{n}: residual ratio {float(r.max())}"
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
    if args.irs:  # read once, at the first context: set before fusemath is imported
        os.environ["FUSEMATH_SOLVE_IRS"] = args.irs
    if args.eig_batched:
        os.environ["FUSEMATH_SOLVE_EIG_BATCHED"] = args.eig_batched
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
    want = [w for w in args.routines.split(",") if w]

    def wanted(*rows):
        # a group is built when a --routines prefix selects one of its rows (the final filter's rule): a
        # prefix "solve_refine" must not build the fp64 group (minutes of inputs and checks) for its row "solve"
        return not want or any(r.startswith(w) for r in rows for w in want)

    cases = []
    if wanted("solve", "cholesky", "qr", "eigh", "svd", "solver_solve_vs_fresh"):
        cases += cases_fp64(torch, cp, fl, [int(s) for s in args.sizes.split(",")])
    if not args.skip_refine and wanted(*(f"solve_refine_{rf}" for rf in REFINES)):
        cases += cases_refine(torch, fl, [int(s) for s in args.refine_sizes.split(",")])
    if not args.skip_batched and wanted("batched_solve", "batched_cholesky", "batched_eigh", "batched_inv"):
        cases += cases_batched(torch, fl)
    if want:
        cases = [c for c in cases if any(c[0].startswith(w) for w in want)]
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
           "settings": {k: os.environ.get(k, "") for k in ("FUSEMATH_SOLVE_IRS", "FUSEMATH_SOLVE_EIG_BATCHED")},
           "results": results}
    path = args.out or os.path.join(HERE, "results",
                                    f"solve_gpu-{args.machine_tag}-{time.strftime('%Y-%m-%d')}.json")
    write_json(path, out)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
