#!/usr/bin/env python3
"""GPU matmul benchmark (issue 3): fusemath's fused epilogues against nvmath-python and PyTorch.

relu / gelu (+ bias) for bf16 ... fp64 on the issue's shapes, one torch stream, paired ratios over interleaved
trials with lead-ins, and the 64x64 f32 host overhead against the bare cublasLtMatmul; benchmarks/README.md.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import math
import os
import socket
import statistics
import sys
import time

from bench_common import REPO_ROOT, c_program, command_line, err, machine, paired, run_json, versions, write_json

DTYPES = ("bf16", "fp16", "fp32", "tf32", "fp64")
SHAPES = ((8192, 8192, 8192), (8192, 8192, 1024), (16384, 4096, 512), (1024, 1024, 1024), (128, 128, 128))
GELU_SHAPES, GELU_DTYPES = ((8192, 8192, 1024), (1024, 1024, 1024)), ("bf16", "fp32")
TARGETS = {"nvmath": 1.00, "addmm_act": 1.00, "plain": 1.03, "unfused": 1.00}
DROPOUT_TARGET, DROPOUT_P = 1.10, 0.1  # issue 27: fused relu+dropout <= 1.10x the fused relu alone
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "tf32": 5e-3, "fp32": 1e-4, "fp64": 1e-10}  # of max |ref|
HOST_CALLS, HOST_REPEATS = 2000, 7


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--quick", action="store_true", help="8192x8192x1024 and 1024^3, bf16 and fp32, shorter timings")
    p.add_argument("--shapes", default=None, help="comma-separated MxNxK (or n for n^3)")
    p.add_argument("--dtypes", default=None, help="comma-separated, of " + ",".join(DTYPES))
    p.add_argument("--epilogues", default="relu,gelu", help="relu,gelu (gelu on its smaller set)")
    p.add_argument("--budget", type=float, default=None, help="seconds of timed calls per method and case (0.5)")
    p.add_argument("--trials", type=int, default=5, help="timing trials per method and case (5)")
    p.add_argument("--lead-in", type=float, default=0.5, help="untimed calls before each trial, fraction of it (0.5)")
    p.add_argument("--max-seconds", type=float, default=None, help="no new case after this (330; --quick 50)")
    p.add_argument("--autotune", action="store_true", help="autotune the fused and the nvmath plans first")
    p.add_argument("--plan-log", action="store_true", help="FUSEMATH_LOG=plan: every choice and autotune candidate")
    p.add_argument("--skip-host-overhead", action="store_true")
    p.add_argument("--host-only", action="store_true", help="only the host-overhead section")
    p.add_argument("--out", default=None, help="output JSON path")
    p.add_argument("--require-gpu", action="store_true", help="exit 2 (not 0) without a GPU")
    p.add_argument("--seed", type=int, default=1234)
    a = p.parse_args(argv)
    a.shapes = ([tuple(int(x) for x in s.replace("^3", "").split("x")) * (1 if "x" in s else 3) for s in a.shapes.split(",")]
                if a.shapes else list(GELU_SHAPES if a.quick else SHAPES))
    a.dtypes = a.dtypes.split(",") if a.dtypes else list(GELU_DTYPES if a.quick else DTYPES)
    a.epilogues = a.epilogues.split(",")
    if set(a.dtypes) - set(DTYPES) or set(a.epilogues) - {"relu", "gelu"}:
        p.error(f"--dtypes of {','.join(DTYPES)}, --epilogues of relu,gelu")
    a.budget, a.max_seconds = a.budget or (0.2 if a.quick else 0.5), a.max_seconds or (50.0 if a.quick else 330.0)
    return a


class Env:
    """torch and its stream (current for torch; fusemath gets the handle, nvmath the object), the peers."""

    def __init__(self, args):
        self.errors, self.cupy, self.nvmath = {}, None, None
        try:
            import torch
            if not torch.cuda.is_available():
                raise RuntimeError("torch.cuda.is_available() is False")
        except Exception as exc:
            self.errors["torch"] = err(exc)
            return
        self.torch, self.stream = torch, torch.cuda.Stream()
        self.sh = int(self.stream.cuda_stream)
        if args.plan_log:
            os.environ["FUSEMATH_LOG"] = "plan"  # read when fusemath makes its context (at import)
        import fusemath
        self.fm = fusemath
        for name in ("cupy", "nvmath.linalg.advanced"):
            try:
                setattr(self, name.split(".")[0], __import__(name))
            except Exception as exc:
                self.errors[name] = err(exc)

    def dtype(self, key):
        t = self.torch
        return {"bf16": t.bfloat16, "fp16": t.float16, "fp64": t.float64}.get(key, t.float32)

    def randn(self, shp, key, gen):
        return self.torch.randn(shp, device="cuda", dtype=self.dtype(key), generator=gen)

    def empty(self, shp, key):
        return self.torch.empty(shp, device="cuda", dtype=self.dtype(key))

    def act(self, x, ep):  # gelu in its tanh form, as cuBLASLt's
        return self.torch.relu(x) if ep == "relu" else self.torch.nn.functional.gelu(x, approximate="tanh")

    def rel_err(self, got, ref, refkey):
        got = got[0] if isinstance(got, tuple) else got
        got = got if isinstance(got, self.torch.Tensor) else self.torch.from_dlpack(got)
        if tuple(got.shape) != tuple(ref.shape):
            raise AssertionError(f"result shape {tuple(got.shape)}, expected {tuple(ref.shape)}")
        d = float((got.to(self.dtype(refkey)) - ref).abs().max())
        return float("inf") if math.isnan(d) else d / max(float(ref.abs().max()), 1e-300)

    def elapsed_ms(self, e0, e1):
        e1.synchronize()
        return e0.elapsed_time(e1)

    def sync(self):
        self.torch.cuda.synchronize()

    def set_tf32(self, on):
        m = self.torch.backends.cuda.matmul
        try:
            m.allow_tf32 = bool(on)
        except Exception:  # where the legacy flag is refused
            m.fp32_precision = "tf32" if on else "ieee"


def time_methods(env, methods: dict, budget, trials, lead_in) -> dict:
    """name -> calls (one per input set) -> {per_trial_ms, median_ms, min_ms} or {error}."""
    res, plan, lead, e0, e1 = {}, {}, {}, env.torch.cuda.Event(enable_timing=True), env.torch.cuda.Event(enable_timing=True)
    for name, calls in methods.items():
        try:
            for f in calls:  # warm-up: every input set once; then a cost estimate from three calls
                f()
            e0.record(env.stream)
            for i in range(3):
                calls[i % len(calls)]()
            e1.record(env.stream)
            reps = int(min(2000, max(3, budget / trials * 1e3 / max(env.elapsed_ms(e0, e1) / 3, 1e-4))))
            plan[name] = [calls[i % len(calls)] for i in range(reps)]
            lead[name] = [calls[(i - round(lead_in * reps)) % len(calls)] for i in range(round(lead_in * reps))]
            res[name] = {"per_trial_ms": [], "reps": reps, "lead_in_calls": len(lead[name])}
        except Exception as exc:
            res[name] = {"error": err(exc)}
    for t in range(trials):
        for name in (list(plan) if t % 2 == 0 else list(plan)[::-1]):
            try:
                if "error" not in res[name]:
                    for f in lead[name]:
                        f()
                    e0.record(env.stream)
                    for f in plan[name]:
                        f()
                    e1.record(env.stream)
                    res[name]["per_trial_ms"].append(env.elapsed_ms(e0, e1) / len(plan[name]))
            except Exception as exc:
                res[name] = {"error": err(exc)}
    for r in res.values():
        if r.get("per_trial_ms"):
            r.update(median_ms=statistics.median(r["per_trial_ms"]), min_ms=min(r["per_trial_ms"]))
    env.sync()
    return res


def run_case(env, ep, dt, shp, args, seed) -> dict:
    torch, fm, nv, (m, n, k) = env.torch, env.fm, env.nvmath, shp
    out = {"dtype": dt, "m": m, "n": n, "k": k, "epilogue": ep, "methods": {}, "errors": {}, "checks": {}}
    elem = {"bf16": 2, "fp16": 2, "fp64": 8}.get(dt, 4)
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 60 << 20
    nsets = out["input_sets"] = 3 if elem * (m * k + k * n + m * n) <= l2 else 1  # no input left in L2
    refkey, objs, methods = "fp64" if dt == "fp64" else "fp32", [], {}
    with torch.cuda.stream(env.stream):
        g = torch.Generator(device="cuda").manual_seed(seed)
        sets = [{key: env.randn(s, dt, g) for key, s in (("a", (m, k)), ("b", (k, n)), ("bias_n", (n,)), ("bias_m", (m,)))}
                for _ in range(nsets)]
        env.set_tf32(False)
        s0 = {key: x.to(env.dtype(refkey)) for key, x in sets[0].items()}
        p = s0["a"] @ s0["b"]  # nvmath's bias (cuBLASLt's column-major view): one per row of D
        refs = {"fused": env.act(p + s0["bias_n"], ep), "plain": p, "nvmath": env.act(p + s0["bias_m"][:, None], ep)}
        env.set_tf32(dt == "tf32")

        def fused():
            d, calls = env.empty((m, n), dt), []  # one d for all sets: the peers' allocators recycle one block
            for s in sets:
                mm = fm.Matmul(s["a"], s["b"], options=fm.MatmulOptions(compute="tf32") if dt == "tf32" else None)
                objs.append(mm.plan(epilogue=ep, bias=s["bias_n"]))
                if args.autotune:
                    mm.autotune()
                calls.append(lambda mm=mm: mm.execute(out=d, stream=env.sh))
            out["fused_plan"] = objs[0].describe()
            return calls

        def dropout():  # bias+relu+dropout: GEMM + the generated kernel, the mask per execute from a generator
            d, calls = env.empty((m, n), dt), []
            for s in sets:
                mm = fm.Matmul(s["a"], s["b"], options=fm.MatmulOptions(compute="tf32") if dt == "tf32" else None)
                objs.append(mm.plan(epilogue=ep + "+dropout", bias=s["bias_n"],
                                    dropout=(DROPOUT_P, fm.random.Generator(seed))))
                calls.append(lambda mm=mm: mm.execute(out=d, stream=env.sh))
            out["dropout_plan"] = objs[-1].describe()
            return calls

        def nvmath():
            if nv is None:
                raise RuntimeError("nvmath-python not importable: " + env.errors.get("nvmath.linalg.advanced", "?"))
            adv, calls = nv.linalg.advanced, []
            opts = adv.MatmulOptions(compute_type=nv.linalg.ComputeType.COMPUTE_32F_FAST_TF32) if dt == "tf32" else None
            for s in sets:
                mm = adv.Matmul(s["a"], s["b"], options=opts, stream=env.stream)
                objs.append(mm)
                mm.plan(epilog=getattr(adv.MatmulEpilog, ep.upper() + "_BIAS"), epilog_inputs={"bias": s["bias_m"]},
                        stream=env.stream)
                if args.autotune:
                    mm.autotune(iterations=3, stream=env.stream)
                calls.append(lambda mm=mm: mm.execute(stream=env.stream))
            return calls

        drop = (("dropout", dropout),) if ep == "relu" else ()
        for name, make in (("fused", fused),) + drop + (("nvmath", nvmath),
                           ("addmm_act", lambda: [lambda s=s: torch._addmm_activation(s["bias_n"], s["a"], s["b"],
                                                                                    use_gelu=ep == "gelu") for s in sets]),
                           ("unfused", lambda: [lambda s=s: env.act(s["a"] @ s["b"] + s["bias_n"], ep) for s in sets]),
                           ("plain", lambda: [lambda s=s: s["a"] @ s["b"] for s in sets])):
            try:
                calls = make()
                got = calls[0]()
                env.sync()
                want = refs.get(name, refs["fused"])
                if name == "dropout":  # the kept elements scaled, the others 0; about p of them dropped
                    kept = got != 0
                    frac = float(kept.sum()) / max(1, int((want > 0).sum()))
                    if abs(frac - (1 - DROPOUT_P)) > 0.02 + 6 / max(1, m * n) ** 0.5:
                        raise AssertionError(f"WRONG RESULT: kept {frac:.4f} of the positive elements, expected "
                                             f"{1 - DROPOUT_P}")
                    want = torch.where(kept, want / (1 - DROPOUT_P), torch.zeros_like(want))
                e = out["checks"][name] = env.rel_err(got, want, refkey)
                if not e <= TOLERANCE[dt]:
                    raise AssertionError(f"WRONG RESULT: max error {e:.3g} of max |ref| > {TOLERANCE[dt]:g}")
                methods[name] = calls
            except Exception as exc:
                out["errors"][name] = err(exc)
        del p, refs, s0
        try:
            for name, r in time_methods(env, methods, args.budget, args.trials, args.lead_in).items():
                if "error" in r:
                    out["errors"][name] = r["error"]
                else:
                    out["methods"][name] = r
        finally:
            for o in objs:
                o.free()
        sets.clear(), methods.clear()  # the inputs go before the next case makes its own
    env.set_tf32(False)
    env.sync()
    out.update(ratios={}, flags=[])
    me = out["methods"]
    for peer, lim in TARGETS.items():
        if "median_ms" in me.get("fused", {}) and "median_ms" in me.get(peer, {}):
            r = out["ratios"][f"fused/{peer}"] = paired(me["fused"]["per_trial_ms"], me[peer]["per_trial_ms"])
            rmin = me["fused"]["min_ms"] / me[peer]["min_ms"]
            if r > lim:
                out["flags"].append(f"MISS fused/{peer} {r:.3f} > {lim:.2f}"
                                    + (f" (ratio of mins {rmin:.3f} meets it: noise?)" if rmin <= lim else ""))
    if "median_ms" in me.get("fused", {}) and "median_ms" in me.get("dropout", {}):
        r = out["ratios"]["dropout/fused"] = paired(me["dropout"]["per_trial_ms"], me["fused"]["per_trial_ms"])
        if r > DROPOUT_TARGET:
            out["flags"].append(f"MISS dropout/fused {r:.3f} > {DROPOUT_TARGET:.2f}")
    if "fused" in out["errors"]:
        out["flags"].append("fused error")
        out["wrong_result"] = "WRONG RESULT" in out["errors"]["fused"]
    return out


def bare_inproc(env, a, b, d, bias):
    """The bare cuBLASLt call loaded into this process (cublaslt_bare_inproc.so): run_n(calls), close()."""
    import ctypes
    path, note = c_program("cublaslt_bare_inproc.so")
    if not path:
        raise FileNotFoundError(note)
    lib = ctypes.CDLL(path)
    lib.fm_bare_open.restype, lib.fm_bare_error.restype = ctypes.c_void_p, ctypes.c_char_p
    lib.fm_bare_open.argtypes = [ctypes.c_size_t] * 4 + [ctypes.c_int] * 3 + [ctypes.c_size_t] * 2
    lib.fm_bare_calls.argtypes, lib.fm_bare_close.argtypes = [ctypes.c_void_p, ctypes.c_int], [ctypes.c_void_p]
    h = lib.fm_bare_open(a.data_ptr(), b.data_ptr(), d.data_ptr(), bias.data_ptr() if bias is not None else 0,
                         64, 64, 64, env.sh, 32 << 20)
    if not h:
        raise RuntimeError("fm_bare_open: " + lib.fm_bare_error().decode())

    def run_n(count):
        if lib.fm_bare_calls(h, count) != 0:
            raise RuntimeError("fm_bare_calls: " + lib.fm_bare_error().decode())
    run_n.loop = True  # one ctypes call runs all the calls: its own cost is paid once
    return run_n, lambda: lib.fm_bare_close(h)


def host_loop(env, fns: dict) -> dict:
    """Per-call host time (us): loops of back-to-back calls + one sync (median over HOST_REPEATS, the order
    alternating), and bursts of 20 calls with an untimed sync between (the enqueue time)."""
    res, live, pc = {}, {}, time.perf_counter

    def run(f, count):
        if getattr(f, "loop", False):
            return f(count)
        for _ in range(count):
            f()

    for name, f in fns.items():
        try:
            t0 = pc()
            run(f, 20)
            env.sync()
            live[name] = int(max(20, min(HOST_CALLS, 2.0 / max((pc() - t0) / 20, 1e-7))))  # at most ~2 s a loop
            res[name] = {"loop_us": [], "burst_us": [], "calls": live[name]}
        except Exception as exc:
            res[name] = {"error": err(exc)}
    for rep in range(HOST_REPEATS):
        for name in (list(live) if rep % 2 == 0 else list(live)[::-1]):
            env.sync()
            t0 = pc()
            run(fns[name], live[name])
            env.sync()
            res[name]["loop_us"].append((pc() - t0) / live[name] * 1e6)
    for name in live:
        for _ in range(100 if live[name] >= 100 else 10):
            t0 = pc()
            run(fns[name], 20)
            res[name]["burst_us"].append((pc() - t0) / 20 * 1e6)
            env.sync()
        r = res[name]
        r.update(us_per_call=statistics.median(r["loop_us"]), min_us=min(r["loop_us"]),
                 burst_us_per_call=statistics.median(r.pop("burst_us")))
    return res


HOST_ROWS = ("a_bare_c", "a0_bare_inproc", "a2_bare_inproc_bias_relu", "b_fm_execute_out", "b2_fm_execute_out_bias_relu",
             "c_fm_execute_alloc", "d_fm_matmul_stateless", "e_torch_matmul", "g_nvmath_execute")  # the order of the table


def run_host_overhead(env, args) -> dict:
    out, fns, closers, keep = {"m": 64, "n": 64, "k": 64, "dtype": "f32", "errors": {}}, {}, [], []
    exe, note = c_program("cublaslt_bare")
    bare = out["bare_c"] = run_json([exe, 64, HOST_CALLS, HOST_REPEATS]) if exe else {"error": note}
    base = {c["epilogue"]: (c["loop_us_per_call"]["median"], c["burst_us_per_call"]["median"])
            for c in bare.get("cases", []) if c["dtype"] == "f32"}
    if "error" in bare:
        out["errors"]["a_bare_c"] = bare["error"]
    torch, fm, nv, sh = env.torch, env.fm, env.nvmath, env.sh
    with torch.cuda.stream(env.stream):
        g = torch.Generator(device="cuda").manual_seed(args.seed)
        a, b, bias = env.randn((64, 64), "fp32", g), env.randn((64, 64), "fp32", g), env.randn((64,), "fp32", g)
        d, d2 = env.empty((64, 64), "fp32"), env.empty((64, 64), "fp32")
        mm, mm2, mm3 = fm.Matmul(a, b).plan(), fm.Matmul(a, b).plan(epilogue="relu", bias=bias), fm.Matmul(a, b).plan()
        keep += [mm, mm2, mm3]

        def inproc(bb):
            f, close = bare_inproc(env, a, b, env.empty((64, 64), "fp32"), bb)
            closers.append(close)
            return f

        def nvmath_mm():
            nmm = nv.linalg.advanced.Matmul(a, b, stream=env.stream)
            keep.append(nmm.plan(stream=env.stream) or nmm)
            return lambda: nmm.execute(stream=env.stream)

        for key, make in (("a0_bare_inproc", lambda: inproc(None)), ("a2_bare_inproc_bias_relu", lambda: inproc(bias)),
                          ("b_fm_execute_out", lambda: lambda: mm.execute(out=d, stream=sh)),
                          ("b2_fm_execute_out_bias_relu", lambda: lambda: mm2.execute(out=d2, stream=sh)),
                          ("c_fm_execute_alloc", lambda: lambda: mm3.execute(stream=sh)),
                          ("d_fm_matmul_stateless", lambda: lambda: fm.matmul(a, b)),
                          ("e_torch_matmul", lambda: lambda: a @ b), ("g_nvmath_execute", lambda: nv and nvmath_mm())):
            try:
                if (f := make()) is not None:
                    fns[key] = f
            except Exception as exc:
                out["errors"][key] = err(exc)
        ref = a @ b
        for key, want, res in (("b_fm_execute_out", ref, d), ("b2_fm_execute_out_bias_relu", env.act(ref + bias, "relu"), d2)):
            fns[key]()
            env.sync()
            if env.rel_err(res, want, "fp32") > 1e-4:
                out["errors"][key] = "WRONG RESULT"
                del fns[key]
        out["fused_plan"] = mm.describe()
        try:
            timed = host_loop(env, fns)
        finally:
            for o in keep:
                o.free()
            for close in closers:
                close()
    rows = {"a_bare_c": {"us_per_call": base["none"][0], "burst_us_per_call": base["none"][1]}} if "none" in base else {}
    rows.update({k: r for k, r in timed.items() if "error" not in r})
    out["errors"].update({k: r["error"] for k, r in timed.items() if "error" in r})
    # "above bare": the bare call timed in this process and loops when it ran, else cublaslt_bare's process
    out["bare_base"] = "this process" if "a0_bare_inproc" in rows else "own process"
    for key, r in rows.items():
        br = key.startswith(("b2_", "a2_"))
        inp = rows.get("a2_bare_inproc_bias_relu" if br else "a0_bare_inproc")
        b0 = (inp["us_per_call"], inp["burst_us_per_call"]) if inp else base.get("bias_relu" if br else "none")
        if b0:
            r.update(above_bare_us=r["us_per_call"] - b0[0], above_bare_burst_us=r["burst_us_per_call"] - b0[1])
    out["rows"] = rows
    return out


def host_table(ho) -> str:
    return "\n".join([f"host overhead 64x64x64 f32, us per call: loop / burst of 20, above the bare call timed in "
                      f"{ho.get('bare_base')} (b2 above the RELU_BIAS one)"] + [
        f"  {k:30} " + (f"{r['us_per_call']:8.2f} / {r['burst_us_per_call']:8.2f}   {r.get('above_bare_us', 0):+.2f} / "
                        f"{r.get('above_bare_burst_us', 0):+.2f}" if (r := ho.get("rows", {}).get(k)) else
                        f"error: {ho['errors'][k][:150]}") for k in HOST_ROWS if k in ho.get("rows", {}) or k in ho.get("errors", {})])


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    t_start, now = time.perf_counter(), datetime.datetime.now().astimezone()
    env = Env(args)
    if "torch" in env.errors:
        print(f"matmul_gpu: no GPU: {env.errors['torch']}; nothing measured")
        return 2 if args.require_gpu else 0
    mach, prop = machine(gpu=True), env.torch.cuda.get_device_properties(0)
    mach.update(gpu_name=prop.name, sm=f"{prop.major}.{prop.minor}", torch_cuda_version=env.torch.version.cuda,
                cuda_runtime_version=env.cupy.cuda.runtime.runtimeGetVersion() if env.cupy else None)
    vers = versions("fusemath", "numpy", "torch", "cupy-cuda13x", "cupy-cuda12x", "nvmath-python", "cuda-bindings")
    if env.nvmath is not None:
        with contextlib.suppress(Exception):
            vers["cublasLt_nvmath"] = __import__("nvmath.bindings.cublasLt").bindings.cublasLt.get_version()
    res = {"benchmark": "matmul_gpu", "date": now.isoformat(timespec="seconds"), "command": command_line(), "machine": mach,
           "versions": vers, "import_errors": env.errors, "cases": [], "skipped": [],
           "settings": {"budget_s": args.budget, "trials": args.trials, "lead_in": args.lead_in, "seed": args.seed,
                        "max_seconds": args.max_seconds, "autotune": args.autotune, "targets": TARGETS,
                        "dropout_target": DROPOUT_TARGET, "dropout_p": DROPOUT_P,
                        "tolerance": TOLERANCE}}
    print(f"matmul_gpu: {mach['gpu_name']}, {mach['cpu_model']}; {vers}; notes: {env.errors}", flush=True)
    if not args.skip_host_overhead:
        try:
            res["host_overhead"] = run_host_overhead(env, args)
        except Exception as exc:
            res["host_overhead"] = {"error": err(exc)}
    cases = [] if args.host_only else [(ep, dt, s) for ep in args.epilogues for s in args.shapes for dt in args.dtypes
                                       if ep == "relu" or (s in GELU_SHAPES and dt in GELU_DTYPES)]
    if cases:  # clocks up before the first timed case
        with env.torch.cuda.stream(env.stream):
            x, t0 = env.torch.randn((4096, 4096), device="cuda", dtype=env.torch.bfloat16), time.perf_counter()
            while time.perf_counter() - t0 < 1.0:
                for _ in range(20):
                    x @ x
                env.sync()
    for i, (ep, dt, s) in enumerate(cases):
        if time.perf_counter() - t_start > args.max_seconds:
            res["skipped"] += [f"{d} {x[0]}x{x[1]}x{x[2]} {e}" for e, d, x in cases[i:]]
            break
        t0 = time.perf_counter()
        try:
            r = run_case(env, ep, dt, s, args, args.seed + i)
        except Exception as exc:  # e.g. out of memory making the inputs
            r = {"dtype": dt, "m": s[0], "n": s[1], "k": s[2], "epilogue": ep, "methods": {}, "ratios": {},
                 "errors": {"case": err(exc)}, "flags": ["case error"]}
            env.torch.cuda.empty_cache()
        r["seconds"] = time.perf_counter() - t0
        res["cases"].append(r)
        print(f"  {dt} {s[0]}x{s[1]}x{s[2]} {ep:<14} " + " ".join(f"{k} {v:.3f}" for k, v in r["ratios"].items())
              + f"  [{'; '.join(r['flags']) or 'ok'}] ({r['seconds']:.1f} s)", flush=True)
    res["total_seconds"] = time.perf_counter() - t_start
    path = args.out or os.path.join(REPO_ROOT, "benchmarks", "results",
                                    f"matmul_gpu-{now:%Y%m%d}-{socket.gethostname().split('.')[0]}.json")
    write_json(path, res)
    errs = sorted({(m, e) for c in res["cases"] for m, e in c["errors"].items()})
    print("\n".join([f"  error {m}: {e}" for m, e in errs] + [f"skipped (time cap): {s}" for s in res["skipped"]]
                    + ([host_table(res["host_overhead"])] if "host_overhead" in res else [])
                    + [f"JSON: {path} ({res['total_seconds']:.0f} s)"]))
    return 1 if any(c.get("wrong_result") for c in res["cases"]) else 0


if __name__ == "__main__":
    sys.exit(main())
