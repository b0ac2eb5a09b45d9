#!/usr/bin/env python3
"""CPU-vs-GPU crossover sweep (`make run`): from which size does the GPU pay, transfers included?

relu(a @ b + bias) f32 (n x n x n) and the c64 fft2 (n x n), n = 64 ... 4096, on the CPU, on the GPU with NumPy
data (execution="cuda") and on GPU-resident CuPy / PyTorch data; checked, then bursts ended by a device sync.
Writes matmul_crossover.json (the FFT under "fft") and, with matplotlib, the two plots into --out-dir.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time

import numpy as np

import fusemath
import fusemath.fft

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import machine  # noqa: E402

CPU, XFER, RES = "cpu", "gpu+transfers", "gpu-resident"


class GpuLib:
    """CuPy: the gpu-resident mode's arrays and stream."""

    def __init__(self):
        self.name = None
        try:
            import cupy
            self.stream, self.mod, self.name, self.version = cupy.cuda.Stream(), cupy, "cupy", cupy.__version__
            self.handle, self.device = int(self.stream.ptr), cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
        except Exception as exc:
            self.error = f"cupy: {exc}"

    def to_device(self, x):
        d = self.mod.asarray(x)
        self.sync()
        return d

    def to_numpy(self, x):
        return x if isinstance(x, np.ndarray) else self.mod.asnumpy(x)

    def sync(self):
        self.mod.cuda.Device().synchronize()


def per_call(fn, sync, budget):
    """Seconds per call: a first call, a cost estimate, then bursts each ended by one sync."""
    fn(), sync()
    t0 = time.perf_counter()
    fn(), sync()
    est = max(time.perf_counter() - t0, 1e-7)
    bursts, calls = (3, 1) if est * 3 >= budget else (5, int(max(1, min(2000, budget / (5 * est)))))
    per = []
    for _ in range(bursts):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        per.append((time.perf_counter() - t0) / calls)
    return {"median_s": statistics.median(per), "min_s": min(per), "bursts": bursts, "calls_per_burst": calls}


def setup(op, mode, n, rng, gpu):
    """-> (call, result of the first call as NumPy, reference, flops, plan) for one op, mode and n."""
    if op == "matmul":
        a, b, bias = (rng.standard_normal(s, dtype=np.float32) for s in ((n, n), (n, n), (n,)))
        ref, flops = np.maximum(a @ b + bias, 0), 2.0 * n ** 3
        if mode == RES:
            a, b, bias = gpu.to_device(a), gpu.to_device(b), gpu.to_device(bias)
        mm = fusemath.Matmul(a, b, options=None if mode == RES else {"execution": "cpu" if mode == CPU else "cuda"})
        mm.plan(epilogue="relu", bias=bias)
        if mode != RES:  # NumPy in, NumPy out
            return mm.execute, np.asarray(mm.execute()), ref, flops, mm.describe()
        out = gpu.mod.empty_like(a)
        call = lambda: mm.execute(out=out, stream=gpu.handle)  # noqa: E731
    else:
        x = (rng.standard_normal((n, n), dtype=np.float32) + 1j * rng.standard_normal((n, n), dtype=np.float32))
        x = x.astype(np.complex64)
        ref, flops = np.fft.fft2(x.astype(np.complex128)), 5.0 * n * n * np.log2(float(n * n))
        if mode != RES:
            ex = "cpu" if mode == CPU else "cuda"
            call = lambda: fusemath.fft.fft2(x, execution=ex)  # noqa: E731
            return call, np.asarray(call()), ref, flops, None
        dx = gpu.to_device(x)
        out = gpu.mod.empty_like(dx)
        call = lambda: fusemath.fft.fft2(dx, out=out, stream=gpu.handle)  # noqa: E731
    call()
    gpu.sync()
    return call, gpu.to_numpy(out), ref, flops, None


def check(name, got, ref, n):
    eps = float(np.finfo(np.float32).eps)
    atol = 32.0 * eps * n if np.isrealobj(ref) else 1e-4 * float(np.abs(ref).max())
    if got.shape != ref.shape or not np.allclose(got, ref, rtol=1e-4, atol=atol):
        raise AssertionError(f"{name}: WRONG RESULT (max abs error {float(np.max(np.abs(got - ref))):.3g})")


def sweep(op, sizes, modes, budget, seed, gpu):
    rows, errors = {m: [] for m in (CPU, XFER, RES)}, {m: None for m in (CPU, XFER, RES)}
    rng = np.random.default_rng(seed)
    for n in sizes:
        time.sleep(0.3)  # NumPy's OpenBLAS threads spin ~0.1 s after a product and slow fusemath's meanwhile
        for mode in modes:
            if errors[mode]:
                continue  # it failed at a smaller n: it stays off
            try:
                call, got, ref, flops, plan = setup(op, mode, n, rng, gpu)
                check(f"{op} {mode} n={n}", got, ref, n)
                t = per_call(call, gpu.sync if gpu and mode != CPU else (lambda: None), budget if n <= 1024 else 0.75 * budget)
                rows[mode].append({"n": n, "ms": t["median_s"] * 1e3, "min_ms": t["min_s"] * 1e3,
                                   "gflops": flops / t["median_s"] / 1e9, "bursts": t["bursts"],
                                   "calls_per_burst": t["calls_per_burst"], "plan": plan})
            except Exception as exc:
                errors[mode] = f"n={n}: {type(exc).__name__}: {exc}"
                print(f"  {op} {mode}: error, mode stopped ({errors[mode]})")
        done = [f"{m} {rows[m][-1]['ms']:.3f} ms" for m in modes if rows[m] and rows[m][-1]["n"] == n]
        print(f"  {op} n={n:5d}: " + ", ".join(done), flush=True)
    res = {"rows": rows, "errors": errors, "modes": modes, "crossover": {}}
    cpu = {r["n"]: r["ms"] for r in rows[CPU]}
    for m in modes[1:]:
        pairs = [(r["n"], r["ms"] < cpu[r["n"]]) for r in rows[m] if r["n"] in cpu]
        from_on = None
        for n, win in reversed(pairs):
            if not win:
                break
            from_on = n
        res["crossover"][m] = {"first_n": next((n for n, w in pairs if w), None), "from_n_on": from_on,
                               "compared": len(pairs)}
    return res


