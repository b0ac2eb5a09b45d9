#!/usr/bin/env python3
"""Writes docs/performance.md from benchmarks/results/*.json and the prose in benchmarks/perf_template.md.

    python3 benchmarks/perf_tables.py           rewrite docs/performance.md
    python3 benchmarks/perf_tables.py --check   exit 1 when docs/performance.md is not what this writes

Standard library only. Per target, machine and case the figure comes from the latest run (JSON "date")
that measured the case, so a short run that repeated a few cases hides none of the others; every row
names its run, every table its machine and the runs' commands; what a JSON lacks is "not recorded".
"""
import functools
import glob
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DOC, NR = os.path.join(HERE, "..", "docs", "performance.md"), "not recorded"
# Runs whose JSON has no "command": the command as docs/performance.md recorded it before it was generated.
DEV = 'bash benchmarks/device_gpu.sh (step matmulcpu: benchmarks/matmul_cpu.py --machine-tag h200-host {})'
COMMANDS = {
    "matmul_cpu-h200-host-20261201-run18-kernel-auto": DEV.format("--sizes 1024,2048,4096 --strategies tiles --budget 0.5"),
    "matmul_cpu-h200-host-20261201-run19-repeat": DEV.format("--sizes 1024,2048 --strategies tiles --budget 0.5"),
    "matmul_cpu-h200-host-20261201-run20-short": DEV.format("--sizes 1024 --dtypes f64 --budget 0.3 --rounds 6 --strategies tiles"),
    "matmul_cpu-dev-2core-20261201-kernel": ".venv/bin/python benchmarks/matmul_cpu.py --machine-tag dev-2core --strategies tiles",
    "matmul_cpu-dev-2core-20261201-kernel-256":
        ".venv/bin/python benchmarks/matmul_cpu.py --machine-tag dev-2core --strategies tiles --sizes 256 --no-skinny",
    "matmul_crossover-2026-11-29-h200": 'STEPS="build crossover" bash benchmarks/device_gpu.sh (python -m fusemath.bench, '
                                        "now benchmarks/crossover.py)",
    "fft_crossover-2026-11-30-h200": "python -m fusemath.bench --ops fft (now benchmarks/crossover.py --ops fft)"}
FFT_ISSUE_CASES = ("1024x1", "4096x4096", "2^20x64", "2^24x4", "2d-4096^2", "3d-512^3")


def load(*prefixes):
    """[(run name, JSON, date)] of results/<prefix>*.json, oldest first."""
    runs = []
    for path in (p for pre in prefixes for p in glob.glob(os.path.join(HERE, "results", pre + "*.json"))):
        with open(path) as f:
            d = json.load(f)
        date = d.get("date") or d.get("meta", {}).get("date") or NR
        runs.append((os.path.basename(path)[:-5], d, date.replace("T", " ")[:16]))
    return sorted(runs, key=lambda r: r[2])


def latest(runs, rows_of):
    """{case key: (row, run, date)} from the latest run that has the case."""
    return {key: (row, name, date) for name, d, date in runs for key, row in rows_of(name, d)}


def f3(v, spec=".3f"):
    return "-" if v is None else format(v, spec)


fms, sgn = functools.partial(f3, spec=".4g"), functools.partial(f3, spec="+.2f")  # ms; signed differences


def md(head, rows):
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                     + ["| " + " | ".join(map(str, r)) + " |" for r in rows]) + "\n"


def glance(issue, what, machine, items, limit, date, unit=""):
    """A row of the targets-at-a-glance table; items: [(label, value)]."""
    vals = [(lab, v) for lab, v in items if v is not None]
    if not vals:
        return None  # no target case on this machine
    bad = [(lab, v) for lab, v in vals if v > limit]
    if len(vals) > 1 and unit:  # signed figures: a range reads better with "..": "-0.61 .. +0.09 us"
        fig = f"{min(v for _, v in vals):+.2f} .. {max(v for _, v in vals):+.2f}"
    elif len(vals) > 1:
        fig = f"{min(v for _, v in vals):.3f}-{max(v for _, v in vals):.3f}"
    else:
        fig = sgn(vals[0][1]) if unit else f3(vals[0][1])
    if len(vals) == 1 and not vals[0][0]:
        st = "not met" if bad else "met"
    else:  # a value that rounds to the limit is shown with one more digit
        st = f"met ({len(vals)} of {len(vals)})" if not bad else f"not met: {len(vals) - len(bad)} of {len(vals)}; " + ", ".join(
            f"{lab} {v:.3f}" if round(v, 3) > limit else f"{lab} {v:.4f}" for lab, v in bad[:4])
    return (issue, what, machine, f"{fig}{unit} ({date[:10]})", st)


def runs_list(sel, runs):
    """The runs the rows of a table came from, with date and command."""
    by = {name: (d, date) for name, d, date in runs}
    return "\nRuns:\n" + "".join(f"- `{n}` ({by[n][1]}): `{by[n][0].get('command') or by[n][0].get('meta', {}).get('command') or COMMANDS.get(n, NR)}`\n"
                                 for n in sorted({s[1] for s in sel}, key=lambda n: by[n][1]))


def short(name):
    return re.sub(r"^[a-z_]+-(h200-host-|dev-2core-)?", "", name)


def newest(sel):
    return max(sel, key=lambda s: s[2])


