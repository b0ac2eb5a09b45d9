#!/usr/bin/env python3
"""Pipelined host<->GPU transfers (issue 29): GPU-with-transfers time on NumPy data with
FUSEMATH_PIPELINE=off (whole operands staged, then the compute, then the copy back) against on
(chunks: the copy in of chunk i+1, the compute of chunk i and the copy back of chunk i-1 overlap),
and the floors: the copy-only time (every input host->device and the output back, CuPy, from pageable
NumPy arrays and from pinned buffers) and the compute-only time (fusemath on CuPy arrays already on
the GPU). Target: on within 1.15x of max(copy, compute).

Cases: f32 matmul n x n x n (n = 2048, 4096, 8192; a and b in, d out), and one FFT of a (8, 2^24)
complex64 array over its last axis: 8 transforms of 2^24 points, "2^24 x 8" read as batch 8 of
2^24-point transforms (1 GiB in, 1 GiB out; the pipeline cuts it into 8 slabs of one transform). The
results go into preallocated NumPy arrays (out=), so neither mode pays fresh pages of a new result.

Modes: off, on (every problem that splits is cut) and auto (the default: pipelined only where the
model predicts a gain over staging whole; its describe() says which and why), auto on the built-in
rates (an empty cache directory: no machine profile) and, with --calibrate, auto_cal on a profile
fusemath.calibrate(quick=True) measured first (in a private cache directory).

The host copy rate model: pageable -> pageable memcpy GB/s at 1, 2, 4, 8 threads (ctypes.memmove on
Python threads, which releases the GIL; 256 MiB, pre-touched), the rate the pipeline's staging threads
(FUSEMATH_PIPELINE_THREADS) can fill and drain the pinned ring at. Measured first, with or without a GPU.

FUSEMATH_PIPELINE is read when the library's context is made (at import), so each mode runs in a child
process of this script. Writes pipeline-<host>-<date>.json into --out-dir (default benchmarks/results).
Without a GPU it measures the host copies only, writes them, and says "no GPU: skipped".
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_common import machine, write_json  # noqa: E402

CASES = [("matmul", 2048), ("matmul", 4096), ("matmul", 8192), ("fft", 1 << 24)]
FFT_BATCH = 8


def timed(fn, sync, repeats):
    """Median and min seconds of `repeats` calls after one warm-up call, each call synchronized."""
    fn(), sync()
    per = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        per.append(time.perf_counter() - t0)
    return {"ms": statistics.median(per) * 1e3, "min_ms": min(per) * 1e3, "max_ms": max(per) * 1e3}


def host_operands(op, n, rng):
    """-> (inputs, output) NumPy arrays of the case."""
    import numpy as np
    if op == "matmul":
        a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
        return [a, b], np.zeros((n, n), np.float32)
    x = np.empty((FFT_BATCH, n), np.complex64)
    x.real, x.imag = rng.standard_normal((FFT_BATCH, n)), rng.standard_normal((FFT_BATCH, n))
    return [x], np.zeros((FFT_BATCH, n), np.complex64)


def with_transfers(op, n, repeats):
    """The child's job: the GPU-with-transfers call on NumPy data under this process's FUSEMATH_PIPELINE."""
    import numpy as np
    import fusemath
    import fusemath.fft
    ins, out = host_operands(op, n, np.random.default_rng(0))
    if op == "matmul":
        mm = fusemath.Matmul(ins[0], ins[1], options={"execution": "cuda"})
        mm.plan()
        call, describe = (lambda: mm.execute(out=out)), mm.describe()
        check = lambda: float(np.max(np.abs(out[:64] - ins[0][:64] @ ins[1])))  # noqa: E731
    else:
        f = fusemath.fft.FFT(ins[0], axes=-1, execution="cuda")
        f.plan()
        call, describe = (lambda: f.execute(out=out)), f.describe()
        check = lambda: float(np.max(np.abs(out[0, :4096] - np.fft.fft(ins[0][0])[:4096])))  # noqa: E731
    t = timed(call, lambda: None, repeats)
    t["describe"] = describe
    t["max_abs_error_sample"] = check()
    return t


def floors(op, n, repeats):
    """Copy-only (pageable and pinned, in and out separately) and compute-only times, with CuPy."""
    import cupy as cp
    import cupyx
    import numpy as np
    import fusemath
    import fusemath.fft
    ins, out = host_operands(op, n, np.random.default_rng(0))
    dev_in = [cp.asarray(x) for x in ins]
    dev_out = cp.empty(out.shape, out.dtype)
    pin_in = [cupyx.empty_pinned(x.shape, x.dtype) for x in ins]
    for p, x in zip(pin_in, ins):
        p[...] = x
    pin_out = cupyx.empty_pinned(out.shape, out.dtype)
    sync = cp.cuda.Device().synchronize
    res = {}
    for kind, src, dst in (("pageable", ins, out), ("pinned", pin_in, pin_out)):
        h2d = timed(lambda: [d.set(s) for d, s in zip(dev_in, src)], sync, repeats)
        d2h = timed(lambda: dev_out.get(out=dst), sync, repeats)
        res[f"h2d_{kind}_ms"], res[f"d2h_{kind}_ms"] = h2d["ms"], d2h["ms"]
        res[f"copy_{kind}_ms"] = h2d["ms"] + d2h["ms"]
    if op == "matmul":
        mm = fusemath.Matmul(dev_in[0], dev_in[1])
        mm.plan()
        stream = cp.cuda.get_current_stream().ptr
        res["compute"] = timed(lambda: mm.execute(out=dev_out, stream=stream), sync, repeats)
    else:
        res["compute"] = timed(lambda: fusemath.fft.fft(dev_in[0], axis=-1, out=dev_out), sync, repeats)
    res["compute_ms"] = res["compute"]["ms"]
    return res


def host_copy_rates(mib=256, threads=(1, 2, 4, 8), repeats=5):
    """{threads: GB/s} of one mib-MiB pageable -> pageable copy cut into `threads` parts copied at once."""
    import ctypes
    import threading
    import numpy as np
    n = mib << 20
    src, dst = np.ones(n, np.uint8), np.zeros(n, np.uint8)  # both touched: no page faults timed
    s0, d0 = src.ctypes.data, dst.ctypes.data
    res = {}
    for t in threads:
        part = -(-n // t)
        best = float("inf")
        for _ in range(repeats):
            go = threading.Barrier(t + 1)
            done = threading.Barrier(t + 1)

            def work(i):
                lo, hi = i * part, min(n, (i + 1) * part)
                go.wait()
                ctypes.memmove(d0 + lo, s0 + lo, hi - lo)
                done.wait()
            ths = [threading.Thread(target=work, args=(i,)) for i in range(t)]
            for th in ths:
                th.start()
            go.wait()
            t0 = time.perf_counter()
            done.wait()
            best = min(best, time.perf_counter() - t0)
            for th in ths:
                th.join()
        res[str(t)] = n / best / 1e9
    assert np.array_equal(src, dst)
    return res


def child(args) -> int:
    op, n = args.case.split(":")
    fn = floors if args.child == "floors" else with_transfers
    print(json.dumps(fn(op, int(n), args.repeats)))
    return 0


CACHE = {}  # mode -> FUSEMATH_CACHE_DIR: "auto" an empty one (built-in rates), "auto_cal" the calibrated one


def run_child(mode, case, repeats):
    env = dict(os.environ)
    if mode.startswith("on_t"):  # on with FUSEMATH_PIPELINE_THREADS=N (--threads-sweep)
        env["FUSEMATH_PIPELINE"], env["FUSEMATH_PIPELINE_THREADS"] = "on", mode[4:]
        mode = "on"
    elif mode in ("on", "off"):
        env["FUSEMATH_PIPELINE"] = mode
    else:
        env.pop("FUSEMATH_PIPELINE", None)
    if mode in CACHE:
        env["FUSEMATH_CACHE_DIR"] = CACHE[mode]
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", mode, "--case", case, "--repeats",
                        str(repeats)], env=env, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        return {"error": (r.stderr or r.stdout)[-2000:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", default=os.path.join(HERE, "results"))
    p.add_argument("--repeats", type=int, default=7, help="timed calls per point (after one warm-up)")
    p.add_argument("--cases", default=",".join(f"{op}:{n}" for op, n in CASES),
                   help="comma-separated op:n (matmul:n for n x n x n f32; fft:n for (8, n) c64 over the last axis)")
    p.add_argument("--calibrate", action="store_true",
                   help="also run auto on a profile measured first by fusemath.calibrate(quick=True)")
    p.add_argument("--threads-sweep", default="",
                   help="comma-separated FUSEMATH_PIPELINE_THREADS values to run 'on' with too (e.g. 4,8,16)")
    p.add_argument("--child", choices=("on", "off", "auto", "auto_cal", "floors"), help=argparse.SUPPRESS)
    p.add_argument("--case", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args)
    CACHE["auto"] = tempfile.mkdtemp(prefix="fm-pipeline-builtin-")
    if args.calibrate:
        CACHE["auto_cal"] = os.environ["FUSEMATH_CACHE_DIR"] = tempfile.mkdtemp(prefix="fm-pipeline-cal-")
    import fusemath
    cores = os.cpu_count() or 1
    copy = host_copy_rates(threads=tuple(t for t in (1, 2, 4, 8, 16) if t <= max(8, cores)))
    print("  host memcpy pageable->pageable (256 MiB): " +
          ", ".join(f"{t} thread{'s' if t != '1' else ''} {r:.1f} GB/s" for t, r in copy.items()), flush=True)
    now = datetime.datetime.now().astimezone()
    res = {"date": now.isoformat(timespec="seconds"), "machine": machine(gpu=fusemath.cuda_device_count() > 0),
           "command": " ".join(["benchmarks/pipeline.py"] + (argv if argv is not None else sys.argv[1:])),
           "host_copy_gb_s": copy,
           "fft_meaning": "batch 8 of 2^24-point complex64 transforms over the last axis of an (8, 2^24) array"}
    path = os.path.join(args.out_dir, f"pipeline-{socket.gethostname()}-{now:%Y-%m-%d}.json")
    if args.calibrate and fusemath.cuda_device_count() > 0:
        t0 = time.perf_counter()
        fusemath.calibrate(quick=True, progress=False)  # saved in CACHE["auto_cal"]: the children load it
        res["calibrate_s"] = time.perf_counter() - t0
        res["profile"] = fusemath.machine_profile()
    if fusemath.cuda_device_count() < 1:
        write_json(path, res)
        print(f"no GPU: skipped (host copies written to {path})")
        return 0
    rows = []
    for case in args.cases.split(","):
        row = {"case": case}
        sweep = tuple(f"on_t{int(t)}" for t in args.threads_sweep.split(",") if t.strip())
        for mode in ("off", "on", "auto") + (("auto_cal",) if "auto_cal" in CACHE else ()) + sweep + ("floors",):
            row[mode] = run_child(mode, case, args.repeats)
        fl, on, off, au = row["floors"], row["on"], row["off"], row["auto"]
        if all("error" not in r for r in (fl, on, off, au)):
            for kind in ("pageable", "pinned"):
                floor = max(fl[f"copy_{kind}_ms"], fl["compute_ms"])
                row[f"on_over_max_copy_{kind}_compute"] = on["ms"] / floor
                row[f"auto_over_max_copy_{kind}_compute"] = au["ms"] / floor
            row["off_over_on"] = off["ms"] / on["ms"]
            row["auto_over_off"] = au["ms"] / off["ms"]
            row["auto_pipelined"] = "pipelined chunks=" in au.get("describe", "")
            print(f"  {case:14} off {off['ms']:9.2f} ms  on {on['ms']:9.2f}  auto {au['ms']:9.2f} "
                  f"({'pipelined' if row['auto_pipelined'] else 'staged'})  copy pageable "
                  f"{fl['copy_pageable_ms']:8.2f} pinned {fl['copy_pinned_ms']:8.2f}  compute {fl['compute_ms']:8.2f}  "
                  f"on / max(copy pinned, compute) {row['on_over_max_copy_pinned_compute']:.2f}x", flush=True)
            if "auto_cal" in row and "error" not in row["auto_cal"]:
                row["auto_cal_over_off"] = row["auto_cal"]["ms"] / off["ms"]
                row["auto_cal_pipelined"] = "pipelined chunks=" in row["auto_cal"].get("describe", "")
                print(f"  {case:14} auto on the calibrated profile {row['auto_cal']['ms']:9.2f} ms "
                      f"({'pipelined' if row['auto_cal_pipelined'] else 'staged'})", flush=True)
            for m in sweep:
                if "error" not in row[m]:
                    print(f"  {case:14} on, FUSEMATH_PIPELINE_THREADS={m[4:]}: {row[m]['ms']:9.2f} ms", flush=True)
        else:
            print(f"  {case}: " + "; ".join(f"{m}: {r['error'][-300:]}" for m, r in row.items()
                                            if isinstance(r, dict) and "error" in r), flush=True)
        rows.append(row)
    res["rows"] = rows
    write_json(path, res)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
