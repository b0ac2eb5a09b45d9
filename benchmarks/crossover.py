#!/usr/bin/env python3
"""CPU-vs-GPU crossover sweep (`make run`): from which size does the GPU pay, transfers included?

relu(a @ b + bias) f32 (n x n x n), the c64 fft2 (n x n), standard_normal f32 of n x n values (fusemath.random,
portable mode) and the f64 solve of an n x n system with 16 right-hand sides (fusemath.linalg.solve), n = 64 ... 4096, on the CPU, on the GPU with NumPy data (execution="cuda"; the RNG: drawn on the GPU
and copied back), on GPU-resident CuPy data, and with execution="best" on NumPy data (its plans' predictions of the
cpu and the GPU-with-transfers times are recorded and plotted dashed: the predicted crossover next to the measured
one); checked, then bursts ended by a device sync.
Writes <op>_crossover.json and, with matplotlib, their plots into --out-dir.
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import statistics
import sys
import time

import numpy as np

import fusemath
import fusemath.fft
import fusemath.linalg
import fusemath.random

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import bursts, machine, write_json  # noqa: E402

CPU, XFER, RES, BEST = "cpu", "gpu+transfers", "gpu-resident", "best"
PREDICTED = re.compile(r"predicted cpu(?:\+xfer)? ([0-9.e+-]+) ms cuda(?:\+xfer)? ([0-9.e+-]+) ms")
SOLVE_NRHS = 16
NO_GPU_HINT = "the crossover needs an NVIDIA GPU and CuPy (pip install cupy-cuda12x); CPU curves only"


def sig3(v):
    return f"{v:#.3g}".rstrip(".")


def cell(r):
    """A row's time with 3 significant digits in a unit that keeps it >= 1 ("412 us ±3%", "1.05 ms ±1%")."""
    unit, scale = next((u, s) for u, s in (("s", 1e3), ("ms", 1.0), ("us", 1e-3), ("us", 0)) if r["ms"] >= s)
    return f"{sig3(r['ms'] / (scale or 1e-3))} {unit} ±{50 * r['spread']:.0f}%"


def per_call(fn, sync, budget):
    """Seconds per call: a first call, a cost estimate, then bursts each ended by one sync."""
    fn(), sync()
    est = max(bursts(fn, 1, 1, sync)[0], 1e-7)
    n, calls = (3, 1) if est * 3 >= budget else (5, int(max(1, min(2000, budget / (5 * est)))))
    per = bursts(fn, calls, n, sync)
    med = statistics.median(per)
    return {"ms": med * 1e3, "min_ms": min(per) * 1e3, "max_ms": max(per) * 1e3,
            "spread": (max(per) - min(per)) / med, "bursts": n, "calls_per_burst": calls}


