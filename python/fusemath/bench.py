"""CPU-vs-GPU crossover sweep: ``python -m fusemath.bench`` (what ``make run`` runs).

Times ``relu(a @ b + bias)`` through fusemath (planned :class:`fusemath.Matmul`, fused
bias+relu epilogue), float32, square n = 64, 128, ..., 4096, on:

* ``cpu``            NumPy data, ``execution="cpu"``;
* ``gpu+transfers``  NumPy data, ``execution="cuda"`` (host-to-device copies, the product,
                     the copy back: what a NumPy user pays);
* ``gpu-resident``   CuPy (or PyTorch) data already on the GPU; the result stays there,
                     written by ``execute(out=..., stream=s)`` into a preallocated array
                     on the array library's stream (``execute(stream=s)``, allocating,
                     where the front end has no ``out=``).

Every mode is timed the same way: bursts of back-to-back calls, each burst ended by a
synchronisation (for the GPU modes of the whole device), wall clock per call, median over
bursts. The gpu-resident rows also carry ``event_ms``, the device time per call measured
with CUDA events around the same bursts.

The GPU modes run only when fusemath reports a CUDA device and CuPy or PyTorch can be
imported; otherwise their rows are absent and a line says why. A GPU error never stops
the CPU sweep: it is caught, printed and recorded, and that mode stops.

The same sweep for the FFT (``--ops fft``; both by default): a complex64 2-D FFT of an
n x n array through ``fusemath.fft.fft2`` (stateless calls: the plan comes from the
library's cache), same sizes, modes

* ``cpu``            NumPy data, the library's CPU threads (FFTW);
* ``gpu+transfers``  NumPy data, ``fft2(x, execution="cuda")``: the library copies the
                     input to the GPU and the result back;
* ``gpu-resident``   CuPy (or PyTorch) data on the GPU, ``fft2(x, out=..., stream=s)`` into a
                     preallocated array (allocating where ``out=`` is refused), synced as above.

GFLOP/s of the FFT use the usual 5 N log2 N for N = n * n points; results are checked
against ``numpy.fft.fft2`` (in complex128) at every n.

Prints a table per operation (ms per call and GFLOP/s per mode) and the crossover size per
GPU mode (the smallest n from which the GPU beats the CPU at every larger size compared,
and the first n where it wins), and writes ``matmul_crossover.json`` (the FFT results in
its ``"fft"`` section), ``matmul_crossover.png`` and ``fft_crossover.png`` (matplotlib, if
installed) into ``--out-dir`` (default ``./fusemath-bench``). Every result is checked
against NumPy before it is timed. About 15-30 s on 2 cores for the matmul part.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import socket
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional

import numpy as np

import fusemath

CPU = "cpu"
GPU_XFER = "gpu+transfers"
GPU_RES = "gpu-resident"
GPU_MODES = (GPU_XFER, GPU_RES)


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------
def cpu_model() -> str:
    """The CPU's model name (shared with benchmarks/matmul_cpu.py)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _time_point(fn: Callable[[], object], sync: Callable[[], None], budget: float, events=None) -> Dict[str, float]:
    """Per-call seconds of fn: warm-up, a cost estimate, then bursts of calls each
    followed by one sync; per call = burst time / calls. Median and min over bursts.

    events: optional (record, elapsed_s) pair of the GPU array library: record() marks a
    point on the stream the calls run on, elapsed_s(e0, e1) is the device time between two
    marks. Then each burst is also timed with events (``event_median_s``: device time per
    call, host gaps included); the wall clock (``median_s``) stays the primary figure."""
    fn()
    sync()  # first call: planning, library initialisation, page faults
    t0 = time.perf_counter()
    fn()
    sync()
    est = max(time.perf_counter() - t0, 1e-7)
    if est * 3 >= budget:
        bursts, calls = 3, 1
    else:
        bursts = 5
        calls = int(max(1, min(2000, budget / (bursts * est))))
    per, per_ev = [], []
    pc = time.perf_counter
    for _ in range(bursts):
        if events is not None:
            e0 = events[0]()
        t0 = pc()
        for _ in range(calls):
            fn()
        if events is not None:
            e1 = events[0]()
        sync()
        per.append((pc() - t0) / calls)
        if events is not None:
            per_ev.append(events[1](e0, e1) / calls)
    res = {"median_s": statistics.median(per), "min_s": min(per), "bursts": bursts, "calls_per_burst": calls}
    if per_ev:
        res["event_median_s"] = statistics.median(per_ev)
    return res


