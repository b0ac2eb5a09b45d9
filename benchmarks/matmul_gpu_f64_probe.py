"""matmul_gpu_f64_probe.py: fp64 products on the GPU, fusemath next to torch, on random data.

torch ``a @ b`` (cuBLAS) against fusemath's plain plan and its bias+relu plan (default and
autotuned), and torch's unfused ``relu(addmm(bias, a, b))``, for 8192^3, 8192x8192x1024,
16384x4096x512 and 1024^3: 8 rounds, the methods timed back to back in each (order reversed
every other round), CUDA events, ~0.25 s of calls per method and round; ratios are paired
(median over rounds of the per-round ratio), because this GPU's fp64 clock moves by up to 25%
between rounds. With $OUT set it writes $OUT/matmul_gpu_f64_probe.json.

    python benchmarks/matmul_gpu_f64_probe.py
"""
import json
import os
import statistics
import time

import torch

import fusemath as fm

dev = torch.device("cuda")
s = torch.cuda.Stream()
res = []
for (m, n, k) in [(8192, 8192, 8192), (8192, 8192, 1024), (16384, 4096, 512), (1024, 1024, 1024)]:
    g = torch.Generator(device=dev).manual_seed(0)
    a = torch.rand(m, k, device=dev, dtype=torch.float64, generator=g) - 0.5
    b = torch.rand(k, n, device=dev, dtype=torch.float64, generator=g) - 0.5
    bias = torch.rand(n, device=dev, dtype=torch.float64, generator=g)
    d0 = torch.empty(m, n, device=dev, dtype=torch.float64)
    d1, d2, d3 = torch.empty_like(d0), torch.empty_like(d0), torch.empty_like(d0)
    plain = fm.Matmul(a, b); plain.plan()
    fused = fm.Matmul(a, b); fused.plan(epilogue="relu", bias=bias)
    tuned = fm.Matmul(a, b); tuned.plan(epilogue="relu", bias=bias); tuned.autotune()
    tplain = fm.Matmul(a, b); tplain.plan(); tplain.autotune()
    meth = {
        "torch_mm": lambda: torch.matmul(a, b, out=d0),
        "fm_plain": lambda: plain.execute(out=d1, stream=s),
        "fm_plain_tuned": lambda: tplain.execute(out=d1, stream=s),
        "fm_fused": lambda: fused.execute(out=d2, stream=s),
        "fm_fused_tuned": lambda: tuned.execute(out=d3, stream=s),
        "torch_unfused": lambda: torch.relu_(torch.addmm(bias, a, b)),
    }
    reps = max(3, int(0.25 / max(2 * m * n * k / 50e12, 1e-5)))
    reps = min(reps, 500)
    t = {x: [] for x in meth}
    with torch.cuda.stream(s):
        for f in meth.values():
            f(); f()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for r in range(8):
            for name in (list(meth) if r % 2 == 0 else list(meth)[::-1]):
                e0.record(s)
                for _ in range(reps):
                    meth[name]()
                e1.record(s)
                e1.synchronize()
                t[name].append(e0.elapsed_time(e1) / reps)
    pr = lambda x, y: statistics.median(p / q for p, q in zip(t[x], t[y]))
    row = {"mnk": [m, n, k], "ms": {x: statistics.median(v) for x, v in t.items()},
           "fm_plain/torch": pr("fm_plain", "torch_mm"), "fm_plain_tuned/torch": pr("fm_plain_tuned", "torch_mm"),
           "fused/torch": pr("fm_fused", "torch_mm"), "fused_tuned/torch": pr("fm_fused_tuned", "torch_mm"),
           "describe": {"plain": plain.describe(), "plain_tuned": tplain.describe(), "fused": fused.describe(),
                        "fused_tuned": tuned.describe()}}
    res.append(row)
    print(json.dumps(row), flush=True)
if os.environ.get("OUT"):
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__, "command": "benchmarks/matmul_gpu_f64_probe.py"}
    with open(os.path.join(os.environ["OUT"], "matmul_gpu_f64_probe.json"), "w") as fh:
        json.dump({"meta": meta, "results": res}, fh, indent=1)
