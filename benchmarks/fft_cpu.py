#!/usr/bin/env python3
"""CPU FFT benchmark (issue 4): fusemath (FFTW) against scipy.fft, side by side.

1-D rows, columns, 2-D, 3-D, r2c / c2r and inverse cases, plain and fused (fft(x * w) * 0.5), one thread count
for everyone, paired ratios over rounds; targets fm / scipy <= 1.00, fused / plain <= 1.15; benchmarks/README.md.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

from bench_common import command_line, cpu_model, paired, write_json


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--dtypes", default="c64", help="comma-separated: c64,c128")
    p.add_argument("--budget", type=float, default=0.1)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="a few cases only")
    p.add_argument("--kinds", default=None, help="comma-separated case kinds to run: 1d,cols,2d,3d,r2c,c2r,inv")
    p.add_argument("--machine-tag", default=platform.node() or "host")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    os.environ["FUSEMATH_NUM_THREADS"] = str(args.threads)
    import numpy as np
    import scipy.fft

    import fusemath
    import fusemath.fft as ffm

    rng = np.random.default_rng(1)
    cases = []
    for e in ([10, 16, 22] if args.quick else range(10, 23, 2)):
        n = 1 << e
        cases.append(("1d", (max(1, (1 << 22) // n), n), (-1,)))
    # columns: the transform over the strided leading axis of a C-ordered array
    cases += [("cols", (4096, 1024), (0,))]
    cases += [("2d", (1024, 1024), (0, 1))] + ([] if args.quick else [("2d", (2048, 2048), (0, 1)),
                                                                       ("3d", (128, 128, 128), (0, 1, 2)),
                                                                       ("3d", (256, 256, 256), (0, 1, 2))])
    for real in ("r2c", "c2r"):
        cases += [(real, (1024, 1024), (0, 1))] + ([] if args.quick else [(real, (2048, 2048), (0, 1)),
                                                                           (real, (128, 128, 128), (0, 1, 2))])
    # inverse c2c (ifft / ifftn: the norm is a chain of its own): rows and 2-D
    cases += [("inv", (4096, 1024), (-1,))] + ([] if args.quick else [("inv", (1024, 1024), (0, 1))])
    if args.kinds:
        want = set(args.kinds.split(","))
        bad = want - {c[0] for c in cases}
        if bad:
            p.error(f"--kinds: unknown {sorted(bad)}")
        cases = [c for c in cases if c[0] in want]
    results = []
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": args.machine_tag, "cpu": cpu_model(),
            "cores": len(os.sched_getaffinity(0)), "threads": args.threads, "numpy": np.__version__,
            "scipy": scipy.__version__, "fusemath": fusemath.__version__, "command": command_line()}
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                   f"fft_cpu-{args.machine_tag}-{time.strftime('%Y%m%d')}.json")

    def save():  # after every case: a run stopped by a time limit keeps what it measured
        write_json(out, {"meta": meta, "results": results})

    def timeit(fn):
        fn()
        t0 = time.perf_counter()
        fn()
        one = max(time.perf_counter() - t0, 1e-6)
        reps = max(1, min(1000, int(args.budget / one)))
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - t0) / reps

    def real_case(kind, shape, axes, rdt, cdt):
        """r2c: rfftn(x), fused rfftn(x) * f; c2r: irfftn(X), fused irfftn(X * f) (f real, half
        spectrum); plans, references and peers."""
        half = tuple(shape[:-1]) + (shape[-1] // 2 + 1,)
        f = rng.random(half).astype(rdt)
        if kind == "r2c":
            x = rng.standard_normal(shape).astype(rdt)
            ref, ref_f = np.fft.rfftn(x, axes=axes), np.fft.rfftn(x, axes=axes) * f
            plan = ffm.FFT(x, axes=axes, kind="r2c")
            plan.plan()
            fused = ffm.FFT(x, axes=axes, kind="r2c")
            fused.plan(epilog={"multiply": f})
            return x, f, plan, fused, ref, ref_f, "forward", {
                "scipy": lambda: scipy.fft.rfftn(x, axes=axes, workers=args.threads),
                "fm_stateless": lambda: ffm.rfftn(x, axes=axes),
                "scipy_unf": lambda: scipy.fft.rfftn(x, axes=axes, workers=args.threads) * f}
        x = np.fft.rfftn(rng.standard_normal(shape), axes=axes).astype(cdt)
        n = shape[-1]
        ref, ref_f = np.fft.irfftn(x, s=shape, axes=axes), np.fft.irfftn(x * f, s=shape, axes=axes)
        plan = ffm.FFT(x, axes=axes, kind="c2r", n=n)
        plan.plan()
        fused = ffm.FFT(x, axes=axes, kind="c2r", n=n)
        fused.plan(prolog={"multiply": f})
        return x, f, plan, fused, ref, ref_f, "inverse", {
            "scipy": lambda: scipy.fft.irfftn(x, s=shape, axes=axes, workers=args.threads),
            "fm_stateless": lambda: ffm.irfftn(x, s=shape, axes=axes),
            "scipy_unf": lambda: scipy.fft.irfftn(x * f, s=shape, axes=axes, workers=args.threads)}

    for dt in args.dtypes.split(","):
        cdt = np.complex64 if dt == "c64" else np.complex128
        rdt = np.float32 if dt == "c64" else np.float64
        for kind, shape, axes in cases:
            if kind in ("r2c", "c2r"):
                x, wb, plan, fused, ref, ref_f, direction, peers = real_case(kind, shape, axes, rdt, cdt)
            else:
                x = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(cdt)
                wshape = tuple(shape[a] for a in axes)
                w = rng.random(wshape).astype(rdt)
                own = [a % len(shape) for a in axes]
                wb = w.reshape(tuple(shape[d] if d in own else 1 for d in range(len(shape))))
                inv = kind == "inv"
                npf, spf, fmf = ((np.fft.ifftn, scipy.fft.ifftn, ffm.ifftn) if inv else
                                 (np.fft.fftn, scipy.fft.fftn, ffm.fftn))
                ref = npf(x, axes=axes)
                plan = ffm.FFT(x, axes=axes)
                plan.plan()
                fused = ffm.FFT(x, axes=axes)
                fused.plan(prolog={"multiply": wb}, epilog={"scale": 0.5})
                ref_f = npf(x * wb, axes=axes) * 0.5
                direction = "inverse" if inv else "forward"
                peers = {"scipy": lambda: spf(x, axes=axes, workers=args.threads),
                         "fm_stateless": lambda: fmf(x, axes=axes),
                         "scipy_unf": lambda: spf(x * wb, axes=axes, workers=args.threads) * 0.5}
            got = plan.execute(direction=direction)
            err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
            err_f = np.linalg.norm(fused.execute(direction=direction) - ref_f) / np.linalg.norm(ref_f)
            tol = 1e-4 if dt == "c64" else 1e-10
            if not (err < tol and err_f < tol):
                print(f"WRONG RESULT {kind} {shape}: {err:.3g} {err_f:.3g}", file=sys.stderr)
                return 1
            out_p = np.empty_like(got)
            out_f = np.empty_like(got)
            methods = {
                "fm_fused": lambda: fused.execute(direction=direction),
                "fm_plain": lambda: plan.execute(direction=direction),
                "scipy": peers["scipy"],
                "fm_plain_out": lambda: plan.execute(out=out_p, direction=direction),
                "fm_fused_out": lambda: fused.execute(out=out_f, direction=direction),
                "fm_stateless": peers["fm_stateless"],
                "scipy_unf": peers["scipy_unf"],
            }
            times = {k: [] for k in methods}
            order = list(methods)
            for r in range(args.rounds):
                for k in order if r % 2 == 0 else reversed(order):
                    times[k].append(timeit(methods[k]))
            med = {k: statistics.median(v) * 1e3 for k, v in times.items()}

            def pr(a, b):
                return paired(times[a], times[b])

            row = {"dtype": dt, "kind": kind, "shape": list(shape), "axes": list(axes), "ms": med,
                   "fm_over_scipy": pr("fm_plain", "scipy"), "fused_over_plain": pr("fm_fused", "fm_plain"),
                   "fused_over_scipy_unfused": pr("fm_fused", "scipy_unf"),
                   "fused_out_over_plain_out": pr("fm_fused_out", "fm_plain_out"),
                   "ratio_of_medians": {"fm_over_scipy": med["fm_plain"] / med["scipy"],
                                        "fused_over_plain": med["fm_fused"] / med["fm_plain"]},
                   "describe": plan.describe(), "describe_fused": fused.describe()}
            results.append(row)
            save()
            flags = []
            if row["fm_over_scipy"] > 1.0:
                flags.append(f"MISS fm/scipy {row['fm_over_scipy']:.2f}")
            if row["fused_over_plain"] > 1.15:
                flags.append(f"MISS fused/plain {row['fused_over_plain']:.2f}")
            print(f"{dt} {kind} {'x'.join(map(str, shape)):>14}: " +
                  " ".join(f"{k} {v:8.3f}" for k, v in med.items()) +
                  f" | fm/scipy {row['fm_over_scipy']:.2f} fused/plain {row['fused_over_plain']:.2f} "
                  f"(out= {row['fused_out_over_plain_out']:.2f}) "
                  f"fused/scipy_unf {row['fused_over_scipy_unfused']:.2f} {'; '.join(flags) or 'ok'}", flush=True)
    save()
    print("JSON:", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
