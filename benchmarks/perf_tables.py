#!/usr/bin/env python3
"""Writes docs/performance.md from the JSON in benchmarks/results/ (standard library only).

    python3 benchmarks/perf_tables.py           rewrite docs/performance.md
    python3 benchmarks/perf_tables.py --check   exit 1 when docs/performance.md is not what this writes

Per target, machine and case the figure comes from the latest run (JSON "date") that measured that case,
so a short run that repeated a few cases does not hide the others; every row names its run, every table
its machine and the runs' commands. A field a JSON lacks is written "not recorded".
"""
import glob
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS, DOC = os.path.join(ROOT, "benchmarks", "results"), os.path.join(ROOT, "docs", "performance.md")
NR = "not recorded"
# Runs whose JSON has no "command": the command as docs/performance.md recorded it before it was generated.
DEVICE = 'bash benchmarks/device_gpu.sh (step matmulcpu: benchmarks/matmul_cpu.py --machine-tag h200-host {})'
COMMANDS = {
    "matmul_cpu-h200-host-20261201-run18-kernel-auto": DEVICE.format("--sizes 1024,2048,4096 --strategies tiles --budget 0.5"),
    "matmul_cpu-h200-host-20261201-run19-repeat": DEVICE.format("--sizes 1024,2048 --strategies tiles --budget 0.5"),
    "matmul_cpu-h200-host-20261201-run20-short": DEVICE.format(
        "--sizes 1024 --dtypes f64 --budget 0.3 --rounds 6 --strategies tiles"),
    "matmul_cpu-dev-2core-20261201-kernel": ".venv/bin/python benchmarks/matmul_cpu.py --machine-tag dev-2core --strategies tiles",
    "matmul_cpu-dev-2core-20261201-kernel-256": ".venv/bin/python benchmarks/matmul_cpu.py --machine-tag dev-2core "
                                                "--strategies tiles --sizes 256 --no-skinny",
    "matmul_crossover-2026-11-29-h200": 'STEPS="build crossover" bash benchmarks/device_gpu.sh (python -m fusemath.bench, '
                                        "now benchmarks/crossover.py)",
    "fft_crossover-2026-11-30-h200": "python -m fusemath.bench --ops fft (now benchmarks/crossover.py --ops fft)"}
FFT_GPU_ISSUE_CASES = ("1024x1", "4096x4096", "2^20x64", "2^24x4", "2d-4096^2", "3d-512^3")


def load(prefix):
    """[(run name, JSON, date)] of results/<prefix>*.json, oldest first."""
    runs = []
    for path in glob.glob(os.path.join(RESULTS, prefix + "*.json")):
        with open(path) as f:
            d = json.load(f)
        if (d.get("settings") or {}).get("cpu_dry_run"):
            continue  # a check of the script, not a measurement
        date = d.get("date") or d.get("meta", {}).get("date") or NR
        runs.append((os.path.basename(path)[:-5], d, date.replace("T", " ")[:16]))
    return sorted(runs, key=lambda r: r[2])


def latest(runs, rows_of):
    """{(machine, case key): (row, run, date)} from the latest run of each (machine, case)."""
    out = {}
    for name, d, date in runs:
        for key, row in rows_of(name, d):
            out[key] = (row, name, date)
    return out


def f3(v):
    return "-" if v is None else f"{v:.3f}"


def fms(v):
    return "-" if v is None else f"{v:.4g}"


def md(head, rows):
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(map(str, r)) + " |"
                                                                                 for r in rows]) + "\n"


def span(vals):
    vals = [v for v in vals if v is not None]
    return "-" if not vals else f3(vals[0]) if len(vals) == 1 else f"{min(vals):.3f}-{max(vals):.3f}"