def setup(op, mode, n, rng, cp):
    """-> (call, its first result as NumPy, reference, flops, plan description) for one op, mode and n."""
    if op == "matmul":
        a, b, bias = (rng.standard_normal(s, dtype=np.float32) for s in ((n, n), (n, n), (n,)))
        ref, flops = np.maximum(a @ b + bias, 0), 2.0 * n ** 3
        if mode == RES:
            a, b, bias = cp.asarray(a), cp.asarray(b), cp.asarray(bias)
        ex = {CPU: "cpu", XFER: "cuda", BEST: "best"}.get(mode)
        mm = fusemath.Matmul(a, b, options=None if mode == RES else {"execution": ex})
        mm.plan(epilogue="relu", bias=bias)
        out = cp.empty_like(a) if mode == RES else None
        call = mm.execute if mode != RES else lambda: mm.execute(out=out, stream=cp.bench_stream.ptr)
        plan = mm.describe()
    elif op == "rng":  # portable mode: the GPU's values are the CPU's bits, so the CPU's first draw is the reference
        seed, f32 = int(rng.integers(1 << 62)), np.float32
        ref, flops, plan = fusemath.random.default_rng(seed).standard_normal((n, n), dtype=f32), float(n * n), None
        g = fusemath.random.default_rng(seed, device={CPU: "cpu", BEST: "best"}.get(mode, "cuda"))
        if mode == RES:
            out = cp.empty((n, n), dtype=f32)
            call = lambda: g.standard_normal(dtype=f32, out=out)  # noqa: E731
        elif mode == XFER:
            call = lambda: cp.asnumpy(g.standard_normal((n, n), dtype=f32))  # noqa: E731
        else:
            host = np.empty((n, n), dtype=f32)
            call = lambda: g.standard_normal(dtype=f32, out=host)  # noqa: E731
    elif op == "solve":  # a diagonally dominant system, so the residual check holds at every n
        a = rng.standard_normal((n, n)) + n * np.eye(n)
        b = rng.standard_normal((n, SOLVE_NRHS))
        ref, flops, plan = np.linalg.solve(a, b), 2.0 * n ** 3 / 3 + 2.0 * n * n * SOLVE_NRHS, None
        if mode == RES:
            a, b = cp.asarray(a), cp.asarray(b)
        ex = {CPU: "cpu", XFER: "cuda", BEST: "best"}.get(mode)
        call = lambda: fusemath.linalg.solve(a, b, execution=ex)  # noqa: E731
    else:
        x = (rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n))).astype(np.complex64)
        ref, flops, plan = np.fft.fft2(x.astype(np.complex128)), 5.0 * n * n * np.log2(float(n * n)), None
        if mode == RES:
            dx = cp.asarray(x)
            out = cp.empty_like(dx)
            call = lambda: fusemath.fft.fft2(dx, out=out, stream=cp.bench_stream.ptr)  # noqa: E731
        elif mode == BEST:  # the planner, for describe()'s predictions
            f = fusemath.fft.FFT(x, axes=(0, 1), execution="best")
            f.plan()
            call, plan = f.execute, f.describe()
        else:
            call = lambda: fusemath.fft.fft2(x, execution="cpu" if mode == CPU else "cuda")  # noqa: E731
    got = call()
    if mode == RES:
        cp.cuda.Device().synchronize()
    if op == "solve":
        return call, cp.asnumpy(got) if mode == RES else np.asarray(got), ref, flops, plan
    return call, cp.asnumpy(out) if mode == RES else np.asarray(got), ref, flops, plan


def check(name, got, ref, n):
    if got.dtype == np.float64:  # the solve: LU residual-level agreement with NumPy's
        if got.shape != ref.shape or not np.allclose(got, ref, rtol=1e-9, atol=1e-12):
            raise AssertionError(f"{name}: WRONG RESULT (max abs error {float(np.max(np.abs(got - ref))):.3g})")
        return
    atol = 32.0 * float(np.finfo(np.float32).eps) * n if np.isrealobj(ref) else 1e-4 * float(np.abs(ref).max())
    if got.shape != ref.shape or not np.allclose(got, ref, rtol=1e-4, atol=atol):
        raise AssertionError(f"{name}: WRONG RESULT (max abs error {float(np.max(np.abs(got - ref))):.3g})")


def progress(op, done, total, text, size_done):
    """The progress bar: one line rewritten with \\r on a terminal, a line per size otherwise."""
    line = f"  {op} [{'#' * (20 * done // total):<20}] {done}/{total} {text}"
    if sys.stdout.isatty():
        print("\r" + line.ljust(110)[:110], end="" if done < total else "\n", flush=True)
    elif size_done:
        print(line, flush=True)


