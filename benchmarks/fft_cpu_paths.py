"""fft_cpu_paths.py: the two ways a CPU FFT prolog can run, side by side with the plain transform.

A prolog on dense c2c transforms is gathered into the L2-sized scratch and FFTW runs from there
into out (scratch>out), or gathered straight into out and FFTW runs in place there (prolog>out).
Planning with effort measure times both and keeps the faster; this script forces each one
(FUSEMATH_FFT_CPU_PATH=chunks / inplace) next to the timed choice and the plain transform, and
prints paired ratios (median over 7 rounds of methods timed next to each other), c64,
fft(x * w) * 0.5.

    python benchmarks/fft_cpu_paths.py [threads] [16x262144,64x65536,...]

With $OUT set it writes $OUT/fft_cpu_paths.json.
"""
import json
import os
import statistics
import sys
import time

import numpy as np

import fusemath
import fusemath.fft as ffm

thr = int(sys.argv[1]) if len(sys.argv) > 1 else os.cpu_count()
fusemath.set_num_threads(thr)
shapes = [(16, 262144), (64, 65536), (4, 1048576), (1, 4194304), (256, 16384), (4096, 1024), (1024, 1024), (2048, 2048)]
if len(sys.argv) > 2:
    shapes = [tuple(map(int, s.split("x"))) for s in sys.argv[2].split(",")]
rng = np.random.default_rng(1)
def timeit(fn, budget=0.1):
    fn(); t0 = time.perf_counter(); fn(); one = max(time.perf_counter() - t0, 1e-6)
    reps = max(1, min(1000, int(budget / one))); t0 = time.perf_counter()
    for _ in range(reps): fn()
    return (time.perf_counter() - t0) / reps
res = []
for sh in shapes:
    axes = (0, 1) if sh in [(1024, 1024), (2048, 2048)] else (1,)
    x = (rng.standard_normal(sh) + 1j * rng.standard_normal(sh)).astype(np.complex64)
    w = rng.random(tuple(sh[a] for a in axes)).astype(np.float32)
    wb = w.reshape(tuple(sh[d] if d in axes else 1 for d in range(2)))
    plain = ffm.FFT(x, axes=axes); plain.plan()
    pl = {}
    for i, mode in enumerate(["chunks", "inplace", ""]):
        os.environ["FUSEMATH_FFT_CPU_PATH"] = mode
        f = ffm.FFT(x, axes=axes); f.plan(prolog={"multiply": wb}, epilog={"scale": 0.5 + 1e-7 * i})
        pl[mode or "timed"] = f
    os.environ["FUSEMATH_FFT_CPU_PATH"] = ""
    ref = np.fft.fftn(x * wb, axes=axes) * 0.5
    for k, f in pl.items():
        e = np.linalg.norm(f.execute() - ref) / np.linalg.norm(ref)
        assert e < 1e-4, (k, e)
    o = {k: np.empty_like(ref) for k in ["p"] + list(pl)}
    m = {"plain": plain.execute, "plain_out": lambda: plain.execute(out=o["p"])}
    for k, f in pl.items():
        m[k] = f.execute
        m[k + "_out"] = (lambda f=f, k=k: f.execute(out=o[k]))
    t = {k: [] for k in m}
    for r in range(7):
        for k in (list(m) if r % 2 == 0 else reversed(list(m))):
            t[k].append(timeit(m[k]))
    pr = lambda a, b: statistics.median(x / y for x, y in zip(t[a], t[b]))
    row = {"shape": sh, "ms": {k: statistics.median(v) * 1e3 for k, v in t.items()},
           "chunks/plain": pr("chunks", "plain"), "inplace/plain": pr("inplace", "plain"), "timed/plain": pr("timed", "plain"),
           "chunks_out/plain_out": pr("chunks_out", "plain_out"), "inplace_out/plain_out": pr("inplace_out", "plain_out"),
           "timed_out/plain_out": pr("timed_out", "plain_out"),
           "timed_describe": pl["timed"].describe()}
    res.append(row)
    print(sh, " ".join(f"{k} {v:.2f}" for k, v in row.items() if isinstance(v, float)), "| timed:",
          row["timed_describe"].split("path=")[1].split(" ")[0] if "path=" in row["timed_describe"] else row["timed_describe"][:200], flush=True)
if os.environ.get("OUT"):
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": os.environ.get("FM_MACHINE", "unknown"),
            "threads": thr, "command": "benchmarks/fft_cpu_paths.py " + " ".join(sys.argv[1:])}
    with open(os.path.join(os.environ["OUT"], "fft_cpu_paths.json"), "w") as fh:
        json.dump({"meta": meta, "results": res}, fh, indent=1)