def status(items, limit):
    """items: [(label, value)] -> 'met (n of n)' or 'not met: k of n (worst ...)'."""
    items = [(lab, v) for lab, v in items if v is not None]
    bad = [(lab, v) for lab, v in items if v > limit]
    if not items:
        return NR
    if not bad:
        return f"met ({len(items)} of {len(items)})"
    return f"not met: {len(items) - len(bad)} of {len(items)}; " + ", ".join(
        f"{lab} {v:.3f}" if round(v, 3) > limit else f"{lab} {v:.4f}" for lab, v in bad[:4])


def runs_list(sel, runs):
    """The runs a table's rows came from: name, date, command."""
    by = {name: (d, date) for name, d, date in runs}
    names = sorted({r[1] for r in sel}, key=lambda n: by[n][1])
    return "".join(f"- `{n}` ({by[n][1]}): `{by[n][0].get('command') or by[n][0].get('meta', {}).get('command') or COMMANDS.get(n, NR)}`\n"
                   for n in names)


def short(name):
    return re.sub(r"^[a-z_]+-(h200-host|dev-2core|h200)?-?", "", name)


# ---- CPU matmul (issue 2) --------------------------------------------------------------------------
def cpu_machine_line(d):
    m, npy = d.get("machine", {}), d.get("numpy", {})
    isa = (npy.get("config") or {}).get("SIMD Extensions", {}).get("found")
    c = (d.get("host_overhead") or {}).get("c") or {}
    return (f"{m.get('cpu_model', NR)}, {m.get('cores', NR)} cores, {m.get('threads_used', NR)} threads for everyone; "
            f"ISA (NumPy's detection): {', '.join(isa) if isa else NR}; fusemath's OpenBLAS: "
            f"{c.get('openblas_config', NR)}; NumPy's BLAS: {npy.get('blas_name', NR)} {npy.get('blas_version', '')}")


def matmul_cpu(runs):
    def rows_of(name, d):
        tag = d.get("machine", {}).get("tag") or re.match(r"matmul_cpu-(.+?)-\d{8}", name).group(1)
        for c in d.get("cases", []):
            yield (tag, c["dtype"], c["kind"], c["n"], c["label"]), c
        if (d.get("host_overhead") or {}).get("overhead_planned_execute_us") is not None:
            yield (tag, "host"), d["host_overhead"]
    sel = latest(runs, rows_of)
    by = {name: d for name, d, _ in runs}
    text, glance = ["Compared: `fm fused` = planned `fusemath.Matmul(a, b).plan(epilogue=\"relu\", bias=bias)."
                    "execute()` against NumPy's plain `a @ b` and its unfused `np.maximum(a @ b + bias, 0)`, same "
                    "thread count for everyone; ratios are paired (median over rounds of the per-round ratio), below "
                    "1 is faster than the peer. `plan` is what the library chose (the own kernel or cblas tiles); "
                    "`forced tiles` the same fusion with `cpu_strategy=\"tiles\"`. Targets: fused <= 1.05x `a @ b` "
                    "for squares n >= 1024, <= 1.10x for the skinny shapes; planned 64x64 execute <= 2 us above "
                    "the bare `cblas_sgemm`. One run's ratio on the H200 host scatters by several percent around the "
                    "same plan's (design.md, \"Lessons from measurement\").\n"], []
    for tag in sorted({k[0] for k in sel}, key=lambda t: t != "h200-host"):
        keys = sorted((k for k in sel if k[0] == tag and k[1] != "host"), key=lambda k: (k[1], k[2] != "square", k[3]))
        rows, met = [], {"square": [], "skinny": []}
        for k in keys:
            c, run, date = sel[k]
            q = c["ratios"]
            kern = re.search(r"kernel=(\w+)", c.get("plans", {}).get("fm_fused", ""))
            v, t = q.get("fused_over_np_plain_paired"), c.get("target_fused_over_np_plain")
            if t:
                met[c["kind"]].append((f"{c['dtype']} {c['label']}", v))
            rows.append([c["dtype"], c["label"], f3(v), f3(q.get("fused_over_fm_plain_paired")),
                         f3(q.get("unfused_over_np_plain_paired")), f3(q.get("tiles_over_np_plain_paired")),
                         f"kernel ({kern.group(1)})" if kern else "cblas tiles", f"<= {t:.2f}" if t else "-",
                         ("yes" if v <= t else "**no**") if t else "-", f"`{short(run)}`"])
        newest = max((sel[k] for k in keys), key=lambda s: s[2])
        day = newest[2][:10]
        glance += [("2", what, tag, f"{span([v for _, v in met[kind]])} ({day})", status(met[kind], lim))
                   for kind, what, lim in (("square", "CPU fused bias+relu <= 1.05x NumPy `a @ b`, squares n >= 1024", 1.05),
                                           ("skinny", "... <= 1.10x for the skinny shapes", 1.10)) if met[kind]]
        text.append(f"### {tag}\n{cpu_machine_line(by[newest[1]])}\n\n" + md(
            ["dtype", "shape", "fused / a@b", "fused / fm plain", "unfused / a@b", "forced tiles / a@b", "plan",
             "target", "met", "run"], rows))
        h = sel.get((tag, "host"))
        if h:
            ho, run, date = h
            ovh = ho.get("overhead_ns", {})
            cc = (ho.get("c") or {}).get("overhead_ns", {})
            g = lambda key: ovh.get(key) / 1e3 if ovh.get(key) is not None else None  # noqa: E731
            text.append("\nHost overhead, 64x64x64 f32, us per call above the bare `cblas_sgemm`:\n\n" + md(
                ["planned `Matmul.execute()`", "`fm_plan_execute` (C)", "stateless `fusemath.matmul`", "NumPy `a @ b`",
                 "run"], [[f"{ho['overhead_planned_execute_us']:+.2f}",
                           f"{cc['fm_plan_execute_identity_vs_cblas'] / 1e3:+.2f}" if cc else NR,
                           f"{g('fusemath.matmul identity - cblas_sgemm'):+.2f}", f"{g('numpy a @ b - cblas_sgemm'):+.2f}",
                           f"`{short(run)}` ({date})"]]))
            glance.append(("2", "planned 64x64 execute <= 2 us above bare cblas", tag,
                           f"{ho['overhead_planned_execute_us']:+.2f} us ({date[:10]})",
                           "met" if ho["overhead_planned_execute_us"] <= 2.0 else "not met"))
        text.append("\nRuns:\n" + runs_list([sel[k] for k in sel if k[0] == tag], runs))
    return "".join(text), glance