def sweep(op, sizes, modes, budget, seed, cp):
    rows, errors, rng = {m: [] for m in modes}, {m: None for m in modes}, np.random.default_rng(seed)
    for si, n in enumerate(sizes):
        time.sleep(0.3)  # NumPy's OpenBLAS threads spin ~0.1 s after a product and slow fusemath's meanwhile
        for i, mode in enumerate(modes):
            if not errors[mode]:  # a mode that failed at a smaller n stays off
                try:
                    call, got, ref, flops, plan = setup(op, mode, n, rng, cp)
                    check(f"{op} {mode} n={n}", got, ref, n)
                    sync = cp.cuda.Device().synchronize if mode in (XFER, RES) else (lambda: None)
                    t = per_call(call, sync, budget if n <= 1024 else 0.75 * budget)
                    pred = PREDICTED.search(plan or "") if mode == BEST else None
                    rows[mode].append(dict(t, n=n, gflops=flops / t["ms"] / 1e6, plan=plan,
                                           **({"predicted_cpu_ms": float(pred.group(1)),
                                               "predicted_cuda_ms": float(pred.group(2))} if pred else {})))
                except Exception as exc:
                    errors[mode] = f"n={n}: {type(exc).__name__}: {exc}"
                    print(f"\n  {op} {mode}: error, mode stopped ({errors[mode]})")
            done = [f"{m} {cell(rows[m][-1])}" for m in modes if rows[m] and rows[m][-1]["n"] == n]
            progress(op, si * len(modes) + i + 1, len(sizes) * len(modes), f"n={n}: " + ", ".join(done),
                     i == len(modes) - 1)
    res = {"op": op, "rows": rows, "errors": errors, "modes": modes, "crossover": {}}
    cpu = {r["n"]: r["ms"] for r in rows[CPU]}
    for m in modes[1:]:
        pairs = [(r["n"], r["ms"] < cpu[r["n"]]) for r in rows[m] if r["n"] in cpu]
        from_on = next((pairs[i][0] for i in range(len(pairs)) if all(w for _, w in pairs[i:])), None)
        res["crossover"][m] = {"from_n_on": from_on, "compared": len(pairs)}
    pred = [(r["n"], r["predicted_cuda_ms"] < r["predicted_cpu_ms"]) for r in rows.get(BEST, []) if "predicted_cpu_ms" in r]
    if pred:  # where best's model puts the crossover (GPU with transfers against the cpu)
        res["crossover"]["predicted"] = {"from_n_on": next((pred[i][0] for i in range(len(pred))
                                                             if all(w for _, w in pred[i:])), None),
                                         "compared": len(pred)}
    return res


def report(op, res):
    print(f"\n{op}: time per call ±half the spread over bursts (GFLOP/s)\n{'n':>6} | "
          + " | ".join(f"{m:>26}" for m in res["modes"]))
    for n in sorted({r["n"] for rs in res["rows"].values() for r in rs}):
        cells = [next((f"{cell(r)} ({sig3(r['gflops'])})" for r in res["rows"][m] if r["n"] == n), "-")
                 for m in res["modes"]]
        print(f"{n:6d} | " + " | ".join(f"{c:>26}" for c in cells))
    for m, c in res["crossover"].items():
        what = ("best's model puts the GPU with transfers ahead" if m == "predicted"
                else f"{m} is faster than the cpu")
        print(f"{op} crossover {m}: " + (f"n = {c['from_n_on']} ({what} for every n >= it compared)"
                                         if c["from_n_on"] else f"none in the {c['compared']} sizes compared"))