def report(op, res, gpu_note):
    print(f"\n{op}: ms per call (GFLOP/s)\n{'n':>6} | " + " | ".join(f"{m:>24}" for m in res["modes"]))
    for n in sorted({r["n"] for rs in res["rows"].values() for r in rs}):
        cells = [next((f"{r['ms']:12.4f} ({r['gflops']:7.1f})" for r in res["rows"][m] if r["n"] == n), "-")
                 for m in res["modes"]]
        print(f"{n:6d} | " + " | ".join(f"{c:>24}" for c in cells))
    if gpu_note:
        print(f"{op} crossover: no GPU ({gpu_note})")
    for m, c in res["crossover"].items():
        print(f"{op} crossover {m}: " + (f"n = {c['from_n_on']} (the GPU is faster for every n >= it compared)"
                                         if c["from_n_on"] else f"none in the {c['compared']} sizes compared"))


def plot(res, path, title, xlabel):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:
        return f"matplotlib is not available ({exc})"
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for mode, style in zip(res["modes"], ("o-", "s--", "^-")):
        for ax, key in zip(axes, ("ms", "gflops")):
            ax.plot([r["n"] for r in res["rows"][mode]], [r[key] for r in res["rows"][mode]], style, label=mode)
    for ax, ylabel in zip(axes, ("ms per call", "GFLOP/s")):
        ax.set(yscale="log", xlabel=xlabel, ylabel=ylabel)
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
    p.add_argument("--ops", default="matmul,fft", help="comma-separated: matmul,fft")
    p.add_argument("--min-n", type=int, default=64)
    p.add_argument("--max-n", type=int, default=4096)
    p.add_argument("--threads", type=int, default=0, help="fusemath CPU threads (default: the library's)")
    p.add_argument("--budget", type=float, default=0.4, help="seconds of timed calls per point and mode")
    p.add_argument("--cpu-only", action="store_true", help="skip the GPU modes")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    ops = [o for o in ("matmul", "fft") if o in args.ops.split(",")]
    sizes = [1 << e for e in range(31) if args.min_n <= 1 << e <= args.max_n]
    if not ops or not sizes:
        p.error("--ops takes matmul,fft; --min-n .. --max-n must hold a power of two")
    if args.threads > 0:
        fusemath.set_num_threads(args.threads)
    t_start, now = time.perf_counter(), datetime.datetime.now().astimezone()
    gpu, note = None, "--cpu-only" if args.cpu_only else None
    if not args.cpu_only:
        if fusemath.cuda_device_count() < 1:
            note = "fusemath.cuda_device_count() = 0 (no CUDA build, driver or GPU)"
        elif (gpu := GpuLib()).name is None:
            gpu, note = None, f"a CUDA device, but CuPy is not usable ({gpu.error})"
    modes = [CPU] + ([XFER, RES] if gpu else [])
    meta = {"date": now.isoformat(timespec="seconds"), "threads": fusemath.get_num_threads(), "sizes": sizes, "ops": ops,
            "machine": machine(), "fusemath_version": fusemath.__version__, "numpy_version": np.__version__,
            "command": " ".join(["benchmarks/crossover.py"] + sys.argv[1:])}
    gpu_info = {"enabled": bool(gpu), "note": note, "array_library": gpu and f"{gpu.name} {gpu.version}",
                "device_name": gpu and gpu.device}
    print(f"crossover: {' and '.join(ops)}, n = {sizes[0]} .. {sizes[-1]}; fusemath {fusemath.__version__}, "
          f"{meta['machine']['cpu_model']}, {meta['threads']} CPU threads" + (f"; no GPU: {note}" if note else ""))
    results = {op: sweep(op, sizes, modes, args.budget, args.seed + (op == "fft"), gpu) for op in ops}
    os.makedirs(args.out_dir, exist_ok=True)
    for op, res in results.items():
        res["gpu"], res["meta"] = gpu_info, meta
        report(op, res, note)
        title = (f"fusemath {'matmul + bias + relu, f32' if op == 'matmul' else 'fft2, complex64'} - "
                 f"{meta['machine']['cpu_model']}, {meta['threads']} CPU threads; {gpu.device if gpu else 'no GPU'}")
        png = os.path.join(args.out_dir, f"{op}_crossover.png")
        res["plot_note"] = "--no-plot" if args.no_plot else plot(res, png, title, f"n ({op} of n x n)")
        res["plot"] = None if res["plot_note"] else png
    out = results.get("matmul") or {"rows": {}, "modes": modes, "gpu": gpu_info, "meta": meta}
    if "fft" in results:
        out["fft"] = results["fft"]
    out["total_seconds"] = time.perf_counter() - t_start
    with open(os.path.join(args.out_dir, "matmul_crossover.json"), "w") as f:
        json.dump(out, f, indent=1, default=str)
    print(f"\nJSON: {os.path.join(args.out_dir, 'matmul_crossover.json')}; plots: "
          + ", ".join(r["plot"] or f"skipped ({r['plot_note']})" for r in results.values())
          + f" ({out['total_seconds']:.0f} s)")
    return 1 if any(r["errors"][CPU] for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