# ---- GPU matmul (issue 3) --------------------------------------------------------------------------
def matmul_gpu(runs, c_runs):
    sel = latest(runs, lambda name, d: (((c["epilogue"], c["dtype"], c["m"], c["n"], c["k"]), c) for c in d["cases"]))
    host = [(r, n, date) for n, d, date in runs if (r := d.get("host_overhead") or {}).get("rows")][-1:]
    if not sel:
        return "No GPU matmul results.\n", []
    last = max(sel.values(), key=lambda s: s[2])
    d = next(dd for n, dd, _ in runs if n == last[1])
    m, v = d["machine"], d.get("versions", {})
    text = ["Compared, on one stream: `fused` = planned `fusemath.Matmul(...).plan(epilogue=..., bias=bias)`, "
            "`execute(out=d, stream=s)`; nvmath-python's planned `Matmul` with its RELU_BIAS / GELU_BIAS epilog; "
            "torch's `_addmm_activation` (cuBLASLt's epilogue); torch's unfused `relu(a @ b + bias)`; plain `a @ b`. "
            "Ratios are fused / peer, paired over trials (below 1: fused is faster). Targets: <= 1.00x nvmath and "
            "addmm_act, <= 1.03x plain, <= 1.00x unfused. Known limits (design.md, \"Lessons from measurement\"): "
            "fp64 at k <= 1024 cannot reach 1.03x plain with cuBLASLt (no fast fused fp64 epilogue, and the pass "
            "over D is 10-20% of such a GEMM); ratios of 1.000-1.004 are ties on the peer's own kernel; from Python "
            "the stateless call's result, allocated by the caller's allocator, takes 2-3 us of its 3.\n\n"
            f"Machine: {m.get('gpu_name', NR)} (driver {m.get('nvidia_smi', {}).get('driver_version', NR)}, CUDA runtime "
            f"{m.get('cuda_runtime_version', NR)}, cuBLASLt {v.get('cublasLt_nvmath', NR)}), host CPU {m.get('cpu_model', NR)}; "
            f"torch {v.get('torch', NR)}, nvmath-python {v.get('nvmath-python', NR)}; plans autotuned: "
            f"{'yes' if d.get('settings', {}).get('autotune') else 'no'}.\n\n"]
    rows, per = [], {p: [] for p in ("nvmath", "addmm_act", "plain", "unfused")}
    for key in sorted(sel, key=lambda k: (k[0] != "relu", k[0], -k[2] * k[3] * k[4], k[1])):
        c, run, date = sel[key]
        q, target = c.get("ratios", {}), c["epilogue"] in ("relu", "gelu")  # drelu_bgrad: measured once, no target
        lab = f"{c['dtype']} {c['m']}x{c['n']}x{c['k']} {c['epilogue']}"
        for p in per if target else ():
            per[p].append((lab, q.get(f"fused/{p}")))
        ok = all(q.get(f"fused/{p}") is None or q[f"fused/{p}"] <= lim for p, lim in
                 (("nvmath", 1.0), ("addmm_act", 1.0), ("plain", 1.03), ("unfused", 1.0)))
        ok = ("yes" if ok else "**no**") if target else "no target"
        rows.append([c["epilogue"], c["dtype"], f"{c['m']}x{c['n']}x{c['k']}", fms(c["methods"].get("fused", {}).get("median_ms")),
                     *(f3(q.get(f"fused/{p}")) for p in ("nvmath", "addmm_act", "plain", "unfused")),
                     ok, f"`{short(run)}`"])
    text.append(md(["epilogue", "dtype", "m x n x k", "fused ms", "/ nvmath", "/ addmm_act", "/ plain", "/ unfused",
                    "all met", "run"], rows) + "\nRuns:\n" + runs_list(list(sel.values()), runs))
    day = last[2][:10]
    glance = [("3", "GPU fused <= 1.00x nvmath-python", m.get("gpu_name", NR), f"{span([x for _, x in per['nvmath']])} ({day})",
               status(per["nvmath"], 1.0)),
              ("3", "GPU fused <= 1.00x torch `_addmm_activation`", m.get("gpu_name", NR),
               f"{span([x for _, x in per['addmm_act']])} ({day})", status(per["addmm_act"], 1.0)),
              ("3", "GPU fused <= 1.03x plain `a @ b`", m.get("gpu_name", NR), f"{span([x for _, x in per['plain']])} ({day})",
               status(per["plain"], 1.03)),
              ("3", "GPU fused never slower than unfused", m.get("gpu_name", NR),
               f"{span([x for _, x in per['unfused']])} ({day})", status(per["unfused"], 1.0))]
    if host:
        ho, run, date = host[0]
        labels = {"a0_bare_inproc": "bare `cublasLtMatmul` (C, this process)", "a_bare_c": "bare `cublasLtMatmul` (C, own process)",
                  "b_fm_execute_out": "planned `execute(out=)` (target <= 1)", "b2_fm_execute_out_bias_relu": "planned, bias+relu",
                  "c_fm_execute_alloc": "planned `execute()`, allocating", "d_fm_matmul_stateless": "stateless `fusemath.matmul` (target <= 3)",
                  "e_torch_matmul": "torch `a @ b`", "f_cupy_matmul": "cupy `a @ b`", "g_nvmath_execute": "nvmath planned `execute`"}
        rr = ho["rows"]
        text.append(f"\nHost overhead from Python, 64x64x64 f32, torch tensors, us per call (loop of back-to-back calls / "
                    f"bursts of 20), above the bare call timed in {ho.get('bare_base', NR)} (`{short(run)}`, {date}):\n\n" + md(
                        ["call", "us per call", "above bare"],
                        [[lab, f"{rr[k]['us_per_call']:.2f} / {rr[k].get('burst_us_per_call', float('nan')):.2f}",
                          f"{rr[k].get('above_bare_us', float('nan')):+.2f} / {rr[k].get('above_bare_burst_us', float('nan')):+.2f}"]
                         for k, lab in labels.items() if k in rr]))
        b, s = rr.get("b_fm_execute_out", {}), rr.get("d_fm_matmul_stateless", {})
        glance += [("3", "planned execute <= 1 us above bare cuBLASLt (Python)", m.get("gpu_name", NR),
                    f"{b.get('above_bare_us', 0):+.2f} / {b.get('above_bare_burst_us', 0):+.2f} us ({date[:10]})",
                    status([("loop", b.get("above_bare_us")), ("burst", b.get("above_bare_burst_us"))], 1.0)),
                   ("3", "stateless <= 3 us above bare cuBLASLt (Python)", m.get("gpu_name", NR),
                    f"{s.get('above_bare_us', 0):+.2f} / {s.get('above_bare_burst_us', 0):+.2f} us ({date[:10]})",
                    status([("loop", s.get("above_bare_us")), ("burst", s.get("above_bare_burst_us"))], 3.0))]
    if c_runs:
        name, d, date = c_runs[-1]
        rows, pl, st = [], [], []
        for r in d.get("runs", [d]):
            for c in r.get("cases", []):
                ws = re.search(r"ws=(\d+)", c.get("plan", ""))
                lab = f"{r.get('dtype', 'f32')} {r.get('n', 64)}^3 {c['epilogue']}"
                pl.append((lab, c["planned_above_bare_us"]))
                st.append((lab, c["stateless_above_bare_us"]))
                rows.append([r.get("call", 1), r.get("dtype", "f32"), f"{r.get('n', 64)}^3", c["epilogue"], ws.group(1) if ws else NR,
                             f"{c['bare_us']:.2f}", f"{c['planned_above_bare_us']:+.2f}", f"{c['stateless_above_bare_us']:+.2f}"])
        text.append(f"\nThe library's own cost, in C (`build/benchmarks/host_overhead_gpu n dtype`: planned `fm_plan_execute`"
                    f" and stateless `fm_matmul_v` next to the bare `cublasLtMatmul`, bursts of 20, median of 200; `{name}`, "
                    f"{date}, {d.get('machine', NR)}):\n\n" + md(["call", "dtype", "n", "epilogue", "plan workspace (MiB)", "bare us",
                                                                 "planned above bare", "stateless above bare"], rows))
        cm = str(d.get("machine", NR)).split(",")[0]
        glance += [("3", "planned execute <= 1 us above bare cuBLASLt (C)", cm,
                    f"{span([x for _, x in pl])} us ({date[:10]})", status(pl, 1.0)),
                   ("3", "stateless <= 3 us above bare cuBLASLt (C)", cm,
                    f"{span([x for _, x in st])} us ({date[:10]})", status(st, 3.0))]
    return "".join(text), glance


