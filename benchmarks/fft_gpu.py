#!/usr/bin/env python3
"""GPU FFT benchmark (issue 4): fusemath's fused FFT against plain cuFFT, nvmath-python, CuPy and PyTorch.

y = fft(x * w) * 0.5 (complex64, or --dtype complex128) on one CuPy stream; fused / plain cuFFT (the fastest of
fusemath's, CuPy's and torch's plain calls), paired fused / fm_plain, fused / nvmath; the 1-D host overhead
against the bare cufftExecC2C (cufft_bare, fft_overhead_gpu); benchmarks/README.md.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import math
import os
import socket
import statistics
import sys
import time

from bench_common import REPO_ROOT, c_program, command_line, err, machine, paired, run_json, versions, write_json

CASES = (("1024x1", (1024,), (0,)), ("4096x4096", (4096, 4096), (1,)), ("1024x16384", (16384, 1024), (1,)),
         ("256x65536", (65536, 256), (1,)), ("1024x16384-axis0", (1024, 16384), (0,)), ("2^20x64", (64, 2 ** 20), (1,)),
         ("2^24x4", (4, 2 ** 24), (1,)), ("2d-4096^2", (4096, 4096), (0, 1)), ("3d-512^3", (512, 512, 512), (0, 1, 2)))
QUICK = ("1024x1", "4096x4096", "1024x16384", "2d-4096^2")
CONTESTANTS = ("fm_fused", "fm_plain", "nvmath_fused", "cupy_unfused", "cupy_plain", "torch_plain")
PLAIN = ("fm_plain", "cupy_plain", "torch_plain")
TARGETS = {"fm_fused/plain_cufft": 1.10, "fm_fused/fm_plain (paired)": 1.10, "fm_fused/nvmath_fused": 1.00}
SCALE, REAL, TOL = 0.5, {"complex64": "float32", "complex128": "float64"}, {"complex64": 1e-3, "complex128": 1e-9}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--quick", action="store_true", help="cases " + ",".join(QUICK) + ", shorter timings")
    p.add_argument("--cases", default=None, help="comma-separated case names")
    p.add_argument("--dtype", choices=tuple(REAL), default="complex64")
    p.add_argument("--budget", type=float, default=None, help="seconds of timing per contestant and case (0.5)")
    p.add_argument("--max-seconds", type=float, default=420.0, help="start no new case or section after this")
    p.add_argument("--host-calls", type=int, default=20000, help="calls per host-overhead burst")
    p.add_argument("--skip-host-overhead", action="store_true")
    p.add_argument("--out", default=None, help="output JSON path")
    p.add_argument("--require-gpu", action="store_true", help="exit 2 (not 0) without a GPU")
    p.add_argument("--seed", type=int, default=1234)
    a = p.parse_args(argv)
    want = a.cases.split(",") if a.cases else QUICK if a.quick else [c[0] for c in CASES]
    a.case_list = [c for c in CASES if c[0] in want]
    if len(a.case_list) != len(set(want)):
        p.error(f"--cases: choose from {','.join(c[0] for c in CASES)}")
    a.budget = a.budget or (0.2 if a.quick else 0.5)
    if a.quick:
        a.host_calls = min(a.host_calls, 2000)
    return a


class Env:
    """CuPy and its non-blocking stream (PyTorch's current stream too), nvmath-python with numba."""

    def __init__(self):
        import numpy
        self.np, self.errors, self.torch, self.nvmath, self.tstream = numpy, {}, None, None, None
        try:
            import cupy
            cupy.cuda.runtime.getDeviceCount()
        except Exception as exc:
            self.errors["cupy"] = err(exc)
            return
        self.cp = self.xp = cupy
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.sh = int(self.stream.ptr)
        for name in ("torch", "nvmath.fft", "numba.cuda"):
            try:
                if name == "numba.cuda" and not hasattr(numpy, "row_stack"):
                    numpy.row_stack = numpy.vstack  # numba (nvmath's compile_prolog) still calls it; NumPy 2.4 removed it
                setattr(self, name.split(".")[0], __import__(name))
            except Exception as exc:
                self.errors[name] = err(exc)
        if self.torch is not None:
            self.tstream = self.torch.cuda.ExternalStream(self.sh)
        import fusemath.fft as ff
        self.ff = ff

    def ctx(self):
        st = contextlib.ExitStack()
        st.enter_context(self.stream)
        if self.tstream is not None:
            st.enter_context(self.torch.cuda.stream(self.tstream))
        return st

    def event(self):
        return self.cp.cuda.Event()

    def elapsed_ms(self, e0, e1):
        e1.synchronize()
        return float(self.cp.cuda.get_elapsed_time(e0, e1))

    def sync(self):
        self.stream.synchronize()

    def free_memory(self):
        gc.collect()
        self.sync()
        self.cp.get_default_memory_pool().free_all_blocks()
        if self.torch is not None:
            self.torch.cuda.empty_cache()

    def data(self, shape, axes, seed, dtype):
        """x (normal), w (1 + 0.5 cos(0.37 i) over the transformed extents, broadcast where needed)."""
        xp, rt = self.xp, getattr(self.xp, REAL[dtype])
        x = xp.random.default_rng(seed).standard_normal(tuple(shape) + (2,), dtype=rt).view(getattr(xp, dtype))
        x = x.reshape(shape)
        wsize = math.prod(shape[a] for a in axes)
        w = (1.0 + 0.5 * xp.cos(xp.arange(wsize, dtype=rt) * rt(0.37))).astype(rt)
        if tuple(axes) == tuple(range(len(shape) - len(axes), len(shape))):
            return x, w.reshape(tuple(shape[a] for a in axes))
        return x, w.reshape(tuple(shape[d] if d in axes else 1 for d in range(min(axes), len(shape))))

    def fft(self, a, axes):
        return self.xp.fft.fft(a, axis=axes[0]) if len(axes) == 1 else self.xp.fft.fftn(a, axes=axes)

    def rel_err(self, got, ref):
        if self.torch is not None and isinstance(got, self.torch.Tensor):
            got = self.cp.from_dlpack(got)
        got = self.xp.asarray(got)
        if tuple(got.shape) != tuple(ref.shape):
            raise ValueError(f"result has shape {tuple(got.shape)}, expected {tuple(ref.shape)}")
        return float(abs(got - ref).max()) / max(float(abs(ref).max()), 1e-300)


def nvmath_fft(env, x, w, axes):
    """nvmath.fft.FFT with a numba-compiled prolog x * w[offset % w.size] and epilog * SCALE."""
    if env.nvmath is None or "numba.cuda" in env.errors:
        raise RuntimeError(env.errors.get("nvmath.fft") or env.errors.get("numba.cuda") or "?")
    if w.ndim != len(axes):
        raise RuntimeError("its prolog indexes the window by the flat offset: trailing axes only")
    np, dt = env.np, str(x.dtype)
    nw, sc = np.uint64(w.size), getattr(np, REAL[dt])(SCALE)  # uint64 like offset (uint64 % int64 is float64)

    def prolog(data_in, offset, user_info, unused):  # two real multiplies per element
        v, wv = data_in[offset], user_info[offset % nw]
        return complex(v.real * wv, v.imag * wv)

    def epilog(data_out, offset, element, user_info, unused):
        data_out[offset] = complex(element.real * sc, element.imag * sc)

    with env.cp.cuda.Device():
        pro, epi = env.nvmath.fft.compile_prolog(prolog, dt, REAL[dt]), env.nvmath.fft.compile_epilog(epilog, dt, REAL[dt])
    f = env.nvmath.fft.FFT(x, axes=list(axes), stream=env.stream)
    f.plan(prolog={"ltoir": pro, "data": int(w.data.ptr)}, epilog={"ltoir": epi}, stream=env.stream)
    return (lambda: f.execute(stream=env.stream)), f.free, {}


def contestants(env, x, w, axes):
    """name -> a setup function returning (call, free or None, info)."""
    def fm(fused):
        def make():
            f = env.ff.FFT(x, axes=axes)
            f.plan(**({"prolog": {"multiply": w}, "epilog": {"scale": SCALE}} if fused else {}))
            y = env.xp.empty_like(x)
            return (lambda: f.execute(out=y, stream=env.sh)), f.free, {"plan": f.describe()}
        return make

    def torch_plain():
        if env.torch is None:
            raise RuntimeError(env.errors.get("torch", "?"))
        xt = env.torch.as_tensor(x, device="cuda")
        tf = env.torch.fft
        return ((lambda: tf.fft(xt, dim=axes[0])) if len(axes) == 1 else (lambda: tf.fftn(xt, dim=tuple(axes)))), None, {}

    return {"fm_fused": fm(True), "fm_plain": fm(False), "nvmath_fused": lambda: nvmath_fft(env, x, w, axes),
            "cupy_unfused": lambda: ((lambda: env.fft(x * w, axes) * SCALE), None, {}),
            "cupy_plain": lambda: ((lambda: env.fft(x, axes)), None, {}), "torch_plain": torch_plain}


def reps_for(env, call, rep_ms=2.0):
    """After 3 warm-up calls: how many back-to-back calls take about rep_ms."""
    for _ in range(3):
        call()
    e0, e1 = env.event(), env.event()
    e0.record(env.stream)
    call()
    e1.record(env.stream)
    return int(max(1, min(2000, math.ceil(rep_ms / max(env.elapsed_ms(e0, e1), 1e-4)))))


def time_rounds(env, calls: dict, budget, min_rounds=5):
    """Per-call ms of each call, per round: k back-to-back calls between two events, the calls taking
    turns (order alternating) until `budget` seconds have passed."""
    ks = {n: reps_for(env, c) for n, c in calls.items()}
    per, evs, t_end = {n: [] for n in calls}, [env.event(), env.event()], time.perf_counter() + budget
    while (r := len(per[next(iter(calls))])) < min_rounds or time.perf_counter() < t_end:
        for n in (list(calls) if r % 2 == 0 else list(calls)[::-1]):
            evs[0].record(env.stream)
            for _ in range(ks[n]):
                calls[n]()
            evs[1].record(env.stream)
            per[n].append(env.elapsed_ms(*evs) / ks[n])
        if r > 20000:
            break
    return per


def run_case(env, case, args, seed) -> dict:
    name, shape, axes = case
    xp, dt = env.xp, args.dtype
    rec = {"name": name, "shape": list(shape), "axes": list(axes), "dtype": dt, "contestants": {}, "ratios": {}}
    cres = rec["contestants"]
    with env.ctx():
        x, w = env.data(shape, axes, seed, dt)
        x128 = x.astype(xp.complex128)
        ref_fused, ref_plain = env.fft(x128 * w.astype(xp.float64), axes) * SCALE, env.fft(x128, axes)
        del x128
        setups, live = contestants(env, x, w, axes), {}
        for cname in CONTESTANTS:
            try:
                live[cname] = setups[cname]()
                cres[cname] = dict(live[cname][2])
                y = live[cname][0]()
                env.sync()
                cres[cname]["rel_err"] = env.rel_err(y, ref_plain if cname in PLAIN else ref_fused)
                cres[cname]["ok"] = cres[cname]["rel_err"] <= TOL[dt]
                del y
            except Exception as exc:
                cres[cname] = {"error": err(exc), "ok": False}
                live.pop(cname, None)
        del ref_fused, ref_plain
        if "fm_fused" in live and "fm_plain" in live:
            per = time_rounds(env, {c: live[c][0] for c in ("fm_fused", "fm_plain")}, args.budget)
            rec["paired"] = {"fm_fused/fm_plain": paired(per["fm_fused"], per["fm_plain"]), "rounds": len(per["fm_plain"])}
        for cname, (call, free, _) in live.items():
            try:
                t = time_rounds(env, {cname: call}, args.budget)[cname]
                cres[cname].update(ms=statistics.median(t), ms_min=min(t), reps=len(t))
            except Exception as exc:
                cres[cname]["error"] = err(exc)
            if free is not None:
                free()
        del x, w, live, setups
    env.free_memory()
    ms = {c: r["ms"] for c, r in cres.items() if "ms" in r and r.get("ok")}
    plain = min((ms[c], c) for c in PLAIN if c in ms) if any(c in ms for c in PLAIN) else None
    if plain:
        ms["plain_cufft"], rec["plain_cufft_from"] = plain
    for a, b in (("fm_fused", "plain_cufft"), ("fm_fused", "nvmath_fused"), ("cupy_unfused", "fm_fused")):
        rec["ratios"][f"{a}/{b}"] = ms[a] / ms[b] if a in ms and b in ms else None
    rec["ratios"]["fm_fused/fm_plain (paired)"] = (rec.get("paired") or {}).get("fm_fused/fm_plain")
    rec["misses"] = [f"{k} {v:.3f} > {lim}" for k, lim in TARGETS.items() if (v := rec["ratios"][k]) is not None and v > lim]
    return rec


def run_host_overhead(env, args) -> dict:
    calls, bursts = args.host_calls, 7
    bare, note = c_program("cufft_bare")
    c_prog, c_note = c_program("fft_overhead_gpu")
    out = {"calls_per_burst": calls, "bursts": bursts, "unit": "us per call (median over bursts)", "sizes": {}}
    for n in (64, 1024):
        row, methods, objs = {}, {}, []
        with env.ctx():
            x, w = env.data((n,), (0,), args.seed + n, "complex64")
            for key, chain in (("fm_execute", {}), ("fm_fused_execute", {"prolog": {"multiply": w}, "epilog": {"scale": SCALE}})):
                f, y = env.ff.FFT(x, axes=(0,)).plan(**chain), env.xp.empty_like(x)
                objs.append(f)
                methods[key] = lambda f=f, y=y: f.execute(out=y, stream=env.sh)
            methods["cupy_fft"] = lambda: env.xp.fft.fft(x)
            if env.torch is not None:
                xt = env.torch.as_tensor(x, device="cuda")
                methods["torch_fft"] = lambda: env.torch.fft.fft(xt)
            times = {k: [] for k in methods}
            for k, fn in methods.items():  # warm-up
                for _ in range(200):
                    fn()
            env.sync()
            for _ in range(bursts):  # the methods interleaved burst by burst
                for k, fn in methods.items():
                    t0 = time.perf_counter()
                    for _ in range(calls):
                        fn()
                    env.sync()
                    times[k].append((time.perf_counter() - t0) / calls * 1e6)
            row = {k: {"us": statistics.median(t), "us_min": min(t)} for k, t in times.items()}
            for o in objs:
                o.free()
        env.free_memory()
        b = run_json([bare, n, calls, bursts]) if bare else {"error": note}
        row["bare_c_cufft"] = {"us": b["us_per_call_median"], "raw": b} if "us_per_call_median" in b else b
        for v in row.values():
            if "us" in v and "us" in row["bare_c_cufft"]:
                v["above_bare_us"] = v["us"] - row["bare_c_cufft"]["us"]
        row["c_fft_overhead_gpu"] = run_json([c_prog, n, calls, bursts]) if c_prog else {"error": c_note}
        out["sizes"][str(n)] = row
    return out


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    t_start, now = time.perf_counter(), datetime.datetime.now().astimezone()
    env = Env()
    if "cupy" in env.errors:
        print(f"fft_gpu: no GPU: {env.errors['cupy']}; nothing measured")
        return 2 if args.require_gpu else 0
    vers = versions("numpy", "cupy", "cupy-cuda13x", "cupy-cuda12x", "torch", "nvmath-python", "numba-cuda", "fusemath")
    mach, rt = machine(gpu=True), env.cp.cuda.runtime
    mach.update(gpu_name=env.cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), cufft_version=env.cp.cuda.cufft.getVersion(),
                    cuda_runtime_version=rt.runtimeGetVersion(), cuda_driver_version=rt.driverGetVersion())
    res = {"benchmark": "fft_gpu", "date": now.isoformat(timespec="seconds"), "command": command_line(),
           "machine": mach, "versions": vers, "import_errors": env.errors,
           "settings": {"budget_s": args.budget, "max_seconds": args.max_seconds, "dtype": args.dtype, "scale": SCALE,
                        "tolerance": TOL[args.dtype], "targets": TARGETS},
           "cases": [], "host_overhead": None, "skipped": []}
    path = args.out or os.path.join(REPO_ROOT, "benchmarks", "results",
                                    f"fft_gpu-{now:%Y%m%d}-{socket.gethostname().split('.')[0]}.json")
    print(f"fft_gpu: {res['machine']['gpu_name']}, cuFFT {res['machine'].get('cufft_version', '-')}; "
          f"{vers}; notes: {env.errors or 'none'}", flush=True)
    with env.ctx():  # clocks up before the first timed case
        a, t0 = env.xp.ones((4096, 4096), dtype=env.xp.complex64), time.perf_counter()
        while time.perf_counter() - t0 < 1.0:
            env.xp.fft.fft(a)
            env.sync()
    del a
    env.free_memory()
    print(f"{'case':18} {'fm_fused ms':>11} {'fm_plain ms':>11} {'fused/plain cuFFT':>17} {'paired':>7} "
          f"{'fused/nvmath':>12}  plan")
    for i, case in enumerate(args.case_list):
        if time.perf_counter() - t_start > args.max_seconds:
            res["skipped"].append(case[0])
            continue
        try:
            rec = run_case(env, case, args, args.seed + i)
        except Exception as exc:
            rec = {"name": case[0], "error": err(exc), "contestants": {}, "ratios": {}}
            env.free_memory()
        res["cases"].append(rec)
        write_json(path, res)
        c, q = rec["contestants"], rec["ratios"]
        f = lambda v, spec=".4f": "-" if v is None else format(v, spec)  # noqa: E731
        print(f"{case[0]:18} {f(c.get('fm_fused', {}).get('ms')):>11} {f(c.get('fm_plain', {}).get('ms')):>11} "
              f"{f(q.get('fm_fused/plain_cufft'), '.3f'):>17} {f(q.get('fm_fused/fm_plain (paired)'), '.3f'):>7} "
              f"{f(q.get('fm_fused/nvmath_fused'), '.3f'):>12}  {c.get('fm_fused', {}).get('plan', rec.get('error', ''))}",
              flush=True)
        for cname, r in c.items():
            if "error" in r or not r.get("ok", True):
                print(f"    {cname}: {r.get('error') or 'WRONG RESULT, rel err %.3g' % r['rel_err']}"[:200])
    if not args.skip_host_overhead and time.perf_counter() - t_start <= args.max_seconds:
        try:
            res["host_overhead"] = run_host_overhead(env, args)
            for n, row in res["host_overhead"]["sizes"].items():
                cprog = row["c_fft_overhead_gpu"]
                print(f"host overhead n={n}: " + "  ".join(f"{k} {v['us']:.2f} us" for k, v in row.items() if "us" in v)
                      + f"; C planned {cprog.get('planned_above_bare_us', cprog.get('error'))} us above bare")
        except Exception as exc:
            res["host_overhead"] = {"error": err(exc)}
    res["wall_s"] = time.perf_counter() - t_start
    write_json(path, res)
    print(f"JSON: {path} ({res['wall_s']:.0f} s)")
    return 1 if any(not r.get("ok", True) and "rel_err" in r for c in res["cases"] for r in c["contestants"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