def matmul_cpu(runs):
    def rows_of(name, d):
        tag = d.get("machine", {}).get("tag") or re.match(r"matmul_cpu-(.+?)-\d{8}", name).group(1)
        for c in d.get("cases", []):
            yield (tag, c["dtype"], c["kind"], c["n"], c["label"]), c
        if (d.get("host_overhead") or {}).get("overhead_planned_execute_us") is not None:
            yield (tag, "host"), d["host_overhead"]
    sel, by, text, g = latest(runs, rows_of), {n: d for n, d, _ in runs}, [], []
    for tag in sorted({k[0] for k in sel}, key=lambda t: t != "h200-host"):
        keys = sorted((k for k in sel if k[0] == tag and k[1] != "host"), key=lambda k: (k[1], k[2] != "square", k[3]))
        rows, met = [], {"square": [], "skinny": []}
        for k in keys:
            c, run, _ = sel[k]
            q, t = c["ratios"], c.get("target_fused_over_np_plain")
            v, kern = q.get("fused_over_np_plain_paired"), re.search(r"kernel=(\w+)", c.get("plans", {}).get("fm_fused", ""))
            if t:
                met[c["kind"]].append((f"{c['dtype']} {c['label']}", v))
            rows.append([c["dtype"], c["label"], f3(v), f3(q.get("fused_over_fm_plain_paired")),
                         f3(q.get("unfused_over_np_plain_paired")), f3(q.get("tiles_over_np_plain_paired")),
                         f"kernel ({kern.group(1)})" if kern else "cblas tiles", f"<= {t:.2f}" if t else "-",
                         ("yes" if v <= t else "**no**") if t else "-", f"`{short(run)}`"])
        last = newest([sel[k] for k in keys])
        d = by[last[1]]
        m, npy, c = d.get("machine", {}), d.get("numpy", {}), (d.get("host_overhead") or {}).get("c") or {}
        isa = (npy.get("config") or {}).get("SIMD Extensions", {}).get("found")
        text.append(f"\n### {tag}\n{m.get('cpu_model', NR)}, {m.get('cores', NR)} cores, {m.get('threads_used', NR)} threads "
                    f"for everyone; ISA (NumPy's detection): {', '.join(isa) if isa else NR}; fusemath's OpenBLAS: "
                    f"{c.get('openblas_config', NR)}; NumPy's BLAS: {npy.get('blas_name', NR)} {npy.get('blas_version', '')}\n\n"
                    + md(["dtype", "shape", "fused / a@b", "fused / fm plain", "unfused / a@b", "forced tiles / a@b",
                          "plan", "target", "met", "run"], rows))
        g += [glance("2", "CPU fused bias+relu <= 1.05x NumPy `a @ b`, squares n >= 1024", tag, met["square"], 1.05, last[2]),
              glance("2", "... <= 1.10x for the skinny shapes", tag, met["skinny"], 1.10, last[2])]
        if (tag, "host") in sel:
            ho, run, date = sel[(tag, "host")]
            o, oc = ho.get("overhead_ns", {}), (ho.get("c") or {}).get("overhead_ns", {})
            us = [o.get(k, float("nan")) / 1e3 for k in ("fusemath.matmul identity - cblas_sgemm", "numpy a @ b - cblas_sgemm")]
            text.append("\nHost overhead, 64x64x64 f32, us per call above the bare `cblas_sgemm`:\n\n" + md(
                ["planned `Matmul.execute()`", "`fm_plan_execute` (C)", "stateless `fusemath.matmul`", "NumPy `a @ b`", "run"],
                [[sgn(ho["overhead_planned_execute_us"]), sgn(oc["fm_plan_execute_identity_vs_cblas"] / 1e3) if oc else NR,
                  sgn(us[0]), sgn(us[1]), f"`{short(run)}` ({date})"]]))
            g.append(glance("2", "planned 64x64 execute <= 2 us above bare cblas", tag,
                            [("", ho["overhead_planned_execute_us"])], 2.0, date, " us"))
        text.append(runs_list([s for k, s in sel.items() if k[0] == tag], runs))
    return "".join(text), g


def matmul_gpu(runs, c_runs):
    sel = latest(runs, lambda name, d: (((c["epilogue"], c["dtype"], c["m"], c["n"], c["k"]), c) for c in d["cases"]))
    if not sel:
        return "No GPU matmul results.\n", []
    last = newest(sel.values())
    d = next(dd for n, dd, _ in runs if n == last[1])
    m, v, gpu = d["machine"], d.get("versions", {}), d["machine"].get("gpu_name", NR)
    text = [f"\nMachine: {gpu} (driver {m.get('nvidia_smi', {}).get('driver_version', NR)}, CUDA runtime "
            f"{m.get('cuda_runtime_version', NR)}, cuBLASLt {v.get('cublasLt_nvmath', NR)}), host CPU {m.get('cpu_model', NR)}; "
            f"torch {v.get('torch', NR)}, nvmath-python {v.get('nvmath-python', NR)}; plans autotuned: "
            f"{'yes' if d.get('settings', {}).get('autotune') else 'no'}.\n\n"]
    rows, per, lims = [], {}, {"nvmath": 1.0, "addmm_act": 1.0, "plain": 1.03, "unfused": 1.0}
    for key in sorted(sel, key=lambda k: (k[0] != "relu", k[0], -k[2] * k[3] * k[4], k[1])):
        c, run, _ = sel[key]
        q, target = c.get("ratios", {}), c["epilogue"] in ("relu", "gelu")  # drelu_bgrad: measured once, no target
        for p in lims if target else ():
            per.setdefault(p, []).append((f"{c['dtype']} {c['m']}x{c['n']}x{c['k']} {c['epilogue']}", q.get(f"fused/{p}")))
        ok = all(q.get(f"fused/{p}") is None or q[f"fused/{p}"] <= lim for p, lim in lims.items())
        rows.append([c["epilogue"], c["dtype"], f"{c['m']}x{c['n']}x{c['k']}", fms(c["methods"].get("fused", {}).get("median_ms")),
                     *(f3(q.get(f"fused/{p}")) for p in lims), ("yes" if ok else "**no**") if target else "no target",
                     f"`{short(run)}`"])
    text.append(md(["epilogue", "dtype", "m x n x k", "fused ms", *(f"/ {p}" for p in lims), "all met", "run"], rows)
                + runs_list(sel.values(), runs))
    g = [glance("3", f"GPU fused <= {lim:.2f}x {p}" + (" (never slower)" if p == "unfused" else ""), gpu, per.get(p, []),
                lim, last[2]) for p, lim in lims.items()]
    host = [(n, d["host_overhead"], date) for n, d, date in runs if (d.get("host_overhead") or {}).get("rows")][-1:]
    for run, ho, date in host:
        rr = ho["rows"]
        labels = {"a0_bare_inproc": "bare `cublasLtMatmul` (C, this process)", "a_bare_c": "bare `cublasLtMatmul` (C, own process)",
                  "b_fm_execute_out": "planned `execute(out=)` (target <= 1)", "b2_fm_execute_out_bias_relu": "planned, bias+relu",
                  "c_fm_execute_alloc": "planned `execute()`, allocating", "d_fm_matmul_stateless": "stateless `fusemath.matmul` "
                  "(target <= 3)", "e_torch_matmul": "torch `a @ b`", "f_cupy_matmul": "cupy `a @ b`",
                  "g_nvmath_execute": "nvmath planned `execute`"}
        text.append(f"\nHost overhead from Python, 64x64x64 f32, torch tensors, us per call (a loop of back-to-back calls / "
                    f"bursts of 20), above the bare call timed in {ho.get('bare_base', NR)} (`{short(run)}`, {date}):\n\n"
                    + md(["call", "us per call", "above bare"], [
                        [lab, f"{rr[k]['us_per_call']:.2f} / {rr[k]['burst_us_per_call']:.2f}",
                         f"{sgn(rr[k].get('above_bare_us'))} / {sgn(rr[k].get('above_bare_burst_us'))}"]
                        for k, lab in labels.items() if k in rr]))
        for key, what, lim in (("b_fm_execute_out", "planned execute <= 1 us", 1.0), ("d_fm_matmul_stateless", "stateless <= 3 us", 3.0)):
            r = rr.get(key, {})
            g.append(glance("3", what + " above bare cuBLASLt (Python; loop, burst)", gpu,
                            [("loop", r.get("above_bare_us")), ("burst", r.get("above_bare_burst_us"))], lim, date, " us"))
    for name, d, date in c_runs[-1:]:
        rows, pl, st = [], [], []
        for r in d.get("runs", [d]):
            for c in r.get("cases", []):
                ws, lab = re.search(r"ws=(\d+)", c.get("plan", "")), f"{r.get('dtype', 'f32')} {r.get('n', 64)}^3 {c['epilogue']}"
                pl.append((lab, c["planned_above_bare_us"]))
                st.append((lab, c["stateless_above_bare_us"]))
                rows.append([r.get("call", 1), r.get("dtype", "f32"), f"{r.get('n', 64)}^3", c["epilogue"], ws.group(1) if ws else NR,
                             f"{c['bare_us']:.2f}", sgn(c["planned_above_bare_us"]), sgn(c["stateless_above_bare_us"])])
        text.append(f"\nThe library's own cost, in C (`build/benchmarks/host_overhead_gpu n dtype`: planned `fm_plan_execute` "
                    f"and stateless `fm_matmul_v` next to the bare `cublasLtMatmul`, bursts of 20, median of 200; `{name}`, "
                    f"{date}, {d.get('machine', NR)}):\n\n" + md(["call", "dtype", "n", "epilogue", "plan workspace (MiB)",
                                                                 "bare us", "planned above bare", "stateless above bare"], rows))
        cm = str(d.get("machine", NR)).split(",")[0]
        g += [glance("3", "planned execute <= 1 us above bare cuBLASLt (C)", cm, pl, 1.0, date, " us"),
              glance("3", "stateless <= 3 us above bare cuBLASLt (C)", cm, st, 3.0, date, " us")]
    return "".join(text), g