# ---- GPU FFT (issue 4) -----------------------------------------------------------------------------
def fft_gpu(runs):
    sel = latest(runs, lambda name, d: (((c.get("dtype", "complex64"), c["name"]), c) for c in d["cases"]
                                         if not c["name"].startswith("sweep-") and c.get("contestants")))
    if not sel:
        return "No GPU FFT results.\n", []
    last = max(sel.values(), key=lambda s: s[2])
    m = next(d for n, d, _ in runs if n == last[1])["machine"]
    gpu = m.get("gpu_name", NR)
    text = ["Compared: `fft(x * w) * 0.5` (w a real window over the transformed axes) through a planned "
            "`fusemath.fft.FFT(x, axes).plan(prolog={\"multiply\": w}, epilog={\"scale\": 0.5})`, "
            "`execute(out=y, stream=s)`, against the fastest plain transform of fusemath, CuPy and torch "
            "(\"plain cuFFT\"), the same pair timed in alternating rounds (\"paired\") and nvmath-python's FFT with a "
            "numba LTO prolog and epilog. Below 1: fusemath is faster. Targets (complex64): <= 1.10x plain cuFFT, "
            "<= 1.00x nvmath-python.\n\n"
            f"Machine: {gpu} (nvidia-smi: {m.get('nvidia_smi') or NR}), cuFFT {m.get('cufft_version', NR)}, CUDA runtime "
            f"{m.get('cuda_runtime_version', NR)}, host CPU {m.get('cpu_model', NR)}.\n\n"]
    rows, plain, nv = [], [], []
    for key in sorted(sel, key=lambda k: (k[0] != "complex64", k[1] not in FFT_GPU_ISSUE_CASES)):
        c, run, date = sel[key]
        q, fm = c["ratios"], c["contestants"].get("fm_fused", {})
        if key[0] == "complex64" and c["name"] in FFT_GPU_ISSUE_CASES:
            plain.append((c["name"], q.get("fm_fused/plain_cufft")))
        if key[0] == "complex64":
            nv.append((c["name"], q.get("fm_fused/nvmath_fused")))
        found = re.findall(r"^fft cuda/(\S+)|((?:radices|steps|axis-passes|callbacks)=\S+)", fm.get("plan", ""))
        path = " ".join(a or b for a, b in found) or NR
        rows.append([c["name"] + ("" if c["name"] in FFT_GPU_ISSUE_CASES else " (extra)"), key[0],
                     fms(fm.get("ms")), fms(c["contestants"].get(c.get("plain_cufft_from"), {}).get("ms")),
                     f3(q.get("fm_fused/plain_cufft")), f3(q.get("fm_fused/fm_plain (paired)")),
                     f3(q.get("fm_fused/nvmath_fused")), path, f"`{short(run)}`"])
    text.append(md(["case", "dtype", "fused ms", "plain cuFFT ms", "fused / plain", "paired", "fused / nvmath",
                    "fused path", "run"], rows) + "\nRuns:\n" + runs_list(list(sel.values()), runs))
    day = last[2][:10]
    glance = [("4", "GPU fused FFT <= 1.10x plain cuFFT (the issue's six c64 cases)", gpu,
               f"{span([x for _, x in plain])} ({day})", status(plain, 1.10)),
              ("4", "GPU fused FFT <= 1.00x nvmath-python fused (c64)", gpu, f"{span([x for _, x in nv])} ({day})",
               status(nv, 1.0))]
    host = [(d["host_overhead"], n, date) for n, d, date in runs if (d.get("host_overhead") or {}).get("sizes")][-1:]
    if host:
        ho, run, date = host[0]
        rows, pl = [], []
        for n, r in ho["sizes"].items():
            c = r.get("c_fft_overhead_gpu", {})
            pl.append((f"n={n}", c.get("planned_above_bare_us")))
            rows.append([n, fms(c.get("bare_us")), f"{c.get('planned_above_bare_us', float('nan')):+.2f}",
                         f"{c.get('stateless_above_bare_us', float('nan')):+.2f}",
                         *(fms(r.get(k, {}).get("us")) for k in ("fm_execute", "torch_fft", "cupy_fft", "nvmath_execute"))])
        text.append(f"\nHost overhead, 1-D c64, batch 1, us per call (`{short(run)}`, {date}): in C "
                    "(`fft_overhead_gpu`: bare `cufftExecC2C`, planned `fm_plan_execute` and stateless `fm_fft` in one "
                    "process), and from Python per call:\n\n" + md(
                        ["n", "bare cufftExecC2C (C)", "planned above bare (C)", "stateless above bare (C)",
                         "`FFT.execute(out=)` (Python)", "torch `fft`", "cupy `fft`", "nvmath `execute`"], rows))
        glance.append(("4", "planned FFT execute <= 1 us above bare cufftExec (C)", gpu, f"{span([x for _, x in pl])} us "
                       f"({date[:10]})", status(pl, 1.0)))
    return "".join(text), glance


