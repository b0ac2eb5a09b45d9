#!/usr/bin/env python3
"""GPU matmul benchmark: fusemath's fused epilogues against nvmath-python and PyTorch, side by side.

In one process, on one GPU, on one CUDA stream (a non-blocking stream made current for
PyTorch and handed to fusemath and nvmath explicitly), with random data (normal, never
zeros), for bf16, fp16, fp32, tf32 (fp32 data, TF32 tensor-core compute) and fp64 and the
shapes (M, N, K) = 8192^3, 8192x8192x1024, 16384x4096x512, 1024^3 and 128^3 it times
D = relu(A @ B + bias) through:

    fused      fusemath.Matmul(a, b).plan(epilogue="relu", bias=bias_n), then
               execute(out=d, stream=s) (the output is preallocated, one buffer for every
               input set, as the peers' caching allocators hand each call the block the
               previous result freed; tf32 through options=fusemath.MatmulOptions(compute="tf32")).
               Until 2026-11-30 each input set had its own d: three outputs rotating through
               L2 against the peers' one, which cost the same cuBLASLt kernel 6% at fp32
               1024^3 (benchmarks/matmul_gpu_kernel_probe.py)
    nvmath     nvmath.linalg.advanced.Matmul(a, b).plan(epilog=RELU_BIAS,
               epilog_inputs={"bias": bias_m}), then execute() (stateful API)
    addmm_act  torch._addmm_activation(bias_n, a, b, use_gelu=False) (cuBLASLt epilogue)
    unfused    torch.relu(a @ b + bias_n)
    plain      a @ b (torch; no bias, no activation: the floor)

Bias convention: fusemath (like torch) adds a bias of length N to every row; nvmath-python
(cuBLASLt's column-major view) adds a bias of length M to every column. Each gets its own
native bias (bias_n, bias_m), so that neither pays for a layout conversion; the work is the
same (one add per output element). Each result is checked against a reference computed in
fp32 (fp64 for fp64 data) before it is timed.

A smaller set (8192x8192x1024 and 1024^3, bf16 and fp32) does the same with gelu + bias
(tanh approximation: torch._addmm_activation(..., use_gelu=True) and
F.gelu(a @ b + bias, approximate="tanh")), and with the backward epilogue DRELU_BGRAD:
D = (A @ B) * relu_mask, bgrad = sums of D (fused: the mask comes from fusemath's own
RELU_AUX_BIAS forward, bgrad has length N; nvmath: mask from its RELU_AUX_BIAS forward,
bgrad of length M; unfused torch: (a @ b) * mask then .sum(0)). addmm_act has no backward.

Timing (CUDA events on the benchmark stream): per case and method a warm-up and a cost
estimate, then --trials (5) trials of back-to-back calls, methods interleaved trial by
trial (order reversed every other trial), each trial about --budget/--trials seconds and
preceded by --lead-in times as long of the same method's calls, untimed (default 0.5: at a
power limit the clock follows the draw of the kernel running, so without it a trial starts
at its predecessor's clock; the H200 caps fp64 and 8192^3 bf16/fp16 at 700 W);
reported: median and min per call over trials. Where one input set (A, B, D) fits in the
GPU's L2 cache (60 MB on an H200), three sets are rotated call by call, so that no call
finds its inputs left in L2 by the previous one (outputs: fusemath writes one buffer, the
peers get the block their allocator recycles). Ratios (of medians): fused/nvmath,
fused/addmm_act, fused/plain, fused/unfused. Targets, flagged MISS when not met:
fused <= 1.00x nvmath, <= 1.00x addmm_act, <= 1.03x plain, <= 1.00x unfused (never slower).

Host overhead, 64x64x64 f32, plain product (per-call host time; bursts of back-to-back
calls then one device-wide sync; --host-repeats repeats, median; and bursts of 20 calls
with a sync between bursts, median of the per-call enqueue time):
    a  bare C cublasLtMatmul, algorithm chosen beforehand (build/benchmarks/cublaslt_bare,
       run as a subprocess; its JSON is kept)
    a0 the same bare call made from this process (build/benchmarks/cublaslt_bare_inproc.so,
       ctypes, one ctypes call per loop or burst), timed in the same loops as the others
       (a2: with RELU_BIAS); the baseline of "above bare" when it ran, since a baseline
       timed in another process moved 2-4 us against this one between runs
    b  fusemath planned execute(out=..., stream=s)        (b2: same with bias+relu)
    c  fusemath planned execute(stream=s), allocating
    d  stateless fusemath.matmul(a, b) (plan from the library's cache)
    e  torch a @ b
    f  cupy a @ b (cupy.matmul)
    g  nvmath stateful execute(stream=s)  (g2: stream as int, g3: no stream argument)
    h  stateless nvmath.linalg.advanced.matmul(a, b)
each as us/call and us above the bare C call (b2 above the bare bias+relu call); the JSON also
keeps each row above cublaslt_bare's own process ("above_bare_process_us").

Every peer is optional: a missing package or an error in one case is recorded (the error
text in the JSON, "error" in the table) and the run goes on.

Output: JSON (date; machine: GPU name, driver, CUDA versions, CPU model; library versions;
every timing, ratio, plan description and error) to
benchmarks/results/matmul_gpu-<YYYYMMDD>-<host>.json (or --out), then a compact table.

Without a GPU (no CUDA device visible to PyTorch or CuPy, or neither importable) it prints
"matmul_gpu: no GPU: <reason>" and exits with status 0 having measured nothing, or with
status 2 under --require-gpu. Other exit statuses: 0 after a run (target misses and peer
errors are reported, not failures), 1 when a fusemath result was wrong.

Usage (from the repository root, after `make build`):
    .venv/bin/python benchmarks/matmul_gpu.py [--quick] [--shapes 8192x8192x1024,1024]
        [--dtypes bf16,fp16,fp32,tf32,fp64] [--epilogues relu,gelu,drelu_bgrad]
        [--budget S] [--trials N] [--max-seconds S] [--autotune] [--skip-host-overhead]
        [--host-only] [--bare-bin PATH] [--out PATH] [--require-gpu] [--cpu-dry-run]
Default run: about 3-5 minutes on an H200 (capped by --max-seconds, default 330: cases not
reached by then are listed as skipped); --quick: under a minute. --cpu-dry-run runs the
whole script without a GPU (NumPy arrays, fusemath on the CPU, wall-clock timing, no
peers but NumPy's unfused/plain) to check the script itself; its numbers mean nothing.
On the GPU machine: benchmarks/device_gpu.sh (step "bench") runs it.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import time

from bench_common import WallEvent, cpu_model, err

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ALL_DTYPES = ("bf16", "fp16", "fp32", "tf32", "fp64")
DEFAULT_SHAPES = ((8192, 8192, 8192), (8192, 8192, 1024), (16384, 4096, 512), (1024, 1024, 1024), (128, 128, 128))
SMALL_SET_SHAPES = ((8192, 8192, 1024), (1024, 1024, 1024))  # gelu and drelu_bgrad
SMALL_SET_DTYPES = ("bf16", "fp32")
ALL_EPILOGUES = ("relu", "gelu", "drelu_bgrad")
QUICK_SHAPES = ((8192, 8192, 1024), (1024, 1024, 1024))
QUICK_DTYPES = ("bf16", "fp32")

# fused / peer: at most this (paired: median over trials of the per-trial ratio)
TARGETS = {"nvmath": 1.00, "addmm_act": 1.00, "plain": 1.03, "unfused": 1.00}
PEERS = ("nvmath", "addmm_act", "unfused", "plain")
METHODS = ("fused",) + PEERS
# max |got - ref| / max |ref| (ref in fp32, fp64 for fp64 data)
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "tf32": 5e-3, "fp32": 1e-4, "fp64": 1e-10}
DEFAULT_L2_BYTES = 60 * 1024 * 1024


def parse_shape(text: str):
    parts = text.lower().replace("^3", "").split("x")
    try:
        vals = [int(p) for p in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad shape {text!r}: expected MxNxK or n (= n x n x n)") from None
    if len(vals) == 1:
        vals = vals * 3
    if len(vals) != 3 or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"bad shape {text!r}: expected MxNxK or n (= n x n x n)")
    return tuple(vals)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--quick", action="store_true",
                   help="small subset, under a minute: 8192x8192x1024 and 1024^3, bf16 and fp32, "
                        "shorter timings")
    p.add_argument("--shapes", default=None,
                   help="comma-separated MxNxK (or n for n^3); default 8192^3,8192x8192x1024,16384x4096x512,1024^3,128^3")
    p.add_argument("--dtypes", default=None, help="comma-separated, of " + ",".join(ALL_DTYPES) + " (default all)")
    p.add_argument("--epilogues", default=",".join(ALL_EPILOGUES),
                   help="comma-separated, of relu,gelu,drelu_bgrad (default all; gelu and drelu_bgrad run on "
                        "the shapes/dtypes also in the small set 8192x8192x1024,1024^3 x bf16,fp32)")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds of timed calls per method and case, over all trials (default 0.5; --quick 0.2)")
    p.add_argument("--trials", type=int, default=5, help="timing trials per method and case (default 5)")
    p.add_argument("--lead-in", type=float, default=0.5,
                   help="untimed calls of the same method before each trial, as a fraction of the trial (default 0.5)")
    p.add_argument("--methods", default=",".join(PEERS),
                   help="peers timed next to fused, comma-separated, of " + ",".join(PEERS) + " (default all). "
                   "Under a power cap (fp64 on the H200) a method's time depends on what ran before it: "
                   "timing fused and plain alone tells that apart from the fusion's own cost")
    p.add_argument("--max-seconds", type=float, default=None,
                   help="stop starting new cases after this many seconds (default 330; --quick 50)")
    p.add_argument("--autotune", action="store_true", help="autotune the fused and the nvmath plans before timing")
    p.add_argument("--plan-log", action="store_true",
                   help="FUSEMATH_LOG=plan: fusemath prints its planner's choices and every autotune candidate "
                        "(time, ratio to the default) to stderr")
    p.add_argument("--skip-host-overhead", action="store_true", help="skip the 64x64x64 host-overhead section")
    p.add_argument("--host-only", action="store_true", help="only the host-overhead section")
    p.add_argument("--host-calls", type=int, default=2000, help="calls per host-overhead loop (default 2000)")
    p.add_argument("--host-repeats", type=int, default=None, help="host-overhead loops per method (default 7; --quick 3)")
    p.add_argument("--bare-bin", default=None,
                   help="the cublaslt_bare executable (default build/benchmarks/cublaslt_bare under the repository)")
    p.add_argument("--out", default=None,
                   help="output JSON (default benchmarks/results/matmul_gpu-<YYYYMMDD>-<host>.json)")
    p.add_argument("--require-gpu", action="store_true", help="exit with status 2 (not 0) when there is no GPU")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--cpu-dry-run", action="store_true",
                   help="exercise the script without a GPU: NumPy arrays, fusemath on the CPU, wall-clock timing, "
                        "no nvmath/torch (default shapes 256^3 and 512x384x128, fp32 and fp64; JSON into the temp "
                        "directory). The numbers are not GPU numbers.")
    a = p.parse_args(argv)
    if a.shapes:
        try:
            a.shapes = [parse_shape(s.strip()) for s in a.shapes.split(",") if s.strip()]
        except argparse.ArgumentTypeError as exc:
            p.error(f"--shapes: {exc}")
    elif a.cpu_dry_run:
        a.shapes = [(256, 256, 256), (512, 384, 128)]
    else:
        a.shapes = list(QUICK_SHAPES if a.quick else DEFAULT_SHAPES)
    if a.cpu_dry_run and not a.dtypes:
        a.dtypes = "fp32,fp64"
    if a.dtypes:
        a.dtypes = [d.strip().lower() for d in a.dtypes.split(",") if d.strip()]
        bad = [d for d in a.dtypes if d not in ALL_DTYPES]
        if bad:
            p.error(f"--dtypes: unknown {bad} (choose from {','.join(ALL_DTYPES)})")
    else:
        a.dtypes = list(QUICK_DTYPES if a.quick else ALL_DTYPES)
    a.epilogues = [e.strip().lower() for e in a.epilogues.split(",") if e.strip()]
    bad = [e for e in a.epilogues if e not in ALL_EPILOGUES]
    if bad:
        p.error(f"--epilogues: unknown {bad} (choose from {','.join(ALL_EPILOGUES)})")
    a.methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    bad = [m for m in a.methods if m not in PEERS]
    if bad:
        p.error(f"--methods: unknown {bad} (choose from {','.join(PEERS)})")
    if a.budget is None:
        a.budget = 0.2 if a.quick else 0.5
    if a.max_seconds is None:
        a.max_seconds = 50.0 if a.quick else 330.0
    if a.host_repeats is None:
        a.host_repeats = 3 if a.quick else 7
    if a.trials < 1 or a.budget <= 0 or a.host_calls < 1 or a.host_repeats < 1:
        p.error("--trials, --budget, --host-calls and --host-repeats must be positive")
    if a.lead_in < 0:
        p.error("--lead-in must be >= 0")
    return a


# ---------------------------------------------------------------------------------------
# Environment: GPU, libraries, machine
# ---------------------------------------------------------------------------------------
def dist_version(name: str):
    try:
        from importlib import metadata

        return metadata.version(name)
    except Exception:
        return None


def nvidia_smi() -> dict:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm,"
                              "clocks.sm,power.limit,pstate", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        if out.returncode != 0:
            return {"error": (out.stderr or out.stdout).strip()[:300]}
        first = out.stdout.strip().splitlines()[0]
        keys = ("name", "driver_version", "memory_total", "clocks_max_sm", "clocks_sm_at_start", "power_limit", "pstate")
        return dict(zip(keys, [x.strip() for x in first.split(",")]))
    except Exception as exc:
        return {"error": err(exc)}


class Env:
    """Imports, the array library and the benchmark stream. torch is the array library when it
    sees a GPU; else CuPy (then bf16 and torch._addmm_activation are unavailable). With
    --cpu-dry-run: NumPy arrays, fusemath on the CPU, wall-clock "events", no stream (to
    exercise this script on a machine without a GPU; the numbers mean nothing)."""

    def __init__(self, dry_run: bool = False):
        self.torch = self.cupy = self.nvmath = self.fusemath = None
        self.errors = {}
        self.lib = None
        self.dry_run = dry_run
        self.stream, self.sh = None, None
        if dry_run:
            import numpy

            self.np = numpy
            self.lib = "numpy"
            self.errors["torch"] = self.errors["cupy"] = "not used in --cpu-dry-run"
            return
        try:
            import torch

            if torch.cuda.is_available() and torch.cuda.device_count() > 0:
                self.torch = torch
                self.lib = "torch"
            else:
                self.errors["torch"] = "torch.cuda.is_available() is False"
        except Exception as exc:
            self.errors["torch"] = err(exc)
        try:
            import cupy

            if cupy.cuda.runtime.getDeviceCount() > 0:
                self.cupy = cupy
                if self.lib is None:
                    self.lib = "cupy"
            else:
                self.errors["cupy"] = "no CUDA device"
        except Exception as exc:
            self.errors["cupy"] = err(exc)

    def no_gpu_reason(self):
        if self.lib is not None:
            return None
        return "; ".join(f"{k}: {v}" for k, v in self.errors.items()) or "no CUDA device"

    def load_rest(self):
        try:
            if getattr(self, "plan_log", False):
                os.environ["FUSEMATH_LOG"] = "plan"  # read when fusemath makes its context (import)
            import fusemath

            self.fusemath = fusemath
            if not self.dry_run and fusemath.cuda_device_count() < 1:
                self.errors["fusemath"] = "fusemath.cuda_device_count() = 0 (built without CUDA?)"
        except Exception as exc:
            self.errors["fusemath"] = err(exc) + " (build it with `make build`; run with .venv/bin/python)"
        if self.dry_run:
            self.errors["nvmath"] = "not used in --cpu-dry-run"
        else:
            try:
                import nvmath  # noqa: F401
                import nvmath.linalg.advanced  # noqa: F401

                self.nvmath = nvmath
            except Exception as exc:
                self.errors["nvmath"] = err(exc)
        if self.lib == "torch":
            t = self.torch
            self.stream = t.cuda.Stream()
            self.sh = int(self.stream.cuda_stream)
            self.stream_ctx = lambda: t.cuda.stream(self.stream)
        elif self.lib == "cupy":
            cp = self.cupy
            self.stream = cp.cuda.Stream(non_blocking=True)
            self.sh = int(self.stream.ptr)
            self.stream_ctx = lambda: self.stream
        else:
            self.stream_ctx = contextlib.nullcontext

    # -- arrays ----------------------------------------------------------------------
    def tdtype(self, key):
        if self.lib == "torch":
            t = self.torch
            return {"bf16": t.bfloat16, "fp16": t.float16, "fp32": t.float32, "tf32": t.float32, "fp64": t.float64}[key]
        if key == "bf16":
            raise RuntimeError(f"bf16 needs torch ({self.lib} has no bfloat16)")
        xp = self.cupy if self.lib == "cupy" else self.np
        return {"fp16": xp.float16, "fp32": xp.float32, "tf32": xp.float32, "fp64": xp.float64}[key]

    def generator(self, seed):
        if self.lib == "torch":
            g = self.torch.Generator(device="cuda")
            g.manual_seed(seed)
            return g
        if self.lib == "cupy":
            return self.cupy.random.default_rng(seed)
        return self.np.random.default_rng(seed)

    def randn(self, shape, key, gen):
        if self.lib == "torch":
            return self.torch.randn(shape, device="cuda", dtype=self.tdtype(key), generator=gen)
        xp = self.cupy if self.lib == "cupy" else self.np
        return gen.standard_normal(shape, dtype=xp.float64 if key == "fp64" else xp.float32).astype(self.tdtype(key))

    def data_ptr(self, x) -> int:
        if self.lib == "torch":
            return x.data_ptr()
        if self.lib == "cupy":
            return x.data.ptr
        return x.ctypes.data

    def empty(self, shape, key):
        if self.lib == "torch":
            return self.torch.empty(shape, device="cuda", dtype=self.tdtype(key))
        xp = self.cupy if self.lib == "cupy" else self.np
        return xp.empty(shape, dtype=self.tdtype(key))

    def cast(self, x, key):
        return x.to(self.tdtype(key)) if self.lib == "torch" else x.astype(self.tdtype(key))

    def as_lib(self, x):
        """A result (maybe of another array type) as an array of the main library."""
        if self.lib == "torch":
            if isinstance(x, self.torch.Tensor):
                return x
            return self.torch.from_dlpack(x)
        if self.lib == "cupy":
            return self.cupy.asarray(x)
        return self.np.asarray(x)

    def relu(self, x):
        if self.lib == "torch":
            return self.torch.relu(x)
        xp = self.cupy if self.lib == "cupy" else self.np
        return xp.maximum(x, 0)

    def gelu(self, x):
        """gelu, tanh approximation (as cuBLASLt's GELU epilogue)."""
        if self.lib == "torch":
            return self.torch.nn.functional.gelu(x, approximate="tanh")
        xp = self.cupy if self.lib == "cupy" else self.np
        return 0.5 * x * (1.0 + xp.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))

    def max_abs(self, x) -> float:
        return float(abs(x).max())

    # -- timing ----------------------------------------------------------------------
    def event(self):
        if self.lib == "torch":
            return self.torch.cuda.Event(enable_timing=True)
        if self.lib == "cupy":
            return self.cupy.cuda.Event()
        return WallEvent()

    def record(self, ev):
        ev.record(self.stream)

    def elapsed_ms(self, e0, e1):
        e1.synchronize()
        if self.lib == "torch":
            return e0.elapsed_time(e1)
        if self.lib == "cupy":
            return self.cupy.cuda.get_elapsed_time(e0, e1)
        return (e1.t - e0.t) * 1e3

    def device_sync(self):
        if self.lib == "torch":
            self.torch.cuda.synchronize()
        elif self.lib == "cupy":
            self.cupy.cuda.Device().synchronize()

    def l2_bytes(self):
        try:
            if self.lib == "torch":
                v = getattr(self.torch.cuda.get_device_properties(0), "L2_cache_size", 0)
            elif self.lib == "cupy":
                v = self.cupy.cuda.runtime.getDeviceProperties(0).get("l2CacheSize", 0)
            else:
                v = 0
            return int(v) or DEFAULT_L2_BYTES
        except Exception:
            return DEFAULT_L2_BYTES

    def set_tf32(self, on: bool):
        """TF32 for torch's fp32 products (torch.backends.cuda.matmul.allow_tf32; the newer
        fp32_precision setting where the legacy flag is refused)."""
        if self.lib != "torch":
            return
        m = self.torch.backends.cuda.matmul
        try:
            m.allow_tf32 = bool(on)
        except Exception:
            m.fp32_precision = "tf32" if on else "ieee"