def fft_gpu(runs):
    sel = latest(runs, lambda name, d: (((c.get("dtype", "complex64"), c["name"]), c) for c in d["cases"]
                                         if not c["name"].startswith("sweep-") and c.get("contestants")))
    if not sel:
        return "No GPU FFT results.\n", []
    last = newest(sel.values())
    m = next(d for n, d, _ in runs if n == last[1])["machine"]
    gpu, smi = m.get("gpu_name", NR), m.get("nvidia_smi") or NR
    text = [f"\nMachine: {gpu} (nvidia-smi: {', '.join(smi.values()) if isinstance(smi, dict) else smi}), cuFFT "
            f"{m.get('cufft_version', NR)}, CUDA runtime {m.get('cuda_runtime_version', NR)}, host CPU {m.get('cpu_model', NR)}.\n\n"]
    rows, plain, nv = [], [], []
    for key in sorted(sel, key=lambda k: (k[0] != "complex64", k[1] not in FFT_ISSUE_CASES)):
        c, run, _ = sel[key]
        q, fm, issue = c["ratios"], c["contestants"].get("fm_fused", {}), c["name"] in FFT_ISSUE_CASES
        if key[0] == "complex64":
            plain += [(c["name"], q.get("fm_fused/plain_cufft"))] if issue else []
            nv.append((c["name"], q.get("fm_fused/nvmath_fused")))
        found = re.findall(r"^fft cuda/(\S+)|((?:radices|steps|axis-passes|callbacks)=\S+)", fm.get("plan", ""))
        rows.append([c["name"] + ("" if issue else " (extra)"), key[0], fms(fm.get("ms")),
                     fms(c["contestants"].get(c.get("plain_cufft_from"), {}).get("ms")), f3(q.get("fm_fused/plain_cufft")),
                     f3(q.get("fm_fused/fm_plain (paired)")), f3(q.get("fm_fused/nvmath_fused")),
                     " ".join(a or b for a, b in found) or NR, f"`{short(run)}`"])
    text.append(md(["case", "dtype", "fused ms", "plain cuFFT ms", "fused / plain", "paired", "fused / nvmath",
                    "fused path", "run"], rows) + runs_list(sel.values(), runs))
    g = [glance("4", "GPU fused FFT <= 1.10x plain cuFFT (the issue's six c64 cases)", gpu, plain, 1.10, last[2]),
         glance("4", "GPU fused FFT <= 1.00x nvmath-python fused (c64)", gpu, nv, 1.0, last[2])]
    for run, ho, date in [(n, d["host_overhead"], date) for n, d, date in runs if (d.get("host_overhead") or {}).get("sizes")][-1:]:
        rows, pl = [], []
        for n, r in ho["sizes"].items():
            c = r.get("c_fft_overhead_gpu", {})
            pl.append((f"n={n}", c.get("planned_above_bare_us")))
            rows.append([n, fms(c.get("bare_us")), sgn(c.get("planned_above_bare_us")), sgn(c.get("stateless_above_bare_us")),
                         *(fms(r.get(k, {}).get("us")) for k in ("fm_execute", "torch_fft", "cupy_fft", "nvmath_execute"))])
        text.append(f"\nHost overhead, 1-D c64, batch 1, us per call (`{short(run)}`, {date}): in C (`fft_overhead_gpu`: bare "
                    "`cufftExecC2C`, planned `fm_plan_execute` and stateless `fm_fft` in one process), and from Python:\n\n"
                    + md(["n", "bare cufftExecC2C (C)", "planned above bare (C)", "stateless above bare (C)",
                          "`FFT.execute(out=)` (Python)", "torch `fft`", "cupy `fft`", "nvmath `execute`"], rows))
        g.append(glance("4", "planned FFT execute <= 1 us above bare cufftExec (C)", gpu, pl, 1.0, date, " us"))
    return "".join(text), g