# ---- CPU FFT (issue 4) -----------------------------------------------------------------------------
def fft_cpu(runs):
    sel = latest(runs, lambda name, d: (((d["meta"]["machine"], r["dtype"], r["kind"], tuple(r["shape"])), r)
                                         for r in d["results"]))
    text, glance = ["Compared: a planned `fusemath.fft.FFT` (FFTW, effort measure) against `scipy.fft` with the same "
                    "number of workers (`fm / scipy` below 1: fusemath is faster), and the fused `fft(x * w) * 0.5` "
                    "(r2c: `rfftn(x) * f`, c2r: `irfftn(X * f)`, inv: `ifft(x * w)`) against fusemath's plain "
                    "transform; paired ratios. Targets: fm / scipy <= 1.00, fused / plain <= 1.15. On the H200 host a prolog "
                    "alone has a floor of about 1.05-1.25x plain (design.md, \"Lessons from measurement\"), so single "
                    "cases land on either side of 1.15 from run to run.\n"], []
    by = {name: d for name, d, _ in runs}
    for tag in sorted({k[0] for k in sel}, key=lambda t: t != "h200-host"):
        keys = sorted((k for k in sel if k[0] == tag), key=lambda k: (k[1], k[2], k[3]))
        rows, sc, fu = [], [], []
        for k in keys:
            r, run, date = sel[k]
            lab = f"{r['dtype']} {r['kind']} {'x'.join(map(str, r['shape']))}"
            sc.append((lab, r["fm_over_scipy"]))
            fu.append((lab, r["fused_over_plain"]))
            path = re.search(r"path=(\S+)", r.get("describe_fused", ""))
            rows.append([r["dtype"], r["kind"], "x".join(map(str, r["shape"])), fms(r["ms"].get("fm_plain")),
                         f3(r["fm_over_scipy"]), f3(r["fused_over_plain"]), path.group(1) if path else NR,
                         "yes" if r["fm_over_scipy"] <= 1.0 and r["fused_over_plain"] <= 1.15 else "**no**", f"`{short(run)}`"])
        newest = max((sel[k] for k in keys), key=lambda s: s[2])
        meta = by[newest[1]]["meta"]
        cpu = meta.get("cpu") if meta.get("cpu") not in (None, "", "x86_64") else NR
        text.append(f"### {tag}\nCPU {cpu}, {meta.get('threads', NR)} threads for everyone; ISA {NR}; numpy "
                    f"{meta.get('numpy', NR)}, scipy {meta.get('scipy', NR)}\n\n" + md(
                        ["dtype", "kind", "shape", "plain ms", "fm / scipy", "fused / plain", "fused path", "met", "run"],
                        rows) + "\nRuns:\n" + runs_list([sel[k] for k in keys], runs))
        day = newest[2][:10]
        glance += [("4", "CPU FFT >= 1.0x scipy.fft's speed (fm / scipy <= 1.00)", tag, f"{span([v for _, v in sc])} "
                    f"({day})", status(sc, 1.0)),
                   ("4", "CPU fused chain <= 1.15x plain transform", tag, f"{span([v for _, v in fu])} ({day})",
                    status(fu, 1.15))]
    return "".join(text), glance


