#!/usr/bin/env bash
# device_gpu.sh: everything fusemath checks and measures on the GPU machine, offline, in one call
# (benchmarks/README.md). Run from the checkout there with $OUT set; what lands in $OUT comes back:
#   STEPS="wheels build ctest pytest sanitizer" bash benchmarks/device_gpu.sh         # the GPU tests
#   STEPS="wheels build bench crossover" BENCH_ARGS="--autotune" bash benchmarks/device_gpu.sh
#   STEPS="wheels build fft fftcpu" bash benchmarks/device_gpu.sh
#   STEPS="build matmulcpu hostc" bash benchmarks/device_gpu.sh
#   STEPS="wheels build rng" bash benchmarks/device_gpu.sh                              # RNG, CPU and GPU
#   STEPS="build dist" DIST_ARGS="--nps 4" bash benchmarks/device_gpu.sh               # distributed, CPU ranks
#   STEPS="build pipeline" bash benchmarks/device_gpu.sh                                # pipelined transfers
#   STEPS="build split" bash benchmarks/device_gpu.sh                                   # split cpu + GPU execution
#   STEPS="build solvegpu" SOLVEGPU_ARGS="--routines solve_refine" bash benchmarks/device_gpu.sh # dense solvers, GPU
#   STEPS="build distgpu" bash benchmarks/device_gpu.sh                                 # distributed, GPU ranks
# A call may run 600 s, less than all steps on a fresh machine. Steps (in this order): wheels build ctest
# pytest pytestcpu sanitizer bench crossover heat fftcpu fft rng dispatch solvegpu pipeline split matmulcpu dist
# distgpu hostc; what each runs, its *_ARGS
# and T_<STEP> limit, and the files it leaves in $OUT: benchmarks/README.md. No step starts after
# DEADLINE_S (570 s); the Python benchmarks get --max-seconds so that they still write their JSON.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
OUT=${OUT:-/tmp/fusemath-device-out}
mkdir -p "$OUT"
STEPS=${STEPS:-"wheels build ctest pytest sanitizer"}
DEADLINE_S=${DEADLINE_S:-570}
VPY=$PWD/.venv/bin/python
SUMMARY=$OUT/summary.txt
START=$SECONDS
FAILED=0
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} # never NVLink multicast (device notes)
export FUSEMATH_SETUP_OFFLINE=${FUSEMATH_SETUP_OFFLINE:-1} # nothing can be fetched there: no waiting on downloads
[[ -d /tmp/site ]] && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}

say() { echo "$*" | tee -a "$SUMMARY"; }
want() { [[ " $STEPS " == *" $1 "* ]]; }
# run_step NAME LIMIT LOG TAIL command...: bounded by min(LIMIT, time left), output into LOG, a result
# line and LOG's last TAIL lines into the summary
run_step() {
  local name=$1 limit=$2 log=$3 tail_n=$4 t0=$SECONDS left rc tmp
  shift 4
  left=$((DEADLINE_S - (SECONDS - START) - 10))
  ((left < limit)) && limit=$left
  if ((limit < 20)); then say "[$name] skipped: no time left"; return 0; fi
  tmp=$(mktemp)
  timeout -k 10 "$limit" "$@" >"$tmp" 2>&1
  rc=$?
  { echo "== $*"; cat "$tmp"; } >>"$log"
  case $rc in
    0) say "[$name] ok ($((SECONDS - t0)) s)" ;;
    124 | 137) FAILED=1; say "[$name] TIMED OUT ($((SECONDS - t0)) s)" ;;
    *) FAILED=1; say "[$name] FAILED, exit status $rc ($((SECONDS - t0)) s)" ;;
  esac
  tail -n "$tail_n" "$tmp" | sed 's/^/    /' | tee -a "$SUMMARY"
  rm -f "$tmp"
}
max_s() { echo $((DEADLINE_S - (SECONDS - START) - 55)); } # for --max-seconds: the time left, less margin

: >"$SUMMARY"
{
  echo "== fusemath device_gpu.sh, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), steps: $STEPS"
  echo "host $(hostname), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -n1)"
} | tee -a "$SUMMARY"