def fft_cpu(runs):
    sel = latest(runs, lambda name, d: (((d["meta"]["machine"], r["dtype"], r["kind"], tuple(r["shape"])), r)
                                         for r in d["results"]))
    by, text, g = {name: d for name, d, _ in runs}, [], []
    for tag in sorted({k[0] for k in sel}, key=lambda t: t != "h200-host"):
        keys, rows, sc, fu = sorted(k for k in sel if k[0] == tag), [], [], []
        for k in keys:
            r, run, _ = sel[k]
            lab, path = f"{r['dtype']} {r['kind']} {'x'.join(map(str, r['shape']))}", re.search(r"path=(\S+)", r.get("describe_fused", ""))
            sc.append((lab, r["fm_over_scipy"]))
            fu.append((lab, r["fused_over_plain"]))
            rows.append([*lab.split(), fms(r["ms"].get("fm_plain")), f3(r["fm_over_scipy"]), f3(r["fused_over_plain"]),
                         path.group(1) if path else NR, "yes" if r["fm_over_scipy"] <= 1.0 and r["fused_over_plain"] <= 1.15
                         else "**no**", f"`{short(run)}`"])
        last = newest([sel[k] for k in keys])
        meta = by[last[1]]["meta"]
        text.append(f"\n### {tag}\nCPU {meta.get('cpu') if meta.get('cpu') not in (None, '', 'x86_64') else NR}, "
                    f"{meta.get('threads', NR)} threads for everyone; ISA {NR}; numpy {meta.get('numpy', NR)}, scipy "
                    f"{meta.get('scipy', NR)}\n\n" + md(["dtype", "kind", "shape", "plain ms", "fm / scipy", "fused / plain",
                                                          "fused path", "met", "run"], rows) + runs_list([sel[k] for k in keys], runs))
        g += [glance("4", "CPU FFT >= 1.0x scipy.fft's speed (fm / scipy <= 1.00)", tag, sc, 1.0, last[2]),
              glance("4", "CPU fused chain <= 1.15x plain transform", tag, fu, 1.15, last[2])]
    return "".join(text), g


def solve_cpu(runs):
    """Dense solvers on the CPU (benchmarks/solve.py): fusemath / scipy.linalg per routine and n."""
    def rows_of(name, d):
        tag = d.get("machine", {}).get("tag", NR)
        for r in d.get("cases", []):
            yield (tag, d.get("threads"), r["routine"], r["n"]), r
    sel = latest(runs, rows_of)
    by, text, g = {name: d for name, d, _ in runs}, [], []
    for tag, th in sorted({k[:2] for k in sel}, key=str):
        keys = sorted((k for k in sel if k[:2] == (tag, th)), key=lambda k: (k[2], k[3]))
        rows, items = [], []
        for k in keys:
            r, run, _ = sel[k]
            sc, npr = r["fm_over"]["scipy"], r["fm_over"]["numpy"]
            items.append((f"{k[2]} {k[3]}", sc["median"]))
            rows.append([k[2], k[3], fms(r["median_s"]["fusemath"] * 1e3), fms(r["median_s"]["scipy"] * 1e3),
                         fms(r["median_s"]["numpy"] * 1e3), f"{f3(sc['median'])} [{f3(sc['min'])}, {f3(sc['max'])}]",
                         f3(npr["median"]), "yes" if sc["median"] <= 1.05 else "**no**", f"`{short(run)}`"])
        last = newest([sel[k] for k in keys])
        d = by[last[1]]
        m, blas = d.get("machine", {}), d.get("blas", {})
        res = d.get("solver_resolve")
        extra = (f"\nFactor once: `Solver.solve` of a new right-hand side ({res['nrhs']} columns) at n = {res['n']} "
                 f"takes {f3(res['solver_over_fresh_median'], '.4f')}x a fresh `solve` (target <= 0.1).\n") if res else ""
        text.append(f"\n### {tag}, {th} thread(s)\nCPU {m.get('cpu_model', NR)} ({m.get('cores', NR)} cores), ISA "
                    f"{m.get('isa', NR)}; BLAS: fusemath "
                    f"{blas.get('fusemath', NR)}; scipy {blas.get('scipy', NR)}; numpy {blas.get('numpy', NR)}\n\n"
                    + md(["routine", "n", "fm ms", "scipy ms", "numpy ms", "fm / scipy [min, max]", "fm / numpy", "met",
                          "run"], rows) + extra + runs_list([sel[k] for k in keys], runs))
        g.append(glance("28", f"CPU f64 solvers <= 1.05x scipy.linalg's time ({th} thread(s))", tag, items, 1.05,
                        last[2]))
        if res:
            g.append(glance("28", "CPU Solver.solve of a new b <= 0.1x a fresh solve", tag,
                            [("", res["solver_over_fresh_median"])], 0.1, last[2]))
    return "".join(text), g


def solve_gpu(runs):
    """Dense solvers on the GPU (benchmarks/solve_gpu.py): fusemath against torch / CuPy per routine and size."""
    def rows_of(name, d):
        gpu = d.get("machine", {}).get("nvidia_smi", {}).get("name") or d.get("machine", {}).get("tag", NR)
        for r in d.get("results", []):
            yield (gpu, r["routine"], str(r["size"])), r
    sel = latest(runs, rows_of)
    text, g = [], []
    for gpu in sorted({k[0] for k in sel}):
        keys = sorted((k for k in sel if k[0] == gpu), key=lambda k: (k[1].startswith("batched"), k[1], len(k[2]), k[2]))
        rows, peer, batched, eigh20, refine, fresh = [], [], [], [], [], []
        for k in keys:
            r, run, _ = sel[k]
            ms, rv = r["ms"], {p: v["median"] for p, v in r.get("ratio_vs", {}).items()}
            label = f"{k[1]} {k[2]}"
            if k[1] == "solver_solve_vs_fresh":
                # against the plain fresh solve where the run has it (a refined default made "fresh" slower)
                ratio, target = rv.get("fresh_solve_off", rv.get("fresh_solve")), "<= 0.1x fresh"
                fresh.append((label, ratio))
                ok = ratio is not None and ratio <= 0.1
            elif k[1].startswith("solve_refine"):
                ratio, target = rv.get("torch"), "<= 0.5x torch"
                if k[1] != "solve_refine_off" and ratio is not None:  # off: the plain fp64 LU, for reference
                    refine.append((label, ratio / 0.5, k[2]))
                ok = ratio is not None and ratio <= 0.5
            elif k[1] == "batched_eigh" and k[2] != "10000x32x32":
                ratio, target = rv.get("torch"), "<= 0.05x torch"
                eigh20.append((label, ratio / 0.05 if ratio is not None else None))
                ok = ratio is not None and ratio <= 0.05
            else:
                ratio, target = max(rv.values()) if rv else None, "<= 1.00x faster peer"  # fm over the faster peer
                (batched if k[1].startswith("batched") else peer).append((label, ratio))
                ok = ratio is not None and ratio <= 1.0
            rows.append([k[1], k[2], fms(ms.get("fusemath")), fms(ms.get("torch")), fms(ms.get("cupy")),
                         fms(ms.get("fresh_solve_off", ms.get("fresh_solve"))), f3(ratio), target, "yes" if ok else "**no**", f"`{short(run)}`"])
        # the refine target per size: the fastest refined choice there (every choice is a row of the table)
        best = {}
        for lab, v, size in refine:
            if size not in best or v < best[size][1]:
                best[size] = (lab, v)
        refine = [best[size] for size in sorted(best, key=lambda z: (len(z), z))]
        last = newest([sel[k] for k in keys])
        text.append(f"\n### {gpu}\n" + md(["routine", "size", "fm ms", "torch ms", "cupy ms", "fresh solve ms",
                                             "ratio", "target", "met", "run"], rows) + runs_list([sel[k] for k in keys], runs))
        g += [glance("28", "GPU fp64 solvers <= 1.00x the faster of torch / CuPy", gpu, peer, 1.0, last[2]),
              glance("28", "GPU Solver.solve of a new b <= 0.1x a fresh solve (n = 4096)", gpu, fresh, 0.1, last[2]),
              glance("28", "GPU refine >= 2x faster than torch fp64 (fastest refined choice per n; shown: ratio / 0.5)",
                     gpu,
                     refine, 1.0, last[2]),
              glance("28", "GPU batched f32 <= 1.00x torch", gpu, batched, 1.0, last[2]),
              glance("28", "GPU batched eigh >= 20x faster than torch (shown: ratio / 0.05)", gpu, eigh20, 1.0, last[2])]
    return "".join(text) or "No GPU solver results yet.\n", g