def _no_sync() -> None:
    pass


def _check(name: str, got: np.ndarray, ref: np.ndarray, k: int) -> None:
    """Raise AssertionError unless got matches NumPy's result within f32 rounding."""
    eps = float(np.finfo(np.float32).eps)
    atol, rtol = 32.0 * eps * k, 1e-4
    if got.shape != ref.shape:
        raise AssertionError(f"{name}: result shape {got.shape}, expected {ref.shape}")
    if not np.allclose(got, ref, rtol=rtol, atol=atol):
        err = float(np.max(np.abs(got.astype(np.float64) - ref)))
        raise AssertionError(f"{name}: WRONG RESULT (max abs error {err:.3g} > {atol:.3g})")


class _GpuLib:
    """The GPU array library used for the gpu-resident mode (CuPy first, then PyTorch).

    It owns one CUDA stream (a blocking one: it orders itself after uploads made on the
    legacy default stream) that is passed to ``Matmul.execute(stream=...)``; ``sync()``
    synchronizes the whole device, so the timing holds whichever stream the library uses."""

    def __init__(self):
        self.name = None
        self.version = None
        self.error = None
        self._mod = None
        self.stream = None
        self.stream_handle = None
        self.device_name = None
        errors = []
        try:
            import cupy

            if cupy.cuda.runtime.getDeviceCount() < 1:
                raise RuntimeError("no CUDA device")
            self.stream = cupy.cuda.Stream()
            self.stream_handle = int(self.stream.ptr)
            self._mod, self.name, self.version = cupy, "cupy", cupy.__version__
            self.device_name = self._device_name()
            return
        except Exception as exc:  # ImportError, or a CUDA error while importing
            errors.append(f"cupy: {exc}")
        try:
            import torch

            if not torch.cuda.is_available():
                raise RuntimeError("torch.cuda.is_available() is False")
            self.stream = torch.cuda.Stream()
            self.stream_handle = int(self.stream.cuda_stream)
            self._mod, self.name, self.version = torch, "torch", torch.__version__
            self.device_name = self._device_name()
            return
        except Exception as exc:
            errors.append(f"torch: {exc}")
        self.error = "; ".join(errors)

    def _device_name(self) -> Optional[str]:
        try:
            if self.name == "cupy":
                name = self._mod.cuda.runtime.getDeviceProperties(0)["name"]
                return name.decode() if isinstance(name, bytes) else str(name)
            return self._mod.cuda.get_device_name(0)
        except Exception:
            return None

    def to_device(self, x: np.ndarray):
        if self.name == "cupy":
            d = self._mod.asarray(x)
        else:
            d = self._mod.from_numpy(x).cuda()
        self.sync()  # uploaded before any stream uses it
        return d

    def empty_like(self, x):
        return self._mod.empty_like(x)

    def to_numpy(self, x) -> np.ndarray:
        if isinstance(x, np.ndarray):
            return x
        if self.name == "cupy":
            return self._mod.asnumpy(x)
        return x.detach().cpu().numpy()

    def sync(self) -> None:
        if self.name == "cupy":
            self._mod.cuda.Device().synchronize()
        else:
            self._mod.cuda.synchronize()

    def events(self):
        """(record, elapsed_s) for _time_point, on this library's stream."""
        mod, stream = self._mod, self.stream
        if self.name == "cupy":
            def record():
                ev = mod.cuda.Event()
                ev.record(stream)
                return ev

            def elapsed(e0, e1):
                e1.synchronize()
                return mod.cuda.get_elapsed_time(e0, e1) * 1e-3
        else:
            def record():
                ev = mod.cuda.Event(enable_timing=True)
                ev.record(stream)
                return ev

            def elapsed(e0, e1):
                e1.synchronize()
                return e0.elapsed_time(e1) * 1e-3
        return record, elapsed


# ---------------------------------------------------------------------------
# Sweep
# ---------------------------------------------------------------------------
def _budget(n: int, base: float) -> float:
    """Seconds of timed calls per point: more for small n (cheap, noisy), less for big."""
    return base if n <= 1024 else base * 0.75