# ---- crossover (make run) --------------------------------------------------------------------------
def crossover(runs):
    text = ["`make run` (benchmarks/crossover.py): `relu(a @ b + bias)` f32 (n x n x n) and the c64 `fft2` of n x n "
            "through fusemath on the CPU, on the GPU with NumPy data (transfers included) and on GPU-resident CuPy "
            "data; ms per call. The crossover is the smallest n from which the GPU is faster at every larger n.\n"]
    for op in ("matmul", "fft"):
        have = [(n, d, (d.get("fft") or {}) if op == "fft" else d, date) for n, d, date in runs]
        have = [h for h in have if h[2].get("rows", {}).get("cpu")]
        if not have:
            continue
        name, d, res, date = have[-1]
        meta, gpu = d.get("meta", {}), res.get("gpu") or d.get("gpu", {})
        modes = res["modes"]
        ns = sorted({r["n"] for m in modes for r in res["rows"][m]})
        rows = [[n] + [fms(next((r["ms"] for r in res["rows"][m] if r["n"] == n), None)) for m in modes] for n in ns]
        cross = "; ".join(f"{m}: from n = {c['from_n_on']}" for m, c in res.get("crossover", {}).items())
        text.append(f"\n### {'matmul + bias + relu, f32' if op == 'matmul' else 'fft2, complex64'}\n"
                    f"{meta.get('machine', {}).get('cpu_model', NR)}, {meta.get('threads', NR)} CPU threads; "
                    f"{gpu.get('device_name') or NR} ({gpu.get('array_library') or NR}); `{name}` ({date}): "
                    f"`{meta.get('command') or COMMANDS.get(name, NR)}`. Crossover: {cross or 'no GPU'}.\n\n"
                    + md(["n"] + [f"{m} ms" for m in modes], rows))
    return "".join(text)


