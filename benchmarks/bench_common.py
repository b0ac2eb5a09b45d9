"""Helpers the benchmark scripts share (they run as `python benchmarks/<name>.py`, so this folder is on
sys.path). Imports nothing heavy: matmul_cpu.py sets thread variables before NumPy loads."""
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def err(exc: BaseException) -> str:
    """An exception as one line of at most ~600 characters, for the JSON."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) < 600 else text[:600] + " ..."


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine(gpu: bool = False) -> dict:
    """hostname, CPU model, cores, platform, Python; with gpu, nvidia-smi's name / driver / clock / power limit."""
    m = {"hostname": socket.gethostname(), "cpu_model": cpu_model(), "cores": len(os.sched_getaffinity(0)),
         "platform": platform.platform(), "python": sys.version.split()[0]}
    if gpu:
        try:
            q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,power.limit",
                                "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout
            m["nvidia_smi"] = dict(zip(("name", "driver_version", "clocks_max_sm", "power_limit"),
                                       (x.strip() for x in q.splitlines()[0].split(","))))
        except Exception as exc:
            m["nvidia_smi"] = {"error": err(exc)}
    return m


def versions(*dists) -> dict:
    """The installed versions of the given distributions."""
    from importlib import metadata
    out = {}
    for d in dists:
        try:
            out[d] = metadata.version(d)
        except Exception:
            pass
    return out


def command_line() -> str:
    return " ".join([os.path.relpath(os.path.abspath(sys.argv[0]), REPO_ROOT)] + sys.argv[1:])


def paired(xs, ys) -> float:
    """Median over rounds of the per-round ratio x / y (both timed next to each other in each round)."""
    return statistics.median(x / y for x, y in zip(xs, ys) if y > 0)


def write_json(path: str, obj) -> None:
    """Written whole or not at all (a kill mid-write keeps the previous file)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f, indent=1, default=str)
        f.write("\n")
    os.replace(path + ".tmp", path)


def c_program(name: str):
    """-> (path of the C baseline build/benchmarks/<name>, "") or (None, how to build it)."""
    exe = os.path.join(REPO_ROOT, "build", "benchmarks", name)
    if os.path.exists(exe):
        return exe, ""
    return None, (f"{exe} not found: cmake -S . -B build -DFUSEMATH_BUILD_BENCHMARKS=ON && cmake --build build "
                  f"--target {name.split('.')[0]} (the GPU baselines need the CUDA toolkit)")


def bursts(fn, calls: int, n: int, sync=lambda: None) -> list:
    """Seconds per call in each of n bursts of `calls` calls, each burst ended by sync()."""
    per = []
    for _ in range(n):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        per.append((time.perf_counter() - t0) / calls)
    return per


def run_json(cmd, timeout: float = 300.0):
    """Run a C baseline: the JSON object it prints (with its exit status), or {"error": ...}."""
    try:
        p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)
        return dict(json.loads(p.stdout), exit_status=p.returncode)
    except (OSError, subprocess.SubprocessError, ValueError, TypeError) as exc:
        return {"error": f"{err(exc)}; {(p.stderr or p.stdout)[-400:] if 'p' in locals() else ''}"}