def _resident_call(mm, out, stream: int):
    """-> (zero-argument call, array the result lands in or None, description):
    execute(out=out, stream=stream) when the front end takes out=, else
    execute(stream=stream) (a new result per call, returned by the call)."""
    try:
        mm.execute(out=out, stream=stream)
    except TypeError as exc:
        if "out" not in str(exc) or "keyword" not in str(exc):
            raise
        return (lambda: mm.execute(stream=stream)), None, f"execute(stream=s), allocating (no out=: {exc})"
    return (lambda: mm.execute(out=out, stream=stream)), out, "execute(out=preallocated, stream=s)"


def gpu_setup(want_gpu: bool):
    """-> (gpu_info dict, _GpuLib or None): whether the GPU modes run, and why not."""
    gpu_info: dict = {"cuda_device_count": 0, "array_library": None, "enabled": False, "note": None}
    gpulib = None
    try:
        ndev = fusemath.cuda_device_count()
    except Exception as exc:  # never let a GPU probe break the CPU sweep
        ndev = 0
        gpu_info["note"] = f"fusemath.cuda_device_count() failed: {exc!r}"
    gpu_info["cuda_device_count"] = ndev
    if not want_gpu:
        gpu_info["note"] = "GPU modes disabled (--cpu-only)"
    elif ndev <= 0:
        gpu_info["note"] = gpu_info["note"] or "fusemath.cuda_device_count() = 0 (no CUDA build, driver or GPU)"
    else:
        gpulib = _GpuLib()
        if gpulib.name is None:
            gpu_info["note"] = f"{ndev} CUDA device(s), but neither CuPy nor PyTorch is usable ({gpulib.error})"
            gpulib = None
        else:
            gpu_info.update(enabled=True, array_library=f"{gpulib.name} {gpulib.version}",
                            device_name=gpulib.device_name)
    return gpu_info, gpulib


def run_sweep(sizes: List[int], budget: float, seed: int, want_gpu: bool, log=print, gpu=None) -> dict:
    """The matmul sweep. gpu: a gpu_setup() result to share between sweeps (None: probe here)."""
    rows: Dict[str, List[dict]] = {CPU: [], GPU_XFER: [], GPU_RES: []}
    errors: Dict[str, Optional[str]] = {CPU: None, GPU_XFER: None, GPU_RES: None}
    if gpu is None:
        gpu = gpu_setup(want_gpu)
    gpu_info, gpulib = dict(gpu[0]), gpu[1]
    modes = [CPU] + ([GPU_XFER, GPU_RES] if gpulib is not None else [])

    rng = np.random.default_rng(seed)
    for n in sizes:
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        bias = rng.standard_normal(n, dtype=np.float32)
        ref = np.maximum(a @ b + bias, 0)
        flops = 2.0 * n * n * n
        # NumPy's OpenBLAS threads spin for ~0.1-0.15 s after a product and slow down
        # fusemath's own threads meanwhile (measured 3-6x on the first calls): let them sleep.
        time.sleep(0.3)
        for mode in modes:
            if errors[mode] is not None:
                continue  # this mode failed at a smaller n: it stays off
            mm = None
            try:
                if mode == CPU:
                    mm = fusemath.Matmul(a, b, options={"execution": "cpu"})
                    mm.plan(epilogue="relu", bias=bias)
                    sync, to_np = _no_sync, np.asarray
                elif mode == GPU_XFER:
                    mm = fusemath.Matmul(a, b, options={"execution": "cuda"})
                    mm.plan(epilogue="relu", bias=bias)
                    sync, to_np = _no_sync, gpulib.to_numpy  # result comes back as NumPy
                else:
                    da, db, dbias = gpulib.to_device(a), gpulib.to_device(b), gpulib.to_device(bias)
                    mm = fusemath.Matmul(da, db)
                    mm.plan(epilogue="relu", bias=dbias)
                    sync, to_np = gpulib.sync, gpulib.to_numpy
                call, events = mm.execute, None
                if mode == GPU_RES:
                    # the result stays on the GPU, written into a preallocated array on the
                    # library's stream (allocating per call where execute(out=) is missing)
                    events = gpulib.events()
                    call, out_buf, how = _resident_call(mm, gpulib.empty_like(da), gpulib.stream_handle)
                    gpu_info["gpu_resident_call"] = how
                    out = call()
                    if out_buf is not None:
                        out = out_buf
                else:
                    out = mm.execute()
                sync()
                _check(f"{mode} n={n}", to_np(out), ref, n)
                del out
                t = _time_point(call, sync, _budget(n, budget), events)
                row = {"n": n, "ms": t["median_s"] * 1e3, "min_ms": t["min_s"] * 1e3,
                       "gflops": flops / t["median_s"] / 1e9, "bursts": t["bursts"],
                       "calls_per_burst": t["calls_per_burst"], "plan": mm.describe()}
                if "event_median_s" in t:
                    row["event_ms"] = t["event_median_s"] * 1e3
                rows[mode].append(row)
            except Exception as exc:
                msg = f"n={n}: {type(exc).__name__}: {exc}"
                errors[mode] = msg
                log(f"  {mode}: error, mode stopped ({msg})")
            finally:
                if mm is not None:
                    try:
                        mm.free()
                    except Exception:
                        pass
        cells = []
        for mode in modes:
            r = next((r for r in rows[mode] if r["n"] == n), None)
            cells.append(f"{mode} {r['ms']:.3f} ms" if r else f"{mode} -")
        log(f"  n={n:5d}: " + ", ".join(cells), flush=True)
        del a, b, bias, ref
    return {"rows": rows, "errors": errors, "gpu": gpu_info, "modes": modes}