if want wheels; then
  if ls .whl/nvmath_python-*.whl >/dev/null 2>&1; then
    pipi() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$@"; }
    run_step wheels "${T_WHEELS:-90}" "$OUT/build.log" 2 bash -c "$(declare -f pipi); pipi .whl/nvmath_python-*.whl &&
      { PYTHONPATH=/tmp/site python3 -c 'import nvmath.linalg.advanced' || pipi .whl/fallback/*.whl; } &&
      PYTHONPATH=/tmp/site python3 -c 'import nvmath, nvmath.linalg.advanced; print(\"nvmath-python\", nvmath.__version__)'"
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  else
    say "[wheels] skipped: no .whl/nvmath_python-*.whl (name .whl in the device call's carry)"
  fi
fi
# (FUSEMATH_WITH_DIST_GPU=ON: the distributed layer's GPU-rank module is required, not just looked for)
want build && run_step build "${T_BUILD:-420}" "$OUT/build.log" 3 bash -c "FUSEMATH_WITH_DIST_GPU=ON make build FUSEMATH_WITH_CUDA=ON JOBS=$(nproc) &&
  cmake -S . -B build -DFUSEMATH_BUILD_BENCHMARKS=ON >/dev/null && cmake --build build --parallel $(nproc) &&
  ls build/benchmarks/cublaslt_bare build/benchmarks/cufft_bare"
# shellcheck disable=SC2086  # the *_ARGS are lists of words
want ctest && run_step ctest "${T_CTEST:-300}" "$OUT/ctest.log" 3 ctest --test-dir build --output-on-failure ${CTEST_ARGS:-}
want pytest && run_step pytest "${T_PYTEST:-300}" "$OUT/pytest_gpu.log" 1 \
  "$VPY" -m pytest -q -m gpu -p no:cacheprovider ${PYTEST_PATHS:-tests/python} ${PYTEST_ARGS:-}
want pytestcpu && run_step pytestcpu "${T_PYTEST:-300}" "$OUT/pytest_cpu.log" 1 \
  "$VPY" -m pytest -q -m "not gpu" -p no:cacheprovider tests/python

if want sanitizer; then
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  # ctest's own command lines (and working directories) of the tests matching SANITIZER_TESTS (the ones
  # that run CUDA work: the no-CUDA modes of test_cuda_module and the NEEDED check have none to check)
  ctest --test-dir build --show-only=json-v1 2>/dev/null | PAT=${SANITIZER_TESTS:-"_gpu$|^test_cuda_staging$|^test_cuda_module(_rows)?$"} WD=$PWD/build/tests python3 -c '
import json, os, re, shlex, sys
for t in json.load(sys.stdin).get("tests", []):
    if re.search(os.environ["PAT"], t["name"]) and t.get("command"):
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        print("cd " + shlex.quote(props.get("WORKING_DIRECTORY") or os.environ["WD"]) + " && exec " + shlex.join(t["command"]))
' >"$OUT/sanitizer_cmds.txt"
  san() { FM_TEST_UNDER_SANITIZER=1 "$SAN" --tool memcheck --leak-check full --error-exitcode 86 --print-limit 50 "$@"; }
  while read -r cmd; do
    run_step "sanitizer ${cmd##*/}" 120 "$OUT/sanitizer.log" 1 bash -c "$(declare -f san); SAN=$SAN; ${cmd/exec /san }"
  done <"$OUT/sanitizer_cmds.txt"
  # (the out-of-memory test's deliberate cudaMalloc failure would count as an API error)
  run_step "sanitizer python" "${T_SANITIZER:-300}" "$OUT/sanitizer.log" 1 "$SAN" --tool memcheck --error-exitcode 86 \
    --print-limit 50 "$VPY" -m pytest -q -m gpu -p no:cacheprovider -k "not out_of_memory" ${SANITIZER_PYTEST:-tests/python/test_gpu.py}
  rm -f "$OUT/sanitizer_cmds.txt"
fi

want bench && run_step bench "${T_BENCH:-400}" "$OUT/bench.log" 60 "$VPY" benchmarks/matmul_gpu.py --require-gpu \
  --max-seconds "$(max_s)" --out "$OUT/matmul_gpu.json" ${BENCH_ARGS:-}
want crossover && run_step crossover "${T_CROSSOVER:-240}" "$OUT/bench.log" 40 "$VPY" benchmarks/crossover.py \
  --out-dir "$OUT" ${CROSSOVER_ARGS:-}
if want heat; then
  for dev in cuda cpu; do
    run_step "heat $dev" "${T_HEAT:-120}" "$OUT/bench.log" 3 build/tests/example_heat2d_spectral ${HEAT_ARGS:-1024 50} $dev
  done
fi
want fftcpu && run_step fftcpu "${T_FFTCPU:-400}" "$OUT/bench.log" 30 "$VPY" benchmarks/fft_cpu.py \
  --machine-tag h200-host --out "$OUT/fft_cpu.json" ${FFTCPU_ARGS:-}
want fft && run_step fft "${T_FFT:-420}" "$OUT/bench.log" 30 "$VPY" benchmarks/fft_gpu.py --require-gpu \
  --max-seconds "$(max_s)" --out "$OUT/fft_gpu.json" ${FFT_ARGS:-}
want rng && run_step rng "${T_RNG:-420}" "$OUT/bench.log" 40 "$VPY" benchmarks/rng.py --machine-tag h200-host \
  --max-seconds "$(max_s)" --out "$OUT/rng.json" ${RNG_ARGS:-}
