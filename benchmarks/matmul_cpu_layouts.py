"""matmul_cpu_layouts.py: where the CPU matmul's time goes, layout by layout.

For each case, side by side in one process and paired (7 rounds; in each round every method
gets a 0.2 s pause so the other thread pools go to sleep, a warm-up, then timed calls; the
method order reverses every other round): NumPy's plain `a @ b`; fusemath's fused bias+relu
with the heuristic plan and with each forced tile grid (`panel_rows`); OpenBLAS threading the
whole GEMM (`cpu_strategy="blas_threads"`) fused and plain. Prints the median ms and the
median over rounds of each method's per-round ratio to NumPy's `a @ b`.

    python benchmarks/matmul_cpu_layouts.py [threads] [f64:1024x1024x1024,f64:16384x512x128,...]

With $OUT set it writes $OUT/matmul_cpu_layouts.json. Run it under
`OPENBLAS_THREAD_TIMEOUT=4` too to see what OpenBLAS's spinning workers cost the passes
(the variable is read when OpenBLAS loads, so set it in the environment).
"""
import datetime
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

import fusemath

thr = int(sys.argv[1]) if len(sys.argv) > 1 else os.cpu_count()
fusemath.set_num_threads(thr)
cases = ["f64:1024x1024x1024", "f64:2048x2048x2048", "f64:16384x512x128", "f32:16384x512x128"]
if len(sys.argv) > 2:
    cases = sys.argv[2].split(",")
ROUNDS, PAUSE, BUDGET = 7, 0.2, 0.25


def timed(fn, reps, warm):
    for _ in range(warm):
        fn()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def run_case(spec):
    dt, dims = spec.split(":")
    m, n, k = map(int, dims.split("x"))
    rng = np.random.default_rng(7)
    a = rng.standard_normal((m, k)).astype(dt.replace("f", "float"))
    b = rng.standard_normal((k, n)).astype(a.dtype)
    bias = rng.standard_normal(n).astype(a.dtype)
    ref = np.maximum(a @ b + bias, 0)
    methods, plans = {"np a@b": lambda: a @ b}, {}

    def add(name, fused, **opts):
        mm = fusemath.Matmul(a, b, options=opts or None)
        mm.plan(epilogue="bias+relu" if fused else None, bias=bias if fused else None)
        got = mm.execute()
        want = ref if fused else a @ b
        err = float(np.max(np.abs(got - want)) / (np.max(np.abs(want)) or 1))
        if err > (1e-4 if dt == "f32" else 1e-10):
            raise SystemExit(f"{spec} {name}: relative error {err:.2e}")
        plans[name] = mm.describe()
        methods[name] = mm.execute

    add("fm fused auto", True)
    add("fm plain auto", False)
    seen = {plans["fm fused auto"].split(" panel=")[-1].split()[0]} if " panel=" in plans["fm fused auto"] else set()
    for rows in (64, 128, 256, 512, 1024):
        if rows > m:
            continue
        mm = fusemath.Matmul(a, b, options={"panel_rows": rows})
        mm.plan(epilogue="bias+relu", bias=bias)
        grid = mm.describe().split(" panel=")[-1].split()[0]
        if grid in seen:
            continue
        seen.add(grid)
        add(f"fm fused tiles {grid}", True, panel_rows=rows)
    add("fm fused blas_threads", True, cpu_strategy="blas_threads")
    add("fm plain blas_threads", False, cpu_strategy="blas_threads")

    est = {}
    for name, fn in methods.items():
        time.sleep(PAUSE)
        fn()
        t0 = time.perf_counter()
        fn()
        est[name] = time.perf_counter() - t0
    per_round = {name: [] for name in methods}
    names = list(methods)
    for r in range(ROUNDS):
        for name in (names if r % 2 == 0 else names[::-1]):
            t = max(est[name], 1e-6)
            reps = int(min(150, max(3, BUDGET / ROUNDS / t)))
            time.sleep(PAUSE)
            per_round[name].append(statistics.median(timed(methods[name], reps, max(2, min(10, int(0.02 / t))))))
    base = per_round["np a@b"]
    rows = []
    for name in names:
        med = statistics.median(per_round[name])
        ratio = statistics.median(x / y for x, y in zip(per_round[name], base))
        rows.append({"method": name, "median_ms": med * 1e3, "over_np_paired": ratio, "plan": plans.get(name)})
    return {"case": spec, "m": m, "n": n, "k": k, "dtype": dt, "methods": rows}


def main():
    res = {"benchmark": "matmul_cpu_layouts", "date": datetime.datetime.now().isoformat(timespec="seconds"),
           "machine": {"host": platform.node(), "cpu_count": os.cpu_count(), "threads": thr,
                       "OPENBLAS_THREAD_TIMEOUT": os.environ.get("OPENBLAS_THREAD_TIMEOUT")},
           "numpy": np.__version__, "cases": []}
    print(f"threads {thr}, OPENBLAS_THREAD_TIMEOUT={os.environ.get('OPENBLAS_THREAD_TIMEOUT')}")
    for spec in cases:
        c = run_case(spec)
        res["cases"].append(c)
        print(f"\n{spec}")
        for r in c["methods"]:
            print(f"  {r['method']:34} {r['median_ms']:9.3f} ms  /np {r['over_np_paired']:6.3f}")
        sys.stdout.flush()
    out = os.environ.get("OUT")
    if out:
        tag = os.environ.get("LAYOUTS_TAG", "")
        with open(os.path.join(out, f"matmul_cpu_layouts{tag}.json"), "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