# ---------------------------------------------------------------------------
# FFT sweep
# ---------------------------------------------------------------------------
def _check_fft(name: str, got: np.ndarray, ref: np.ndarray, n: int) -> None:
    """Raise AssertionError unless got matches numpy.fft.fft2 (complex128) within c64 rounding:
    an FFT's error grows like eps * log2(N) * |x| (entries of standard normal data are ~n)."""
    eps = float(np.finfo(np.float32).eps)
    atol, rtol = 8.0 * eps * n * max(1.0, np.log2(float(n) * n)), 1e-4
    if got.shape != ref.shape:
        raise AssertionError(f"{name}: result shape {got.shape}, expected {ref.shape}")
    if got.dtype != np.complex64:
        raise AssertionError(f"{name}: result dtype {got.dtype}, expected complex64")
    if not np.allclose(got, ref, rtol=rtol, atol=atol):
        err = float(np.max(np.abs(got.astype(np.complex128) - ref)))
        raise AssertionError(f"{name}: WRONG RESULT (max abs error {err:.3g} > {atol:.3g})")


def _resident_fft_call(fft2, dx, out, stream: int):
    """-> (zero-argument call, array the result lands in or None, description): like
    _resident_call, for fusemath.fft.fft2 on GPU data."""
    try:
        fft2(dx, out=out, stream=stream)
    except TypeError as exc:
        if "out" not in str(exc):
            raise
        return (lambda: fft2(dx, stream=stream)), None, f"fft2(x, stream=s), allocating (no out=: {exc})"
    return (lambda: fft2(dx, out=out, stream=stream)), out, "fft2(x, out=preallocated, stream=s)"