def machine_info(env: Env) -> dict:
    info = {"hostname": socket.gethostname(), "cpu_model": cpu_model(), "cores": os.cpu_count(),
            "platform": platform.platform(), "python": sys.version.split()[0], "nvidia_smi": nvidia_smi()}
    try:
        if env.torch is not None:
            t = env.torch
            p = t.cuda.get_device_properties(0)
            info.update(gpu_name=t.cuda.get_device_name(0), sm=f"{p.major}.{p.minor}",
                        multiprocessors=p.multi_processor_count, gpu_memory_bytes=p.total_memory,
                        torch_cuda_version=t.version.cuda)
        if env.cupy is not None:
            rt = env.cupy.cuda.runtime
            info.update(cuda_runtime_version=rt.runtimeGetVersion(), cuda_driver_version=rt.driverGetVersion())
            info.setdefault("gpu_name", rt.getDeviceProperties(0)["name"].decode())
    except Exception as exc:
        info["gpu_info_error"] = err(exc)
    info["l2_cache_bytes"] = env.l2_bytes()
    return info


def library_versions(env: Env) -> dict:
    v = {"numpy": dist_version("numpy"), "torch": env.torch.__version__ if env.torch else None,
         "cupy": env.cupy.__version__ if env.cupy else None,
         "nvmath-python": getattr(env.nvmath, "__version__", None) or dist_version("nvmath-python"),
         "cuda-bindings": dist_version("cuda-bindings"), "cuda-core": dist_version("cuda-core"),
         "cuda-pathfinder": dist_version("cuda-pathfinder")}
    if env.fusemath is not None:
        v["fusemath"] = env.fusemath.__version__
        try:
            v["libfusemath"] = env.fusemath.library_version()
            v["fusemath_backends"] = [tuple(b) for b in env.fusemath.backends()]
        except Exception as exc:
            v["fusemath_info_error"] = err(exc)
    if env.nvmath is not None:
        try:
            from nvmath.bindings import cublasLt

            v["cublasLt_nvmath"] = cublasLt.get_version()
        except Exception as exc:
            v["cublasLt_nvmath"] = err(exc)
    if env.torch is not None:
        try:
            v["cublas_torch"] = env.torch.backends.cuda.preferred_blas_library().name
        except Exception:
            pass
        m = env.torch.backends.cuda.matmul
        v["torch_matmul_flags"] = {k: getattr(m, k, None) for k in (
            "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction")}
    return {k: val for k, val in v.items() if val is not None}


