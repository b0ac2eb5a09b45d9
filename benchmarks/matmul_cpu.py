#!/usr/bin/env python3
"""CPU matmul benchmark (issue 2): fusemath's fused bias+relu against NumPy, side by side.

f32 / f64 squares and the skinny shapes, one thread count for everyone (set before NumPy loads); paired ratios
over rounds with pauses between methods, and the 64x64 host overhead against the bare cblas_sgemm
(build/benchmarks/host_overhead); benchmarks/README.md.
"""
from __future__ import annotations

import argparse
import os
import sys

THREAD_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "FUSEMATH_NUM_THREADS", "MKL_NUM_THREADS")
SKINNY = ((8192, 1024, 64), (16384, 512, 128))
TARGET_SQUARE, TARGET_SKINNY, TARGET_HOST_US = 1.05, 1.10, 2.0
TARGET_DROPOUT, DROPOUT_P = 1.10, 0.1  # issue 27: fused relu+dropout <= 1.10x the fused relu alone
VERDICT = "fused_over_np_plain_paired"
PAUSE_S = 0.2
FORCED = {"tiles": "fm_fused_tiles", "kernel": "fm_fused_kernel", "blas_threads": "fm_fused_blas"}
# (ratio, numerator, denominator): the ratio of the medians as <ratio>, the paired one as <ratio>_paired
PAIRS = (("fused_over_np_plain", "fm_fused", "np_plain"), ("unfused_over_np_plain", "np_unfused", "np_plain"),
         ("fused_over_fm_plain", "fm_fused", "fm_plain"), ("fm_plain_over_np_plain", "fm_plain", "np_plain"),
         ("stateless_over_np_plain", "fm_stateless", "np_plain"), ("tiles_over_np_plain", "fm_fused_tiles", "np_plain"),
         ("kernel_over_np_plain", "fm_fused_kernel", "np_plain"), ("blas_threads_over_np_plain", "fm_fused_blas", "np_plain"),
         ("dropout_over_fused", "fm_dropout", "fm_fused"))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--threads", type=int, default=0, help="threads for everyone (default: all available cores)")
    p.add_argument("--sizes", default="256,512,1024,2048,4096", help="comma-separated square sizes")
    p.add_argument("--quick", action="store_true", help="leave out n = 4096")
    p.add_argument("--no-skinny", action="store_true", help="leave out the skinny shapes")
    p.add_argument("--dtypes", default="f32,f64", help="comma-separated: f32,f64")
    p.add_argument("--strategies", default="", help="also time the fused plan with each cpu_strategy forced: "
                                                     + ",".join(FORCED))
    p.add_argument("--budget", type=float, default=1.0, help="seconds of timed calls per method and case (default 1)")
    p.add_argument("--rounds", type=int, default=8, help="timing rounds per case (default 8)")
    p.add_argument("--skip-host-overhead", action="store_true", help="leave out the 64x64 host-overhead section")
    p.add_argument("--machine-tag", default=None, help="tag in the output file name (default: the hostname)")
    p.add_argument("--out", default=None, help="output JSON path")
    p.add_argument("--seed", type=int, default=1234)
    a = p.parse_args(argv)
    a.threads = a.threads or len(os.sched_getaffinity(0))
    a.sizes = [int(s) for s in a.sizes.split(",") if s.strip() and not (a.quick and int(s) >= 4096)]
    a.dtypes = [d for d in a.dtypes.split(",") if d]
    a.strategies = [s for s in a.strategies.split(",") if s]
    if set(a.dtypes) - {"f32", "f64"} or set(a.strategies) - set(FORCED) or a.rounds < 1:
        p.error(f"--dtypes takes f32,f64; --strategies {','.join(FORCED)}; --rounds >= 1")
    return a


ARGS = parse_args(sys.argv[1:])
if any(os.environ.get(k) != str(ARGS.threads) for k in THREAD_ENV):
    os.environ.update({k: str(ARGS.threads) for k in THREAD_ENV})
    if "numpy" in sys.modules:  # a sitecustomize imported it: OpenBLAS already read the variables
        os.execv(sys.executable, [sys.executable] + sys.argv)

import datetime  # noqa: E402
import gc  # noqa: E402
import re  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from bench_common import bursts, c_program, command_line, cpu_model, machine, paired, run_json, write_json  # noqa: E402

_ = np.ones((8, 8)) @ np.ones((8, 8))  # NumPy loads its BLAS now


