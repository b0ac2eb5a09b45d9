#!/usr/bin/env python3
"""GPU FFT benchmark: fusemath's fused FFT against nvmath-python, CuPy and PyTorch, side by side.

In one process, on one GPU, on one CUDA stream (a non-blocking CuPy stream made current for
CuPy, wrapped as torch.cuda.ExternalStream and made current for PyTorch, and handed to
fusemath (int handle) and nvmath (the stream object) explicitly on every call), complex64
data (normal random numbers), it times y = fft(x * w) * s with w a real float32 window
(a cosine ripple in [0.5, 1.5]) broadcast along the transformed axes (1-D: shape (n,); 2-D / 3-D:
the full transform shape) and s = 0.5, for the cases (name, shape, axes):

    1024x1      (1024,)              (0,)      1-D
    4096x4096   (4096, 4096)         (1,)      1-D over the last axis, batched over the first
    2^20x64     (64, 2**20)          (1,)
    2^24x4      (4, 2**24)           (1,)
    2d-4096^2   (4096, 4096)         (0, 1)
    3d-512^3    (512, 512, 512)      (0, 1, 2)

through the contestants

    fm_fused      f = fusemath.fft.FFT(x, axes=axes); f.plan(prolog={"multiply": w},
                  epilog={"scale": s}); f.execute(out=y, stream=s)   (cuFFT callbacks)
    fm_plain      the same without prolog / epilog (plain planned cuFFT through fusemath)
    nvmath_fused  nvmath.fft.FFT(x, axes=axes) planned with an LTO-IR prolog multiplying by w
                  (w passed as the callback's user data, indexed by offset % w.size) and an
                  epilog scaling by s, both compiled from Python with numba through
                  nvmath.fft.compile_prolog / compile_epilog; f.execute(stream=s) (allocates
                  its result: nvmath's stateful FFT has no out=)
    cupy_unfused  cupy.fft.fft(x * w, axis=a) * s (cupy.fft.fftn for 2-D / 3-D), plan cache warm
    cupy_plain    cupy.fft.fft / fftn of x: the plain cuFFT time
    torch_plain   torch.fft.fft / fftn of torch.as_tensor(x, device="cuda") (shares x's memory)

Every result is checked before it is timed against a complex128 reference computed on the
GPU (cupy.fft in double precision of x * w * s, or of x for the plain contestants; for the
1-D cases the reference's first row is itself checked against numpy.fft): max |got - ref| /
max |ref| <= 1e-3 gives "ok": true.

Timing: CUDA events on the benchmark stream. Per contestant: 3 warm-up calls, a cost estimate,
then repetitions of k back-to-back calls (k chosen so a repetition takes about 2 ms, at least
1) between two events until --budget seconds (default 0.5) of wall time have passed, at least
5 repetitions; reported: median (and min) ms per call over repetitions. Ratios (of medians):
fm_fused / plain_cufft (the fastest of fm_plain, cupy_plain, torch_plain), fm_fused /
cupy_plain, fm_fused / torch_plain, fm_fused / nvmath_fused, cupy_unfused / fm_fused (and
fm_fused / fm_plain). Paired: before the contestants are timed one by one, fm_fused and fm_plain
are timed in alternating rounds (k calls of each per round, --budget seconds) and the median of
the per-round ratios is reported as "fm_fused/fm_plain (paired)": the launch-bound cases (1024 x
1) otherwise compare two different states of the machine. Targets, PASS / FAIL per case:
fm_fused <= 1.10 x plain cuFFT (plain_cufft, and paired) and <= 1.00 x nvmath_fused. fm_fused_kernel / fm_fused_pass / fm_fused_callback:
the same plan with gpu_prolog="kernel" / "pass" / "callback" (fm_fused is "auto"; the kernel
takes 1-D c2c power-of-two lengths up to 4096, an error row elsewhere); --prolog-sweep adds
1-D cases of several sizes timing them against each other.

Plan creation (case 4096x4096): FFT(x, axes).plan(prolog=..., epilog=...) timed in a fresh
subprocess with FUSEMATH_CACHE_DIR set to a new empty temporary directory (cold: includes the
NVRTC compile of the callbacks), then in a second fresh subprocess with the same directory
(warm: the on-disk LTO-IR cache); each child also times a plain plan and a second fused plan
after the first one. nvmath: compile_prolog + compile_epilog and FFT(...).plan(prolog,
epilog) in a fresh subprocess. Seconds.

Host overhead (1-D c64, n = 64 and n = 1024, batch 1): per-call host time of bursts of
--host-calls (20000) back-to-back calls followed by one stream synchronize (time.perf_counter,
median and min over --host-bursts bursts, methods interleaved burst by burst):
fusemath planned execute(out=y, stream=s) (plain, and fused), cupy.fft.fft(x),
torch.fft.fft(xt), nvmath stateful execute(stream=s), and the bare C cufftExecC2C measured
by build/benchmarks/cufft_bare (run as a subprocess with the same calls and bursts;
"unavailable" if not built). build/benchmarks/fft_overhead_gpu (fusemath's C API next to the
bare call in one C process) is run too when built.

Output: JSON (date, machine: hostname, GPU, driver / runtime / cuFFT versions; versions of
the libraries; cases; plan_creation; host_overhead) to --out (default
benchmarks/results/fft_gpu-<YYYYMMDD>-<host>.json), rewritten after every section so that an
interrupted run keeps what it measured; and a table on stdout. --max-seconds: no new case (or
section) is started after that much wall time; what was not reached is listed in "skipped".
Every peer is optional: a missing package or an error in one contestant is recorded (its
error text in the JSON, "error" in the table) and the run goes on.

Without a GPU (CuPy missing or no CUDA device) it prints "fft_gpu: no GPU: <reason>" and
exits 0 having measured nothing (status 2 with --require-gpu). --cpu-dry-run exercises the
script on the CPU (NumPy arrays, fusemath on FFTW, numpy.fft standing in for cupy.fft,
wall-clock timing, small sizes, no torch / nvmath); its numbers mean nothing.

Usage (from the repository root, after `make build` and
`cmake --build build --target cufft_bare fft_overhead_gpu`):
    PYTHONPATH=/tmp/site .venv/bin/python benchmarks/fft_gpu.py [--quick] [--cases 4096x4096,...]
        [--budget S] [--max-seconds S] [--host-calls N] [--host-bursts N] [--skip-plan-creation]
        [--skip-host-overhead] [--bare-bin PATH] [--out PATH] [--require-gpu] [--cpu-dry-run]
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from bench_common import WallEvent, cpu_model, err

REPO_ROOT = os.path.dirname(os.path.abspath(os.path.dirname(os.path.abspath(__file__))))

# (name, shape, axes)
CASES = (
    ("1024x1", (1024,), (0,)),
    ("4096x4096", (4096, 4096), (1,)),
    ("1024x16384", (16384, 1024), (1,)),
    ("256x65536", (65536, 256), (1,)),
    ("1024x16384-axis0", (1024, 16384), (0,)),
    ("2^20x64", (64, 2 ** 20), (1,)),
    ("2^24x4", (4, 2 ** 24), (1,)),
    ("2d-4096^2", (4096, 4096), (0, 1)),
    ("3d-512^3", (512, 512, 512), (0, 1, 2)),
)
QUICK_CASES = (
    ("1024x1", (1024,), (0,)),
    ("4096x4096", (4096, 4096), (1,)),
    ("1024x16384", (16384, 1024), (1,)),
    ("256x65536", (65536, 256), (1,)),
    ("2^20x8", (8, 2 ** 20), (1,)),
    ("2d-2048^2", (2048, 2048), (0, 1)),
    ("3d-256^3", (256, 256, 256), (0, 1, 2)),
)
DRY_CASES = (
    ("1024x1", (1024,), (0,)),
    ("256x512", (256, 512), (1,)),
    ("2^14x4", (4, 2 ** 14), (1,)),
    ("256x512-axis0", (256, 512), (0,)),
    ("2d-256^2", (256, 256), (0, 1)),
    ("3d-32^3", (32, 32, 32), (0, 1, 2)),
)
PLAN_CASE = ("4096x4096", (4096, 4096), (1,))
DRY_PLAN_CASE = ("256x512", (256, 512), (1,))
HOST_SIZES = (64, 1024)

CONTESTANTS = ("fm_fused", "fm_fused_kernel", "fm_fused_pass", "fm_fused_callback", "fm_split_callback", "fm_plain", "nvmath_fused",
               "cupy_unfused", "cupy_plain", "torch_plain")
FUSED = {"fm_fused": True, "fm_fused_kernel": True, "fm_fused_pass": True, "fm_fused_callback": True, "fm_split_callback": True,
         "fm_plain": False,
         "nvmath_fused": True, "cupy_unfused": True, "cupy_plain": False, "torch_plain": False}
# --prolog-sweep: where the prolog as a load callback stops beating the prolog as a pass (the rule
# behind gpu_prolog="auto"); 1-D c64 transforms of n points, batched
def sweep_cases(spec):
    """1-D cases 'sweep-<n>x<batch>' from (n, batches) pairs."""
    return tuple((f"sweep-{n}x{b}", (b, n) if b > 1 else (n,), (1,) if b > 1 else (0,)) for n, bs in spec for b in bs)


SWEEP_CASES = sweep_cases(((1024, (1, 4, 16, 64, 256, 1024)), (4096, (4, 16, 64, 256)), (65536, (1, 4, 16))))
SWEEP_CONTESTANTS = ("fm_fused", "fm_fused_kernel", "fm_fused_pass", "fm_fused_callback", "fm_plain", "cupy_plain")
SCALE = 0.5
TOL = {"complex64": 1e-3, "complex128": 1e-9}
REAL = {"complex64": "float32", "complex128": "float64"}
# "plain cuFFT" = the fastest of the plain contestants (fm_plain, cupy_plain, torch_plain): CuPy's
# per-call costs (allocation, plan cache) can make its plain call slower than the transform
TARGETS = {"fm_fused/plain_cufft": 1.10, "fm_fused/fm_plain (paired)": 1.10, "fm_fused/nvmath_fused": 1.00}
RATIOS = (("fm_fused", "plain_cufft"), ("fm_fused_kernel", "plain_cufft"), ("fm_fused", "cupy_plain"), ("fm_fused", "torch_plain"),
          ("fm_fused", "nvmath_fused"), ("cupy_unfused", "fm_fused"), ("fm_fused", "fm_plain"))
PLAIN = ("fm_plain", "cupy_plain", "torch_plain")
CHILD_MARK = "FFT_GPU_CHILD_RESULT "


def numba_numpy_shim() -> bool:
    """numba (which nvmath's compile_prolog / compile_epilog use) still calls np.row_stack, which
    NumPy 2.4 removed; it was an alias of vstack, so give it back for the peer's sake."""
    import numpy

    if hasattr(numpy, "row_stack"):
        return False
    numpy.row_stack = numpy.vstack
    return True


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--quick", action="store_true",
                   help="smaller subset and sizes (1024x1, 4096x4096, 2^20x8, 2d-2048^2, 3d-256^3), shorter "
                        "timings and host-overhead loops")
    p.add_argument("--cases", default=None, help="comma-separated case names to run (of the chosen set)")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds of timed calls per contestant and case (default 0.5; --quick 0.2)")
    p.add_argument("--max-seconds", type=float, default=None,
                   help="start no new case or section after this many seconds (default 420; --quick 150)")
    p.add_argument("--host-calls", type=int, default=None, help="calls per host-overhead burst (default 20000; "
                                                                "--quick 5000)")
    p.add_argument("--host-bursts", type=int, default=None, help="host-overhead bursts per method (default 7; "
                                                                 "--quick 3)")
    p.add_argument("--prolog-sweep", action="store_true",
                   help="add the prolog-mode sweep (1-D c64, n = 1024 / 4096 / 65536, several batches: "
                        "gpu_prolog pass vs callback vs plain)")
    p.add_argument("--sweep", default=None, metavar="N:B,...",
                   help="add 1-D sweep cases of N points batched B times (the prolog-sweep contestants)")
    p.add_argument("--split-probe", action="store_true",
                   help="2-axis cases: add fm_split_callback, the chain run as two fusemath plans (the last "
                        "axis with the prolog as a cuFFT load callback, then the first axis in place with "
                        "the epilog): what a split plan would cost")
    p.add_argument("--skip-plan-creation", action="store_true", help="skip the plan-creation subprocesses")
    p.add_argument("--skip-host-overhead", action="store_true", help="skip the host-overhead section")
    p.add_argument("--bare-bin", default=None,
                   help="the cufft_bare executable (default build/benchmarks/cufft_bare under the repository)")
    p.add_argument("--out", default=None, help="output JSON (default benchmarks/results/fft_gpu-<YYYYMMDD>-<host>.json)")
    p.add_argument("--require-gpu", action="store_true", help="exit with status 2 (not 0) when there is no GPU")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--dtype", choices=("complex64", "complex128"), default="complex64",
                   help="data type of x (the window is the matching real type); default complex64, the issue's")
    p.add_argument("--cpu-dry-run", action="store_true",
                   help="exercise the script without a GPU (NumPy arrays, fusemath on the CPU, numpy.fft in place "
                        "of cupy.fft, wall-clock timing, small sizes, JSON into the temp directory); the numbers "
                        "are not GPU numbers")
    # internal: the plan-creation child processes
    p.add_argument("--plan-child", choices=("fm", "nvmath"), default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.budget is None:
        a.budget = 0.2 if (a.quick or a.cpu_dry_run) else 0.5
    if a.max_seconds is None:
        a.max_seconds = 150.0 if a.quick else 420.0
    if a.host_calls is None:
        a.host_calls = 2000 if a.cpu_dry_run else (5000 if a.quick else 20000)
    if a.host_bursts is None:
        a.host_bursts = 3 if (a.quick or a.cpu_dry_run) else 7
    if a.budget <= 0 or a.host_calls < 1 or a.host_bursts < 1:
        p.error("--budget, --host-calls and --host-bursts must be positive")
    base = DRY_CASES if a.cpu_dry_run else (QUICK_CASES if a.quick else CASES)
    if a.cases:
        want = [c.strip() for c in a.cases.split(",") if c.strip()]
        names = [c[0] for c in base]
        bad = [c for c in want if c not in names]
        if bad:
            p.error(f"--cases: unknown {bad} (choose from {','.join(names)})")
        a.case_list = [c for c in base if c[0] in want]
    else:
        a.case_list = list(base)
    if a.prolog_sweep:
        a.case_list += list(SWEEP_CASES)
    if a.sweep:
        try:
            pairs = [tuple(int(v) for v in item.split(":")) for item in a.sweep.split(",") if item.strip()]
            if any(len(t) != 2 or t[0] < 2 or t[1] < 1 for t in pairs):
                raise ValueError
        except ValueError:
            p.error("--sweep: expected N:B pairs, N >= 2, B >= 1, e.g. 1024:16384,4096:4096")
        a.case_list += list(sweep_cases(tuple((n, (b,)) for n, b in pairs)))
    return a


# ---------------------------------------------------------------------------------------
# Environment
# ---------------------------------------------------------------------------------------
class Env:
    """The array library (CuPy; NumPy in --cpu-dry-run), the benchmark stream and the peers."""

    def __init__(self, dry_run: bool = False):
        import numpy

        self.np = numpy
        self.dry_run = dry_run
        self.cp = self.torch = self.nvmath = self.ff = None
        self.errors = {}
        self.stream = self.sh = self.tstream = None
        if dry_run:
            self.xp = numpy
            for k in ("cupy", "torch", "nvmath"):
                self.errors[k] = "not used in --cpu-dry-run"
            return
        self.xp = None
        try:
            import cupy

            if cupy.cuda.runtime.getDeviceCount() > 0:
                self.cp = self.xp = cupy
            else:
                self.errors["cupy"] = "no CUDA device"
        except Exception as exc:
            self.errors["cupy"] = err(exc)

    def no_gpu_reason(self):
        if self.xp is not None:
            return None
        return "; ".join(f"{k}: {v}" for k, v in self.errors.items()) or "no CUDA device"

    def load_rest(self, want_nvmath: bool = True):
        try:
            import fusemath.fft as ff

            self.ff = ff
            import fusemath

            if not self.dry_run and fusemath.cuda_device_count() < 1:
                self.errors["fusemath"] = "fusemath.cuda_device_count() = 0 (built without CUDA?)"
        except Exception as exc:
            self.errors["fusemath"] = err(exc) + " (build it with `make build`; run with .venv/bin/python)"
        if self.dry_run:
            return
        cp = self.cp
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.sh = int(self.stream.ptr)
        try:
            import torch

            if torch.cuda.is_available():
                self.torch = torch
                self.tstream = torch.cuda.ExternalStream(self.sh)
            else:
                self.errors["torch"] = "torch.cuda.is_available() is False"
        except Exception as exc:
            self.errors["torch"] = err(exc)
        if want_nvmath:
            if numba_numpy_shim():
                self.errors["numba_shim"] = "numpy.row_stack restored as numpy.vstack (NumPy 2.4 removed it)"
            try:
                import nvmath  # noqa: F401
                import nvmath.fft  # noqa: F401

                self.nvmath = nvmath
            except Exception as exc:
                self.errors["nvmath"] = err(exc)
            try:
                import numba.cuda  # noqa: F401  (nvmath.fft.compile_prolog / _epilog need it)
            except Exception as exc:
                self.errors["numba"] = err(exc)

    # -- streams and timing -----------------------------------------------------------
    def stream_ctx(self):
        """CuPy's (and PyTorch's) current stream := the benchmark stream."""
        import contextlib

        st = contextlib.ExitStack()
        if self.stream is not None:
            st.enter_context(self.stream)
        if self.tstream is not None:
            st.enter_context(self.torch.cuda.stream(self.tstream))
        return st

    def event(self):
        return WallEvent() if self.dry_run else self.cp.cuda.Event()

    def record(self, ev):
        if self.dry_run:
            ev.record()
        else:
            ev.record(self.stream)

    def elapsed_ms(self, e0, e1) -> float:
        if self.dry_run:
            return (e1.t - e0.t) * 1e3
        e1.synchronize()
        return float(self.cp.cuda.get_elapsed_time(e0, e1))

    def sync(self):
        if self.stream is not None:
            self.stream.synchronize()

    def free_memory(self):
        import gc

        gc.collect()
        if self.cp is not None:
            try:
                self.sync()
                self.cp.get_default_memory_pool().free_all_blocks()
            except Exception:
                pass
        if self.torch is not None:
            try:
                self.torch.cuda.empty_cache()
            except Exception:
                pass

    # -- arrays -------------------------------------------------------------------------
    def rng(self, seed):
        return self.xp.random.default_rng(seed)

    def data(self, shape, axes, seed, dtype="complex64"):
        """x (dtype, normal), w (its real type, in [0.5, 1.5], a cosine ripple; the transform shape)."""
        xp = self.xp
        g = self.rng(seed)
        rt = getattr(xp, REAL[dtype])
        # (re, im) pairs of the real type viewed as the complex one
        x = g.standard_normal(tuple(shape) + (2,), dtype=rt).view(getattr(xp, dtype)).reshape(shape)
        wshape = tuple(shape[a] for a in axes)
        wsize = math.prod(wshape)
        w = (1.0 + 0.5 * xp.cos(xp.arange(wsize, dtype=rt) * rt(0.37))).astype(rt)
        if tuple(axes) != tuple(range(len(shape) - len(axes), len(shape))):
            # not the trailing axes (1024x16384-axis0): 1 along the batch axes after them
            wshape = tuple(shape[d] if d in axes else 1 for d in range(min(axes), len(shape)))
        w = w.reshape(wshape)
        return x, w

    def fft(self, xp_mod, a, axes):
        """xp_mod.fft.fft over one axis, fftn over several."""
        if len(axes) == 1:
            return xp_mod.fft.fft(a, axis=axes[0])
        return xp_mod.fft.fftn(a, axes=axes)

    def as_xp(self, y):
        """A result (CuPy, NumPy or a torch tensor) as an array of the main library."""
        if self.torch is not None and isinstance(y, self.torch.Tensor):
            try:
                return self.cp.from_dlpack(y)
            except Exception:
                return self.cp.asarray(y)
        return self.xp.asarray(y)

    def rel_err(self, got, ref) -> float:
        g = self.as_xp(got)
        if tuple(g.shape) != tuple(ref.shape):
            raise ValueError(f"result has shape {tuple(g.shape)}, expected {tuple(ref.shape)}")
        xp = self.xp
        num = float(xp.abs(g - ref).max())
        den = float(xp.abs(ref).max())
        return num / den if den > 0 else num


def machine_info(env: Env) -> dict:
    m = {"hostname": socket.gethostname(), "platform": platform.platform(), "python": platform.python_version(),
         "cpu_model": cpu_model()}
    cp = env.cp
    if cp is not None:
        try:
            props = cp.cuda.runtime.getDeviceProperties(0)
            name = props.get("name", b"?")
            m["gpu_name"] = name.decode() if isinstance(name, bytes) else str(name)
            m["gpu_memory_bytes"] = int(props.get("totalGlobalMem", 0))
            m["compute_capability"] = f"{props.get('major', '?')}.{props.get('minor', '?')}"
        except Exception as exc:
            m["gpu_error"] = err(exc)
        for key, fn in (("cuda_runtime_version", lambda: cp.cuda.runtime.runtimeGetVersion()),
                        ("cuda_driver_version", lambda: cp.cuda.runtime.driverGetVersion()),
                        ("cufft_version", lambda: cp.cuda.cufft.getVersion())):
            try:
                m[key] = int(fn())
            except Exception as exc:
                m[key] = err(exc)
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,power.limit",
                                  "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
            if out.returncode == 0 and out.stdout.strip():
                m["nvidia_smi"] = out.stdout.strip().splitlines()[0]
        except Exception:
            pass
    return m


def library_versions(env: Env) -> dict:
    from importlib import metadata

    v = {}
    for dist in ("numpy", "cupy", "cupy-cuda13x", "cupy-cuda12x", "torch", "nvmath-python", "numba", "numba-cuda",
                 "fusemath"):
        try:
            v[dist] = metadata.version(dist)
        except Exception:
            pass
    if env.torch is not None:
        v["torch.version.cuda"] = getattr(env.torch.version, "cuda", None)
    try:
        import fusemath

        v["fusemath"] = getattr(fusemath, "__version__", v.get("fusemath"))
    except Exception:
        pass
    return v


# ---------------------------------------------------------------------------------------
# Contestants
# ---------------------------------------------------------------------------------------
def nvmath_callbacks(env: Env, wsize: int, scale: float, dtype: str = "complex64"):
    """(prolog LTO-IR, epilog LTO-IR): prolog x -> x * w[offset % wsize] (w: real user data of
    dtype's precision), epilog stores element * scale. Compiled by numba through
    nvmath.fft.compile_prolog / _epilog."""
    np = env.np
    nvmath = env.nvmath
    nw = np.uint64(wsize)      # uint64 like offset: uint64 % int64 would type as float64 in numba
    sc = getattr(np, REAL[dtype])(scale)

    # Real-by-complex products written per component: two f32 multiplies per element (numba's
    # complex64 * float32 promotes the real factor to complex and, without fastmath, keeps the
    # four multiplies). Checked by compiling to PTX with numba-cuda 0.30 for sm_90: loads, two
    # mul.f32, stores; the complex() round trip through complex128 folds away.
    def prolog_window(data_in, offset, user_info, unused):
        v = data_in[offset]
        wv = user_info[offset % nw]
        return complex(v.real * wv, v.imag * wv)

    def epilog_scale(data_out, offset, element, user_info, unused):
        data_out[offset] = complex(element.real * sc, element.imag * sc)

    with env.cp.cuda.Device():
        pro = nvmath.fft.compile_prolog(prolog_window, dtype, REAL[dtype])
        epi = nvmath.fft.compile_epilog(epilog_scale, dtype, REAL[dtype])
    return pro, epi


def make_contestants(env: Env, x, w, axes, rec: dict, only=CONTESTANTS):
    """name -> (call() -> result, cleanup() or None, info dict) for the contestants in `only` that
    could be set up; setup errors go into rec[name]["error"]."""
    xp = env.xp
    ff = env.ff
    out = {}

    def setup(name, fn):
        if name not in only:
            return
        try:
            out[name] = fn()
        except Exception as exc:
            rec[name] = {"error": "setup: " + err(exc), "ok": False}

    def fm(fused, gpu_prolog="auto"):
        def f_():
            if ff is None:
                raise RuntimeError(env.errors.get("fusemath", "fusemath not importable"))
            f = ff.FFT(x, axes=axes)
            if fused:
                f.plan(prolog={"multiply": w}, epilog={"scale": SCALE}, gpu_prolog=gpu_prolog)
            else:
                f.plan()
            y = xp.empty_like(x)
            sh = env.sh
            ex = f.execute
            if sh is None:
                call = lambda: ex(out=y)  # noqa: E731
            else:
                call = lambda: ex(out=y, stream=sh)  # noqa: E731
            return call, f.free, {"plan": f.describe()}
        return f_

    setup("fm_fused", fm(True))
    setup("fm_fused_kernel", fm(True, "kernel"))
    setup("fm_fused_pass", fm(True, "pass"))
    setup("fm_fused_callback", fm(True, "callback"))
    setup("fm_plain", fm(False))

    def split():
        if len(axes) != 2 or w.ndim != 2:
            raise RuntimeError("two transformed axes only")
        rows = ff.FFT(x, axes=(axes[1],))
        rows.plan(prolog={"multiply": w}, gpu_prolog="callback")
        y = xp.empty_like(x)
        cols = ff.FFT(y, axes=(axes[0],))
        cols.plan(epilog={"scale": SCALE})
        sh = env.sh

        def call():
            rows.execute(out=y, stream=sh)
            return cols.execute(out=y, stream=sh)

        def free():
            rows.free()
            cols.free()
        return call, free, {"plan": rows.describe() + " then " + cols.describe()}

    setup("fm_split_callback", split)

    def nv():
        if env.dry_run:
            raise RuntimeError("not used in --cpu-dry-run")
        if env.nvmath is None:
            raise RuntimeError("nvmath unavailable: " + env.errors.get("nvmath", "?"))
        if "numba" in env.errors:
            raise RuntimeError("numba unavailable: " + env.errors["numba"])
        if w.ndim != len(axes):
            raise RuntimeError("the prolog indexes the window by offset % size: trailing axes only")
        pro, epi = nvmath_callbacks(env, int(w.size), SCALE, str(x.dtype))
        f = env.nvmath.fft.FFT(x, axes=list(axes), stream=env.stream)
        info = {}
        try:
            shape, strides = f.get_input_layout()
            info["input_layout"] = {"shape": list(shape), "strides": list(strides)}
            cstr = [int(s) // x.itemsize for s in x.strides]
            if list(strides) != cstr:  # the prolog indexes w by the flat offset of this layout
                info["layout_warning"] = f"nvmath input strides {list(strides)} != x's {cstr}"
        except Exception as exc:
            info["input_layout"] = err(exc)
        f.plan(prolog={"ltoir": pro, "data": int(w.data.ptr)}, epilog={"ltoir": epi}, stream=env.stream)
        st = env.stream
        ex = f.execute
        return (lambda: ex(stream=st)), f.free, info

    setup("nvmath_fused", nv)

    def cupy_unfused():
        mod = xp
        return (lambda: env.fft(mod, x * w, axes) * SCALE), None, {"library": mod.__name__}

    def cupy_plain():
        mod = xp
        return (lambda: env.fft(mod, x, axes)), None, {"library": mod.__name__}

    setup("cupy_unfused", cupy_unfused)
    setup("cupy_plain", cupy_plain)

    def torch_plain():
        if env.torch is None:
            raise RuntimeError("torch unavailable: " + env.errors.get("torch", "?"))
        torch = env.torch
        xt = torch.as_tensor(x, device="cuda")
        shares = int(xt.data_ptr()) == int(x.data.ptr)
        if len(axes) == 1:
            a0 = axes[0]
            call = lambda: torch.fft.fft(xt, dim=a0)  # noqa: E731
        else:
            dims = tuple(axes)
            call = lambda: torch.fft.fftn(xt, dim=dims)  # noqa: E731
        return call, None, {"shares_x_memory": shares}

    setup("torch_plain", torch_plain)
    return out


def calls_per_rep(env: Env, call, warmup: int, rep_ms: float) -> int:
    """After warmup calls, how many back-to-back calls take about rep_ms (1 to 2000)."""
    for _ in range(warmup):
        call()
    env.sync()
    e0, e1 = env.event(), env.event()
    env.record(e0)
    call()
    env.record(e1)
    return int(max(1, min(2000, math.ceil(rep_ms / max(env.elapsed_ms(e0, e1), 1e-4)))))


def time_call(env: Env, call, budget: float, min_reps: int = 5, warmup: int = 3, rep_ms: float = 2.0):
    """Median / min ms per call: repetitions of k back-to-back calls between two events."""
    k = calls_per_rep(env, call, warmup, rep_ms)
    times = []
    t_end = time.perf_counter() + budget
    evs = [(env.event(), env.event()) for _ in range(8)]
    i = 0
    while len(times) < min_reps or time.perf_counter() < t_end:
        a, b = evs[i % len(evs)]
        env.record(a)
        for _ in range(k):
            call()
        env.record(b)
        times.append(env.elapsed_ms(a, b) / k)
        i += 1
        if len(times) >= 100000:
            break
    return {"ms": statistics.median(times), "ms_min": min(times), "reps": len(times), "calls_per_rep": k}


def time_paired(env: Env, calls: dict, budget: float, min_rounds: int = 7, warmup: int = 3, rep_ms: float = 2.0):
    """Median over rounds of per-round ratios of each method to the last one: every round times
    k back-to-back calls of each method in turn (the order reversed every other round), so both sides of a ratio see the same state of
    the machine (launch costs on the H200 host move between 8 and 13 us per call within minutes)."""
    names = list(calls)
    ks = {n: calls_per_rep(env, call, warmup, rep_ms) for n, call in calls.items()}
    per = {n: [] for n in names}
    evs = {n: (env.event(), env.event()) for n in names}
    t_end = time.perf_counter() + budget
    while len(per[names[0]]) < min_rounds or time.perf_counter() < t_end:
        for n in (names if len(per[names[0]]) % 2 == 0 else names[::-1]):  # the order alternates
            a, b = evs[n]
            env.record(a)
            for _ in range(ks[n]):
                calls[n]()
            env.record(b)
            per[n].append(env.elapsed_ms(a, b) / ks[n])
        if len(per[names[0]]) >= 10000:
            break
    base = names[-1]
    return {f"{n}/{base}": statistics.median(x / y for x, y in zip(per[n], per[base])) for n in names[:-1]}, \
        len(per[base])


def run_case(env: Env, case, args, seed: int) -> dict:
    name, shape, axes = case
    xp = env.xp
    n_elems = math.prod(shape)
    rec = {"name": name, "shape": list(shape), "axes": list(axes), "dtype": args.dtype,
           "bytes": n_elems * (16 if args.dtype == "complex128" else 8), "contestants": {}, "ratios": {}, "targets": {}}
    cres = rec["contestants"]
    with env.stream_ctx():
        x, w = env.data(shape, axes, seed, args.dtype)
        # complex128 references on the device
        x128 = x.astype(xp.complex128)
        ref_fused = env.fft(xp, x128 * w.astype(xp.float64), axes) * SCALE
        ref_plain = env.fft(xp, x128, axes)
        del x128
        env.sync()
        if len(axes) == 1 and axes[0] == len(shape) - 1 and not env.dry_run:
            # the reference itself against numpy.fft on the first transform
            np = env.np
            row = x.reshape(-1, shape[axes[0]])[0].get().astype(np.complex128) if x.ndim > 1 else \
                x.get().astype(np.complex128)
            want = np.fft.fft(row * w.get().astype(np.float64)) * SCALE
            got = (ref_fused.reshape(-1, shape[axes[0]])[0] if x.ndim > 1 else ref_fused).get()
            rec["reference_numpy_check_rel_err"] = float(np.abs(got - want).max() / np.abs(want).max())
        only = SWEEP_CONTESTANTS if name.startswith("sweep-") else \
            tuple(c for c in CONTESTANTS if c != "fm_split_callback" or (args.split_probe and len(axes) == 2))
        contestants = make_contestants(env, x, w, axes, cres, only)
        if contestants.get("fm_fused") and contestants.get("fm_plain"):
            # fused against plain cuFFT through the same call path, interleaved (see time_paired)
            try:
                pr, rounds = time_paired(env, {c: contestants[c][0] for c in ("fm_fused", "fm_plain")}, args.budget)
                rec["paired"] = dict(pr, rounds=rounds)
            except Exception as exc:
                rec["paired"] = {"error": err(exc)}
        for cname in only:
            if cname not in contestants:
                if cname not in cres:
                    cres[cname] = {"error": "not set up", "ok": False}
                continue
            call, cleanup, info = contestants[cname]
            r = dict(info)
            cres[cname] = r
            try:
                y = call()
                env.sync()
                rel = env.rel_err(y, ref_fused if FUSED[cname] else ref_plain)
                del y
                r["rel_err"] = rel
                r["ok"] = bool(rel <= TOL[args.dtype])
                r.update(time_call(env, call, args.budget))
            except Exception as exc:
                r["error"] = err(exc)
                r.setdefault("ok", False)
            finally:
                contestants[cname] = None
                if cleanup is not None:
                    try:
                        cleanup()
                    except Exception:
                        pass
                env.free_memory()
        del ref_fused, ref_plain, x, w, contestants
    env.free_memory()
    rec["contestants"] = cres = {c: cres[c] for c in CONTESTANTS if c in cres}
    ms = {k: v.get("ms") for k, v in cres.items()}
    plain = [(ms[c], c) for c in PLAIN if ms.get(c) and cres[c].get("ok")]
    if plain:
        ms["plain_cufft"] = min(plain)[0]
        rec["plain_cufft_from"] = min(plain)[1]
    for a, b in RATIOS:
        if ms.get(a) and ms.get(b):
            rec["ratios"][f"{a}/{b}"] = ms[a] / ms[b]
        else:
            rec["ratios"][f"{a}/{b}"] = None
    rec["ratios"]["fm_fused/fm_plain (paired)"] = (rec.get("paired") or {}).get("fm_fused/fm_plain")
    for key, lim in TARGETS.items():
        v = rec["ratios"].get(key)
        a, b = key.replace(" (paired)", "").split("/")
        if v is None:
            rec["targets"][key] = {"limit": lim, "value": None, "result": "n/a"}
        else:
            ok = cres.get(a, {}).get("ok") and (b == "plain_cufft" or cres.get(b, {}).get("ok"))
            rec["targets"][key] = {"limit": lim, "value": v,
                                   "result": ("PASS" if v <= lim else "FAIL") if ok else "FAIL (wrong result)"}
    return rec


# ---------------------------------------------------------------------------------------
# Plan creation (subprocesses)
# ---------------------------------------------------------------------------------------
def _file_count(d: str) -> int:
    n = 0
    for _, _, files in os.walk(d):
        n += len(files)
    return n


def plan_child(args) -> int:
    """Runs in a fresh process: times planning, prints one CHILD_MARK + JSON line."""
    res = {}
    try:
        env = Env(dry_run=args.cpu_dry_run)
        reason = env.no_gpu_reason()
        if reason:
            raise RuntimeError("no GPU: " + reason)
        _, shape, axes = DRY_PLAN_CASE if args.cpu_dry_run else PLAN_CASE
        if True:
            x, w = env.data(shape, axes, args.seed)
            if not env.dry_run:
                env.cp.cuda.Device().synchronize()  # CUDA context and data ready before any timer
            if args.plan_child == "fm":
                t0 = time.perf_counter()
                import fusemath.fft as ff
                res["import_s"] = time.perf_counter() - t0
                t0 = time.perf_counter()
                f = ff.FFT(x, axes=axes)
                f.plan(prolog={"multiply": w}, epilog={"scale": SCALE})
                res["fused_plan_s"] = time.perf_counter() - t0
                res["plan"] = f.describe()
                t0 = time.perf_counter()
                g = ff.FFT(x, axes=axes)
                g.plan()
                res["plain_plan_after_s"] = time.perf_counter() - t0
                t0 = time.perf_counter()
                h = ff.FFT(x, axes=axes)
                h.plan(prolog={"multiply": w}, epilog={"scale": SCALE})
                res["fused_plan_again_s"] = time.perf_counter() - t0
                # the prolog as a cuFFT load callback (NVRTC -> LTO-IR, cuFFT's JIT link)
                t0 = time.perf_counter()
                k = ff.FFT(x, axes=axes)
                k.plan(prolog={"multiply": w}, epilog={"scale": SCALE}, gpu_prolog="callback")
                res["fused_callback_plan_s"] = time.perf_counter() - t0
                res["callback_plan"] = k.describe()
                for o in (f, g, h, k):
                    o.free()
            else:
                if env.dry_run:
                    raise RuntimeError("not used in --cpu-dry-run")
                t0 = time.perf_counter()
                numba_numpy_shim()
                import nvmath
                import nvmath.fft  # noqa: F401

                env.nvmath = nvmath
                res["import_s"] = time.perf_counter() - t0
                env.stream = env.cp.cuda.Stream(non_blocking=True)
                env.sh = int(env.stream.ptr)
                t0 = time.perf_counter()
                pro, epi = nvmath_callbacks(env, int(w.size), SCALE)
                res["compile_s"] = time.perf_counter() - t0
                t0 = time.perf_counter()
                f = env.nvmath.fft.FFT(x, axes=list(axes), stream=env.stream)
                f.plan(prolog={"ltoir": pro, "data": int(w.data.ptr)}, epilog={"ltoir": epi}, stream=env.stream)
                env.sync()
                res["plan_s"] = time.perf_counter() - t0
                res["compile_plus_plan_s"] = res["compile_s"] + res["plan_s"]
                t0 = time.perf_counter()
                g = env.nvmath.fft.FFT(x, axes=list(axes), stream=env.stream)
                g.plan(prolog={"ltoir": pro, "data": int(w.data.ptr)}, epilog={"ltoir": epi}, stream=env.stream)
                env.sync()
                res["plan_again_s"] = time.perf_counter() - t0
                f.free()
                g.free()
        rc = 0
    except Exception as exc:
        res["error"] = err(exc)
        rc = 1
    print(CHILD_MARK + json.dumps(res), flush=True)
    return rc


def run_child(kind: str, args, env_vars: dict, timeout: float = 300.0) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--plan-child", kind, "--seed", str(args.seed)]
    if args.cpu_dry_run:
        cmd.append("--cpu-dry-run")
    envd = dict(os.environ)
    envd.update(env_vars)
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=envd, cwd=REPO_ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    wall = time.perf_counter() - t0
    for line in reversed(p.stdout.splitlines()):
        if line.startswith(CHILD_MARK):
            try:
                r = json.loads(line[len(CHILD_MARK):])
            except ValueError as exc:
                r = {"error": f"bad child output: {exc}"}
            r["process_wall_s"] = wall
            return r
    return {"error": f"child exited {p.returncode} without a result: {(p.stderr or p.stdout)[-600:]}",
            "process_wall_s": wall}


def run_plan_creation(env: Env, args) -> dict:
    name, shape, axes = DRY_PLAN_CASE if args.cpu_dry_run else PLAN_CASE
    out = {"case": name, "shape": list(shape), "axes": list(axes),
           "note": "seconds; each in a fresh subprocess (CUDA context made before the timer starts)"}
    d = tempfile.mkdtemp(prefix="fusemath-fftcache-")
    try:
        out["cache_dir"] = d
        out["fm_cold"] = run_child("fm", args, {"FUSEMATH_CACHE_DIR": d})
        out["cache_files_after_cold"] = _file_count(d)
        out["fm_warm"] = run_child("fm", args, {"FUSEMATH_CACHE_DIR": d})
        out["cache_files_after_warm"] = _file_count(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    if args.cpu_dry_run:
        out["nvmath"] = {"error": "not used in --cpu-dry-run"}
    else:
        out["nvmath"] = run_child("nvmath", args, {})
    return out


# ---------------------------------------------------------------------------------------
# Host overhead
# ---------------------------------------------------------------------------------------
def run_binary(path: str, argv, timeout: float = 300.0):
    if not path or not os.path.isfile(path) or not os.access(path, os.X_OK):
        return "unavailable"
    try:
        p = subprocess.run([path] + [str(a) for a in argv], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    except OSError as exc:
        return {"error": err(exc)}
    for line in reversed(p.stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                r = json.loads(line)
                r["exit_status"] = p.returncode
                return r
            except ValueError:
                break
    return {"error": f"exit status {p.returncode}: {(p.stderr or p.stdout)[-400:]}"}


def run_host_overhead(env: Env, args) -> dict:
    xp = env.xp
    calls, bursts = args.host_calls, args.host_bursts
    bare_bin = args.bare_bin or os.path.join(REPO_ROOT, "build", "benchmarks", "cufft_bare")
    c_bin = os.path.join(os.path.dirname(bare_bin), "fft_overhead_gpu")
    out = {"calls_per_burst": calls, "bursts": bursts, "unit": "us per call (median over bursts)",
           "method": "bursts of back-to-back calls then one stream synchronize, time.perf_counter; "
                     "methods interleaved burst by burst", "sizes": {}}
    for n in HOST_SIZES:
        row = {}
        errors = {}
        with env.stream_ctx():
            x, w = env.data((n,), (0,), args.seed + n)
            y = xp.empty_like(x)
            methods = {}
            objs = []
            sh = env.sh
            try:
                if env.ff is None:
                    raise RuntimeError(env.errors.get("fusemath", "fusemath not importable"))
                f = env.ff.FFT(x, axes=(0,))
                f.plan()
                objs.append(f)
                ex = f.execute
                methods["fm_execute"] = (lambda: ex(out=y, stream=sh)) if sh else (lambda: ex(out=y))
                g = env.ff.FFT(x, axes=(0,))
                g.plan(prolog={"multiply": w}, epilog={"scale": SCALE})
                objs.append(g)
                gx = g.execute
                y2 = xp.empty_like(x)
                methods["fm_fused_execute"] = (lambda: gx(out=y2, stream=sh)) if sh else (lambda: gx(out=y2))
            except Exception as exc:
                errors["fm_execute"] = err(exc)
            fftm = xp.fft.fft
            methods["cupy_fft" if not env.dry_run else "numpy_fft"] = lambda: fftm(x)
            if env.torch is not None:
                torch = env.torch
                xt = torch.as_tensor(x, device="cuda")
                tf = torch.fft.fft
                methods["torch_fft"] = lambda: tf(xt)
            elif not env.dry_run:
                errors["torch_fft"] = env.errors.get("torch", "unavailable")
            if env.nvmath is not None and not env.dry_run:
                try:
                    nf = env.nvmath.fft.FFT(x, axes=[0], stream=env.stream)
                    nf.plan(stream=env.stream)
                    objs.append(nf)
                    nex, st = nf.execute, env.stream
                    methods["nvmath_execute"] = lambda: nex(stream=st)
                except Exception as exc:
                    errors["nvmath_execute"] = err(exc)
            elif not env.dry_run:
                errors["nvmath_execute"] = env.errors.get("nvmath", "unavailable")
            # warm-up (and drop methods that fail)
            for k in list(methods):
                try:
                    for _ in range(200):
                        methods[k]()
                    env.sync()
                except Exception as exc:
                    errors[k] = err(exc)
                    del methods[k]
            times = {k: [] for k in methods}
            for _ in range(bursts):
                for k, fn in methods.items():
                    t0 = time.perf_counter()
                    for _ in range(calls):
                        fn()
                    env.sync()
                    times[k].append((time.perf_counter() - t0) / calls * 1e6)
            for k, ts in times.items():
                row[k] = {"us": statistics.median(ts), "us_min": min(ts)}
            for o in objs:
                try:
                    o.free()
                except Exception:
                    pass
            methods.clear()
            objs.clear()
        env.free_memory()
        bare = run_binary(bare_bin, [n, calls, max(bursts, 3)])
        row["bare_c_cufft"] = bare if isinstance(bare, str) else (
            {"us": bare.get("us_per_call_median"), "us_min": bare.get("us_per_call_min"), "raw": bare}
            if "us_per_call_median" in bare else bare)
        b_us = row["bare_c_cufft"].get("us") if isinstance(row["bare_c_cufft"], dict) else None
        if b_us:
            for k, v in row.items():
                if k != "bare_c_cufft" and isinstance(v, dict) and v.get("us") is not None:
                    v["above_bare_us"] = v["us"] - b_us
        c_prog = run_binary(c_bin, [n, calls, max(bursts, 3)])
        row["c_fft_overhead_gpu"] = c_prog
        if errors:
            row["errors"] = errors
        out["sizes"][str(n)] = row
    out["bare_bin"] = bare_bin
    return out


# ---------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------
def _fmt(v, spec=".3f"):
    return "-" if v is None else format(v, spec)


def print_case_table(rec: dict):
    print(f"\n{rec['name']}  shape={tuple(rec['shape'])} axes={tuple(rec['axes'])} {rec.get('dtype', 'complex64')}")
    print(f"  {'contestant':17s} {'ms':>10s} {'min ms':>10s} {'reps':>6s} {'rel err':>9s}  ok")
    for c in (c for c in CONTESTANTS if c in rec["contestants"]):
        r = rec["contestants"][c]
        if "ms" in r:
            print(f"  {c:17s} {r['ms']:10.4f} {r['ms_min']:10.4f} {r['reps']:6d} {_fmt(r.get('rel_err'), '.2e'):>9s}  "
                  f"{'ok' if r.get('ok') else 'WRONG'}")
        else:
            print(f"  {c:17s} {'error':>10s}  {str(r.get('error', ''))[:110]}")
    rs = "  ".join(f"{k}={_fmt(v, '.3f')}" for k, v in rec["ratios"].items())
    print(f"  ratios: {rs}")
    ts = "  ".join(f"{k}<={t['limit']:.2f}: {t['result']}" for k, t in rec["targets"].items())
    print(f"  targets: {ts}", flush=True)


def print_summary(res: dict):
    print("\nsummary (median ms per call)")
    hdr = (f"  {'case':15s}" + "".join(f"{c:>18s}" for c in CONTESTANTS) +
           f"{'fm/plain':>9s}{'paired':>8s}{'kern/plain':>11s}{'fm/nvm':>8s}  targets")
    print(hdr)
    for rec in res["cases"]:
        line = f"  {rec['name']:15s}"
        for c in CONTESTANTS:
            r = rec["contestants"].get(c, {})
            v = r.get("ms")
            line += f"{(_fmt(v, '.4f') + ('' if r.get('ok') or v is None else '!')):>18s}" if v is not None else \
                f"{'-' if c not in rec['contestants'] else 'error':>18s}"
        line += f"{_fmt(rec['ratios'].get('fm_fused/plain_cufft'), '.3f'):>9s}"
        line += f"{_fmt(rec['ratios'].get('fm_fused/fm_plain (paired)'), '.3f'):>8s}"
        line += f"{_fmt(rec['ratios'].get('fm_fused_kernel/plain_cufft'), '.3f'):>11s}"
        line += f"{_fmt(rec['ratios'].get('fm_fused/nvmath_fused'), '.3f'):>8s}  "
        line += " ".join(t["result"].split()[0] for t in rec["targets"].values())
        print(line)
    print("  (! = result outside tolerance; fm/plain = fm_fused / the fastest plain cuFFT call of fm_plain, "
          "cupy_plain, torch_plain; paired = fm_fused / fm_plain timed in alternating rounds, median of "
          "the per-round ratios; kern/plain = the same for gpu_prolog=\"kernel\"; targets: fm/plain and paired <= 1.10, "
          "fm_fused <= 1.00 x nvmath_fused)")
    pc = res.get("plan_creation")
    if isinstance(pc, dict) and "fm_cold" in pc:
        print(f"\nplan creation ({pc['case']}, s): fm cold {_fmt(pc['fm_cold'].get('fused_plan_s'))}  "
              f"fm warm {_fmt(pc['fm_warm'].get('fused_plan_s'))}  "
              f"fm load-callback cold {_fmt(pc['fm_cold'].get('fused_callback_plan_s'))} "
              f"warm {_fmt(pc['fm_warm'].get('fused_callback_plan_s'))}  "
              f"nvmath compile+plan {_fmt(pc['nvmath'].get('compile_plus_plan_s'))} "
              f"(plan {_fmt(pc['nvmath'].get('plan_s'))})")
        for k in ("fm_cold", "fm_warm", "nvmath"):
            if pc[k].get("error"):
                print(f"  {k}: error: {pc[k]['error'][:200]}")
    ho = res.get("host_overhead")
    if isinstance(ho, dict) and ho.get("sizes"):
        print("\nhost overhead (us per call, median)")
        for n, row in ho["sizes"].items():
            parts = []
            for k, v in row.items():
                if k in ("errors", "c_fft_overhead_gpu"):
                    continue
                parts.append(f"{k}={_fmt(v.get('us'), '.2f')}" if isinstance(v, dict) and "us" in v
                             else f"{k}={v if isinstance(v, str) else 'error'}")
            print(f"  n={n}: " + "  ".join(parts))
            if row.get("errors"):
                for k, e in row["errors"].items():
                    print(f"    {k}: {e[:150]}")


def write_json(res: dict, path: str):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(res, f, indent=1, default=str)
    os.replace(tmp, path)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.plan_child:
        return plan_child(args)
    t_start = time.perf_counter()
    env = Env(dry_run=args.cpu_dry_run)
    reason = env.no_gpu_reason()
    if reason:
        print(f"fft_gpu: no GPU: {reason}; nothing measured")
        return 2 if args.require_gpu else 0
    env.load_rest()
    now = datetime.datetime.now().astimezone()
    host = socket.gethostname().split(".")[0]
    if args.out:
        out_path = args.out
    elif args.cpu_dry_run:
        out_path = os.path.join(tempfile.gettempdir(), f"fft_gpu-dryrun-{now:%Y%m%d}-{host}.json")
    else:
        out_path = os.path.join(REPO_ROOT, "benchmarks", "results", f"fft_gpu-{now:%Y%m%d}-{host}.json")
    res = {
        "benchmark": "fft_gpu",
        "date": now.isoformat(timespec="seconds"),
        "command": " ".join(["benchmarks/fft_gpu.py"] + (sys.argv[1:] if argv is None else list(argv))),
        "machine": machine_info(env),
        "versions": library_versions(env),
        "import_errors": env.errors,
        "settings": {"budget_s": args.budget, "max_seconds": args.max_seconds, "quick": args.quick,
                     "cpu_dry_run": args.cpu_dry_run, "scale": SCALE, "tolerance": TOL[args.dtype], "targets": TARGETS,
                     "dtype": args.dtype,
                     "window": f"real {REAL[args.dtype]}, 1 + 0.5 cos(0.37 i) (flat index i), shape = the "
                               "transformed extents",
                     "stream": "one non-blocking CuPy stream: current for CuPy and (ExternalStream) PyTorch; "
                               "passed as stream= to fusemath (int handle) and nvmath (stream object)",
                     "timing": "CUDA events around k back-to-back calls per repetition; median over repetitions "
                               "(>= 5, until the budget)"},
        "cases": [],
        "plan_creation": None,
        "host_overhead": None,
        "skipped": [],
    }
    m = res["machine"]
    print(f"fft_gpu: {m.get('gpu_name', 'cpu dry run')} on {m['hostname']}; CUDA runtime "
          f"{m.get('cuda_runtime_version', '-')}, cuFFT {m.get('cufft_version', '-')}; "
          f"versions {res['versions']}", flush=True)
    for k, v in env.errors.items():
        print(f"  note: {k}: {v}", flush=True)
    write_json(res, out_path)

    def over():
        return time.perf_counter() - t_start > args.max_seconds

    if not env.dry_run:  # clocks up before the first timed case
        try:
            with env.stream_ctx():
                a = env.xp.ones((4096, 4096), dtype=env.xp.complex64)
                t0 = time.perf_counter()
                while time.perf_counter() - t0 < 1.0:
                    for _ in range(10):
                        env.xp.fft.fft(a)
                    env.sync()
                del a
            env.free_memory()
        except Exception as exc:
            res["warmup_error"] = err(exc)

    for i, case in enumerate(args.case_list):
        if over():
            res["skipped"].append({"case": case[0], "reason": f"--max-seconds {args.max_seconds:g} reached"})
            continue
        t0 = time.perf_counter()
        try:
            rec = run_case(env, case, args, args.seed + i)
        except Exception as exc:
            rec = {"name": case[0], "shape": list(case[1]), "axes": list(case[2]), "error": err(exc),
                   "contestants": {}, "ratios": {}, "targets": {}}
            env.free_memory()
        rec["wall_s"] = time.perf_counter() - t0
        res["cases"].append(rec)
        if "error" in rec:
            print(f"\n{case[0]}: error: {rec['error']}", flush=True)
        else:
            print_case_table(rec)
        write_json(res, out_path)

    if args.skip_plan_creation:
        res["plan_creation"] = {"skipped": "--skip-plan-creation"}
    elif over():
        res["plan_creation"] = {"skipped": f"--max-seconds {args.max_seconds:g} reached"}
        res["skipped"].append({"section": "plan_creation", "reason": "--max-seconds"})
    else:
        t0 = time.perf_counter()
        try:
            res["plan_creation"] = run_plan_creation(env, args)
        except Exception as exc:
            res["plan_creation"] = {"error": err(exc)}
        print(f"\nplan creation: done ({time.perf_counter() - t0:.0f} s)", flush=True)
        write_json(res, out_path)

    if args.skip_host_overhead:
        res["host_overhead"] = {"skipped": "--skip-host-overhead"}
    elif over():
        res["host_overhead"] = {"skipped": f"--max-seconds {args.max_seconds:g} reached"}
        res["skipped"].append({"section": "host_overhead", "reason": "--max-seconds"})
    else:
        t0 = time.perf_counter()
        try:
            res["host_overhead"] = run_host_overhead(env, args)
        except Exception as exc:
            res["host_overhead"] = {"error": err(exc)}
        print(f"host overhead: done ({time.perf_counter() - t0:.0f} s)", flush=True)

    res["wall_s"] = time.perf_counter() - t_start
    write_json(res, out_path)
    print_summary(res)
    print(f"\nwrote {out_path} ({res['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