# ---------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------
def cycle(calls, n):
    """A list of n zero-argument callables, rotating through `calls`."""
    return [calls[i % len(calls)] for i in range(n)]


def time_methods(env: Env, methods: dict, budget: float, trials: int, max_reps: int = 2000,
                 lead_in: float = 0.0) -> dict:
    """methods: name -> list of zero-argument callables (one per input set). Returns name ->
    {median_ms, min_ms, reps, trials} or {error}. CUDA events on the benchmark stream around
    reps back-to-back calls; methods interleaved trial by trial, each trial after lead_in *
    reps untimed calls of the same method."""
    res = {}
    plan = {}
    lead = {}
    e0, e1 = env.event(), env.event()
    for name, calls in methods.items():
        try:
            for f in calls:  # warm-up: every input set once
                f()
            n_est = 3
            seq = cycle(calls, n_est)
            env.record(e0)
            for f in seq:
                f()
            env.record(e1)
            est_ms = max(env.elapsed_ms(e0, e1) / n_est, 1e-4)
            reps = int(min(max_reps, max(3, (budget / trials) * 1e3 / est_ms)))
            plan[name] = cycle(calls, reps)
            n_lead = int(round(lead_in * reps))  # ends on the last input set: the trial starts on the first
            lead[name] = [calls[(i - n_lead) % len(calls)] for i in range(n_lead)]
            res[name] = {"per_trial_ms": [], "reps": reps, "lead_in_calls": len(lead[name]), "estimate_ms": est_ms}
        except Exception as exc:
            res[name] = {"error": err(exc)}
    names = list(plan)
    for t in range(trials):
        for name in (names if t % 2 == 0 else names[::-1]):
            if "error" in res[name]:
                continue
            seq = plan[name]
            try:
                for f in lead[name]:
                    f()
                env.record(e0)
                for f in seq:
                    f()
                env.record(e1)
                res[name]["per_trial_ms"].append(env.elapsed_ms(e0, e1) / len(seq))
            except Exception as exc:
                res[name] = {"error": err(exc)}
    for name in names:
        r = res[name]
        if "error" not in r and r["per_trial_ms"]:
            r["median_ms"] = statistics.median(r["per_trial_ms"])
            r["min_ms"] = min(r["per_trial_ms"])
            r["trials"] = len(r["per_trial_ms"])
    env.device_sync()
    return res


