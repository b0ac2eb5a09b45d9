#!/usr/bin/env python3
"""CPU dense-solver benchmark (issue 28): fusemath.linalg (LAPACKE) against scipy.linalg and numpy.linalg.

float64, n = 256 ... 4096: solve (16 right-hand sides), cholesky, qr (reduced), eigh, svd, and the
factor-once Solver's solve of a new right-hand side against a fresh solve. One thread count for everyone
(OPENBLAS_NUM_THREADS, OMP_NUM_THREADS and FUSEMATH_NUM_THREADS set before NumPy loads); every result
checked first; paired rounds with the order rotated each round; medians and the spread (min, max) of the
per-round ratios. Target: fusemath <= 1.05x scipy's time. JSON results/solve_cpu-<tag>-<date>.json.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

from bench_common import command_line, machine, versions, write_json

ROUTINES = ("solve", "cholesky", "qr", "eigh", "svd")
LIMIT = {"eigh": 2048, "svd": 1024}  # larger ones take minutes per call on a small machine


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--sizes", default="256,512,1024,2048,4096")
    p.add_argument("--routines", default=",".join(ROUTINES))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--budget", type=float, default=0.05, help="seconds of calls per timing (at least one call)")
    p.add_argument("--limits", default="eigh=2048,svd=1024", help="largest n per routine, e.g. eigh=1024,svd=512")
    p.add_argument("--machine-tag", default=platform.node() or "host")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "FUSEMATH_NUM_THREADS"):
        os.environ[v] = str(args.threads)
    import numpy as np
    import scipy
    import scipy.linalg as sl

    import fusemath
    import fusemath.linalg as fl

    rng = np.random.default_rng(28)
    sizes = [int(s) for s in args.sizes.split(",")]
    routines = args.routines.split(",")
    limit = dict(LIMIT, **{k: int(v) for k, v in (kv.split("=") for kv in args.limits.split(",") if kv)})
    cases = []
    for n in sizes:
        a = rng.standard_normal((n, n))
        spd = a @ a.T + n * np.eye(n)
        b = rng.standard_normal((n, 16))
        sym = (a + a.T) / 2
        impl = _impls(fl, sl, np, a, b, spd, sym)  # bound per n (closures over the loop's names would not be)
        for r in routines:
            if n <= limit.get(r, 1 << 30):
                cases.append((r, n, impl[r], (a, b)))
    out = {"benchmark": "solve_cpu", "date": time.strftime("%Y-%m-%d %H:%M:%S"), "command": command_line(),
           "machine": dict(machine(), tag=args.machine_tag, isa=_isa()), "threads": args.threads,
           "blas": {"fusemath": fusemath.blas_info(), "numpy": _blas_config(np), "scipy": _blas_config(scipy)},
           "versions": versions("numpy", "scipy", "scipy-openblas32"), "method":
           "paired rounds (order rotated per round), per timing >= budget seconds of calls after one warm-up; "
           "scipy with check_finite=False (fusemath.linalg's numpy names do not check either)", "cases": []}
    print(f"threads {args.threads}; fusemath BLAS: {fusemath.blas_info()}", flush=True)
    for r, n, fns, (a, b) in cases:
        _check(r, fns, a, b, np)
        times = {k: [] for k in ("fusemath", "scipy", "numpy")}
        names = list(times)
        for rnd in range(args.rounds):
            order = names[rnd % 3:] + names[:rnd % 3]
            for k in order:
                times[k].append(_time(fns[names.index(k)], args.budget))
        ratios = {peer: [f / s for f, s in zip(times["fusemath"], times[peer])] for peer in ("scipy", "numpy")}
        row = {"routine": r, "n": n, "times_s": times,
               "median_s": {k: statistics.median(v) for k, v in times.items()},
               "fm_over": {peer: {"median": statistics.median(v), "min": min(v), "max": max(v)}
                           for peer, v in ratios.items()}}
        out["cases"].append(row)
        print(f"{r:9s} n={n:5d}  fm {row['median_s']['fusemath'] * 1e3:9.2f} ms  scipy "
              f"{row['median_s']['scipy'] * 1e3:9.2f}  numpy {row['median_s']['numpy'] * 1e3:9.2f}  fm/scipy "
              f"{row['fm_over']['scipy']['median']:.3f} [{row['fm_over']['scipy']['min']:.3f}, "
              f"{row['fm_over']['scipy']['max']:.3f}]  fm/numpy {row['fm_over']['numpy']['median']:.3f}", flush=True)
    if "solve" in routines:  # factor once, then a new right-hand side
        n = max(sizes)
        a, b = rng.standard_normal((n, n)), rng.standard_normal((n, 16))
        s = fl.Solver(a, kind="lu").factor()
        assert np.allclose(a @ s.solve(b), b, atol=1e-6 * n)
        fresh, again = [], []
        for _ in range(args.rounds):
            fresh.append(_time(lambda: fl.solve(a, b), args.budget))
            again.append(_time(lambda: s.solve(b), args.budget))
        ratio = statistics.median(x / y for x, y in zip(again, fresh))
        out["solver_resolve"] = {"n": n, "nrhs": 16, "fresh_s": fresh, "solver_solve_s": again,
                                 "solver_over_fresh_median": ratio, "target": 0.1}
        print(f"Solver.solve of a new b at n={n}: {statistics.median(again) * 1e3:.2f} ms vs a fresh solve "
              f"{statistics.median(fresh) * 1e3:.2f} ms: {ratio:.4f}x (target <= 0.1)", flush=True)
    path = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                    f"solve_cpu-{args.machine_tag}-{time.strftime('%Y%m%d')}.json")
    write_json(path, out)
    print("wrote", path)
    return 0


def _impls(fl, sl, np, a, b, spd, sym):
    """Per routine: (fusemath, scipy, numpy) calls on this n's operands."""
    return {
        "solve": (lambda: fl.solve(a, b), lambda: sl.solve(a, b, check_finite=False),
                  lambda: np.linalg.solve(a, b)),
        "cholesky": (lambda: fl.cholesky(spd), lambda: sl.cholesky(spd, lower=True, check_finite=False),
                     lambda: np.linalg.cholesky(spd)),
        "qr": (lambda: fl.qr(a), lambda: sl.qr(a, mode="economic", check_finite=False), lambda: np.linalg.qr(a)),
        "eigh": (lambda: fl.eigh(sym), lambda: sl.eigh(sym, check_finite=False, driver="evd"),
                 lambda: np.linalg.eigh(sym)),
        "svd": (lambda: fl.svd(a, full_matrices=False),
                lambda: sl.svd(a, full_matrices=False, check_finite=False, lapack_driver="gesdd"),
                lambda: np.linalg.svd(a, full_matrices=False)),
    }