def crossover(runs):
    text = []
    for op in ("matmul", "fft", "rng", "solve"):
        # since the FFT has its own file, each JSON says its "op"; older ones held the FFT under "fft"
        have = [(n, d, d if d.get("op", "matmul") == op else (d.get("fft") or {}) if op == "fft" else {}, date)
                for n, d, date in runs]
        have = {(d.get("meta", {}).get("machine", {}).get("cpu_model"), (r.get("gpu") or d.get("gpu", {})).get("device_name")):
                (n, d, r, date) for n, d, r, date in have if r.get("rows", {}).get("cpu")}  # the latest per machine
        for name, d, res, date in have.values():
            meta, gpu, modes = d.get("meta", {}), res.get("gpu") or d.get("gpu", {}), res["modes"]
            rows = [[n] + [fms(next((r["ms"] for r in res["rows"][m] if r["n"] == n), None)) for m in modes]
                    for n in sorted({r["n"] for m in modes for r in res["rows"][m]})]
            cross = "; ".join(f"{m}: from n = {c['from_n_on']}" for m, c in res.get("crossover", {}).items())
            png = name if op != "fft" else name.replace("matmul_crossover", "fft_crossover")
            what = {"matmul": "matmul + bias + relu, f32", "fft": "fft2, complex64",
                    "rng": "standard_normal, float32, n x n values (portable mode)",
                    "solve": "solve, float64, n x n with 16 right-hand sides"}[op]
            text.append(f"\n### {what}\n"
                        f"{meta.get('machine', {}).get('cpu_model', NR)}, {meta.get('threads', NR)} CPU threads; "
                        + (f"{gpu.get('device_name') or NR} ({gpu.get('array_library') or NR})" if gpu.get("enabled", True)
                           else f"no GPU ({gpu.get('note') or NR})") + f"; `{name}` ({date}): "
                        f"`{meta.get('command') or COMMANDS.get(name, NR)}`. Crossover: {cross or 'no GPU'}."
                        + (f" Plot: `benchmarks/results/{png}.png`." if os.path.exists(os.path.join(HERE, "results", png + ".png"))
                           else "") + "\n\n"
                        + md(["n"] + [f"{m} ms" for m in modes], rows))
    return "".join(text)


RNG_TARGETS = {"random": 3.0, "standard_normal": 2.0}  # issue 27: speed-up over NumPy PCG64 per core


def rng(runs):
    """benchmarks/rng.py: per machine, the CPU fills (ns per value, paired speed-up over NumPy) and the GPU fills."""
    def rows_of(name, d):
        tag = d.get("machine", {}).get("tag", NR)
        for c in d.get("cpu", []):
            yield (tag, "cpu", c["threads"], c["dist"], c["dtype"]), c
        for c in (d.get("gpu") or {}).get("cases", []):
            yield (d["machine"].get("nvidia_smi", {}).get("name", tag), "gpu", 0, c["dist"], c["dtype"]), c
    sel, by, text, g = latest(runs, rows_of), {n: (d, date) for n, d, date in runs}, [], []
    for tag in sorted({k[0] for k in sel if k[1] == "cpu"}):
        keys = sorted((k for k in sel if k[0] == tag and k[1] == "cpu"), key=lambda k: (k[2], list(
            ("random", "standard_normal", "normal(1, 2)", "standard_exponential", "exponential(2)")).index(k[3])
            if k[3] in ("random", "standard_normal", "normal(1, 2)", "standard_exponential", "exponential(2)") else 9, k[4]))
        rows, per_core, scaling = [], [], []
        one = {(k[3], k[4]): sel[k][0] for k in keys if k[2] == 1}
        for k in keys:
            c, run, _ = sel[k]
            me, sp = c["methods"], c.get("speedup_paired", {})
            ns = lambda m: f"{me[m]['ns_per_value']:.2f} ±{50 * me[m]['spread']:.0f}%" if m in me else "-"  # noqa: E731
            pcg = sp.get("np_pcg64/fm_portable") or {}
            target = RNG_TARGETS.get(c["dist"])
            if target and pcg:
                per_core.append((f"{c['dist']} {c['dtype']} {c['threads']}t", target / pcg["median"]))
            t1 = one.get((c["dist"], c["dtype"]))
            eff = None
            if c["threads"] > 1 and t1 and "fm_portable" in me and "fm_portable" in t1["methods"]:
                eff = t1["methods"]["fm_portable"]["ns_per_value"] / (me["fm_portable"]["ns_per_value"] * c["threads"])
                if target:
                    scaling.append((f"{c['dist']} {c['dtype']} {c['threads']}t", 0.8 / eff))
            rows.append([c["threads"], c["dist"], c["dtype"], ns("fm_portable"), ns("fm_curand"), ns("np_pcg64"), ns("np_philox"),
                         f"{pcg['median']:.2f} ({pcg['min']:.2f}-{pcg['max']:.2f})" if pcg else "-",
                         f3((sp.get("np_philox/fm_portable") or {}).get("median"), ".2f"),
                         f3((sp.get("np_pcg64/fm_curand") or {}).get("median"), ".2f"), f3(eff, ".2f"),
                         (f">= {target:.0f}x: " + ("yes" if pcg["median"] >= target else "**no**")) if target and pcg else "-",
                         f"`{short(run)}`"])
        last = newest([sel[k] for k in keys])
        d, date = by[last[1]]
        m = d.get("machine", {})
        text.append(f"\n### {tag}\n{m.get('cpu_model', NR)}, {m.get('cores', NR)} cores; fusemath's RNG ISA "
                    f"{m.get('rng_isa', NR)}; load average {', '.join(f'{x:.1f}' for x in m.get('load_average', [])) or NR} "
                    f"at the start; {d.get('note') or ''} 2^{d.get('log2n', NR)} values, {d.get('rounds', NR)} paired rounds; "
                    "ns per value: median ±half the spread over rounds.\n\n" + md(
                        ["threads", "distribution", "dtype", "fm portable", "fm curand", "NumPy PCG64", "NumPy Philox",
                         "PCG64 / portable (min-max)", "Philox / portable", "PCG64 / curand", "scaling", "target", "run"], rows)
                    + runs_list([sel[k] for k in keys], runs))
        g += [glance("27", "CPU uniform >= 3x and normal >= 2x NumPy PCG64 (shown: target / speed-up, <= 1 met)", tag,
                     per_core, 1.0, last[2]),
              glance("27", "CPU fill scaling >= 0.8 x threads (shown: 0.8 / efficiency, <= 1 met)", tag, scaling, 1.0, last[2])]
    gk = [k for k in sel if k[1] == "gpu"]
    for gpu in sorted({k[0] for k in gk}):
        rows = []
        for k in sorted(k for k in gk if k[0] == gpu):
            c, run, _ = sel[k]
            me = c["methods"]
            cell = lambda m: f"{me[m]['ms']:.3f} ({me[m]['tb_per_s_written']:.2f})" if m in me else "-"  # noqa: E731
            rows.append([c["dist"], c["dtype"], f"2^{c['n'].bit_length() - 1}", cell("fm_portable"), cell("fm_curand"),
                         cell("cupy"), cell("torch"), "; ".join(c.get("notes", {}).values())[:120] or "-", f"`{short(run)}`"])
        text.append(f"\n### {gpu}\nms per fill (TB/s written), CUDA events, median.\n\n" + md(
            ["distribution", "dtype", "n", "fm portable", "fm curand", "CuPy", "torch", "notes", "run"], rows)
            + runs_list([sel[k] for k in gk if k[0] == gpu], runs))
    return "".join(text) or "No RNG results.\n", g


