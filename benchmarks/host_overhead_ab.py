"""Host overhead per call of two builds of fusemath, side by side in one run.

A change to the layers between a call and its backend (core, the extension, the Python front)
must not make calls dearer. This times the same small calls with build A and build B, each in its
own subprocess (two builds of one package cannot share a process), alternating A, B, B, A, ... for
--rounds rounds, and reports per case the median over rounds of each build's per-call time and of
the paired differences B - A. --jobs N runs N rounds of the CPU cases at once, each round's A and B
pinned to one core of its own (a pair shares its core, so pairing still cancels what that core
adds); the GPU cases (--gpu) run one round at a time, as concurrent processes would share the GPU.

    python benchmarks/host_overhead_ab.py --a /tmp/fm_before --b .venv/lib/python3.11/site-packages

--a / --b: a directory to put first on sys.path (where that build's `fusemath` package lives).
Cases: CPU (NumPy): planned 64x64 f32 `Matmul.execute(out=)`, stateless `fusemath.matmul` 64x64,
stateless `fusemath.fft.fft` on 1024 complex64 points, planned `FFT.execute(out=)` 1024 points;
with --gpu also torch CUDA tensors: planned 64x64 matmul execute and stateless matmul, planned
1024-point FFT execute, and torch's own `a @ b` as an in-process reference: each GPU case is also
reported less the reference of its own process, which cancels what makes one process slower than
another for all code alike. Writes JSON with --json.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

REFERENCE = "gpu torch a @ b 64^3 (in-process reference)"
WORKER = r'''
import sys, time, json
REFERENCE = "gpu torch a @ b 64^3 (in-process reference)"
sys.path.insert(0, sys.argv[1])
import numpy as np, fusemath, fusemath.fft as ff
calls, gpu = int(sys.argv[2]), sys.argv[3] == "gpu"

def per_call(f):
    for _ in range(200):
        f()
    best = 1e9
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            f()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best * 1e6

r, info = {}, {}
a = np.random.rand(64, 64).astype(np.float32); b = np.random.rand(64, 64).astype(np.float32)
d = np.empty((64, 64), np.float32)
mm = fusemath.Matmul(a, b); mm.plan()
if not gpu:
    r["cpu planned matmul 64^3 execute(out=)"] = per_call(lambda: mm.execute(out=d))
info["cpu plan"] = mm.describe()
try:
    import ctypes
    core = ctypes.CDLL("libopenblas.so.0").openblas_get_corename
    core.restype = ctypes.c_char_p
    info["openblas core"] = core().decode()
except Exception as exc:
    info["openblas core"] = f"unknown ({type(exc).__name__})"
if not gpu:
    r["cpu stateless fusemath.matmul 64^3"] = per_call(lambda: fusemath.matmul(a, b))
    x = (np.random.rand(1024) + 1j * np.random.rand(1024)).astype(np.complex64); y = np.empty_like(x)
    r["cpu stateless fft 1024 c64"] = per_call(lambda: ff.fft(x))
    f = ff.FFT(x); f.plan(effort="estimate")
    r["cpu planned fft 1024 c64 execute(out=)"] = per_call(lambda: f.execute(out=y))
else:
    import torch
    ta = torch.randn(64, 64, device="cuda"); tb = torch.randn(64, 64, device="cuda")
    td = torch.empty(64, 64, device="cuda")
    tm = fusemath.Matmul(ta, tb); tm.plan()
    r["gpu planned matmul 64^3 execute(out=)"] = per_call(lambda: tm.execute(out=td))
    r["gpu stateless fusemath.matmul 64^3"] = per_call(lambda: fusemath.matmul(ta, tb))
    r[REFERENCE] = per_call(lambda: ta @ tb)  # a like call of another library, timed in the same process
    tx = torch.randn(1024, dtype=torch.complex64, device="cuda"); ty = torch.empty_like(tx)
    tf = ff.FFT(tx); tf.plan(effort="estimate")
    r["gpu planned fft 1024 c64 execute(out=)"] = per_call(lambda: tf.execute(out=ty))
    torch.cuda.synchronize()
print(json.dumps({"times": r, "info": info}))
'''


def run(path, calls, part, core=None):
    pin = ["taskset", "-c", str(core)] if core is not None else []
    out = subprocess.run(pin + [sys.executable, "-c", WORKER, os.path.abspath(path), str(calls), part],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def paired_round(args, part, r, core=None):
    """One round: A then B on even rounds, B then A on odd ones -> {side: result}."""
    return {side: run(getattr(args, side), args.calls, part, core) for side in ("ab" if r % 2 == 0 else "ba")}


def isa() -> str:
    try:
        flags = next(ln for ln in open("/proc/cpuinfo") if ln.startswith("flags")).split()
    except (OSError, StopIteration):
        return "unknown"
    return "avx512f" if "avx512f" in flags else "avx2" if "avx2" in flags else "baseline x86-64"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, help="sys.path entry of build A (before)")
    ap.add_argument("--b", required=True, help="sys.path entry of build B (after)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("--gpu-rounds", type=int, default=0, help="rounds of the GPU cases (default: --rounds)")
    ap.add_argument("--jobs", type=int, default=1, help="CPU rounds run at once, each pinned to its own core")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--machine-tag", default=platform.node())
    args = ap.parse_args()
    from concurrent.futures import ThreadPoolExecutor
    jobs = max(1, min(args.jobs, os.cpu_count() or 1))
    with ThreadPoolExecutor(jobs) as pool:
        rounds = list(pool.map(lambda r: paired_round(args, "cpu", r, r % jobs if jobs > 1 else None),
                               range(args.rounds)))
    if args.gpu:
        gpu_rounds = [paired_round(args, "gpu", r) for r in range(args.gpu_rounds or args.rounds)]
        for both, gpu in zip(rounds, gpu_rounds):  # (the CPU cases' extra rounds keep their own medians)
            for side in both:
                both[side]["times"].update(gpu[side]["times"])
    samples = {side: [rd[side]["times"] for rd in rounds] for side in "ab"}
    info = {side: rounds[-1][side]["info"] for side in "ab"}
    rows = {}
    for case in samples["a"][0]:
        ta = [s[case] for s in samples["a"] if case in s]
        tb = [s[case] for s in samples["b"] if case in s]
        diff = [y - x for x, y in zip(ta, tb)]
        rows[case] = {"a_us": statistics.median(ta), "b_us": statistics.median(tb),
                      "b_minus_a_us": statistics.median(diff), "diff_min": min(diff), "diff_max": max(diff)}
    # Each GPU case less the reference in its own process: what differs between two processes for
    # reasons of their own (measured: ~0.7 us on identical torch calls) cancels.
    for case in [c for c in rows if c.startswith("gpu ") and c != REFERENCE and REFERENCE in rows]:
        rel = {side: [s[case] - s[REFERENCE] for s in samples[side] if case in s] for side in "ab"}
        diff = [y - x for x, y in zip(rel["a"], rel["b"])]
        rows[case + " minus reference"] = {"a_us": statistics.median(rel["a"]), "b_us": statistics.median(rel["b"]),
                                           "b_minus_a_us": statistics.median(diff), "diff_min": min(diff),
                                           "diff_max": max(diff)}
    print(f"{'case':44s} {'A us':>8s} {'B us':>8s} {'B-A us':>8s}  (spread of B-A)")
    for case, v in rows.items():
        print(f"{case:44s} {v['a_us']:8.2f} {v['b_us']:8.2f} {v['b_minus_a_us']:+8.2f}  "
              f"({v['diff_min']:+.2f} .. {v['diff_max']:+.2f})")
    if args.json:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from bench_common import cpu_model
        meta = {"date": time.strftime("%Y-%m-%d"), "machine": args.machine_tag, "cpu": cpu_model(), "isa": isa(),
                "plans_and_blas": info,
                "nproc": os.cpu_count(), "command": " ".join(sys.argv), "rounds": args.rounds, "calls": args.calls,
                "gpu_rounds": args.gpu_rounds or args.rounds,
                "jobs": jobs,
                "a": args.a, "b": args.b}
        with open(args.json, "w") as fh:
            json.dump({"meta": meta, "cases": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
