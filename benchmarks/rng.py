#!/usr/bin/env python3
"""Random-number fills (issue 27, "Measured"): fusemath vs NumPy on the CPU, vs CuPy and torch on the GPU.

CPU: 2^25 values (--log2n) of each distribution and dtype through fusemath (modes portable and curand)
next to numpy.random.default_rng() (PCG64) and numpy.random.Generator(Philox), filling one preallocated
`out=`; 1 thread and all threads (--threads). NumPy's Generator is single-threaded: with t threads it
fills t slices from t spawned generators on a thread pool (NumPy's own multithreaded recipe, its fills
release the GIL). Each result is checked (mean and standard deviation against the distribution's) before
it is timed. Paired rounds: every round times every contestant once (the order reversed every other
round); per contestant the median ns per value and the spread (max - min) / median over rounds; per peer
the paired ratio peer / fusemath (median over rounds of the per-round ratio, with its min and max).
GPU (only where CuPy or torch and a GPU exist): 2^28 float32 and 2^27 float64 (--gpu-log2n) through
fusemath device="cuda" (skipped with a message where it is not available), cupy.random.default_rng()
.random / .standard_normal / .standard_exponential and torch uniform_ / normal_ / exponential_ /
log_normal_; CUDA events, TB/s written; per dtype and mode fusemath's normal / uniform time. curand
mode's float64 fills each restart the generator at position 0 (a run of float64 calls from 0), so
no replay of an earlier run (backends/cuda/curand_rng.c) is timed with them.
JSON: results/rng-<machine tag>-<date>.json (or --out).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import os
import statistics
import sys
import time

import numpy as np

import fusemath
import fusemath.random

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import REPO_ROOT, command_line, err, machine, versions, write_json  # noqa: E402

F64, F32 = np.float64, np.float32
# name -> (fusemath / numpy call on a generator, expected mean, expected std, dtypes numpy takes dtype= for)
DISTS = {
    "random": (lambda g, dt, out: g.random(dtype=dt, out=out), 0.5, (1 / 12) ** 0.5, (F64, F32)),
    "standard_normal": (lambda g, dt, out: g.standard_normal(dtype=dt, out=out), 0.0, 1.0, (F64, F32)),
    "normal(1, 2)": (None, 1.0, 2.0, (F64,)),
    "standard_exponential": (lambda g, dt, out: g.standard_exponential(dtype=dt, out=out), 1.0, 1.0, (F64, F32)),
    "exponential(2)": (None, 2.0, 2.0, (F64,)),
    "lognormal(0, 0.5)": (None, float(np.exp(0.125)), float(np.sqrt((np.exp(0.25) - 1) * np.exp(0.25))), (F64,)),
}


def np_call(name, g, out):
    """NumPy's method into out (normal / exponential / lognormal have no dtype= and no out=: a new array)."""
    if name == "normal(1, 2)":
        return g.normal(1.0, 2.0, size=out.shape)
    if name == "exponential(2)":
        return g.exponential(2.0, size=out.shape)
    if name == "lognormal(0, 0.5)":
        return g.lognormal(0.0, 0.5, size=out.shape)
    return DISTS[name][0](g, out.dtype.type, out)


def fm_call(name, g, out):
    dt = out.dtype.type
    if name == "normal(1, 2)":
        return g.normal(1.0, 2.0, dtype=dt, out=out)
    if name == "exponential(2)":
        return g.exponential(2.0, dtype=dt, out=out)
    if name == "lognormal(0, 0.5)":
        return g.lognormal(0.0, 0.5, dtype=dt, out=out)
    return DISTS[name][0](g, dt, out)


def check(label, x, mean, std):
    """Mean within 10 standard errors, std within 20 / sqrt(n) relative: a wrong fill fails."""
    x = np.asarray(x, dtype=np.float64)
    m, s, n = float(x.mean()), float(x.std()), x.size
    if not np.isfinite(m) or abs(m - mean) > 10 * std / n ** 0.5 + 1e-6 or abs(s - std) > 20 * std / n ** 0.5:
        raise AssertionError(f"{label}: WRONG RESULT (mean {m:.6g}, std {s:.6g}; expected {mean:.6g}, {std:.6g})")