def run_fft_sweep(sizes: List[int], budget: float, seed: int, want_gpu: bool, log=print, gpu=None) -> dict:
    """The FFT sweep: complex64 2-D FFT of n x n through fusemath.fft.fft2, per mode."""
    fmfft = fusemath.fft  # the module

    rows: Dict[str, List[dict]] = {CPU: [], GPU_XFER: [], GPU_RES: []}
    errors: Dict[str, Optional[str]] = {CPU: None, GPU_XFER: None, GPU_RES: None}
    if gpu is None:
        gpu = gpu_setup(want_gpu)
    gpu_info, gpulib = dict(gpu[0]), gpu[1]
    modes = [CPU] + ([GPU_XFER, GPU_RES] if gpulib is not None else [])

    rng = np.random.default_rng(seed + 1)
    for n in sizes:
        x = np.empty((n, n), dtype=np.complex64)
        x.real = rng.standard_normal((n, n), dtype=np.float32)
        x.imag = rng.standard_normal((n, n), dtype=np.float32)
        ref = np.fft.fft2(x.astype(np.complex128))
        npts = float(n) * n
        flops = 5.0 * npts * np.log2(npts)
        for mode in modes:
            if errors[mode] is not None:
                continue  # this mode failed at a smaller n: it stays off
            dx = out = out_buf = None
            try:
                events = None
                if mode == CPU:
                    def call(x=x):
                        return fmfft.fft2(x, execution="cpu")
                    sync, to_np = _no_sync, np.asarray
                    out = call()
                elif mode == GPU_XFER:
                    def call(x=x):
                        return fmfft.fft2(x, execution="cuda")  # NumPy in, NumPy out
                    sync, to_np = _no_sync, np.asarray
                    out = call()
                else:
                    dx = gpulib.to_device(x)
                    sync, to_np = gpulib.sync, gpulib.to_numpy
                    events = gpulib.events()
                    call, out_buf, how = _resident_fft_call(fmfft.fft2, dx, gpulib.empty_like(dx),
                                                            gpulib.stream_handle)
                    gpu_info["gpu_resident_call"] = how
                    out = call()
                    if out_buf is not None:
                        out = out_buf
                sync()
                _check_fft(f"fft {mode} n={n}", to_np(out), ref, n)
                del out
                t = _time_point(call, sync, _budget(n, budget), events)
                row = {"n": n, "ms": t["median_s"] * 1e3, "min_ms": t["min_s"] * 1e3,
                       "gflops": flops / t["median_s"] / 1e9, "bursts": t["bursts"],
                       "calls_per_burst": t["calls_per_burst"]}
                if "event_median_s" in t:
                    row["event_ms"] = t["event_median_s"] * 1e3
                rows[mode].append(row)
            except Exception as exc:
                msg = f"n={n}: {type(exc).__name__}: {exc}"
                errors[mode] = msg
                log(f"  fft {mode}: error, mode stopped ({msg})")
            finally:
                del dx, out_buf
        cells = []
        for mode in modes:
            r = next((r for r in rows[mode] if r["n"] == n), None)
            cells.append(f"{mode} {r['ms']:.3f} ms" if r else f"{mode} -")
        log(f"  fft n={n:5d}: " + ", ".join(cells), flush=True)
        del x, ref
    return {"rows": rows, "errors": errors, "gpu": gpu_info, "modes": modes,
            "problem": "Y = fft2(X), complex64, X n x n; fusemath.fft.fft2 per call (cached plan)",
            "sizes": sizes}


def crossover(rows: Dict[str, List[dict]], mode: str) -> dict:
    """Smallest n where mode beats the CPU, and the smallest n from which it always does."""
    cpu = {r["n"]: r["ms"] for r in rows[CPU]}
    pairs = [(r["n"], r["ms"], cpu[r["n"]]) for r in rows[mode] if r["n"] in cpu]
    if not pairs:
        return {"first_n": None, "from_n_on": None, "compared": 0}
    wins = [n for n, g, c in pairs if g < c]
    from_on = None
    for n, g, c in reversed(pairs):
        if g < c:
            from_on = n
        else:
            break
    return {"first_n": wins[0] if wins else None, "from_n_on": from_on, "compared": len(pairs)}


# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------
def format_table(res: dict) -> str:
    modes = res["modes"]
    sizes = sorted({r["n"] for m in modes for r in res["rows"][m]} | {r["n"] for r in res["rows"][CPU]})
    head = f"{'n':>6} |" + "|".join(f" {m + ' ms':>19} {'GFLOP/s':>8} " for m in modes)
    lines = [head, "-" * len(head)]
    for n in sizes:
        cells = []
        for m in modes:
            r = next((r for r in res["rows"][m] if r["n"] == n), None)
            cells.append(f" {r['ms']:19.4f} {r['gflops']:8.1f} " if r else f" {'-':>19} {'-':>8} ")
        lines.append(f"{n:6d} |" + "|".join(cells))
    return "\n".join(lines)


