"""Run torch's and fusemath's call for a few matmul cases once each, with a marker line on stderr
before each, so that benchmarks/cublaslt_call_trace.c (LD_PRELOAD) shows what each passes to
cublasLtMatmul. fusemath's call is its default plan (no autotune), as matmul_gpu.py's first plan.

    LD_PRELOAD=$PWD/build/benchmarks/cublaslt_call_trace.so python benchmarks/matmul_gpu_lt_compare.py 2> trace.txt
    python benchmarks/matmul_gpu_lt_compare.py --swap trace.txt bf16   # prints LT_SWAP_ALGO's value

--swap reads such a trace and prints "<fusemath's algo>/<torch's algo>" for the case, for the shim
to run torch's exact algorithm inside fusemath's calls (empty when both passed the same one),
and on stderr the descriptor and layout fields in which the two calls differ.
"""
import sys

CASES = [("bf16", (8192, 8192, 8192), True), ("fp16", (8192, 8192, 8192), True), ("fp32", (1024, 1024, 1024), True),
         ("fp64", (8192, 8192, 8192), False)]


def mark(text):
    sys.stderr.flush()
    print(f"CASE {text}", file=sys.stderr, flush=True)


def calls_by_case(path):
    """case name -> {"torch": [(header, algo line, attrs line)], "fusemath": [...]} from a trace."""
    out, cur = {}, None
    lines = open(path).read().splitlines()
    for i, line in enumerate(lines):
        if line.startswith("CASE "):
            parts = line.split()
            cur = out.setdefault(parts[1], {}).setdefault(parts[3], []) if len(parts) > 3 and parts[3] in (
                "torch", "fusemath") else None
        elif line.startswith("LTCALL") and cur is not None and i + 2 < len(lines):
            cur.append((line, lines[i + 1], lines[i + 2]))
    return out


def swap(path, case):
    calls = calls_by_case(path).get(case, {})
    t, f = calls.get("torch"), calls.get("fusemath")
    if not t or not f:  # the shim prints a call only once: no fusemath line means the very same call
        print(f"{case}: torch calls {len(t or [])}, fusemath calls {len(f or [])}", file=sys.stderr)
        return 0
    raw = [c[1].split("raw")[1].split() for c in (f[-1], t[-1])]
    print(" ".join(raw[0]) + "/" + " ".join(raw[1]))
    for label, a, b in (("header", f[-1][0], t[-1][0]), ("algo", f[-1][1], t[-1][1])):
        if a.split()[2:] != b.split()[2:]:
            print(f"{label}: fusemath {a.strip()}\n{'':>{len(label) + 2}}torch    {b.strip()}", file=sys.stderr)
    fa, ta = f[-1][2].split(), t[-1][2].split()
    print("attributes only fusemath:", sorted(set(fa) - set(ta)), file=sys.stderr)
    print("attributes only torch:   ", sorted(set(ta) - set(fa)), file=sys.stderr)
    return 0


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--swap":
        return swap(sys.argv[2], sys.argv[3])
    import torch

    import fusemath
    torch.backends.cuda.matmul.allow_tf32 = False
    for name, (m, n, k), fused in CASES:
        dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp64": torch.float64}[name]
        a = torch.randn(m, k, device="cuda", dtype=dt)
        b = torch.randn(k, n, device="cuda", dtype=dt)
        bias = torch.randn(n, device="cuda", dtype=dt)
        mark(f"{name} {m}x{n}x{k} torch")
        t = torch._addmm_activation(bias, a, b) if fused else torch.mm(a, b)
        torch.cuda.synchronize()
        mark(f"{name} {m}x{n}x{k} fusemath")
        f = fusemath.matmul(a, b, bias=bias, epilogue="bias+relu") if fused else fusemath.matmul(a, b)
        torch.cuda.synchronize()
        err = ((f.double() - t.double()).abs().max() / t.double().abs().max()).item()
        mark(f"{name} done, max relative difference {err:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