# ---------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------
def rel_err(env: Env, got, ref, refkey: str) -> float:
    """max |got - ref| / max |ref| (NaN anywhere: inf)."""
    got = env.as_lib(got)
    if tuple(got.shape) != tuple(ref.shape):
        raise AssertionError(f"result shape {tuple(got.shape)}, expected {tuple(ref.shape)}")
    diff = env.max_abs(env.cast(got, refkey) - ref)
    if math.isnan(diff):
        return float("inf")
    return diff / max(env.max_abs(ref), 1e-300)


def first(res):
    return res[0] if isinstance(res, tuple) else res


class Case:
    def __init__(self, epilogue, dtype, shape):
        self.epilogue, self.dtype, self.shape = epilogue, dtype, shape

    @property
    def label(self):
        m, n, k = self.shape
        return f"{self.dtype} {m}x{n}x{k} {self.epilogue}"


def build_cases(args):
    cases = []
    for ep in args.epilogues:
        if ep == "relu":
            shapes, dtypes = args.shapes, args.dtypes
        else:
            # the small set, or (shapes/dtypes given that miss it) the first one given
            shapes = [s for s in args.shapes if s in SMALL_SET_SHAPES] or args.shapes[:1]
            dtypes = [d for d in args.dtypes if d in SMALL_SET_DTYPES] or args.dtypes[:1]
            if args.quick:
                shapes = shapes[:1]
        for shape in shapes:
            for dt in dtypes:
                cases.append(Case(ep, dt, shape))
    return cases


def _free_all(objs):
    for mm in objs:
        try:
            mm.free()
        except Exception:
            pass


def _drelu_bgrad_unfused(a, b, mask):
    """What one writes without a fused backward epilogue: d = (a @ b) * mask; bgrad = d.sum(0)."""
    d = (a @ b) * mask
    return d, d.sum(0)