def per_gpu(fn, runs, *extra):
    """fn's section once per GPU the runs were measured on (extra goes with the first)."""
    gpus = sorted({d.get("machine", {}).get("gpu_name", NR) for _, d, _ in runs}) or [NR]
    text, glance = [], []
    for i, gpu in enumerate(gpus):
        t, g = fn([r for r in runs if r[1].get("machine", {}).get("gpu_name", NR) == gpu], *(extra if i == 0 else ([],) * len(extra)))
        text.append((f"### {gpu}\n" if len(gpus) > 1 else "") + t)
        glance += g
    return "".join(text), glance


def render() -> str:
    cpu_mm, g1 = matmul_cpu(load("matmul_cpu-"))
    gpu_mm, g2 = per_gpu(matmul_gpu, load("matmul_gpu-"), load("host_overhead_gpu-"))
    gpu_fft, g3 = per_gpu(fft_gpu, load("fft_gpu-"))
    cpu_fft, g4 = fft_cpu(load("fft_cpu-"))
    glance = md(["issue", "target", "machine", "latest (date)", "status"], g1 + g2 + g3 + g4)
    return ("# Performance (measured)\n\n<!-- Generated by `python3 benchmarks/perf_tables.py` from benchmarks/results/*.json;"
            " edit that script, not this file. -->\n\nThe current figure of every target, from the JSON the benchmarks "
            "in `benchmarks/` wrote (benchmarks/README.md says how to run them). Each row comes from the latest run "
            "that measured its case on that machine and names the run (`benchmarks/results/<kind>-<run>.json`); "
            "\"not recorded\" marks what a run's JSON does not hold. What the measurements taught, and the numbers "
            "behind the design's choices: docs/design.md, \"Lessons from measurement\"; the run-by-run history: "
            "`git log -p -- docs/performance.md`.\n\n## Targets at a glance\n" + glance
            + "\n## CPU matmul with fused bias + relu (issue 2) - `benchmarks/matmul_cpu.py`\n" + cpu_mm
            + "\n## GPU matmul with fused epilogues (issue 3) - `benchmarks/matmul_gpu.py`\n" + gpu_mm
            + "\n## GPU FFT with fused prolog / epilog (issue 4) - `benchmarks/fft_gpu.py`\n" + gpu_fft
            + "\n## CPU FFT (issue 4) - `benchmarks/fft_cpu.py`\n" + cpu_fft
            + "\n## CPU-vs-GPU crossover - `benchmarks/crossover.py` (`make run`)\n"
            + crossover(sorted(load("matmul_crossover-") + load("fft_crossover-"), key=lambda r: r[2])))


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        with open(DOC) as f:
            if f.read() != text:
                print("docs/performance.md is stale: run python3 benchmarks/perf_tables.py", file=sys.stderr)
                return 1
        return 0
    with open(DOC, "w") as f:
        f.write(text)
    print(f"wrote {os.path.relpath(DOC, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