def _isa() -> str:
    """The vector extensions /proc/cpuinfo lists that OpenBLAS's kernels use."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return "unknown"
    return "+".join(x for x in ("avx512f", "avx2", "fma") if x in flags) or "baseline x86-64"


def _blas_config(mod) -> str:
    try:
        cfg = mod.show_config(mode="dicts")
        blas = cfg["Build Dependencies"]["blas"]
        return f"{blas.get('name')} {blas.get('version')} ({blas.get('openblas configuration', '')})".strip()
    except Exception as exc:  # pragma: no cover
        return f"unknown ({exc})"


def _time(fn, budget: float) -> float:
    # OpenBLAS's workers spin ~0.1 s after a call: fusemath's and SciPy's / NumPy's instances would share
    # the cores with the previous implementation's (cholesky 1024: scipy 5 ms one run, 26 the next)
    time.sleep(0.2)
    fn()  # warm-up
    calls, t0 = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        t = time.perf_counter() - t0
        if t >= budget:
            return t / calls


def _check(r, fns, a, b, np) -> None:
    """fusemath's result against SciPy's (the routine's invariants where factors differ by signs)."""
    got, ref = fns[0](), fns[1]()
    n = a.shape[0]
    if r in ("solve", "cholesky"):
        assert np.allclose(got, ref, rtol=1e-6, atol=1e-8 * n), r
    elif r == "qr":
        assert np.allclose(got[0] @ got[1], a, atol=1e-8 * n), r
    else:
        w_got, w_ref = (got[0], ref[0]) if r == "eigh" else (got[1], ref[1])
        assert np.allclose(w_got, w_ref, rtol=1e-8, atol=1e-8 * n), r


if __name__ == "__main__":
    sys.exit(main())