def run_case(env: Env, case: Case, args, seed: int) -> dict:
    torch, fm, nvm = env.torch, env.fusemath, env.nvmath
    m, n, k = case.shape
    dt = case.dtype
    ep = case.epilogue
    out = {"dtype": dt, "m": m, "n": n, "k": k, "epilogue": ep, "methods": {}, "errors": {}, "checks": {},
           "peer_library": env.lib}
    elem = {"bf16": 2, "fp16": 2, "fp32": 4, "tf32": 4, "fp64": 8}[dt]
    set_bytes = elem * (m * k + k * n + m * n)
    nsets = 3 if set_bytes <= env.l2_bytes() else 1
    out["input_sets"] = nsets
    out["set_bytes"] = set_bytes
    tol = TOLERANCE[dt]
    refkey = "fp64" if dt == "fp64" else "fp32"
    fm_objs, nv_objs = [], []
    with env.stream_ctx():
        gen = env.generator(seed)
        sets = []
        for _ in range(nsets):
            sets.append({"a": env.randn((m, k), dt, gen), "b": env.randn((k, n), dt, gen),
                         "bias_n": env.randn((n,), dt, gen), "bias_m": env.randn((m,), dt, gen)})
        # Reference on set 0 in fp32 (fp64 for fp64 data), TF32 off.
        env.set_tf32(False)
        s0 = sets[0]
        p = env.cast(s0["a"], refkey) @ env.cast(s0["b"], refkey)
        bn = env.cast(s0["bias_n"], refkey)
        bm = env.cast(s0["bias_m"], refkey)[:, None]
        if ep == "relu":
            ref_fm, ref_nv = env.relu(p + bn), env.relu(p + bm)
        elif ep == "gelu":
            ref_fm, ref_nv = env.gelu(p + bn), env.gelu(p + bm)
        else:  # drelu_bgrad: D = (A @ B) * (pre > 0); each its own forward's mask
            ref_fm, ref_nv = p * ((p + bn) > 0), p * ((p + bm) > 0)
        ref_plain = p
        if ep == "drelu_bgrad":  # the unfused peer's stored mask (pre-activation > 0, in the data dtype)
            for s in sets:
                pre = env.cast(s["a"], refkey) @ env.cast(s["b"], refkey) + env.cast(s["bias_n"], refkey)
                mask = pre > 0
                s["mask"] = mask.to(s["a"].dtype) if env.lib == "torch" else mask.astype(s["a"].dtype)
                del pre, mask
        env.set_tf32(dt == "tf32")
        methods = {}

        def check(name, got, ref):
            e = rel_err(env, got, ref, refkey)
            out["checks"][name] = e
            if not e <= tol:
                raise AssertionError(f"WRONG RESULT: max error {e:.3g} relative to max |ref| > {tol:g}")

        # ---- fused (fusemath) ------------------------------------------------------
        try:
            if fm is None:
                raise RuntimeError("fusemath not importable: " + env.errors.get("fusemath", "?"))
            opts = fm.MatmulOptions(compute="tf32") if dt == "tf32" else None
            calls = []
            for i, s in enumerate(sets):
                mm = fm.Matmul(s["a"], s["b"], options=opts) if opts is not None else fm.Matmul(s["a"], s["b"])
                fm_objs.append(mm)
                if ep == "relu":
                    mm.plan(epilogue="relu", bias=s["bias_n"])
                elif ep == "gelu":
                    mm.plan(epilogue="gelu", bias=s["bias_n"])
                else:
                    fwd = fm.matmul(s["a"], s["b"], bias=s["bias_n"], epilogue="RELU_AUX_BIAS", stream=env.sh)
                    s["fm_mask"] = fwd[1]["relu_aux"]
                    try:
                        mm.plan(epilogue="DRELU_BGRAD", epilog_inputs={"relu_aux": s["fm_mask"]})
                    except (TypeError, ValueError) as exc1:
                        try:
                            mm.plan(epilogue="drelu+bgrad", aux=s["fm_mask"])
                        except Exception as exc2:
                            raise RuntimeError(f"plan(DRELU_BGRAD, epilog_inputs={{'relu_aux': mask}}): {err(exc1)}; "
                                               f"plan('drelu+bgrad', aux=mask): {err(exc2)}") from None
                if args.autotune:
                    mm.autotune()
                if i == 0:  # one output for every input set: the peers' allocators recycle one block
                    d_shared = env.empty((m, n), dt)
                d = d_shared
                s["fm_out"] = d
                if i == 0:
                    try:
                        mm.execute(out=d, stream=env.sh)
                        out["fused_call"] = "execute(out=d, stream=s)"
                        got = d
                    except TypeError as exc:  # a front end without execute(out=): allocate instead
                        if "out" not in str(exc) or "keyword" not in str(exc):
                            raise
                        out["fused_call"] = f"execute(stream=s), allocating (execute(out=) failed: {err(exc)})"
                        got = first(mm.execute(stream=env.sh))
                    env.device_sync()
                    check("fused", got, ref_fm)
                    out["fused_plan"] = mm.describe()
                if out["fused_call"].startswith("execute(out"):
                    calls.append(lambda mm=mm, d=d: mm.execute(out=d, stream=env.sh))
                else:
                    calls.append(lambda mm=mm: mm.execute(stream=env.sh))
            methods["fused"] = calls
        except Exception as exc:
            out["errors"]["fused"] = err(exc)

        # ---- nvmath-python (stateful) ------------------------------------------------
        try:
            if nvm is None:
                raise RuntimeError("nvmath-python not importable: " + env.errors.get("nvmath", "?"))
            adv = nvm.linalg.advanced
            E = adv.MatmulEpilog
            opts = None
            if dt == "tf32":
                opts = adv.MatmulOptions(compute_type=nvm.linalg.ComputeType.COMPUTE_32F_FAST_TF32)
            calls = []
            for i, s in enumerate(sets):
                if ep == "drelu_bgrad":
                    fwd = adv.matmul(s["a"], s["b"], epilog=E.RELU_AUX_BIAS, epilog_inputs={"bias": s["bias_m"]},
                                     options=opts, stream=env.stream)
                    epilog, inputs = E.DRELU_BGRAD, {"relu_aux": fwd[1]["relu_aux"]}
                    del fwd
                else:
                    epilog = E.RELU_BIAS if ep == "relu" else E.GELU_BIAS
                    inputs = {"bias": s["bias_m"]}
                mm = adv.Matmul(s["a"], s["b"], options=opts, stream=env.stream)
                nv_objs.append(mm)
                mm.plan(epilog=epilog, epilog_inputs=inputs, stream=env.stream)
                if args.autotune:
                    mm.autotune(iterations=3, stream=env.stream)
                if i == 0:
                    got = first(mm.execute(stream=env.stream))
                    env.device_sync()
                    check("nvmath", got, ref_nv)
                calls.append(lambda mm=mm: mm.execute(stream=env.stream))
            methods["nvmath"] = calls
        except Exception as exc:
            out["errors"]["nvmath"] = err(exc)

        # ---- torch (or, without torch, the array library's) peers ----------------------
        peers = {}
        if ep in ("relu", "gelu"):
            g = ep == "gelu"
            if torch is not None:
                peers["addmm_act"] = [lambda s=s: torch._addmm_activation(s["bias_n"], s["a"], s["b"], use_gelu=g)
                                      for s in sets]
            else:
                out["errors"]["addmm_act"] = "torch not usable: " + env.errors.get("torch", "?")
            act = env.gelu if g else env.relu
            peers["unfused"] = [lambda s=s: act(s["a"] @ s["b"] + s["bias_n"]) for s in sets]
        else:
            out["errors"]["addmm_act"] = "n/a (torch has no fused backward epilogue)"
            peers["unfused"] = [lambda s=s: _drelu_bgrad_unfused(s["a"], s["b"], s["mask"]) for s in sets]
        peers["plain"] = [lambda s=s: s["a"] @ s["b"] for s in sets]
        for name, calls in peers.items():
            try:
                got = first(calls[0]())
                env.device_sync()
                check(name, got, ref_plain if name == "plain" else ref_fm)
                methods[name] = calls
            except Exception as exc:
                out["errors"][name] = err(exc)
        got = None
        del p, ref_fm, ref_nv, ref_plain, got

        for name in list(methods):
            if name != "fused" and name not in args.methods:
                del methods[name]
                out["errors"][name] = "not timed (--methods)"
        try:
            timed = time_methods(env, methods, args.budget, args.trials, lead_in=args.lead_in)
        finally:
            _free_all(fm_objs)
            _free_all(nv_objs)
        for name, r in timed.items():
            if "error" in r:
                out["errors"][name] = r["error"]
            else:
                out["methods"][name] = r
        del sets, methods, peers
    env.set_tf32(False)
    env.device_sync()
    # ratios and flags
    med = {k: v["median_ms"] for k, v in out["methods"].items() if "median_ms" in v}
    mins = {k: v["min_ms"] for k, v in out["methods"].items() if "min_ms" in v}
    out["ratios"], out["flags"] = {}, []
    flops = 2.0 * m * n * k
    out["tflops"] = {k: flops / (v * 1e-3) / 1e12 for k, v in med.items() if v > 0}
    out["ratios_of_medians"] = {}

    def paired(a: str, b: str) -> float:
        # median over trials of the per-trial ratio: the two were timed next to each other in
        # every trial, so the GPU's clock drift (8192^3 fp64 cublasDgemm moved 18.9 -> 23.8 ->
        # 19.5 ms between rounds of one process) cancels
        ta, tb = out["methods"][a]["per_trial_ms"], out["methods"][b]["per_trial_ms"]
        return statistics.median(x / y for x, y in zip(ta, tb) if y > 0)

    if "fused" in med:
        for peer in PEERS:
            if peer in med and med[peer] > 0:
                r = paired("fused", peer)
                out["ratios"][f"fused/{peer}"] = r
                out["ratios_of_medians"][f"fused/{peer}"] = med["fused"] / med[peer]
                if r > TARGETS[peer]:
                    rmin = mins["fused"] / mins[peer] if mins.get(peer) else float("inf")
                    note = f" (ratio of mins {rmin:.3f} meets it: noise?)" if rmin <= TARGETS[peer] else ""
                    out["flags"].append(f"MISS fused/{peer} {r:.3f} > {TARGETS[peer]:.2f}{note}")
    elif "fused" in out["errors"]:
        out["flags"].append("fused error")
    if "WRONG RESULT" in out["errors"].get("fused", ""):
        out["wrong_result"] = True
    return out


