"""Which cuBLASLt kernel does torch._addmm_activation run, and how does each of fusemath's
autotune candidates time, for one fused bias+relu product, in one process?

Written for the one case the wider search left behind (fp32 1024^3: fusemath's autotuned plan
0.058-0.060 ms in matmul_gpu.py's rotation of three operand sets, torch's 0.054). For every
candidate fusemath offers (gpu_algo 0, 1, ... with the chain fused, through the C API by
ctypes, since Python does not expose gpu_algo) and for torch's call: time with the three sets
rotated and with one set, CUDA events around back-to-back calls, trials interleaved; and the
names of the kernels each one launches (torch.profiler). JSON to --out.

    python benchmarks/matmul_gpu_kernel_probe.py [--shape 1024x1024x1024] [--dtype fp32]
        [--epilogue bias+relu|none] [--passes 1|2] [--lib build/libfusemath.so] [--out probe.json]

--epilogue none compares the plain GEMM candidates with torch.mm (the GEMM kernel alone).
torch_out is torch.mm(a, b, out=d) into the very output buffers fusemath's plans write (with an
epilogue: addmm(out=d) then relu_, another call): whether the output buffer decides a gap seen
between one kernel launched by torch and by fusemath at the H200's power cap. fm_algo_N_fresh is
the other way round: fusemath's plan writing into a new torch.empty output on every call, as
torch's own call does. --algos 0,1 times only those candidates (fewer methods: more trials fit).
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import tempfile
import time

import torch

FM_DEVICE_CUDA = 2
FM_F64, FM_F32, FM_BF16, FM_F16 = 4, 3, 2, 1
FM_EPILOGUE_BIAS, FM_EPILOGUE_RELU = 1, 2
NSLOTS = 10


class Device(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int32), ("id", ctypes.c_int32)]


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", Device), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int32),
                ("shape", ctypes.c_int64 * 8), ("strides", ctypes.c_int64 * 8)]


class Options(ctypes.Structure):
    _fields_ = [("alpha", ctypes.c_double * 2), ("beta", ctypes.c_double * 2), ("epilogue", ctypes.c_uint),
                ("execution", ctypes.c_int32), ("device_id", ctypes.c_int32), ("num_threads", ctypes.c_int32),
                ("panel_rows", ctypes.c_int32), ("cpu_strategy", ctypes.c_int32), ("compute", ctypes.c_int32),
                ("gpu_algo", ctypes.c_int32), ("gpu_passes", ctypes.c_int32), ("reserved", ctypes.c_int32 * 4),
                ("clamp", ctypes.c_double * 2)]


def load(path):
    lib = ctypes.CDLL(path)
    lib.fm_context_create.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    lib.fm_tensor_init.argtypes = [ctypes.POINTER(Tensor), ctypes.c_void_p, Device, ctypes.c_int, ctypes.c_int,
                                   ctypes.POINTER(ctypes.c_int64), ctypes.c_void_p]
    lib.fm_matmul_options_init.argtypes = [ctypes.POINTER(Options)]
    lib.fm_matmul_plan_v.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.POINTER(Tensor)), ctypes.POINTER(Options),
                                     ctypes.POINTER(ctypes.c_void_p)]
    lib.fm_plan_execute.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_void_p]
    lib.fm_plan_describe.argtypes = [ctypes.c_void_p]
    lib.fm_plan_describe.restype = ctypes.c_char_p
    lib.fm_plan_release.argtypes = [ctypes.c_void_p]
    lib.fm_last_error.restype = ctypes.c_char_p
    return lib


def tensor(lib, x, fmt):
    t = Tensor()
    shape = (ctypes.c_int64 * x.dim())(*x.shape)
    lib.fm_tensor_init(ctypes.byref(t), x.data_ptr(), Device(FM_DEVICE_CUDA, x.device.index or 0), fmt, x.dim(),
                       shape, None)
    return t


def time_all(methods, reps, trials):
    """methods: name -> zero-argument callable doing `reps` calls. ms per call, median of trials."""
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    per = {name: [] for name in methods}
    clk = {name: [] for name in methods}
    for f in methods.values():
        f()
    torch.cuda.synchronize()
    names = list(methods)
    for t in range(trials):
        for name in names if t % 2 == 0 else names[::-1]:
            e0.record()
            methods[name]()
            e1.record()
            e1.synchronize()
            per[name].append(e0.elapsed_time(e1) / reps)
            c = clocks()
            if c:
                clk[name].append(c)
    return ({name: statistics.median(v) for name, v in per.items()},
            {name: {"sm_mhz": statistics.median(x["sm_mhz"] for x in v), "watts": statistics.median(x["watts"] for x in v)}
             for name, v in clk.items() if v})


def kernels_of(f):
    """The GPU work f queues (torch.profiler's chrome trace): kernels with name, grid, block and
    device time; memsets and copies too (a per-call memset between two GEMMs would stop the
    next one from starting while the previous drains)."""
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            f()
            torch.cuda.synchronize()
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.json")
            prof.export_chrome_trace(path)
            with open(path) as fh:
                events = json.load(fh).get("traceEvents", [])
        found = []
        for e in events:
            if e.get("cat") not in ("kernel", "gpu_memset", "gpu_memcpy"):
                continue
            a = e.get("args", {})
            found.append({"name": f"[{e['cat']}] " * (e["cat"] != "kernel") + e.get("name", "?"), "us": e.get("dur"),
                          "grid": a.get("grid"),
                          "block": a.get("block"), "smem": a.get("shared memory"),
                          "regs": a.get("registers per thread")})
        return found
    except Exception as exc:  # the profiler is a diagnostic here, not the measurement
        return [{"name": f"profiler failed: {exc!r}"}]


def clocks():
    """SM clock (MHz) and power (W) now, when pynvml is there: fp64 GEMMs run into the power limit."""
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        return {"sm_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                "watts": pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0}
    except Exception:
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="1024x1024x1024")
    ap.add_argument("--dtype", default="fp32", choices=["fp64", "fp32", "bf16", "fp16"])
    ap.add_argument("--epilogue", default="bias+relu", choices=["bias+relu", "none"])
    ap.add_argument("--passes", type=int, default=1, choices=[1, 2])
    ap.add_argument("--lib", default=os.path.join(os.path.dirname(__file__), "..", "build", "libfusemath.so"))
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--algos", default="", help="comma-separated gpu_algo indices to time (default: all)")
    ap.add_argument("--out", default="matmul_gpu_kernel_probe.json")
    args = ap.parse_args()
    m, n, k = (int(v) for v in args.shape.split("x"))
    tdt, fmt = {"fp64": (torch.float64, FM_F64), "fp32": (torch.float32, FM_F32), "bf16": (torch.bfloat16, FM_BF16),
                "fp16": (torch.float16, FM_F16)}[args.dtype]
    torch.backends.cuda.matmul.allow_tf32 = False
    lib = load(args.lib)
    ctx = ctypes.c_void_p()
    assert lib.fm_context_create(ctypes.byref(ctx)) == 0, lib.fm_last_error()
    g = torch.Generator(device="cuda").manual_seed(1234)
    sets = [{"a": torch.randn(m, k, device="cuda", dtype=tdt, generator=g),
             "b": torch.randn(k, n, device="cuda", dtype=tdt, generator=g),
             "bias": torch.randn(n, device="cuda", dtype=tdt, generator=g),
             "d": torch.empty(m, n, device="cuda", dtype=tdt)} for _ in range(3)]
    fused = args.epilogue != "none"
    ref = sets[0]["a"].double() @ sets[0]["b"].double()
    if fused:
        ref = torch.relu(ref + sets[0]["bias"].double())
    reps = max(3, args.reps - args.reps % 3)

    def peer(s):
        return torch._addmm_activation(s["bias"], s["a"], s["b"]) if fused else torch.mm(s["a"], s["b"])

    def torch_call(rot):
        def f():
            for i in range(reps):
                peer(sets[i % 3 if rot else 0])
        return f

    def peer_out(s):  # torch writing into the preallocated d that fusemath's plans write
        if fused:  # not the peer's kernel (addmm then relu_), but the same output buffer
            torch.relu_(torch.addmm(s["bias"], s["a"], s["b"], out=s["d"]))
        else:
            torch.mm(s["a"], s["b"], out=s["d"])

    def torch_out_call(rot):
        def f():
            for i in range(reps):
                peer_out(sets[i % 3 if rot else 0])
        return f

    methods = {"torch_peer_rot": torch_call(True), "torch_peer_one": torch_call(False),
               "torch_out_rot": torch_out_call(True), "torch_out_one": torch_out_call(False)}
    plans, plan_ptrs, info = [], [], {}
    wanted = {int(v) for v in args.algos.split(",") if v}
    for algo in range(max(wanted) + 1 if wanted else 64):
        o = Options()
        lib.fm_matmul_options_init(ctypes.byref(o))
        o.epilogue = FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU if fused else 0
        o.gpu_passes = args.passes
        o.gpu_algo = algo
        s0 = sets[0]
        ts = [tensor(lib, s0["a"], fmt), tensor(lib, s0["b"], fmt), None, tensor(lib, s0["bias"], fmt) if fused else None,
              tensor(lib, s0["d"], fmt)] + [None] * (NSLOTS - 5)
        arr = (ctypes.POINTER(Tensor) * NSLOTS)(*[ctypes.pointer(t) if t is not None else None for t in ts])
        plan = ctypes.c_void_p()
        if lib.fm_matmul_plan_v(ctx, arr, ctypes.byref(o), ctypes.byref(plan)) != 0:
            break
        ptrs = []
        for s in sets:
            p = (ctypes.c_void_p * NSLOTS)()
            p[0], p[1], p[4] = s["a"].data_ptr(), s["b"].data_ptr(), s["d"].data_ptr()
            if fused:  # a pointer in a slot the plan does not use is refused
                p[3] = s["bias"].data_ptr()
            ptrs.append(p)
        if wanted and algo not in wanted:
            lib.fm_plan_release(plan)
            continue
        plans.append(plan)
        plan_ptrs.append(ptrs[0])
        name = f"fm_algo_{algo}"
        info[name] = {"describe": lib.fm_plan_describe(plan).decode()}

        def fm_call(rot, plan=plan, ptrs=ptrs):
            def f():
                for i in range(reps):
                    lib.fm_plan_execute(plan, ptrs[i % 3 if rot else 0], NSLOTS, None)
            return f

        def fm_fresh(plan=plan, ptrs=ptrs):
            def f():
                for i in range(reps):
                    p = (ctypes.c_void_p * NSLOTS)(*ptrs[0])
                    d = torch.empty(m, n, device="cuda", dtype=tdt)  # freed at the next call, as torch's
                    p[4] = d.data_ptr()
                    lib.fm_plan_execute(plan, p, NSLOTS, None)
            return f

        methods[name + "_rot"] = fm_call(True)
        methods[name + "_one"] = fm_call(False)
        methods[name + "_fresh"] = fm_fresh()
        st = lib.fm_plan_execute(plan, ptrs[0], NSLOTS, None)
        if st != 0:
            raise RuntimeError(f"fm_plan_execute: status {st}: {lib.fm_last_error().decode()}")
        torch.cuda.synchronize()
        err = ((sets[0]["d"].double() - ref).abs().max() / ref.abs().max()).item()
        info[name]["rel_err"] = err
    t0 = time.perf_counter()
    times, clk = time_all(methods, reps, args.trials)
    kern = {"torch_peer": kernels_of(lambda: peer(sets[0])), "torch_out": kernels_of(lambda: peer_out(sets[0]))}
    for name, plan, p in zip(info, plans, plan_ptrs):
        kern[name] = kernels_of(lambda plan=plan, p=p: lib.fm_plan_execute(plan, p, NSLOTS, None))
    rows = []
    for name in ["torch_peer", "torch_out"] + list(info):
        rows.append({"method": name, "rot_ms": times[name + "_rot"], "one_ms": times[name + "_one"],
                     "fresh_ms": times.get(name + "_fresh"),
                     "kernels": kern.get(name), "clock_rot": clk.get(name + "_rot"),
                     "clock_one": clk.get(name + "_one"), **info.get(name, {})})
    rows.sort(key=lambda r: r["rot_ms"])
    for r in rows:
        ks = r["kernels"] or [{"name": "?"}]
        c = r["clock_one"] or {}
        fresh = f" fresh {r['fresh_ms']:.5f}" if r["fresh_ms"] else ""
        print(f"{r['method']:>16} rot {r['rot_ms']:.5f} one {r['one_ms']:.5f}{fresh} {c.get('sm_mhz', '-')} MHz "
              f"{c.get('watts', '-')} W  {r.get('describe', '')[-40:]}")
        for kk in ks:
            print(f"{'':>18}{kk.get('us')} us grid {kk.get('grid')} block {kk.get('block')} smem {kk.get('smem')} "
                  f"regs {kk.get('regs')} {kk['name'][:100]}")
    out = {"benchmark": "matmul_gpu_kernel_probe", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
           "device": torch.cuda.get_device_name(), "torch": torch.__version__, "shape": [m, n, k], "dtype": args.dtype,
           "epilogue": args.epilogue, "passes": args.passes, "peer": "torch._addmm_activation" if fused else "torch.mm",
           "reps": reps, "trials": args.trials, "timing_seconds": time.perf_counter() - t0, "rows": rows}
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1)
    for p in plans:
        lib.fm_plan_release(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