def dispatch(runs):
    """benchmarks/dispatch.py: per GPU machine, best (calibrated, built-in) against forced cpu / cuda."""
    by_gpu = {d.get("machine", {}).get("nvidia_smi", {}).get("name", NR): (n, d, date) for n, d, date in runs
              if d.get("ops")}
    text, g = [], []
    for gpu, (name, d, date) in sorted(by_gpu.items()):
        text.append(f"\n### {gpu}\n{d.get('machine', {}).get('cpu_model', NR)}, {d.get('threads', NR)} CPU threads; "
                    f"`{name}` ({date}): `{d.get('command', NR)}`; `calibrate(quick=True)` took "
                    f"{d.get('calibrate_quick_s', 0):.1f} s. ms per call (NumPy data), best / the better forced device.\n")
        items = []
        for op, rows in d["ops"].items():
            text.append(f"\n{op}:\n\n" + md(
                ["n", "cpu ms", "cuda ms", "best ms", "best / better", "builtin ms", "builtin / better"],
                [[r["n"], fms(r["cpu"]), fms(r["cuda"]), fms(r["best"]), f3(r["best_over_better"], ".2f"),
                  fms(r["best-builtin"]), f3(r["builtin_over_better"], ".2f")] for r in rows]))
            items += [(f"{op} n={r['n']}", r["best_over_better"]) for r in rows]
        g.append(glance("29", "execution='best' <= 1.10x the better device (every family and size)", gpu, items,
                        1.10, date))
    for name, d, date in runs:
        if d.get("overhead"):
            text.append(f"\nPer-call cost of best over auto (`{name}`, {date}, {d.get('machine', {}).get('cpu_model', NR)}, "
                        f"{d.get('profile', NR)}), us, median of paired rounds (quartiles):\n\n" + md(
                            ["call", "auto us", "best us", "best - auto us"],
                            [[k, f3(v["auto_us"], ".2f"), f3(v["best_us"], ".2f"),
                              f"{v['best_minus_auto_us']:+.3f} ({v['quartiles_us'][0]:+.3f} .. {v['quartiles_us'][1]:+.3f})"]
                             for k, v in d["overhead"].items()]))
    return "".join(text) or "No dispatch results yet.\n", g


def pipeline(runs):
    """benchmarks/pipeline.py: per GPU machine, GPU-with-transfers off / on against the copy and compute floors."""
    by_gpu = {d.get("machine", {}).get("nvidia_smi", {}).get("name", NR): (n, d, date) for n, d, date in runs
              if d.get("rows")}
    text, g = [], []
    for gpu, (name, d, date) in sorted(by_gpu.items()):
        text.append(f"\n### {gpu}\n{d.get('machine', {}).get('cpu_model', NR)}; `{name}` ({date}): "
                    f"`{d.get('command', NR)}`. ms per call, NumPy data; FFT: {d.get('fft_meaning', NR)}.\n\n")
        rows, items = [], []
        for r in d["rows"]:
            off, on, fl = r.get("off", {}), r.get("on", {}), r.get("floors", {})
            if "error" in off or "error" in on or "error" in fl:
                rows.append([r["case"], "error", "", "", "", "", "", "", ""])
                continue
            rows.append([r["case"], fms(off["ms"]), fms(on["ms"]), f3(r.get("off_over_on"), ".2f"),
                         fms(fl["copy_pageable_ms"]), fms(fl["copy_pinned_ms"]), fms(fl["compute_ms"]),
                         f3(r.get("on_over_max_copy_pageable_compute"), ".2f"),
                         f3(r.get("on_over_max_copy_pinned_compute"), ".2f")])
            items.append((r["case"], r.get("on_over_max_copy_pinned_compute")))  # the stricter floor
        text.append(md(["case", "off ms", "on ms", "off / on", "copy pageable ms", "copy pinned ms", "compute ms",
                        "on / max(pageable, compute)", "on / max(pinned, compute)"], rows))
        g.append(glance("29", "pipelined GPU+transfers <= 1.15x max(pinned copy in + out, compute)", gpu, items, 1.15,
                        date))
    return "".join(text) or "No pipeline results yet (`benchmarks/pipeline.py` on a GPU machine).\n", g


def per_gpu(fn, runs, *extra):
    """fn's section once per GPU the runs were measured on (extra goes with the first)."""
    gpus, text, g = sorted({d.get("machine", {}).get("gpu_name", NR) for _, d, _ in runs}) or [NR], [], []
    for i, gpu in enumerate(gpus):
        t, gg = fn([r for r in runs if r[1].get("machine", {}).get("gpu_name", NR) == gpu], *(extra if i == 0 else ([],) * len(extra)))
        text.append((f"\n### {gpu}\n" if len(gpus) > 1 else "") + t)
        g += gg
    return "".join(text), g