def write_plot(res: dict, path: str, meta: Optional[dict] = None, what: str = "matmul + bias + relu, f32",
               xlabel: str = "n (square n x n x n)") -> Optional[str]:
    """PNG with time and GFLOP/s against n, log-log. Returns an error text or None.
    meta: the run's metadata where res has none (the "fft" section)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:
        return f"matplotlib is not available ({exc}): no plot"
    fig, (ax_t, ax_g) = plt.subplots(1, 2, figsize=(12, 4.8))
    styles = {CPU: ("o-", "tab:blue"), GPU_XFER: ("s--", "tab:orange"), GPU_RES: ("^-", "tab:green")}
    for mode in res["modes"]:
        rs = res["rows"][mode]
        if not rs:
            continue
        ns = [r["n"] for r in rs]
        st, col = styles[mode]
        ax_t.plot(ns, [r["ms"] for r in rs], st, color=col, label=mode)
        ax_g.plot(ns, [r["gflops"] for r in rs], st, color=col, label=mode)
        if mode in GPU_MODES:
            x = res["crossover"].get(mode, {}).get("first_n")
            if x:
                for ax in (ax_t, ax_g):
                    ax.axvline(x, color=col, alpha=0.3, lw=1)
    for ax, ylabel in ((ax_t, "ms per call"), (ax_g, "GFLOP/s")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    m = res.get("meta") or meta
    fig.suptitle(f"fusemath {what} - {m['machine']['cpu_model']}, "
                 f"{m['threads']} CPU threads" + (f"; {res['gpu'].get('device_name') or 'GPU'}"
                                                  if res["gpu"]["enabled"] else " (no GPU)"), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def crossover_lines(res: dict, label: str = "crossover") -> List[str]:
    """The crossover line per GPU mode (or why there is none) and the errors, for printing."""
    lines = []
    if not res["gpu"]["enabled"]:
        lines.append(f"{label} (smallest n from which the GPU beats the CPU): no GPU")
    else:
        for m in GPU_MODES:
            c = res["crossover"][m]
            if res["errors"][m] and not c["compared"]:
                txt = f"n/a (error: {res['errors'][m]})"
            elif c["first_n"] is None:
                txt = f"none: the CPU was faster for every n compared ({c['compared']} sizes)"
            elif c["from_n_on"] is not None:
                txt = f"n = {c['from_n_on']} (the GPU is faster for every n >= {c['from_n_on']} compared"
                txt += ")" if c["first_n"] == c["from_n_on"] else f"; first win at n = {c['first_n']})"
            else:
                txt = f"none for good: the GPU won at n = {c['first_n']} but not at the largest n compared"
            if res["errors"][m] and c["compared"]:
                txt += f" [mode stopped early: {res['errors'][m]}]"
            lines.append(f"{label} {m:14}: {txt}")
    for m, e in res["errors"].items():
        if e:
            lines.append(f"error in {m}: {e}" if label == "crossover" else f"error in {label.split()[0]} {m}: {e}")
    return lines


OPS = ("matmul", "fft")


def _parse_ops(text: str) -> List[str]:
    ops = [o.strip().lower() for o in text.split(",") if o.strip()]
    bad = [o for o in ops if o not in OPS]
    if bad or not ops:
        raise argparse.ArgumentTypeError(f"--ops takes a comma-separated subset of {','.join(OPS)}, got {text!r}")
    return [o for o in OPS if o in ops]


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fusemath.bench",
                                description="CPU-vs-GPU crossover sweeps of fusemath: fused matmul + bias + relu (f32) "
                                            "and the complex64 2-D FFT.")
    p.add_argument("--out-dir", default=os.path.join(os.getcwd(), "fusemath-bench"),
                   help="directory for matmul_crossover.json / .png and fft_crossover.png "
                        "(default: ./fusemath-bench)")
    p.add_argument("--ops", type=_parse_ops, default=list(OPS),
                   help="operations to sweep, comma-separated: matmul,fft (default: both)")
    p.add_argument("--min-n", type=int, default=64)
    p.add_argument("--max-n", type=int, default=4096)
    p.add_argument("--threads", type=int, default=0, help="fusemath CPU threads (default: the library's default)")
    p.add_argument("--budget", type=float, default=0.4, help="seconds of timed calls per point and mode (default 0.4)")
    p.add_argument("--cpu-only", action="store_true", help="skip the GPU modes")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.min_n < 1 or args.max_n < args.min_n:
        p.error("need 1 <= --min-n <= --max-n")
    sizes = []
    n = 1
    while n <= args.max_n:
        if n >= args.min_n:
            sizes.append(n)
        n *= 2
    if not sizes:
        p.error(f"no power of 2 between --min-n {args.min_n} and --max-n {args.max_n}")
    if args.threads > 0:
        fusemath.set_num_threads(args.threads)

    t_start = time.perf_counter()
    now = datetime.datetime.now().astimezone()
    meta = {
        "date": now.isoformat(timespec="seconds"),
        "machine": {"hostname": socket.gethostname(), "cpu_model": cpu_model(), "cores": _cores(),
                    "platform": platform.platform(), "python": sys.version.split()[0],
                    "loadavg_at_start": os.getloadavg() if hasattr(os, "getloadavg") else None},
        "fusemath_version": fusemath.__version__,
        "numpy_version": np.__version__,
        "threads": fusemath.get_num_threads(),
        "problem": "D = relu(A @ B + bias), f32, A, B n x n, bias n; fusemath.Matmul planned once, executed repeatedly",
        "sizes": sizes,
        "ops": args.ops,
    }
    print(f"fusemath.bench: {' and '.join(args.ops)}, n = {sizes[0]} .. {sizes[-1]}; "
          f"fusemath {fusemath.__version__}, {meta['machine']['cpu_model']}, {meta['threads']} CPU threads")

    gpu = gpu_setup(not args.cpu_only)  # one probe (and one array library stream) for both sweeps
    if "matmul" in args.ops:
        print("matmul: fused matmul + bias + relu, f32")
        res = run_sweep(sizes, args.budget, args.seed, not args.cpu_only, gpu=gpu)
    else:  # the matmul keys stay, empty
        res = {"rows": {CPU: [], GPU_XFER: [], GPU_RES: []}, "errors": {CPU: None, GPU_XFER: None, GPU_RES: None},
               "gpu": dict(gpu[0]), "modes": [CPU] + ([GPU_XFER, GPU_RES] if gpu[1] is not None else [])}
    res["meta"] = meta
    if not res["gpu"]["enabled"]:
        print(f"no GPU: {res['gpu']['note']}; GPU rows are absent")
    res["crossover"] = {m: crossover(res["rows"], m) for m in GPU_MODES if m in res["modes"]}
    fres = None
    if "fft" in args.ops:
        print("fft: complex64 2-D FFT of n x n, fusemath.fft.fft2")
        fres = run_fft_sweep(sizes, args.budget, args.seed, not args.cpu_only, gpu=gpu)
        fres["crossover"] = {m: crossover(fres["rows"], m) for m in GPU_MODES if m in fres["modes"]}
        res["fft"] = fres

    if "matmul" in args.ops:
        print()
        print("matmul: relu(A @ B + bias), f32, n x n x n")
        print(format_table(res))
        print()
        for line in crossover_lines(res):
            print(line)
    if fres is not None:
        print()
        print("fft: fft2, complex64, n x n (GFLOP/s = 5 N log2 N, N = n*n)")
        print(format_table(fres))
        print()
        for line in crossover_lines(fres, "fft crossover"):
            print(line)

    os.makedirs(args.out_dir, exist_ok=True)
    json_path = os.path.join(args.out_dir, "matmul_crossover.json")
    png_path = os.path.join(args.out_dir, "matmul_crossover.png")
    fft_png_path = os.path.join(args.out_dir, "fft_crossover.png")
    if args.no_plot:
        plot_note = "--no-plot given"
    elif "matmul" not in args.ops:
        plot_note = "matmul not run (--ops)"
    else:
        plot_note = write_plot(res, png_path)
    res["plot"] = None if plot_note else png_path
    res["plot_note"] = plot_note
    if fres is not None:
        fplot_note = "--no-plot given" if args.no_plot else write_plot(
            fres, fft_png_path, meta=meta, what="fft2, complex64", xlabel="n (n x n 2-D FFT)")
        fres["plot"] = None if fplot_note else fft_png_path
        fres["plot_note"] = fplot_note
    res["total_seconds"] = time.perf_counter() - t_start
    with open(json_path, "w") as f:
        json.dump(res, f, indent=1, default=str)
        f.write("\n")
    print(f"\nJSON: {os.path.abspath(json_path)}")
    for what, path, note in (("plot", res["plot"], plot_note),
                             ("fft plot", fres and fres["plot"], fres and fres["plot_note"])):
        if what == "fft plot" and fres is None:
            continue
        print(f"{what}: skipped ({note})" if note else f"{what}: {os.path.abspath(path)}")
    print(f"({res['total_seconds']:.0f} s)")
    failed = bool(res["errors"][CPU]) or bool(fres is not None and fres["errors"][CPU])
    return 1 if failed else 0

if __name__ == "__main__":
    sys.exit(main())
