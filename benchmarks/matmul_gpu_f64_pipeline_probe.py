"""matmul_gpu_f64_pipeline_probe.py: can the fp64 bias+relu pass hide behind the GEMM?

cuBLASLt has no fp64 bias+relu kernel as fast as its plain one, so fusemath runs the plain GEMM
and one elementwise pass over D (fused / plain 1.10-1.26 at k <= 1024). This probe asks whether
splitting D into row blocks and running block i's pass on a second stream while the GEMM of
block i+1 runs hides the pass. CuPy only (cuBLAS GEMM, one ElementwiseKernel), no fusemath:

    plain    cupy.matmul(a, b, out=d)
    seq      plain, then the bias+relu pass on the same stream
    pipeP    P row blocks; GEMM block i on stream 1, its pass on stream 2 after an event

8 rounds, methods back to back in each (order reversed every other round), paired ratios
(median over rounds of per-round ratios). With $OUT set it writes $OUT/f64_pipeline_probe.json.
"""
import json
import os
import statistics
import time

import cupy as cp

pass_kernel = cp.ElementwiseKernel("T bias", "T d", "d = d + bias > (T)0 ? d + bias : (T)0", "fm_probe_bias_relu")


def pipelined(a, b, bias, d, blocks, s1, s2, evs):
    m = a.shape[0]
    step = (m + blocks - 1) // blocks
    for i in range(blocks):
        r0, r1 = i * step, min(m, (i + 1) * step)
        with s1:
            cp.matmul(a[r0:r1], b, out=d[r0:r1])
            evs[i].record(s1)
        s2.wait_event(evs[i])
        with s2:
            pass_kernel(bias, d[r0:r1])
    evs[blocks].record(s2)
    s1.wait_event(evs[blocks])


def main():
    s1, s2 = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    evs = [cp.cuda.Event(block=False, disable_timing=True) for _ in range(17)]
    res = []
    for (m, n, k) in [(8192, 8192, 1024), (16384, 4096, 512), (8192, 8192, 8192), (1024, 1024, 1024)]:
        rs = cp.random.RandomState(0)
        a = rs.random_sample((m, k)) - 0.5
        b = rs.random_sample((k, n)) - 0.5
        bias = rs.random_sample(n)
        d = cp.empty((m, n))
        ref = cp.maximum(a @ b + bias, 0)
        meth = {"plain": lambda: cp.matmul(a, b, out=d)}

        def seq():
            cp.matmul(a, b, out=d)
            pass_kernel(bias, d)
        meth["seq"] = seq
        for p in (2, 4, 8, 16):
            meth[f"pipe{p}"] = (lambda p=p: pipelined(a, b, bias, d, p, s1, s2, evs))
        errs = {}
        for name, f in meth.items():
            if name == "plain":
                continue
            with s1:
                f()
            s1.synchronize()
            errs[name] = float(cp.abs(d - ref).max())
        reps = max(3, min(300, int(0.2 / max(2 * m * n * k / 50e12, 1e-5))))
        t = {x: [] for x in meth}
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        for r in range(8):
            for name in (list(meth) if r % 2 == 0 else list(meth)[::-1]):
                with s1:
                    meth[name]()
                    e0.record(s1)
                    for _ in range(reps):
                        meth[name]()
                    e1.record(s1)
                e1.synchronize()
                t[name].append(cp.cuda.get_elapsed_time(e0, e1) / reps)
        pr = {x: statistics.median(p / q for p, q in zip(t[x], t["plain"])) for x in meth}
        row = {"mnk": [m, n, k], "ms": {x: statistics.median(v) for x, v in t.items()},
               "over_plain": pr, "max_abs_err": errs}
        res.append(row)
        print(f"{m}x{n}x{k}: plain {row['ms']['plain']:.3f} ms | " +
              " ".join(f"{x} {pr[x]:.3f}" for x in meth if x != "plain") +
              " | err " + " ".join(f"{x}={e:.1e}" for x, e in errs.items()), flush=True)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "f64_pipeline_probe.json"), "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": "h200",
                       "results": res}, f, indent=1)


if __name__ == "__main__":
    main()