def distributed(runs, model_runs):
    """Distributed FFT / ScaLAPACK on CPU ranks (benchmarks/distributed.py), and its alpha-beta model."""
    text, g = [], []
    latest_np = {}  # (tag, np, sizes) -> (run, JSON name, date, JSON): the newest run of each np and size set
    for name, d, date in runs:
        for run in d.get("runs", []):
            latest_np[(d.get("machine", {}).get("tag", NR), run["np"], json.dumps(d.get("sizes")))] = (run, name, date, d)
    for tag in sorted({k[0] for k in latest_np}):
        picked = [latest_np[k] for k in sorted(k for k in latest_np if k[0] == tag)]
        _, name, date, d = max(picked, key=lambda x: x[2])
        m = d.get("machine", {})
        text.append(f"\n### {tag}\nCPU {m.get('cpu_model', NR)} ({m.get('cores', NR)} cores), ISA "
                    f"{', '.join(m.get('isa', [])) or NR}, BLAS core {m.get('blas_core', NR)}; {d.get('mpi', NR)}. Runs: "
                    + "; ".join(f"np = {', '.join(str(r['np']) for r, n2, _, _ in picked if n2 == n)}: `{short(n)}` "
                                f"({dt}, sizes {dd.get('size', NR)}, FFTW effort {dd.get('effort', NR)}: `{dd.get('command', NR)}`)"
                                for n, (dt, dd) in {n: (dt, dd) for _, n, dt, dd in picked}.items())
                    + "\n\n")
        rows, srows, fm_items, ch_items, sl_items, ow_items, m4_items = [], [], [], [], [], [], []
        for run in (r for r, _, _, _ in picked):
            over = " (oversubscribed)" if run.get("oversubscribed") else ""
            for r in run.get("fft", []):
                ms, rat = r.get("median_s", {}), r.get("ratios", {})
                shp = "x".join(map(str, r["shape"]))

                def rr(key):
                    v = rat.get(key)
                    return f"{f3(v['median'])} [{f3(v['min'])}, {f3(v['max'])}]" if v else "-"
                m4 = r.get("mpi4py_fft", {})
                rows.append([f"{run['np']}{over}", shp, fms(ms.get("fusemath", 0) * 1e3), fms(ms.get("fftw_mpi", 0) * 1e3),
                             rr("fusemath/fftw_mpi"), rr("fusemath_ow/fftw_mpi"), rr("fusemath_T/fftw_mpi_T"),
                             rr("fusemath_chain/fusemath"),
                             fms(m4["median_s"] * 1e3) if "median_s" in m4 else m4.get("error", "-")[:40],
                             f3(rat.get("fusemath_T/mpi4py_fft (unpaired)", {}).get("median"))])
                for key, items in (("fusemath/fftw_mpi", fm_items), ("fusemath_chain/fusemath", ch_items),
                                   ("fusemath_ow/fftw_mpi", ow_items), ("fusemath_T/mpi4py_fft (unpaired)", m4_items)):
                    if rat.get(key) and not over:
                        items.append((f"np{run['np']} {shp}", rat[key]["median"]))
            for rname, r in (run.get("scalapack") or {}).items():
                srows.append([f"{run['np']}{over}", rname, r["n"], "x".join(map(str, r["grid"])),
                              fms(r["median_s"]["fusemath"] * 1e3), fms(r["median_s"]["scalapack"] * 1e3),
                              f"{f3(r['ratio']['median'])} [{f3(r['ratio']['min'])}, {f3(r['ratio']['max'])}]"])
                if not over:
                    sl_items.append((f"np{run['np']} {rname}", r["ratio"]["median"]))
            for e in run.get("errors", []):
                text.append(f"- np = {run['np']}: {e[:300]}\n")
        text.append(md(["np", "shape (c64)", "fm ms", "FFTW-MPI ms", "fm / FFTW-MPI", "fm overwrite / FFTW-MPI",
                        "fm T / FFTW-MPI T", "chain / plain", "mpi4py-fft ms", "fm T / mpi4py-fft"], rows))
        if srows:
            text.append("\n" + md(["np", "routine", "n", "grid", "fm ms", "ScaLAPACK ms", "fm / ScaLAPACK"], srows))
        g += [glance("30", "CPU distributed FFT <= 1.05x FFTW-MPI's time", tag, fm_items, 1.05, date),
              glance("30", "CPU distributed FFT, overwrite_input, <= 1.05x FFTW-MPI's time", tag, ow_items, 1.05, date),
              glance("30", "CPU distributed prolog + epilog <= 1.15x plain", tag, ch_items, 1.15, date),
              glance("30", "pdgemm / pdgesv through fusemath <= 1.05x ScaLAPACK", tag, sl_items, 1.05, date),
              glance("30", "CPU distributed FFT faster than mpi4py-fft (fm T / mpi4py-fft, unpaired medians)", tag,
                     m4_items, 1.0, date)]
    for name, d, date in model_runs[-1:]:
        rows = [[r["gpus"], fms(r["transposed_out"]["local_s"] * 1e3), fms(r["transposed_out"]["pack_s"] * 1e3),
                 fms(r["transposed_out"]["exchange_s"] * 1e3), fms(r["transposed_out"]["total_s"] * 1e3),
                 fms(r["restored"]["total_s"] * 1e3)] for r in d.get("gpu_1024", [])]
        chk = [[f"{c['n']}^3", fms(c["measured_s"] * 1e3), fms(c["total_s"] * 1e3)] for c in d.get("gpu_check", [])]
        ib = d.get("ib_assumed", {})
        text.append(f"\n### Model: 1024^3 c64 slab FFT on GPUs (`{short(name)}`, {date})\nT = local cuFFT (one "
                    f"H200's time / p) + a packing pass per exchange + sum over messages (alpha + bytes / beta); "
                    f"alpha {d['gpu']['alpha_s'] * 1e6:.0f} us, beta {d['gpu']['beta_Bps'] / 1e9:.0f} GB/s (NVLink, "
                    f"../shared/GPU-MACHINE.md); 64 GPUs assumed as {ib.get('gpus_per_node')} a node, InfiniBand "
                    f"{ib.get('line_rate')}: alpha {ib.get('alpha_s', 0) * 1e6:.0f} us, beta "
                    f"{ib.get('beta_Bps', 0) / 1e9:.0f} GB/s (assumptions, to be checked on a multi-GPU machine).\n\n"
                    + md(["GPUs", "local ms", "pack ms", "exchange ms", "total ms (transposed out)",
                          "total ms (restored, 2 exchanges)"], rows)
                    + "\nThe model against the 2-GPU measurement it is built from:\n\n"
                    + md(["size", "measured ms", "model ms"], chk))
        cpu = d.get("cpu", {})
        if "alpha_s" in cpu:
            crow = [[c["np"], "x".join(map(str, c["shape"])), c["impl"], fms(c["measured_s"] * 1e3),
                     fms(c["model_s"] * 1e3), "yes" if c.get("oversubscribed") else "no"] for c in cpu["fft_checks"]]
            text.append(f"\nCPU ranks ({cpu.get('machine', NR)}, fit on `{cpu.get('calibration', NR)}`): alpha "
                        f"{cpu['alpha_s'] * 1e6:.2f} us, beta {cpu['beta_Bps'] / 1e9:.2f} GB/s from MPI_Alltoall at "
                        f"{len(cpu['fit'])} sizes; the FFT predicted as the np = 1 time / np + the exchanges:\n\n"
                        + md(["np", "shape", "impl", "measured ms", "model ms", "oversubscribed"], crow))
    return "".join(text), g