def blas_libraries() -> list:
    """Real paths of the BLAS libraries mapped into this process."""
    with open("/proc/self/maps") as f:
        return sorted({os.path.realpath(ln.split()[-1]) for ln in f
                       if len(ln.split()) >= 6 and re.search(r"(openblas|libblas|mkl_|blis)", ln.split()[-1], re.I)})


BLAS_NUMPY = blas_libraries()
import fusemath  # noqa: E402

BLAS_ADDED = [p for p in blas_libraries() if p not in BLAS_NUMPY]
fusemath.set_num_threads(ARGS.threads)


def numpy_info() -> dict:
    info = {"version": np.__version__, "config": np.show_config(mode="dicts")}
    blas = info["config"].get("Build Dependencies", {}).get("blas", {})
    return dict(info, blas_name=blas.get("name"), blas_version=blas.get("version"))


def measure(methods: dict, budget: float, rounds: int) -> dict:
    """name -> {median_s, min_s, reps, round_medians_s}: `rounds` rounds, the order reversed every other
    one; per round and method a pause, a warm-up and timed calls (budget / rounds seconds)."""
    est, samples, medians = {}, {name: [] for name in methods}, {name: [] for name in methods}
    for name, fn in methods.items():  # first calls: warm-up and a cost estimate
        time.sleep(PAUSE_S)
        fn()
        t0 = time.perf_counter()
        fn()
        est[name] = max(time.perf_counter() - t0, 1e-6)
    for r in range(rounds):
        for name in (list(methods) if r % 2 == 0 else list(methods)[::-1]):
            t, fn = est[name], methods[name]
            reps = int(min(1000 // rounds, max(1, budget / rounds / t)))
            time.sleep(PAUSE_S)  # the other library's threads go to sleep, then a warm-up wakes ours
            for _ in range(max(2, min(20, int(0.05 / t))) if t <= 0.2 else int(r == 0 or t <= 0.5)):
                fn()
            got = []
            for _ in range(reps):
                t0 = time.perf_counter()
                fn()
                got.append(time.perf_counter() - t0)
            samples[name] += got
            medians[name].append(statistics.median(got))
    return {n: {"median_s": statistics.median(s), "min_s": min(s), "reps": len(s), "round_medians_s": medians[n]}
            for n, s in samples.items()}


def check_close(name, got, ref, k):
    """Unit-normal data: 32 eps k absolute and 64 eps relative still catch any real bug (a missing bias
    or relu, a wrong panel: errors of O(1))."""
    eps = float(np.finfo(ref.dtype).eps)
    if got.shape != ref.shape or got.dtype != ref.dtype or not np.allclose(got, ref, rtol=64 * eps, atol=32 * eps * k):
        raise AssertionError(f"{name}: WRONG RESULT ({got.shape} {got.dtype}, max abs error "
                             f"{float(np.max(np.abs(got.astype(np.float64) - ref))):.3g})")
    return float(np.max(np.abs(got - ref)))


def run_case(kind, m, n, k, dt, rng, args) -> dict:
    dtype = np.float32 if dt == "f32" else np.float64
    a, b = rng.standard_normal((m, k), dtype=dtype), rng.standard_normal((k, n), dtype=dtype)
    bias = rng.standard_normal(n, dtype=dtype)
    plans = {"fm_fused": fusemath.Matmul(a, b).plan(epilogue="relu", bias=bias), "fm_plain": fusemath.Matmul(a, b).plan()}
    for s in args.strategies:
        plans[FORCED[s]] = fusemath.Matmul(a, b, options={"cpu_strategy": s}).plan(epilogue="relu", bias=bias)
    ref = a @ b
    ref_fused = np.maximum(ref + bias, 0)
    errors = {name: check_close(name, mm.execute(), ref if name == "fm_plain" else ref_fused, k)
              for name, mm in plans.items()}
    errors["fm_stateless"] = check_close("fm_stateless", fusemath.matmul(a, b, bias=bias, epilogue="relu"), ref_fused, k)
    # bias+relu+dropout (issue 27), the mask drawn per execute from a portable generator
    plans["fm_dropout"] = fusemath.Matmul(a, b).plan(epilogue="relu+dropout", bias=bias,
                                                     dropout=(DROPOUT_P, fusemath.random.Generator(args.seed)))
    got = plans["fm_dropout"].execute()
    kept = got != 0
    errors["fm_dropout"] = check_close("fm_dropout", np.where(kept, got, 0), np.where(kept, ref_fused / (1 - DROPOUT_P), 0)
                                       .astype(dtype), k)
    if abs(np.count_nonzero(ref_fused > 0) * (1 - DROPOUT_P) - np.count_nonzero(kept)) > 6 * np.sqrt(got.size) + 1:
        raise AssertionError(f"fm_dropout: WRONG KEEP COUNT {np.count_nonzero(kept)} of {got.size}")
    del ref, ref_fused, got, kept
    methods = {"np_unfused": lambda: np.maximum(a @ b + bias, 0), "np_plain": lambda: a @ b,
               "fm_fused": plans["fm_fused"].execute, "fm_plain": plans["fm_plain"].execute,
               "fm_stateless": lambda: fusemath.matmul(a, b, bias=bias, epilogue="relu")}
    methods.update({name: plans[name].execute for name in plans if name not in methods})
    gc.collect()
    gc.disable()
    try:
        res = measure(methods, args.budget, args.rounds)
    finally:
        gc.enable()
    ratios = {}
    for key, x, y in PAIRS:
        if x in res and y in res:
            ratios[key] = res[x]["median_s"] / res[y]["median_s"]
            ratios[key + "_paired"] = paired(res[x]["round_medians_s"], res[y]["round_medians_s"])
    target = TARGET_SKINNY if kind == "skinny" else TARGET_SQUARE if n >= 1024 else None
    dropout_target = TARGET_DROPOUT if kind == "skinny" or n >= 2048 else None
    describe = {name: mm.describe() for name, mm in plans.items()}
    for mm in plans.values():
        mm.free()
    return {"kind": kind, "dtype": dt, "m": m, "n": n, "k": k, "label": f"{n}^3" if kind == "square" else f"{m}x{n}x{k}",
            "methods": res, "ratios": ratios, "max_abs_error_vs_numpy": errors, "plans": describe,
            "target_fused_over_np_plain": target, "verdict_ratio": VERDICT,
            "verdict": None if target is None else "PASS" if ratios[VERDICT] <= target else "FAIL",
            "target_dropout_over_fused": dropout_target,
            "dropout_verdict": None if dropout_target is None else
            "PASS" if ratios["dropout_over_fused_paired"] <= dropout_target else "FAIL"}


def burst_ns(fn, calls=2000, n=15) -> dict:
    time.sleep(PAUSE_S)
    per = [t * 1e9 for t in bursts(fn, calls, n + 1)[1:]]  # the first burst warms up
    return {"median_ns": statistics.median(per), "min_ns": min(per), "bursts": n, "calls_per_burst": calls}


def host_overhead(args) -> dict:
    exe, note = c_program("host_overhead")
    out = {"m": 64, "n": 64, "k": 64, "dtype": "f32", "host_overhead_bin": exe, "c_note": note}
    c = run_json([exe]) if exe else None
    if c is not None and "error" not in c:
        out["c"] = c
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((64, 64), dtype=np.float32), rng.standard_normal((64, 64), dtype=np.float32)
    bias = rng.standard_normal(64, dtype=np.float32)
    mm_id, mm_br = fusemath.Matmul(a, b).plan(), fusemath.Matmul(a, b).plan(epilogue="relu", bias=bias)
    check_close("host identity", mm_id.execute(), a @ b, 64)
    check_close("host bias+relu", mm_br.execute(), np.maximum(a @ b + bias, 0), 64)
    py = {"Matmul.execute identity": burst_ns(mm_id.execute), "Matmul.execute bias+relu": burst_ns(mm_br.execute),
          "fusemath.matmul identity": burst_ns(lambda: fusemath.matmul(a, b)),
          "fusemath.matmul bias+relu": burst_ns(lambda: fusemath.matmul(a, b, bias=bias, epilogue="relu")),
          "numpy a @ b": burst_ns(lambda: a @ b)}
    out.update(python=py, plans={"identity": mm_id.describe(), "bias+relu": mm_br.describe()}, verdict="SKIPPED")
    if "c" in out:
        bare, cb = out["c"]["per_call_ns"]["cblas_sgemm"]["median"], out["c"]["per_call_ns"]
        out["bare_cblas_sgemm_ns"] = bare
        out["overhead_ns"] = {f"{name} - cblas_sgemm": v["median_ns"] - bare for name, v in py.items()}
        out["overhead_ns"]["Matmul.execute identity - C fm_plan_execute identity"] = \
            py["Matmul.execute identity"]["median_ns"] - cb["fm_plan_execute_identity"]["median"]
        us = out["overhead_planned_execute_us"] = out["overhead_ns"]["Matmul.execute identity - cblas_sgemm"] / 1e3
        out.update(target_us=TARGET_HOST_US, verdict="PASS" if us <= TARGET_HOST_US else "FAIL")
    else:
        out["c_error"] = (c or {}).get("error") or note
    return out


def main() -> int:
    args = ARGS
    t_start, now = time.perf_counter(), datetime.datetime.now().astimezone()
    print(f"matmul_cpu: fusemath {fusemath.__version__}, numpy {np.__version__}, {cpu_model()}, "
          f"{args.threads} threads for everyone", flush=True)
    if BLAS_NUMPY and not any("blas" in os.path.basename(p).lower() for p in BLAS_ADDED):
        print("WARNING: NumPy and fusemath share one OpenBLAS, which fusemath sets to 1 thread: NumPy's products "
              "ran single-threaded and the comparison is not fair.")
    rng = np.random.default_rng(args.seed)
    shapes = [("square", n, n, n) for n in args.sizes] + ([] if args.no_skinny else [("skinny",) + s for s in SKINNY])
    cases = []
    for dt in args.dtypes:
        for kind, m, n, k in shapes:
            c = run_case(kind, m, n, k, dt, rng, args)
            cases.append(c)
            q = c["ratios"]
            extra = "".join(f"  {s}/np {q[s + '_over_np_plain_paired']:.3f}" for s in ("tiles", "kernel", "blas_threads")
                            if s + "_over_np_plain_paired" in q)
            print(f"  {dt} {c['label']:>16}: fused/np {q[VERDICT]:.3f} (medians {q['fused_over_np_plain']:.3f})  "
                  f"unfused/np {q['unfused_over_np_plain_paired']:.3f}  fused/fm_plain "
                  f"{q['fused_over_fm_plain_paired']:.3f}{extra}  {c['verdict'] or ''}  relu+dropout/relu "
                  f"{q['dropout_over_fused_paired']:.3f} {c['dropout_verdict'] or ''}", flush=True)
    host = None if args.skip_host_overhead else host_overhead(args)
    if host:
        print(f"host overhead 64^3 f32: planned execute {host.get('overhead_planned_execute_us', float('nan')):+.2f} us "
              f"above bare cblas_sgemm ({host['verdict']}); " + (host.get("c_error") or ""))
    verdicts = ([c["verdict"] for c in cases if c["verdict"]] + [c["dropout_verdict"] for c in cases if c["dropout_verdict"]]
                + ([host["verdict"]] if host else []))
    print(f"targets: {verdicts.count('PASS')} PASS, {verdicts.count('FAIL')} FAIL")
    tag = re.sub(r"[^A-Za-z0-9_.-]+", "_", args.machine_tag or socket.gethostname())
    result = {
        "benchmark": "matmul_cpu", "date": now.isoformat(timespec="seconds"), "command": command_line(),
        "machine": dict(machine(), tag=tag, threads_used=args.threads, loadavg_at_start=os.getloadavg()),
        "numpy": numpy_info(),
        "blas_check": {"blas_libs_mapped_by_numpy": BLAS_NUMPY, "blas_libs_added_by_fusemath": BLAS_ADDED},
        "fusemath": {"version": fusemath.__version__, "num_threads": fusemath.get_num_threads(),
                     "backends": [b._asdict() for b in fusemath.backends()]},
        "settings": {"threads": args.threads, "sizes": args.sizes, "skinny": not args.no_skinny, "dtypes": args.dtypes,
                     "strategies": args.strategies, "budget_s_per_method": args.budget, "rounds": args.rounds,
                     "seed": args.seed, "pause_s": PAUSE_S, "verdict_statistic": VERDICT},
        "targets": {"square": TARGET_SQUARE, "skinny": TARGET_SKINNY, "host_overhead_us": TARGET_HOST_US,
                    "dropout_over_fused": TARGET_DROPOUT, "dropout_p": DROPOUT_P},
        "cases": cases, "host_overhead": host, "total_seconds": time.perf_counter() - t_start}
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                   f"matmul_cpu-{tag}-{now:%Y%m%d}.json")
    write_json(out, result)
    print(f"wrote {out} ({result['total_seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
