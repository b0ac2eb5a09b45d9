"""Where the host time of a small GPU matmul goes, piece by piece (torch tensors, 64x64 f32).

Each line is the median over 300 bursts of 20 calls of the per-call host time (the
device is drained between bursts, so launches never wait for a full queue), all on one
created torch.cuda.Stream (as benchmarks/matmul_gpu.py; the legacy default stream costs more). Pieces that
launch nothing (attribute reads, allocation from torch's caching allocator) are what the
stateless fusemath.matmul pays on top of the library call. Prints a table and writes JSON
to --out. Run on the GPU machine: python benchmarks/overhead_probe.py --out probe.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import time


def per_call_us(fn, sync, bursts=300, burst=20):
    for _ in range(50):
        fn()
    sync()
    samples = []
    for _ in range(bursts):
        t0 = time.perf_counter()
        for _ in range(burst):
            fn()
        samples.append((time.perf_counter() - t0) / burst * 1e6)
        sync()
    return statistics.median(samples)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None)
    p.add_argument("--n", type=int, default=64)
    args = p.parse_args()
    import torch

    import fusemath

    if not torch.cuda.is_available() or fusemath.cuda_device_count() == 0:
        print("overhead_probe: no GPU; nothing measured")
        return 0
    n = args.n
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    d = torch.empty(n, n, device="cuda")
    bias = torch.randn(n, device="cuda")
    dev = torch.device("cuda", 0)
    sync = torch.cuda.synchronize
    mm = fusemath.Matmul(a, b)
    mm.plan()
    from fusemath import _fusemath as C
    from fusemath._arrays import lib_of
    from fusemath._options import AUTO_DEFAULTS

    idx = lib_of(a).index
    ex = tuple(AUTO_DEFAULTS)
    stream = torch.cuda.Stream()
    sh = stream.cuda_stream
    pieces = {
        "tensor.dtype": lambda: a.dtype,
        "tensor.get_device()": lambda: a.get_device(),
        "tensor.is_cuda": lambda: a.is_cuda,
        "tensor.data_ptr()": lambda: a.data_ptr(),
        "tensor.shape": lambda: a.shape,
        "tensor.stride()": lambda: a.stride(),
        "tensor.is_neg()": lambda: a.is_neg(),
        "tensor.is_conj()": lambda: a.is_conj(),
        "torch.empty(shape, dtype=, device=torch.device)": lambda: torch.empty((n, n), dtype=torch.float32, device=dev),
        "torch.empty(shape, dtype=, device=int)": lambda: torch.empty((n, n), dtype=torch.float32, device=0),
        "tensor.new_empty(shape)": lambda: a.new_empty((n, n)),
        "torch.empty_like(a)": lambda: torch.empty_like(a),
        "torch._C._cuda_getCurrentRawStream(0)": lambda: torch._C._cuda_getCurrentRawStream(0),
        "torch a @ b": lambda: a @ b,
        "torch.matmul(a, b, out=d)": lambda: torch.matmul(a, b, out=d),
        "fusemath Matmul.execute(out=d)": lambda: mm.execute(out=d),
        "fusemath Matmul.execute()": lambda: mm.execute(),
        "fusemath.matmul(a, b)": lambda: fusemath.matmul(a, b),
        "fusemath.matmul(a, b, out=d)": lambda: fusemath.matmul(a, b, out=d),
        "_fusemath.array_matmul(..., out=d) (no Python wrapper)": lambda: C.array_matmul(
            idx, a, b, None, None, None, None, d, 1.0, 0.0, 0, *ex, None, None, None, None),
        "_fusemath.array_matmul(...) allocating (no Python wrapper)": lambda: C.array_matmul(
            idx, a, b, None, None, None, None, None, 1.0, 0.0, 0, *ex, None, None, None, None),
        "_fusemath.array_matmul(..., out=d, stream=int)": lambda: C.array_matmul(
            idx, a, b, None, None, None, None, d, 1.0, 0.0, 0, *ex, None, sh, None, None),
        "fusemath.matmul(a, b, bias=bias, epilogue='relu')": lambda: fusemath.matmul(a, b, bias=bias, epilogue="relu"),
    }
    res = {}
    with torch.cuda.stream(stream):  # a created stream, as matmul_gpu.py (the legacy default stream costs more)
        for name, fn in pieces.items():
            res[name] = per_call_us(fn, sync)
            print(f"{name:55s} {res[name]:8.2f} us")
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "fusemath": fusemath.__version__,
        "n": n,
        "dlpack_c_api": bool(C.lib_uses_dlpack_c_api(idx)),  # FUSEMATH_DLPACK_C_API=0 turns it off
        "method": "median over 300 bursts of 20 calls, device drained between bursts, on a created stream",
    }
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "us_per_call": res}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