def distributed_gpu(runs):
    """GPU ranks of the distributed FFT (benchmarks/distributed.py --gpu): the newest run per (machine, np, shape)."""
    latest = {}
    for name, d, date in runs:
        for run in d.get("runs", []):
            for r in run.get("rows", []):
                latest[(d.get("machine", {}).get("tag", NR), run["np"], tuple(r["shape"]))] = (run, r, name, date, d)
    text = []
    for tag in sorted({k[0] for k in latest}):
        picked = [latest[k] for k in sorted(k for k in latest if k[0] == tag)]
        rows = []
        for run, r, name, date, d in picked:
            ms = {k: v * 1e3 for k, v in r.get("median_s", {}).items()}
            ex = r.get("describe", {}).get("dist_slab", "")
            ex = ex[ex.find("exchange=") + 9:].split(" order=")[0] if "exchange=" in ex else NR
            rows.append([run["np"], run.get("gpus", NR), "x".join(map(str, r["shape"])), fms(ms.get("dist_slab", 0)),
                         fms(ms.get("dist_T", 0)), f3(r.get("ratios", {}).get("dist_chain/dist_slab")),
                         fms(ms.get("dist_pencil", 0)) if "dist_pencil" in ms else "-",
                         fms(ms.get("local_fft", 0)), fms(ms.get("pack_est", 0)),
                         fms(ms.get("staged_exchange_est", 0)) if r.get("pinned_estimate") else "-",
                         fms(ms.get("one_gpu", 0)), f"{r.get('rel_err_vs_one_gpu', 0):.2g}", ex, f"`{short(name)}`"])
        gpu = picked[-1][4].get("machine", {}).get("nvidia_smi", {}).get("name", NR)
        text.append(f"\n### GPU ranks: {tag} ({gpu})\nms per call, the maximum over ranks; local FFT and packing"
                    f" are one rank's; staged exchange = one exchange of the slab outside the library (pinned host"
                    f" buffers, MPI_Alltoall; runs before 2026-12-04 timed pageable copies and are not shown); one GPU"
                    f" = the whole transform on one GPU (fusemath's cuFFT path).\n\n"
                    + md(["np", "GPUs", "shape (c64)", "slab ms", "transposed ms", "chain / plain", "pencil ms",
                          "local FFT ms", "pack ms", "staged exchange ms", "one GPU ms", "rel. error", "exchange",
                          "run"], rows)
                    + runs_list([(None, n) for _, _, n, _, _ in picked], runs))
    return "".join(text), []


def host_overhead(runs):
    """benchmarks/host_overhead_ab.py: the newest before/after run per machine (issue 25's reshape)."""
    latest = {}
    for name, d, date in runs:  # (untagged runs name the host: the H200 machine's is "vm")
        tag = d.get("meta", {}).get("machine", NR)
        latest[{"vm": "h200"}.get(tag, tag)] = (name, d, date)
    text, g = [], []
    for tag, (name, d, date) in sorted(latest.items()):
        meta = d.get("meta", {})
        rows, items = [], []
        for case, c in d.get("cases", {}).items():
            rows.append([case, f"{c['a_us']:.2f}", f"{c['b_us']:.2f}",
                         f"{c['b_minus_a_us']:+.2f} ({c['diff_min']:+.2f} .. {c['diff_max']:+.2f})"])
            gpu_raw = case.startswith("gpu") and "minus reference" not in case and "reference" not in case
            if not gpu_raw and "(in-process reference)" not in case:  # GPU cases count less the reference
                items.append((case.replace(" minus reference", " (referenced)"), c["b_minus_a_us"]))
        text.append(f"\n### {tag}\nCPU {meta.get('cpu', NR)} ({meta.get('nproc', NR)} threads, ISA {meta.get('isa', NR)}); "
                    f"`{short(name)}` ({date}): `{meta.get('command', NR)}`. A = {meta.get('a', NR)}, B = "
                    f"{meta.get('b', NR)}; us per call, median over {meta.get('rounds', NR)} paired rounds (GPU cases: "
                    f"{meta.get('gpu_rounds', '-')}) and the spread of B - A.\n\n"
                    + md(["case", "A us", "B us", "B - A us (spread)"], rows))
        g.append(glance("25", "host overhead growth across the reshape <= 0.2 us", tag, items, 0.2, date, " us"))
    return "".join(text), g


def render() -> str:
    parts = {"matmul_cpu": matmul_cpu(load("matmul_cpu-")),
             "matmul_gpu": per_gpu(matmul_gpu, load("matmul_gpu-"), load("host_overhead_gpu-")),
             "fft_gpu": per_gpu(fft_gpu, load("fft_gpu-")), "fft_cpu": fft_cpu(load("fft_cpu-")),
             "rng": rng(load("rng-")),
             "solve_cpu": solve_cpu(load("solve_cpu-")),
             "solve_gpu": solve_gpu(load("solve_gpu-")),
             "dispatch": dispatch(load("dispatch-")), "pipeline": pipeline(load("pipeline-")),
             "distributed": distributed(load("distributed-"), load("distributed_model-")),
             "distributed_gpu": distributed_gpu(load("distributed_gpu-")),
             "host_overhead": host_overhead(load("host_overhead_ab-")),
             "crossover": (crossover(load("matmul_crossover-", "fft_crossover-", "rng_crossover-",
                                                  "solve_crossover-")), [])}
    with open(os.path.join(HERE, "perf_template.md")) as f:
        text = f.read().replace("{glance}", md(["issue", "target", "machine", "latest (date)", "status"],
                                               [row for _, g in parts.values() for row in g if row]))
    for key, (t, _) in parts.items():
        text = text.replace("{" + key + "}", t)
    return text


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
    print("wrote docs/performance.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