# ---------------------------------------------------------------------------------------
# Host overhead
# ---------------------------------------------------------------------------------------
def run_bare(args) -> dict:
    exe = args.bare_bin or os.path.join(REPO_ROOT, "build", "benchmarks", "cublaslt_bare")
    if not os.path.exists(exe):
        return {"error": f"{exe} not found (build it with `make build` on a machine with the CUDA toolkit)"}
    cmd = [exe, "--dtype", "f32", "--epilogue", "all", "--calls", str(args.host_calls),
           "--repeats", str(args.host_repeats)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except Exception as exc:
        return {"error": err(exc), "command": " ".join(cmd)}
    try:
        data = json.loads(r.stdout)
    except ValueError:
        return {"error": f"exit status {r.returncode}: {(r.stderr or r.stdout).strip()[:500]}", "command": " ".join(cmd)}
    data["command"] = " ".join(cmd)
    data["exit_status"] = r.returncode
    if r.stderr.strip():
        data["stderr"] = r.stderr.strip()[:500]
    return data


class Calls:
    """A method timed by a callable that makes n calls itself (the in-process bare C call:
    one ctypes call per loop, not per matmul)."""

    def __init__(self, run_n):
        self.run_n = run_n


def _run(f, n):
    if isinstance(f, Calls):
        f.run_n(n)
    else:
        for _ in range(n):
            f()


def host_loop(env: Env, fns: dict, calls: int, repeats: int, bursts: int = 100, burst_calls: int = 20) -> dict:
    """Per-call host time (us): loops of `calls` back-to-back calls + one device-wide sync
    (median/min over repeats, the methods in alternating order), and bursts of burst_calls
    (enqueue time, sync untimed)."""
    res = {}
    pc = time.perf_counter
    live = {}
    for name, f in fns.items():
        try:
            t0 = pc()
            _run(f, 20)
            env.device_sync()
            est = (pc() - t0) / 20
            n = int(max(20, min(calls, 2.0 / max(est, 1e-7))))  # at most ~2 s per loop
            live[name] = (f, n)
            res[name] = {"loop_us": [], "burst_us": [], "calls": n}
        except Exception as exc:
            res[name] = {"error": err(exc)}
    for rep in range(repeats):
        order = list(live) if rep % 2 == 0 else list(live)[::-1]
        for name in order:
            if "error" in res[name]:
                continue
            f, n = live[name]
            try:
                env.device_sync()
                t0 = pc()
                _run(f, n)
                env.device_sync()
                res[name]["loop_us"].append((pc() - t0) / n * 1e6)
            except Exception as exc:
                res[name] = {"error": err(exc)}
    for name in live:
        if "error" in res[name]:
            continue
        f, n = live[name]
        nb = bursts if n >= burst_calls * 5 else max(5, bursts // 10)  # slow methods: fewer bursts
        try:
            for _ in range(nb):
                t0 = pc()
                _run(f, burst_calls)
                t1 = pc()
                env.device_sync()
                res[name]["burst_us"].append((t1 - t0) / burst_calls * 1e6)
        except Exception as exc:
            res[name] = {"error": err(exc)}
    for name, r in res.items():
        if "error" in r:
            continue
        r["us_per_call"] = statistics.median(r["loop_us"])
        r["min_us"] = min(r["loop_us"])
        if r["burst_us"]:
            r["burst_us_per_call"] = statistics.median(r["burst_us"])
        r.pop("burst_us")
    return res


def open_bare_inproc(env: Env, a, b, d, bias) -> tuple:
    """The bare cuBLASLt call loaded into this process (build/benchmarks/cublaslt_bare_inproc.so)
    on a, b, d (and bias: RELU_BIAS) and the benchmark stream: (Calls, close) or raises."""
    import ctypes

    path = os.path.join(REPO_ROOT, "build", "benchmarks", "cublaslt_bare_inproc.so")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found (built by `make build` with the CUDA toolkit)")
    lib = ctypes.CDLL(path)
    lib.fm_bare_open.restype = ctypes.c_void_p
    lib.fm_bare_open.argtypes = [ctypes.c_size_t] * 4 + [ctypes.c_int] * 3 + [ctypes.c_size_t] * 2
    lib.fm_bare_calls.restype = ctypes.c_int
    lib.fm_bare_calls.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.fm_bare_close.argtypes = [ctypes.c_void_p]
    lib.fm_bare_error.restype = ctypes.c_char_p
    m, k = a.shape
    n = b.shape[1]
    h = lib.fm_bare_open(env.data_ptr(a), env.data_ptr(b), env.data_ptr(d), env.data_ptr(bias) if bias is not None else 0,
                         m, n, k, env.sh or 0, 32 << 20)  # 32 MiB, as cublaslt_bare
    if not h:
        raise RuntimeError("fm_bare_open: " + lib.fm_bare_error().decode())
    calls = lib.fm_bare_calls

    def run_n(count):
        if calls(h, count) != 0:
            raise RuntimeError("fm_bare_calls: " + lib.fm_bare_error().decode())

    return Calls(run_n), lambda: lib.fm_bare_close(h)


HOST_LABELS = {
    "a_bare_c": "a  bare C cublasLtMatmul (own process)",
    "a0_bare_inproc": "a0 bare C cublasLtMatmul (this process)",
    "a2_bare_inproc_bias_relu": "a2 the same, RELU_BIAS",
    "b0_fm_plan_execute_raw": "b0 fusemath Plan.execute(raw addresses)",
    "b_fm_execute_out": "b  fusemath execute(out=)",
    "b2_fm_execute_out_bias_relu": "b2 fusemath execute(out=) bias+relu",
    "c_fm_execute_alloc": "c  fusemath execute() allocating",
    "d_fm_matmul_stateless": "d  fusemath.matmul(a, b)",
    "e_torch_matmul": "e  torch a @ b",
    "f_cupy_matmul": "f  cupy a @ b",
    "g_nvmath_execute": "g  nvmath Matmul.execute(stream=s)",
    "g2_nvmath_execute_int_stream": "g2 nvmath execute(stream=int)",
    "g3_nvmath_execute_no_stream": "g3 nvmath execute()",
    "h_nvmath_matmul_stateless": "h  nvmath.linalg.advanced.matmul",
}


def run_host_overhead(env: Env, args) -> dict:
    out = {"m": 64, "n": 64, "k": 64, "dtype": "f32", "errors": {}}
    bare = run_bare(args)
    out["bare_c"] = bare
    base = base_br = base_burst = base_burst_br = None
    if "error" not in bare:
        for c in bare.get("cases", []):
            if c["dtype"] == "f32" and c["epilogue"] == "none":
                base, base_burst = c["loop_us_per_call"]["median"], c["burst_us_per_call"]["median"]
            if c["dtype"] == "f32" and c["epilogue"] == "bias_relu":
                base_br, base_burst_br = c["loop_us_per_call"]["median"], c["burst_us_per_call"]["median"]
    else:
        out["errors"]["a_bare_c"] = bare["error"]
    torch, fm, nvm, cp = env.torch, env.fusemath, env.nvmath, env.cupy
    fns = {}
    gen = env.generator(args.seed + 7)
    with env.stream_ctx():
        a = env.randn((64, 64), "fp32", gen)
        b = env.randn((64, 64), "fp32", gen)
        bias = env.randn((64,), "fp32", gen)
        ref = a @ b
        keep = []
        closers = []
        for key, bb in (("a0_bare_inproc", None), ("a2_bare_inproc_bias_relu", bias)):
            if env.dry_run:
                out["errors"][key] = "not in --cpu-dry-run"
                continue
            try:
                dd = env.empty((64, 64), "fp32")
                f, close = open_bare_inproc(env, a, b, dd, bb)
                closers.append(close)
                f.run_n(1)
                env.device_sync()
                want = ref if bb is None else env.relu(ref + bb)
                if rel_err(env, dd, want, "fp32") > 1e-4:
                    raise AssertionError("WRONG RESULT")
                fns[key] = f
            except Exception as exc:
                out["errors"][key] = err(exc)
        # fusemath
        if fm is None:
            for key in ("b_fm_execute_out", "b2_fm_execute_out_bias_relu", "c_fm_execute_alloc", "d_fm_matmul_stateless"):
                out["errors"][key] = "fusemath not importable: " + env.errors.get("fusemath", "?")
        else:
            sh = env.sh
            try:
                mm = fm.Matmul(a, b)
                mm.plan()
                keep.append(mm)
                d = env.empty((64, 64), "fp32")
                mm.execute(out=d, stream=sh)
                env.device_sync()
                if rel_err(env, d, ref, "fp32") > 1e-4:
                    raise AssertionError("WRONG RESULT")
                out["fused_plan"] = mm.describe()
                fns["b_fm_execute_out"] = lambda: mm.execute(out=d, stream=sh)
                # the same plan through the raw-address entry point: what the Python layer costs
                praw = mm._plan
                addr = [env.data_ptr(a), env.data_ptr(b), 0, 0, env.data_ptr(d), 0, 0, 0]
                fns["b0_fm_plan_execute_raw"] = lambda: praw.execute(*addr, sh)
            except Exception as exc:
                out["errors"]["b_fm_execute_out"] = err(exc)
            try:
                mm2 = fm.Matmul(a, b)
                mm2.plan(epilogue="relu", bias=bias)
                keep.append(mm2)
                d2 = env.empty((64, 64), "fp32")
                mm2.execute(out=d2, stream=sh)
                env.device_sync()
                if rel_err(env, d2, env.relu(ref + bias), "fp32") > 1e-4:
                    raise AssertionError("WRONG RESULT")
                fns["b2_fm_execute_out_bias_relu"] = lambda: mm2.execute(out=d2, stream=sh)
            except Exception as exc:
                out["errors"]["b2_fm_execute_out_bias_relu"] = err(exc)
            try:
                mm3 = fm.Matmul(a, b)
                mm3.plan()
                keep.append(mm3)
                got = mm3.execute(stream=sh)
                env.device_sync()
                if rel_err(env, got, ref, "fp32") > 1e-4:
                    raise AssertionError("WRONG RESULT")
                fns["c_fm_execute_alloc"] = lambda: mm3.execute(stream=sh)
            except Exception as exc:
                out["errors"]["c_fm_execute_alloc"] = err(exc)
            try:
                got = fm.matmul(a, b)
                env.device_sync()
                if rel_err(env, got, ref, "fp32") > 1e-4:
                    raise AssertionError("WRONG RESULT")
                fns["d_fm_matmul_stateless"] = lambda: fm.matmul(a, b)
            except Exception as exc:
                out["errors"]["d_fm_matmul_stateless"] = err(exc)
        # torch / cupy
        if torch is not None:
            fns["e_torch_matmul"] = lambda: a @ b
        else:
            out["errors"]["e_torch_matmul"] = "torch not usable: " + env.errors.get("torch", "?")
        if cp is not None:
            try:
                ca, cb = cp.asarray(a), cp.asarray(b)  # zero-copy (CUDA array interface / DLPack)
                fns["f_cupy_matmul"] = lambda: cp.matmul(ca, cb)
            except Exception as exc:
                out["errors"]["f_cupy_matmul"] = err(exc)
        else:
            out["errors"]["f_cupy_matmul"] = "cupy not usable: " + env.errors.get("cupy", "?")
        # nvmath
        if nvm is None:
            for key in ("g_nvmath_execute", "g2_nvmath_execute_int_stream", "g3_nvmath_execute_no_stream",
                        "h_nvmath_matmul_stateless"):
                out["errors"][key] = "nvmath-python not importable: " + env.errors.get("nvmath", "?")
        else:
            adv = nvm.linalg.advanced
            st, sh = env.stream, env.sh
            try:
                nmm = adv.Matmul(a, b, stream=st)
                nmm.plan(stream=st)
                keep.append(nmm)
                got = nmm.execute(stream=st)
                env.device_sync()
                if rel_err(env, got, ref, "fp32") > 1e-4:
                    raise AssertionError("WRONG RESULT")
                fns["g_nvmath_execute"] = lambda: nmm.execute(stream=st)
                fns["g2_nvmath_execute_int_stream"] = lambda: nmm.execute(stream=sh)
                fns["g3_nvmath_execute_no_stream"] = lambda: nmm.execute()
            except Exception as exc:
                out["errors"]["g_nvmath_execute"] = err(exc)
            try:
                adv.matmul(a, b)
                fns["h_nvmath_matmul_stateless"] = lambda: adv.matmul(a, b)
            except Exception as exc:
                out["errors"]["h_nvmath_matmul_stateless"] = err(exc)
        cupy_prev = None
        if cp is not None and env.torch is not None:  # make the benchmark stream CuPy's current stream too
            try:
                cupy_prev = cp.cuda.get_current_stream()
                cp.cuda.ExternalStream(env.sh).use()
            except Exception as exc:
                out["errors"]["cupy_stream"] = err(exc)
        try:
            timed = host_loop(env, fns, args.host_calls, args.host_repeats)
        finally:
            if cupy_prev is not None:
                cupy_prev.use()
        for mm in keep:
            try:
                mm.free()
            except Exception:
                pass
        for close in closers:
            close()
    # "above bare": against the bare call timed in this process, in the same loops, when it ran
    # (the fair comparison); else against cublaslt_bare's own process. Both are kept.
    inproc = {k: timed[k] for k in ("a0_bare_inproc", "a2_bare_inproc_bias_relu")
              if k in timed and "error" not in timed[k]}
    out["bare_base"] = "this process" if "a0_bare_inproc" in inproc else "own process"
    rows = {}
    if base is not None:
        rows["a_bare_c"] = {"us_per_call": base, "burst_us_per_call": base_burst}
    for name, r in timed.items():
        if "error" in r:
            out["errors"][name] = r["error"]
            continue
        br = name.startswith(("b2_", "a2_"))
        b0, bb0 = (base_br, base_burst_br) if br else (base, base_burst)
        r["above_bare_process_us"] = r["us_per_call"] - b0 if b0 is not None else None
        if r.get("burst_us_per_call") is not None and bb0 is not None:
            r["above_bare_process_burst_us"] = r["burst_us_per_call"] - bb0
        ip = inproc.get("a2_bare_inproc_bias_relu" if br else "a0_bare_inproc")
        if ip is not None:
            b0, bb0 = ip["us_per_call"], ip.get("burst_us_per_call")
        r["above_bare_us"] = r["us_per_call"] - b0 if b0 is not None else None
        if r.get("burst_us_per_call") is not None and bb0 is not None:
            r["above_bare_burst_us"] = r["burst_us_per_call"] - bb0
        rows[name] = r
    if "a_bare_c" in rows:
        r = rows["a_bare_c"]
        r["above_bare_process_us"] = 0.0
        ip = inproc.get("a0_bare_inproc")
        r["above_bare_us"] = r["us_per_call"] - (ip["us_per_call"] if ip else base)
        if ip and ip.get("burst_us_per_call") is not None:
            r["above_bare_burst_us"] = r["burst_us_per_call"] - ip["burst_us_per_call"]
    out["rows"] = rows
    return out


# ---------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------
def fmt_ms(v):
    if v is None:
        return "-"
    return f"{v:.4f}" if v < 1 else f"{v:.3f}" if v < 100 else f"{v:.1f}"


def format_tables(res: dict) -> str:
    lines = []
    cases = res.get("cases", [])
    if cases:
        head = (f"{'case (ms, median)':32} {'fused':>9} {'nvmath':>9} {'addmm_act':>9} {'unfused':>9} {'plain':>9} | "
                f"{'f/nv':>6} {'f/addmm':>7} {'f/plain':>7} {'f/unf':>6} | flags")
        lines += [head, "-" * len(head)]
        for c in cases:
            label = f"{c['dtype']} {c['m']}x{c['n']}x{c['k']} {c['epilogue']}"
            cells = []
            for mth in METHODS:
                r = c["methods"].get(mth)
                cells.append(f"{fmt_ms(r['median_ms']):>9}" if r else f"{'err' if mth in c['errors'] else '-':>9}")
            rat = c.get("ratios", {})
            rc = [f"{rat[k]:.3f}" if k in rat else "-" for k in
                  ("fused/nvmath", "fused/addmm_act", "fused/plain", "fused/unfused")]
            flags = "; ".join(c.get("flags", [])) or "ok"
            lines.append(f"{label:32} {' '.join(cells)} | {rc[0]:>6} {rc[1]:>7} {rc[2]:>7} {rc[3]:>6} | {flags}")
        groups = {}  # (method, error) -> case labels: each distinct error once
        for c in cases:
            label = f"{c['dtype']} {c['m']}x{c['n']}x{c['k']} {c['epilogue']}"
            for meth, text in c["errors"].items():
                if not text.startswith("n/a"):
                    groups.setdefault((meth, text), []).append(label)
        if groups:
            lines.append("errors:")
            for (meth, text), labels in groups.items():
                where = labels[0] if len(labels) == 1 else f"{len(labels)} cases ({labels[0]}, ...)"
                lines.append(f"  {meth} in {where}: {text}")
    for s in res.get("skipped", []):
        lines.append(f"skipped (time cap): {s}")
    ho = res.get("host_overhead")
    if ho:
        lines.append("")
        lines.append("host overhead, 64x64x64 f32 (us per call: loop of back-to-back calls + sync, median; "
                     f"burst of 20: enqueue time; above the bare call timed in {ho.get('bare_base', 'its own process')}; "
                     "b2 above the bare RELU_BIAS call)")
        lines.append(f"{'method':40} {'us/call':>8} {'above bare':>10} {'burst20':>8} {'above':>7}")
        for key, label in HOST_LABELS.items():
            r = ho["rows"].get(key)
            if r:
                ab = r.get("above_bare_us")
                abb = r.get("above_bare_burst_us")
                lines.append(f"{label:40} {r['us_per_call']:8.2f} {('%+.2f' % ab) if ab is not None else '-':>10} "
                             f"{r.get('burst_us_per_call') or float('nan'):8.2f} "
                             f"{('%+.2f' % abb) if abb is not None else '-':>7}")
            elif key in ho["errors"]:
                lines.append(f"{label:40} error: {ho['errors'][key][:150]}")
    return "\n".join(lines)


def default_out_path(host: str, dry_run: bool = False) -> str:
    day = datetime.date.today().strftime("%Y%m%d")
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in host)
    if dry_run:
        import tempfile

        return os.path.join(tempfile.gettempdir(), f"matmul_gpu-dryrun-{day}-{safe}.json")
    return os.path.join(REPO_ROOT, "benchmarks", "results", f"matmul_gpu-{day}-{safe}.json")


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    t_start = time.perf_counter()
    env = Env(dry_run=args.cpu_dry_run)
    reason = env.no_gpu_reason()
    if reason:
        print(f"matmul_gpu: no GPU: {reason}; nothing measured")
        return 2 if args.require_gpu else 0
    env.plan_log = args.plan_log
    env.load_rest()
    now = datetime.datetime.now().astimezone()
    res = {
        "benchmark": "matmul_gpu",
        "date": now.isoformat(timespec="seconds"),
        "command": " ".join([os.path.relpath(sys.argv[0], REPO_ROOT) if argv is None else "matmul_gpu.py"]
                            + (sys.argv[1:] if argv is None else list(argv))),
        "machine": machine_info(env),
        "versions": library_versions(env),
        "array_library": env.lib,
        "import_errors": env.errors,
        "settings": {"budget_s": args.budget, "trials": args.trials, "lead_in": args.lead_in, "max_seconds": args.max_seconds,
                     "autotune": args.autotune, "seed": args.seed, "targets": TARGETS, "tolerance": TOLERANCE,
                     "cpu_dry_run": args.cpu_dry_run,
                     "stream": "one non-blocking stream: current for torch; handed to fusemath (int handle) and "
                               "nvmath (stream object) on every call",
                     "bias": "fused/torch: bias length N added to every row; nvmath: bias length M added to every "
                             "column (each its native layout)"},
        "cases": [],
        "skipped": [],
    }
    m = res["machine"]
    print(f"matmul_gpu: {m.get('gpu_name', '?')} (driver {m['nvidia_smi'].get('driver_version', '?')}), "
          f"{m['cpu_model']}; torch {res['versions'].get('torch')}, cupy {res['versions'].get('cupy')}, "
          f"nvmath {res['versions'].get('nvmath-python')}, fusemath {res['versions'].get('fusemath')}", flush=True)
    for k, v in env.errors.items():
        print(f"  note: {k}: {v}", flush=True)

    if not args.skip_host_overhead:
        t0 = time.perf_counter()
        try:
            res["host_overhead"] = run_host_overhead(env, args)
        except Exception as exc:
            res["host_overhead"] = {"error": err(exc), "rows": {}, "errors": {}}
        print(f"host overhead: done ({time.perf_counter() - t0:.0f} s)", flush=True)

    if not args.host_only:
        # clocks up before the first timed case
        try:
            with env.stream_ctx():
                g = env.generator(1)
                nn = 256 if env.dry_run else 4096
                x = env.randn((nn, nn), "bf16" if env.torch is not None else "fp32", g)
                t0 = time.perf_counter()
                while time.perf_counter() - t0 < 1.0:
                    for _ in range(20):
                        x @ x
                    env.device_sync()
                del x
        except Exception as exc:
            res["warmup_error"] = err(exc)
        cases = build_cases(args)
        for i, case in enumerate(cases):
            if time.perf_counter() - t_start > args.max_seconds:
                res["skipped"] += [c.label for c in cases[i:]]
                print(f"time cap ({args.max_seconds:.0f} s) reached: {len(cases) - i} case(s) skipped", flush=True)
                break
            t0 = time.perf_counter()
            try:
                r = run_case(env, case, args, args.seed + i)
            except Exception as exc:  # e.g. out of memory creating the inputs
                r = {"dtype": case.dtype, "m": case.shape[0], "n": case.shape[1], "k": case.shape[2],
                     "epilogue": case.epilogue, "methods": {}, "errors": {"case": err(exc)}, "flags": ["case error"]}
                try:
                    env.device_sync()
                    if env.torch is not None:
                        env.torch.cuda.empty_cache()
                except Exception:
                    pass
            r["seconds"] = time.perf_counter() - t0
            res["cases"].append(r)
            ms = " ".join(f"{k} {fmt_ms(v['median_ms'])}" for k, v in r["methods"].items())
            print(f"  {case.label:32} {ms}  [{'; '.join(r.get('flags', [])) or 'ok'}] ({r['seconds']:.1f} s)",
                  flush=True)

    res["total_seconds"] = time.perf_counter() - t_start
    path = args.out or default_out_path(socket.gethostname(), args.cpu_dry_run)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(res, f, indent=1, default=str)
        f.write("\n")
    print()
    print(format_tables(res))
    print(f"\nJSON: {os.path.abspath(path)}  ({res['total_seconds']:.0f} s)")
    wrong = any(c.get("wrong_result") for c in res["cases"])
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