def numpy_contestant(name, bitgen, threads, n, dt):
    """-> (fill, result): fill() fills n values with NumPy (threads slices from spawned generators when
    threads > 1) and returns them (normal, exponential and lognormal have no out=: new arrays)."""
    out = np.empty(n, dtype=dt)
    if threads == 1:
        g = np.random.Generator(bitgen(12345))
        return lambda: np_call(name, g, out)
    gens = [np.random.Generator(bitgen(s)) for s in np.random.SeedSequence(12345).spawn(threads)]
    edges = [n * i // threads for i in range(threads + 1)]
    pool = concurrent.futures.ThreadPoolExecutor(threads)

    def fill():
        futs = [pool.submit(np_call, name, gens[i], out[edges[i]:edges[i + 1]]) for i in range(threads)]
        parts = [f.result() for f in futs]
        return np.concatenate(parts) if DISTS[name][0] is None else out
    return fill


def cpu_part(args, thread_counts):
    n, cases, t_start = 1 << args.log2n, [], time.perf_counter()
    for t in thread_counts:
        fusemath.set_num_threads(t)
        for name, (_, mean, std, dtypes) in DISTS.items():
            for dt in dtypes:
                label = f"{name} {np.dtype(dt).name} threads={t}"
                if args.max_seconds and time.perf_counter() - t_start > args.max_seconds:
                    print(f"{label}: not run (--max-seconds {args.max_seconds:g})")
                    continue
                calls, notes = {}, {}
                for mode in ("portable", "curand"):
                    g, out = fusemath.random.default_rng(777, mode=mode), np.empty(n, dtype=dt)
                    try:
                        fm_call(name, g, out)
                    except (NotImplementedError, fusemath.FusemathError) as exc:
                        notes[f"fm_{mode}"] = err(exc)
                        continue
                    check(f"fm_{mode} {label}", out, mean, std)
                    calls[f"fm_{mode}"] = (lambda g=g, out=out: fm_call(name, g, out))
                for peer, bitgen in (("np_pcg64", np.random.PCG64), ("np_philox", np.random.Philox)):
                    fn = numpy_contestant(name, bitgen, t, n, dt)
                    check(f"{peer} {label}", fn(), mean, std)
                    calls[peer] = fn
                times = {k: [] for k in calls}
                order = list(calls)
                for rnd in range(args.rounds):
                    for k in (order if rnd % 2 == 0 else order[::-1]):
                        t0 = time.perf_counter()
                        calls[k]()
                        times[k].append(time.perf_counter() - t0)
                res = {k: {"ns_per_value": statistics.median(v) / n * 1e9,
                           "spread": (max(v) - min(v)) / statistics.median(v), "rounds_s": v} for k, v in times.items()}
                ratios = {}
                for fm in ("fm_portable", "fm_curand"):
                    for peer in ("np_pcg64", "np_philox"):
                        if fm in times:
                            r = [p / f for p, f in zip(times[peer], times[fm])]
                            ratios[f"{peer}/{fm}"] = {"median": statistics.median(r), "min": min(r), "max": max(r)}
                cases.append({"dist": name, "dtype": np.dtype(dt).name, "threads": t, "n": n, "methods": res,
                              "speedup_paired": ratios, "notes": notes})
                sp = ratios.get("np_pcg64/fm_portable", {}).get("median")
                print(f"{label:44s} " + "  ".join(f"{k} {v['ns_per_value']:.2f}" for k, v in res.items())
                      + (f"  ns/value; PCG64/portable {sp:.2f}x" if sp else ""), flush=True)
    return cases


def gpu_part(args):
    """-> {"enabled": False, "note": why} or the GPU cases."""
    try:
        import cupy as cp  # noqa: F401
    except ImportError:
        cp = None
    try:
        import torch
        if not torch.cuda.is_available():
            torch = None
    except ImportError:
        torch = None
    if cp is None and torch is None or fusemath.cuda_device_count() == 0:
        return {"enabled": False, "note": "no GPU, or neither CuPy nor torch: GPU part skipped"}
    try:
        fm_gen = {m: fusemath.random.default_rng(777, device="cuda", mode=m) for m in ("portable", "curand")}
        fm_note = None
    except Exception as exc:
        fm_gen, fm_note = {}, f"fusemath device='cuda' not available: {err(exc)}"
        print(fm_note)

    def timed(fn, ev, reps=args.gpu_reps):
        fn()
        ev.sync()
        ms = []
        for _ in range(reps):
            ms.append(ev.time(fn))
        return {"ms": statistics.median(ms), "spread": (max(ms) - min(ms)) / statistics.median(ms)}

    class Events:  # CUDA events on the current stream of CuPy (else torch)
        def __init__(self):
            self.lib = "cupy" if cp is not None else "torch"

        def sync(self):
            (cp.cuda.Device().synchronize() if cp is not None else torch.cuda.synchronize())

        def time(self, fn):
            if cp is not None:
                a, b = cp.cuda.Event(), cp.cuda.Event()
                a.record(), fn(), b.record(), b.synchronize()
                return cp.cuda.get_elapsed_time(a, b)
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(), fn(), b.record(), b.synchronize()
            return a.elapsed_time(b)

    def fm_fill(name, g, mode, out):
        """fusemath's fill; curand-mode float64 from position 0 each time (a run of f64 calls from 0:
        nothing to replay, as a first call)."""
        if mode == "curand" and out.dtype.itemsize == 8:
            g.state = {"seed": 777, "position": 0, "mode": "curand"}
        return fm_call(name, g, out)

    ev, cases, ratios = Events(), [], {}
    for dt, log2n in ((np.float32, args.gpu_log2n), (np.float64, args.gpu_log2n - 1)):
        n = 1 << log2n
        for name in ("random", "standard_normal", "standard_exponential", "lognormal(0, 0.5)"):
            row = {"dist": name, "dtype": np.dtype(dt).name, "n": n, "methods": {}, "notes": {}}
            if fm_note:
                row["notes"]["fm"] = fm_note
            for mode, g in fm_gen.items():
                out = cp.empty(n, dtype=dt) if cp is not None else torch.empty(n, dtype=getattr(torch, np.dtype(dt).name),
                                                                                device="cuda")
                try:
                    fm_fill(name, g, mode, out)
                    ev.sync()
                    host = cp.asnumpy(out) if cp is not None else out.cpu().numpy()
                    check(f"fm_{mode} {name}", host[: 1 << 22], DISTS[name][1], DISTS[name][2])
                    row["methods"][f"fm_{mode}"] = timed(lambda g=g, mode=mode, out=out: fm_fill(name, g, mode, out), ev)
                except Exception as exc:
                    row["notes"][f"fm_{mode}"] = err(exc)
            if cp is not None and not name.startswith("lognormal"):
                cg, out = cp.random.default_rng(777), cp.empty(n, dtype=dt)
                # the size too, as the former rng_gpu.py passed it: without it the check saw a constant out
                # (CuPy 14.2 on the H200, 2026-12-02) and stopped the run
                f = {"random": lambda: cg.random(n, dtype=dt, out=out),
                     "standard_normal": lambda: cg.standard_normal(n, dtype=dt, out=out),
                     "standard_exponential": lambda: cg.standard_exponential(n, dtype=dt, out=out)}[name]
                try:
                    f()
                    check(f"cupy {name}", cp.asnumpy(out[: 1 << 22]), DISTS[name][1], DISTS[name][2])
                    row["methods"]["cupy"] = timed(f, ev)
                except Exception as exc:
                    row["notes"]["cupy"] = err(exc)
            if torch is not None:
                out = torch.empty(n, dtype=getattr(torch, np.dtype(dt).name), device="cuda")
                f = {"random": out.uniform_, "standard_normal": out.normal_, "standard_exponential": out.exponential_,
                     "lognormal(0, 0.5)": lambda: out.log_normal_(0.0, 0.5)}[name]
                f()
                check(f"torch {name}", out[: 1 << 22].cpu().numpy(), DISTS[name][1], DISTS[name][2])
                row["methods"]["torch"] = timed(f, ev)
            for v in row["methods"].values():
                v["tb_per_s_written"] = n * np.dtype(dt).itemsize / (v["ms"] * 1e-3) / 1e12
            cases.append(row)
            print(f"GPU {name} {np.dtype(dt).name} 2^{log2n}: " + "  ".join(
                f"{k} {v['ms']:.3f} ms ({v['tb_per_s_written']:.2f} TB/s)" for k, v in row["methods"].items()), flush=True)
        u, z = (next(c["methods"] for c in cases if c["dtype"] == np.dtype(dt).name and c["dist"] == d)
                for d in ("random", "standard_normal"))
        for m in (m for m in ("fm_portable", "fm_curand") if m in u and m in z):  # the 1.15x target (design.md)
            ratios[f"{np.dtype(dt).name} {m}"] = z[m]["ms"] / u[m]["ms"]
            print(f"GPU {np.dtype(dt).name} {m}: normal / uniform {ratios[f'{np.dtype(dt).name} {m}']:.3f}")
    return {"enabled": True, "array_library": ev.lib, "cases": cases, "normal_over_uniform": ratios}


def simd_isa():
    """The ISA fusemath's CPU RNG picks (backends/cpu/philox_simd.c's rule), from /proc/cpuinfo's flags."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), [])
    except OSError:
        flags = []
    isa = "avx512" if {"avx512f", "avx512dq"} <= set(flags) else "avx2" if "avx2" in flags else "scalar"
    return isa, sorted(x for x in flags if x.startswith("avx"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--machine-tag", default="dev-2core")
    ap.add_argument("--log2n", type=int, default=25)
    ap.add_argument("--gpu-log2n", type=int, default=28, help="float32 size; float64 gets half")
    ap.add_argument("--threads", default="1,all", help="comma list; 'all' = every core")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--gpu-reps", type=int, default=20)
    ap.add_argument("--no-cpu", action="store_true")
    ap.add_argument("--no-gpu", action="store_true")
    ap.add_argument("--max-seconds", type=float, default=0, help="CPU cases not started after this (0: no limit)")
    ap.add_argument("--note", default="", help="recorded in the JSON (e.g. the machine's load)")
    ap.add_argument("--out")
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    threads = sorted({cores if t == "all" else int(t) for t in args.threads.split(",")})
    isa, flags = simd_isa()
    date = datetime.datetime.now(datetime.timezone.utc)
    m = dict(machine(gpu=not args.no_gpu), tag=args.machine_tag, rng_isa=isa, avx_flags=flags,
             load_average=os.getloadavg())
    res = {"date": date.isoformat(timespec="seconds"), "command": command_line(), "machine": m, "note": args.note,
           "versions": versions("numpy", "fusemath", "cupy", "cupy-cuda12x", "cupy-cuda13x", "torch"),
           "threads": threads, "log2n": args.log2n, "rounds": args.rounds,
           "gpu": {"enabled": False, "note": "--no-gpu"} if args.no_gpu else gpu_part(args)}  # first: short
    res["cpu"] = [] if args.no_cpu else cpu_part(args, threads)
    if not res["gpu"].get("enabled"):
        print(res["gpu"]["note"])
    res["machine"]["load_average_end"] = os.getloadavg()
    out = args.out or os.path.join(REPO_ROOT, "benchmarks", "results", f"rng-{args.machine_tag}-{date:%Y%m%d}.json")
    write_json(out, res)
    print("wrote", os.path.relpath(out, REPO_ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