# (a cache directory of its own: the calibration it saves must not reach later steps or runs)
want dispatch && run_step dispatch "${T_DISPATCH:-420}" "$OUT/bench.log" 50 env FUSEMATH_CACHE_DIR=/tmp/fm-dispatch-cache \
  "$VPY" benchmarks/dispatch.py --out-dir "$OUT" ${DISPATCH_ARGS:-}
want solvegpu && run_step solvegpu "${T_SOLVEGPU:-540}" "$OUT/bench.log" 60 "$VPY" benchmarks/solve_gpu.py \
  --machine-tag h200 --out "$OUT/solve_gpu.json" ${SOLVEGPU_ARGS:-}
want pipeline && run_step pipeline "${T_PIPELINE:-420}" "$OUT/bench.log" 20 "$VPY" benchmarks/pipeline.py \
  --out-dir "$OUT" ${PIPELINE_ARGS:---calibrate}
want split && run_step split "${T_SPLIT:-480}" "$OUT/bench.log" 30 env FUSEMATH_CACHE_DIR=/tmp/fm-split-cache \
  "$VPY" benchmarks/split.py --out-dir "$OUT" ${SPLIT_ARGS:-}
want matmulcpu && run_step matmulcpu "${T_MATMULCPU:-360}" "$OUT/bench.log" 20 "$VPY" benchmarks/matmul_cpu.py \
  --machine-tag h200-host --out "$OUT/matmul_cpu.json" ${MATMULCPU_ARGS:-}
# the distributed layer on the host's CPU ranks (mpirun -np 1, 2, 4: DIST_ARGS="--nps 4" etc. to split it
# over calls); needs Open MPI, FFTW-MPI and ScaLAPACK there (else libfusemath_mpi is not built: it says so)
want dist && run_step dist "${T_DIST:-540}" "$OUT/bench.log" 40 "$VPY" benchmarks/distributed.py \
  --machine-tag h200-host --out "$OUT/distributed.json" ${DIST_ARGS:-}
# the distributed layer's GPU ranks: its GPU tests, slabs and pencils (2 ranks sharing the one GPU: the staged exchange; NCCL
# where each rank has a GPU) and benchmarks/distributed.py --gpu (DISTGPU_ARGS="--nps 2 --exchange nccl" on
# nvidia-h200-x2); needs Open MPI and mpi4py there (FFTW-MPI and ScaLAPACK are optional)
want distgpu && run_step distgpu-tests "${T_DISTGPU:-300}" "$OUT/distgpu.log" 3 bash -c \
  "ctest --test-dir build --output-on-failure -R 'test_dist_fft_gpu|test_dist_fft_pencil_gpu' && \
   '$VPY' -m pytest -q -p no:cacheprovider tests/python/test_distributed_gpu.py"
want distgpu && run_step distgpu-bench "${T_DISTGPU:-300}" "$OUT/distgpu.log" 20 "$VPY" benchmarks/distributed.py \
  --gpu --machine-tag "${DISTGPU_TAG:-h200}" --out "$OUT/distributed_gpu.json" ${DISTGPU_ARGS:-}
if want hostc; then
  hc() { # one JSON object: the runs of host_overhead_gpu, date and machine
    echo "{\"benchmark\": \"build/benchmarks/host_overhead_gpu N f32|bf16\", \"date\": \"$(date -u '+%Y-%m-%dT%H:%M')\","
    echo " \"machine\": \"$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n1)\", \"runs\": ["
    local sep="" r
    for c in ${HOSTC_CASES:-64:f32 64:bf16 1024:bf16 4096:bf16}; do
      r=$(build/benchmarks/host_overhead_gpu "${c%%:*}" "${c##*:}") || return 1
      echo "$sep$r"
      sep=","
    done
    echo "]}"
  }
  run_step hostc "${T_HOSTC:-120}" "$OUT/bench.log" 2 bash -c "$(declare -f hc); hc >'$OUT/host_overhead_gpu.json' &&
    python3 -m json.tool '$OUT/host_overhead_gpu.json' >/dev/null && echo host_overhead_gpu.json written ||
    { rm -f '$OUT/host_overhead_gpu.json'; false; }"
fi

# at most 8 files come back: the logs packed first, then everything but the summary
nfiles() { find "$OUT" -mindepth 1 -maxdepth 1 | wc -l; }
if (($(nfiles) > 8)); then (cd "$OUT" && tar czf logs.tgz ./*.log && rm -f ./*.log); fi
if (($(nfiles) > 8)); then
  tar czf /tmp/results.tgz -C "$OUT" --exclude=./summary.txt . &&
    find "$OUT" -mindepth 1 -maxdepth 1 ! -name summary.txt -exec rm -rf {} + && mv /tmp/results.tgz "$OUT/"
fi
say "== done in $((SECONDS - START)) s: $(find "$OUT" -mindepth 1 -maxdepth 1 -printf '%f ' | sort)"
if ((FAILED)); then say "== some steps FAILED (see above)"; else say "== all steps run passed"; fi
exit "$FAILED"
