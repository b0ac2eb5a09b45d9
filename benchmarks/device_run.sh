#!/usr/bin/env bash
# One call on the GPU machine (see .library/device): build from this tree offline,
# run the whole test suite (GPU-marked tests included) and the CPU benchmarks, and
# leave logs + JSON in $OUT (at most 8 files come back, two folders deep).
#   usage there: bash benchmarks/device_run.sh
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-/tmp/fusemath-device-out}
mkdir -p "$OUT/bench"
export PYTHONUNBUFFERED=1
{ date -u; nproc; lscpu | grep -E 'Model name|^CPU\(s\)|L2|L3'; nvidia-smi -L; } >"$OUT/machine.txt" 2>&1
make test >"$OUT/make_test.log" 2>&1
echo "make test rc=$?" | tee -a "$OUT/make_test.log"
tail -5 "$OUT/make_test.log"
# Panel heights and the two CPU strategies against OpenBLAS threading the plain product
# (SWEEP=0 skips it).
[ "${SWEEP:-1}" = 0 ] || for c in "f32 1024 1024 1024 5" "f32 2048 2048 2048 3" "f32 4096 4096 4096 2" "f64 1024 1024 1024 5" \
         "f64 2048 2048 2048 3" "f64 4096 4096 4096 2" "f32 8192 1024 64 10" "f32 16384 512 128 10" \
         "f64 8192 1024 64 10" "f64 16384 512 128 10"; do
  build/benchmarks/panel_sweep $c b,64,128,256,512,1024
done >"$OUT/panel_sweep.jsonl" 2>&1
echo "panel_sweep rc=$?"
.venv/bin/python benchmarks/matmul_cpu.py --machine-tag h200-host --budget "${BUDGET:-0.5}" --autotune \
  --out "$OUT/matmul_cpu-h200-host.json" >"$OUT/matmul_cpu.log" 2>&1
echo "matmul_cpu rc=$?"
tail -75 "$OUT/matmul_cpu.log"
.venv/bin/python -m fusemath.bench --out-dir "$OUT/bench" >"$OUT/bench.log" 2>&1
echo "bench rc=$?"
tail -30 "$OUT/bench.log"