def plot(res, path, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:
        return f"matplotlib is not available ({exc})"
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, key, ylabel in zip(axes, ("ms", "gflops"), ("ms per call", "GFLOP/s")):
        for mode, style in zip(res["modes"], ("o-", "s-", "^-", "d-")):
            ax.plot([r["n"] for r in res["rows"][mode]], [r[key] for r in res["rows"][mode]], style, label=mode)
        pred = [r for r in res["rows"].get(BEST, []) if "predicted_cpu_ms" in r]
        if pred and key == "ms":  # best's predictions, dashed, next to what was measured
            for side, style in (("cpu", "o--"), ("cuda", "s--")):
                ax.plot([r["n"] for r in pred], [r[f"predicted_{side}_ms"] for r in pred], style, alpha=0.6,
                        label=f"predicted {side}" + (" (+ transfers)" if side == "cuda" else ""))
        ax.set(yscale="log", xlabel=f"n ({res['op']} of n x n)", ylabel=ylabel)
        ax.set_xscale("log", base=2)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", default=os.path.join(os.getcwd(), "fusemath-bench"))
    p.add_argument("--ops", default="matmul,fft,rng,solve", help="comma-separated: matmul,fft,rng,solve")
    p.add_argument("--min-n", type=int, default=64)
    p.add_argument("--max-n", type=int, default=4096)
    p.add_argument("--threads", type=int, default=0, help="fusemath CPU threads (default: the library's)")
    p.add_argument("--budget", type=float, default=0.4, help="seconds of timed calls per point and mode")
    p.add_argument("--cpu-only", action="store_true", help="skip the GPU modes")
    p.add_argument("--no-best", action="store_true", help="skip execution='best' (on by default with a GPU)")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    ops = [o for o in ("matmul", "fft", "rng", "solve") if o in args.ops.split(",")]
    sizes = [1 << e for e in range(31) if args.min_n <= 1 << e <= args.max_n]
    if not ops or not sizes:
        p.error("--ops takes matmul,fft,rng,solve; --min-n .. --max-n must hold a power of two")
    if args.threads > 0:
        fusemath.set_num_threads(args.threads)
    t_start, now = time.perf_counter(), datetime.datetime.now().astimezone()
    cp, note = None, "--cpu-only" if args.cpu_only else None
    if not args.cpu_only:
        if fusemath.cuda_device_count() < 1:
            note = "fusemath.cuda_device_count() = 0 (no CUDA build, driver or GPU)"
        else:
            try:
                import cupy as cp
                cp.bench_stream = cp.cuda.Stream()  # the gpu-resident calls' stream
            except Exception as exc:
                cp, note = None, f"a CUDA device, but CuPy is not usable ({type(exc).__name__}: {exc})"
    modes = [CPU] + ([XFER, RES] if cp else []) + ([BEST] if cp and not args.no_best else [])
    meta = {"date": now.isoformat(timespec="seconds"), "threads": fusemath.get_num_threads(), "sizes": sizes,
            "machine": machine(), "fusemath_version": fusemath.__version__, "numpy_version": np.__version__,
            "command": " ".join(["benchmarks/crossover.py"] + sys.argv[1:])}
    device = cp and cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    gpu_info = {"enabled": bool(cp), "note": note, "array_library": cp and f"cupy {cp.__version__}",
                "device_name": device}
    print(f"crossover: {' and '.join(ops)}, n = {sizes[0]} .. {sizes[-1]}; fusemath {fusemath.__version__}, "
          f"{meta['machine']['cpu_model']}, {meta['threads']} CPU threads")
    if note:
        print(f"no GPU ({note}): {NO_GPU_HINT}")
    failed = False
    for op in ops:
        res = sweep(op, sizes, modes, args.budget, args.seed + (op == "fft"), cp)
        report(op, res)
        what = {"matmul": "matmul + bias + relu, f32", "fft": "fft2, complex64",
                "rng": "standard_normal f32 of n x n (GFLOP/s: Gvalues/s)",
                "solve": f"solve f64, n x n with {SOLVE_NRHS} right-hand sides"}[op]
        title = (f"fusemath {what} - "
                 f"{meta['machine']['cpu_model']}, {meta['threads']} CPU threads; {device or 'no GPU'}")
        png = os.path.join(args.out_dir, f"{op}_crossover.png")
        res["plot_note"] = "--no-plot" if args.no_plot else plot(res, png, title)
        res.update(plot=None if res["plot_note"] else png, gpu=gpu_info, meta=meta,
                   total_seconds=time.perf_counter() - t_start)
        write_json(os.path.join(args.out_dir, f"{op}_crossover.json"), res)  # makes the directory
        print(f"{op}: wrote {args.out_dir}/{op}_crossover.json, plot {res['plot'] or 'skipped: ' + res['plot_note']} "
              f"({res['total_seconds']:.0f} s)")
        failed |= bool(res["errors"][CPU])
    return int(failed)


if __name__ == "__main__":
    sys.exit(main())
