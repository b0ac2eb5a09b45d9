#!/usr/bin/env bash
# device_gpu.sh: everything fusemath needs checked on the GPU machine, in one call, offline.
# Run from anywhere inside the checkout there, with $OUT set (what lands in $OUT comes back):
#
#   STEPS="wheels build ctest pytest sanitizer" bash benchmarks/device_gpu.sh     # call 1: tests
#   STEPS="wheels build crossover bench" bash benchmarks/device_gpu.sh            # call 2: benchmarks
#   bash benchmarks/device_gpu.sh          # all steps: does not fit in one call on a fresh machine
#
# One device call may run 600 s. All steps together need more than that on a fresh machine
# (build ~2-3 min; ctest several minutes: test_nvrtc_cache alone took 225 s on the 2-core
# development VM; the sanitizer 1-3 min; matmul_gpu.py 3-5 min), hence the two calls above
# (the second rebuilds if the machine went cold in between). Every step has its own time
# limit, and none starts after the call's own deadline (DEADLINE_S, default 570 s after the
# start); matmul_gpu.py runs last and is told how long it may take (--max-seconds = what is
# left - 45 s), so that it still writes its JSON.
#
# Steps (STEPS, in this order whatever the order given):
#   wheels     install the carried wheels (.whl/, see below) into /tmp/site, PYTHONPATH=/tmp/site
#   build      make build (scripts/setup.sh installs only what is missing, works offline)
#   ctest      ctest --test-dir build --output-on-failure (all tests, gpu label included; CTEST_ARGS)
#   pytest     .venv/bin/python -m pytest -q -m gpu tests/python        (PYTEST_ARGS: extra args)
#   pytestcpu  .venv/bin/python -m pytest -q -m "not gpu" tests/python (the CPU tests on 16 cores)
#   sanitizer  compute-sanitizer --tool memcheck on the C GPU tests (names matching SANITIZER_TESTS,
#              default "gpu|cuda": all of them; "^$" runs none; --leak-check SANITIZER_LEAK, default full)
#              and on a short Python GPU subset (SANITIZER_PYTEST, default tests/python/test_gpu.py)
#   crossover  benchmarks/crossover.py (CROSSOVER_ARGS: extra args)
#   bench      benchmarks/matmul_gpu.py --require-gpu (BENCH_ARGS: extra args, e.g. --quick)
#   heat       docs/examples/heat2d_spectral on the GPU and the CPU (HEAT_ARGS, default "1024 50")
#   fftcpu     benchmarks/fft_cpu.py on all cores vs scipy.fft / numpy.fft (FFTCPU_ARGS)
#   fft        benchmarks/fft_gpu.py --require-gpu (FFT_ARGS): fused FFT vs nvmath-python / CuPy /
#              torch, plan creation, host overhead (runs build/benchmarks/cufft_bare)
#   cbcost     build/benchmarks/cufft_callback_cost for each n:batch in CBCOST_SHAPES (what cuFFT's
#              LTO callbacks cost by themselves)
#   matmulcpu  benchmarks/matmul_cpu.py on all cores vs NumPy (MATMULCPU_ARGS) -> matmul_cpu.json
# Time limits (seconds): T_WHEELS T_BUILD T_CTEST T_PYTEST T_SANITIZER T_BENCH T_CROSSOVER.
# (ctest's own per-test TIMEOUT property, 900 s, wins over ctest --timeout: a hanging C test
# costs the whole ctest step. CTEST_ARGS adds arguments, e.g. "-j 8" or "-E test_nvrtc_cache".)
#
# Files in $OUT (at most 8, no folders):
#   summary.txt      machine, then a few lines per step (status, pass/fail counts, tables)
#   build.log        wheel install + make build      ctest.log   pytest_gpu.log   sanitizer.log
#   pytest_cpu.log   (step pytestcpu)
#   bench.log        output of matmul_gpu.py and crossover.py
#   matmul_gpu.json  matmul_gpu.py's JSON; the crossover sweep's JSON is added to it under the
#                    key "crossover_sweep" (written as matmul_crossover.json when there is no
#                    matmul_gpu.json)
#   matmul_crossover.png
#   fft_gpu.json / fft_cpu.json / fft_crossover.png  from the FFT steps
# When more than 8 files would come back, the *.log files are packed into logs.tgz.
# The summary lines are also what the script prints (stdout), step by step.
# Exit status: 0 when every step run passed, else 1.
#
# Wheels: nvmath-python is not installed on the GPU machine and nothing can be fetched there.
# .whl/ (ignored by git) holds nvmath_python-*.whl; .whl/fallback/ holds cuda-core,
# cuda-pathfinder and cuda-bindings wheels, installed only if the machine's own versions do
# not meet nvmath-python's requirements. Pass .whl in the device call's `carry`. The install
# line (the device notes' one; step "wheels" adds fallback wheels to it only where needed):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#     --target /tmp/site .whl/nvmath_python-1.0.0-cp312-cp312-manylinux_2_28_x86_64.whl \
#     && export PYTHONPATH=/tmp/site
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
REPO=$PWD

OUT=${OUT:-/tmp/fusemath-device-out}
mkdir -p "$OUT"
STEPS=${STEPS:-"wheels build ctest pytest sanitizer crossover bench"}
DEADLINE_S=${DEADLINE_S:-570}
T_WHEELS=${T_WHEELS:-90}
T_BUILD=${T_BUILD:-420}
T_CTEST=${T_CTEST:-300}
CTEST_ARGS=${CTEST_ARGS:-}
T_PYTEST=${T_PYTEST:-300}
T_SANITIZER=${T_SANITIZER:-300}
T_BENCH=${T_BENCH:-400}
T_CROSSOVER=${T_CROSSOVER:-240}
BENCH_ARGS=${BENCH_ARGS:-}
T_FFT=${T_FFT:-420}
FFT_ARGS=${FFT_ARGS:-}
T_FFTCPU=${T_FFTCPU:-400}
FFTCPU_ARGS=${FFTCPU_ARGS:-}
T_HEAT=${T_HEAT:-120}
HEAT_ARGS=${HEAT_ARGS:-1024 50}
CROSSOVER_ARGS=${CROSSOVER_ARGS:-}
T_CBCOST=${T_CBCOST:-120}
CBCOST_SHAPES=${CBCOST_SHAPES:-"1024:1 1024:64 4096:4096 1048576:64"}
T_MATMULCPU=${T_MATMULCPU:-360}
MATMULCPU_ARGS=${MATMULCPU_ARGS:-}
PYTEST_ARGS=${PYTEST_ARGS:-}
SANITIZER_TESTS=${SANITIZER_TESTS:-gpu|cuda}
SANITIZER_PYTEST=${SANITIZER_PYTEST:-tests/python/test_gpu.py}
SANITIZER_LEAK=${SANITIZER_LEAK:-full}
SITE=${SITE:-/tmp/site} # where the carried wheels are installed
VPY=$REPO/.venv/bin/python
SUMMARY=$OUT/summary.txt
START=$SECONDS
FAILED=0
export PYTHONUNBUFFERED=1
# never let anything here use NVLink multicast (see the device notes)
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}

: >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
want() { [[ " $STEPS " == *" $1 "* ]]; }
# remaining seconds before the call's deadline
remaining() { echo $((DEADLINE_S - (SECONDS - START))); }
# step_limit T: min(T, remaining - 10), or nothing (and a summary line) when under 20 s are left
step_limit() {
  local t=$1 r
  r=$(($(remaining) - 10))
  ((r < t)) && t=$r
  if ((t < 20)); then
    return 1
  fi
  echo "$t"
}
# tail_of FILE N: the last N lines, indented, into the summary
tail_of() { tail -n "$2" "$1" 2>/dev/null | sed 's/^/    /' | tee -a "$SUMMARY"; }
result() { # result NAME RC SECONDS [note]
  local name=$1 rc=$2 secs=$3 note=${4:-}
  if [[ $rc == 0 ]]; then
    say "[$name] ok (${secs} s)${note:+ - $note}"
  elif [[ $rc == 124 || $rc == 137 ]]; then
    FAILED=1
    say "[$name] TIMED OUT (${secs} s)${note:+ - $note}"
  else
    FAILED=1
    say "[$name] FAILED, exit status $rc (${secs} s)${note:+ - $note}"
  fi
}

# py_step NAME LIMIT TAIL script args...: a Python benchmark step (bounded, its output into
# bench.log, its last TAIL lines into the summary)
py_step() {
  local name=$1 limit=$2 tail_n=$3 t0=$SECONDS lim tmp rc
  shift 3
  if ! lim=$(step_limit "$limit"); then
    say "[$name] skipped: no time left"
    return 0
  fi
  tmp=$(mktemp)
  timeout -k 10 "$lim" "$VPY" "$@" >"$tmp" 2>&1
  rc=$?
  { echo "== $*"; cat "$tmp"; echo; } >>"$OUT/bench.log"
  result "$name" "$rc" $((SECONDS - t0))
  tail_of "$tmp" "$tail_n"
  rm -f "$tmp"
}

if want sanitizer && want bench; then
  echo "note: sanitizer and bench in one call may not fit in 600 s; see the header of this script for the two-call split" >&2
fi

# ---- machine ------------------------------------------------------------------------
{
  echo "== fusemath device_gpu.sh, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), steps: $STEPS"
  echo "host $(hostname), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
  else
    echo "gpu: nvidia-smi not found"
  fi
  echo "python3: $(command -v python3) $(python3 --version 2>&1)"
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -n1 || echo none)"
  echo "compute-sanitizer: $(compute-sanitizer --version 2>/dev/null | tail -n1 || echo none)"
  echo "carried wheels: $(find .whl -name '*.whl' -printf '%P ' 2>/dev/null)"
} | tee -a "$SUMMARY"

# ---- wheels -------------------------------------------------------------------------
if want wheels; then
  t0=$SECONDS
  if ! ls .whl/nvmath_python-*.whl >/dev/null 2>&1; then
    say "[wheels] skipped: no .whl/nvmath_python-*.whl (name .whl in the device call's carry)"
  elif ! lim=$(step_limit "$T_WHEELS"); then
    say "[wheels] skipped: no time left"
  else
    # Fallback wheels only where the machine's own versions miss nvmath-python 1.0's needs
    # (cuda-bindings 13.x >= 13.0.1, cuda-core >= 0.5 < 2, cuda-pathfinder >= 1.5.1 < 2).
    need=$(python3 - <<'EOF'
from importlib import metadata
def ver(name):
    try:
        parts = []
        for p in metadata.version(name).split(".")[:3]:
            digits = "".join(ch for ch in p if ch.isdigit())
            parts.append(int(digits or 0))
        return tuple(parts + [0] * (3 - len(parts)))
    except Exception:
        return None
need = []
for whl, name, lo, hi in (("cuda_bindings", "cuda-bindings", (13, 0, 1), (14, 0, 0)),
                          ("cuda_core", "cuda-core", (0, 5, 0), (2, 0, 0)),
                          ("cuda_pathfinder", "cuda-pathfinder", (1, 5, 1), (2, 0, 0))):
    v = ver(name)
    if v is None or not (lo <= v < hi):
        need.append(whl)
print(" ".join(need))
EOF
)
    wheels=(.whl/nvmath_python-*.whl)
    for w in $need; do
      for f in .whl/fallback/"$w"-*.whl; do [[ -e $f ]] && wheels+=("$f"); done
    done
    {
      echo "== wheels: ${wheels[*]} (fallbacks needed: ${need:-none})"
      # the install line of the device notes, for the wheels chosen above
      timeout -k 10 "$lim" python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" "${wheels[@]}"
    } >>"$OUT/build.log" 2>&1
    rc=$?
    export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
    check=$(timeout -k 10 60 python3 -c 'import nvmath, nvmath.linalg.advanced; print(nvmath.__version__)' 2>&1 | tail -n1)
    if [[ $rc == 0 ]] && ! [[ $check =~ ^[0-9] ]] && [[ -z $need ]]; then
      # the machine's cuda-* packages looked right but nvmath does not import: try all fallbacks
      echo "== nvmath import failed ($check): installing every fallback wheel" >>"$OUT/build.log"
      timeout -k 10 60 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" .whl/fallback/*.whl >>"$OUT/build.log" 2>&1
      check=$(timeout -k 10 60 python3 -c 'import nvmath, nvmath.linalg.advanced; print(nvmath.__version__)' 2>&1 | tail -n1)
    fi
    [[ $rc == 0 && ! $check =~ ^[0-9] ]] && rc=1
    result wheels "$rc" $((SECONDS - t0)) "nvmath-python: $check; fallbacks: ${need:-none}"
    [[ $rc == 0 ]] || tail_of "$OUT/build.log" 3
  fi
elif [[ -d $SITE/nvmath ]]; then
  export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH} # installed by an earlier call on this machine
fi

# ---- build --------------------------------------------------------------------------
if want build; then
  t0=$SECONDS
  if ! lim=$(step_limit "$T_BUILD"); then
    say "[build] skipped: no time left"
  else
    echo "== make build FUSEMATH_WITH_CUDA=${FUSEMATH_WITH_CUDA:-ON}" >>"$OUT/build.log"
    timeout -k 10 "$lim" make build FUSEMATH_WITH_CUDA="${FUSEMATH_WITH_CUDA:-ON}" JOBS="$(nproc)" >>"$OUT/build.log" 2>&1
    rc=$?
    note=$(grep -oE 'CUDA backend (ON|OFF)[^)]*\)?' "$OUT/build.log" | tail -n1 || true)
    result build "$rc" $((SECONDS - t0)) "$note; cublaslt_bare: $([[ -x build/benchmarks/cublaslt_bare ]] && echo built || echo MISSING)"
    [[ $rc == 0 ]] || tail_of "$OUT/build.log" 25
  fi
fi

# ---- ctest --------------------------------------------------------------------------
if want ctest; then
  t0=$SECONDS
  if ! lim=$(step_limit "$T_CTEST"); then
    say "[ctest] skipped: no time left"
  else
    # shellcheck disable=SC2086  # CTEST_ARGS is a list of words
    timeout -k 10 "$lim" ctest --test-dir build --output-on-failure $CTEST_ARGS >"$OUT/ctest.log" 2>&1
    rc=$?
    result ctest "$rc" $((SECONDS - t0)) "$(grep -E 'tests passed|tests failed' "$OUT/ctest.log" | tail -n1)"
    sed -n '/The following tests FAILED/,$p' "$OUT/ctest.log" | head -n 20 | sed 's/^/    /' | tee -a "$SUMMARY"
    grep -E '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*gpu' "$OUT/ctest.log" | sed 's/^/    /' | tee -a "$SUMMARY"
  fi
fi

# ---- pytest -m gpu ------------------------------------------------------------------
# the CPU-side Python tests too, on this host's cores (the dev machine has 2): pytest -m "not gpu"
if want pytestcpu; then
  t0=$SECONDS
  if ! lim=$(step_limit "$T_PYTEST"); then
    say "[pytestcpu] skipped: no time left"
  else
    timeout -k 10 "$lim" "$VPY" -m pytest -q -m "not gpu" -p no:cacheprovider tests/python >"$OUT/pytest_cpu.log" 2>&1
    rc=$?
    result pytestcpu "$rc" $((SECONDS - t0)) "$(grep -E '(passed|failed|skipped|error|no tests ran)' "$OUT/pytest_cpu.log" | tail -n1)"
    [[ $rc == 0 ]] || grep -E '^(FAILED|ERROR) ' "$OUT/pytest_cpu.log" | head -n 20 | sed 's/^/    /' | tee -a "$SUMMARY"
  fi
fi

if want pytest; then
  t0=$SECONDS
  if ! lim=$(step_limit "$T_PYTEST"); then
    say "[pytest] skipped: no time left"
  else
    # shellcheck disable=SC2086  # PYTEST_ARGS is a list of words
    timeout -k 10 "$lim" "$VPY" -m pytest -q -m gpu -p no:cacheprovider tests/python $PYTEST_ARGS >"$OUT/pytest_gpu.log" 2>&1
    rc=$?
    result pytest "$rc" $((SECONDS - t0)) "$(grep -E '(passed|failed|skipped|error|no tests ran)' "$OUT/pytest_gpu.log" | tail -n1)"
    [[ $rc == 0 ]] || grep -E '^(FAILED|ERROR) ' "$OUT/pytest_gpu.log" | head -n 20 | sed 's/^/    /' | tee -a "$SUMMARY"
  fi
fi

# ---- compute-sanitizer ----------------------------------------------------------------
if want sanitizer; then
  t0=$SECONDS
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if ! lim=$(step_limit "$T_SANITIZER"); then
    say "[sanitizer] skipped: no time left"
  elif [[ ! -x $SAN ]]; then
    FAILED=1
    say "[sanitizer] FAILED: compute-sanitizer not found"
  else
    : >"$OUT/sanitizer.log"
    # The C tests to run: ctest's own command lines, names matching SANITIZER_TESTS.
    mapfile -t tests < <(ctest --test-dir build --show-only=json-v1 2>/dev/null |
      SANITIZER_TESTS=$SANITIZER_TESTS DEFAULT_WD=$REPO/build/tests python3 -c '
import json, os, re, shlex, sys
try:
    data = json.load(sys.stdin)
except ValueError:
    sys.exit(0)
pat = re.compile(os.environ["SANITIZER_TESTS"])
for t in data.get("tests", []):
    props = {p["name"]: p["value"] for p in t.get("properties", [])}
    if pat.search(t["name"]) and t.get("command"):  # (every gpu-labelled test has "gpu" in its name)
        wd = props.get("WORKING_DIRECTORY") or os.environ["DEFAULT_WD"]
        print("\t".join([t["name"], wd, shlex.join(t["command"])]))
')
    n_ok=0 n_bad=0 bad=()
    per=$(( (lim - 20) / (${#tests[@]} + 2) )); ((per < 30)) && per=30
    for line in "${tests[@]}"; do
      IFS=$'\t' read -r name wd cmd <<<"$line"
      ((SECONDS - t0 + 20 > lim)) && { echo "== $name: skipped, no time left" >>"$OUT/sanitizer.log"; continue; }
      echo "== $name (memcheck, leak-check $SANITIZER_LEAK): $cmd" >>"$OUT/sanitizer.log"
      # shellcheck disable=SC2086  # cmd is ctest's command line, already quoted by shlex
      (cd "$wd" && FM_TEST_UNDER_SANITIZER=1 eval timeout -k 10 "$per" "$SAN" --tool memcheck --leak-check "$SANITIZER_LEAK" --error-exitcode 86 \
        --print-limit 50 $cmd) >>"$OUT/sanitizer.log" 2>&1
      rc=$?
      echo "== $name: exit status $rc" >>"$OUT/sanitizer.log"
      if [[ $rc == 0 ]]; then n_ok=$((n_ok + 1)); else n_bad=$((n_bad + 1)); bad+=("$name(rc=$rc)"); fi
    done
    # A short Python GPU subset under memcheck (the library through the Python front end).
    plim=$((lim - (SECONDS - t0) - 5))
    if ((plim >= 30)); then
      # The out-of-memory test is left out: its deliberate cudaMalloc failure is reported as an API error.
      echo "== python: pytest -q -m gpu -k 'not out_of_memory' $SANITIZER_PYTEST (memcheck)" >>"$OUT/sanitizer.log"
      # shellcheck disable=SC2086  # SANITIZER_PYTEST is a list of words
      timeout -k 10 "$plim" "$SAN" --tool memcheck --error-exitcode 86 --print-limit 50 \
        "$VPY" -m pytest -q -m gpu -p no:cacheprovider -k "not out_of_memory" $SANITIZER_PYTEST >>"$OUT/sanitizer.log" 2>&1
      rc=$?
      echo "== python: exit status $rc" >>"$OUT/sanitizer.log"
      if [[ $rc == 0 ]]; then n_ok=$((n_ok + 1)); else n_bad=$((n_bad + 1)); bad+=("python(rc=$rc)"); fi
    else
      echo "== python subset: skipped, no time left" >>"$OUT/sanitizer.log"
    fi
    rc=0
    ((n_bad > 0 || n_ok == 0)) && rc=1
    result sanitizer "$rc" $((SECONDS - t0)) "$n_ok clean, $n_bad with errors or failing${bad:+: ${bad[*]}} (86 = memcheck errors)"
    grep -E '^========= ERROR SUMMARY' "$OUT/sanitizer.log" | sort | uniq -c | sed 's/^/    /' | tee -a "$SUMMARY"
  fi
fi

# ---- benchmarks: the crossover sweep first (bounded), then matmul_gpu.py takes what is left
if want crossover; then
  t0=$SECONDS
  if ! lim=$(step_limit "$T_CROSSOVER"); then
    say "[crossover] skipped: no time left"
  else
    tmp=$(mktemp)
    cdir=$(mktemp -d)
    # shellcheck disable=SC2086  # CROSSOVER_ARGS is a list of words
    timeout -k 10 "$lim" "$VPY" benchmarks/crossover.py --out-dir "$cdir" $CROSSOVER_ARGS >"$tmp" 2>&1
    rc=$?
    { echo "== benchmarks/crossover.py $CROSSOVER_ARGS"; cat "$tmp"; echo; } >>"$OUT/bench.log"
    [[ -f $cdir/matmul_crossover.png ]] && cp "$cdir/matmul_crossover.png" "$OUT/"
    [[ -f $cdir/fft_crossover.png ]] && cp "$cdir/fft_crossover.png" "$OUT/"
    [[ -f $cdir/matmul_crossover.json ]] && cp "$cdir/matmul_crossover.json" "$OUT/"
    gpu_rows=$(grep -c '^crossover gpu' "$tmp" 2>/dev/null || true)
    result crossover "$rc" $((SECONDS - t0)) "${gpu_rows:-0} crossover line(s) for GPU modes"
    sed -n '/^ *n |/,$p' "$tmp" | grep -v '^JSON:\|^plot:\|^([0-9]* s)$\|^$' | sed 's/^/    /' | tee -a "$SUMMARY"
    rm -rf "$tmp" "$cdir"
  fi
fi

if want bench; then
  t0=$SECONDS
  if ! lim=$(step_limit "$T_BENCH"); then
    say "[bench] skipped: no time left"
  else
    maxs=$((lim - 45))
    ((maxs < 30)) && maxs=30
    tmp=$(mktemp)
    # shellcheck disable=SC2086  # BENCH_ARGS is a list of words
    timeout -k 10 "$lim" "$VPY" benchmarks/matmul_gpu.py --require-gpu --max-seconds "$maxs" \
      --bare-bin build/benchmarks/cublaslt_bare --out "$OUT/matmul_gpu.json" $BENCH_ARGS >"$tmp" 2>&1
    rc=$?
    { echo "== benchmarks/matmul_gpu.py --max-seconds $maxs $BENCH_ARGS"; cat "$tmp"; echo; } >>"$OUT/bench.log"
    counts=$(python3 - "$OUT/matmul_gpu.json" <<'EOF' 2>/dev/null || echo "no JSON written"
import json, sys
r = json.load(open(sys.argv[1]))
cases = r.get("cases", [])
miss = sum(any(f.startswith("MISS") for f in c.get("flags", [])) for c in cases)
ferr = sum("fused" in c.get("errors", {}) for c in cases)
ho = r.get("host_overhead", {}).get("rows", {})
print(f"{len(cases)} cases timed, {miss} with a target MISS, {ferr} with a fused error, "
      f"{len(r.get('skipped', []))} skipped (time cap); host-overhead rows: {len(ho)}")
EOF
)
    result bench "$rc" $((SECONDS - t0)) "$counts"
    if grep -q '^case (ms, median)\|^host overhead, 64x64x64' "$tmp"; then
      awk '/^case \(ms, median\)|^host overhead, 64x64x64|^skipped \(time cap\)/{p=1} p' "$tmp" | sed 's/^/    /' | tee -a "$SUMMARY"
    else
      tail_of "$tmp" 25
    fi
    rm -f "$tmp"
  fi
fi

# ---- FFT: the heat example on both devices, the CPU FFT benchmark, the GPU FFT benchmark
if want heat; then
  t0=$SECONDS
  if ! lim=$(step_limit "$T_HEAT"); then
    say "[heat] skipped: no time left"
  else
    rc=0
    tmp=$(mktemp)
    for dev in cuda cpu; do
      # shellcheck disable=SC2086  # HEAT_ARGS is a list of words
      { echo "== heat2d_spectral $HEAT_ARGS $dev"; timeout -k 10 "$lim" build/tests/example_heat2d_spectral $HEAT_ARGS $dev; } \
        >>"$tmp" 2>&1 || rc=1
    done
    cat "$tmp" >>"$OUT/bench.log"
    result heat "$rc" $((SECONDS - t0))
    tail_of "$tmp" 20
    rm -f "$tmp"
  fi
fi

# shellcheck disable=SC2086  # FFTCPU_ARGS is a list of words
want fftcpu && py_step fftcpu "$T_FFTCPU" 30 benchmarks/fft_cpu.py --machine-tag h200-host --out "$OUT/fft_cpu.json" \
  $FFTCPU_ARGS

if want fft; then
  t0=$SECONDS
  if ! lim=$(step_limit "$T_FFT"); then
    say "[fft] skipped: no time left"
  else
    maxs=$((lim - 45))
    ((maxs < 30)) && maxs=30
    tmp=$(mktemp)
    # shellcheck disable=SC2086  # FFT_ARGS is a list of words
    timeout -k 10 "$lim" "$VPY" benchmarks/fft_gpu.py --require-gpu --max-seconds "$maxs" \
      --bare-bin build/benchmarks/cufft_bare --out "$OUT/fft_gpu.json" $FFT_ARGS >"$tmp" 2>&1
    rc=$?
    { echo "== benchmarks/fft_gpu.py --max-seconds $maxs $FFT_ARGS"; cat "$tmp"; echo; } >>"$OUT/bench.log"
    result fft "$rc" $((SECONDS - t0))
    tail_of "$tmp" 60
    rm -f "$tmp"
  fi
fi

if want cbcost; then
  t0=$SECONDS
  if ! lim=$(step_limit "$T_CBCOST"); then
    say "[cbcost] skipped: no time left"
  elif [[ ! -x build/benchmarks/cufft_callback_cost ]]; then
    say "[cbcost] skipped: build/benchmarks/cufft_callback_cost not built"
  else
    rc=0
    tmp=$(mktemp)
    for shape in $CBCOST_SHAPES; do # n:batch
      timeout -k 10 "$lim" build/benchmarks/cufft_callback_cost "${shape%%:*}" "${shape##*:}" 50 >>"$tmp" 2>&1 || rc=1
    done
    { echo "== cufft_callback_cost $CBCOST_SHAPES"; cat "$tmp"; echo; } >>"$OUT/bench.log"
    result cbcost "$rc" $((SECONDS - t0))
    tail_of "$tmp" 60
    rm -f "$tmp"
  fi
fi

# shellcheck disable=SC2086  # MATMULCPU_ARGS is a list of words
want matmulcpu && py_step matmulcpu "$T_MATMULCPU" 40 benchmarks/matmul_cpu.py --machine-tag h200-host \
  --out "$OUT/matmul_cpu.json" $MATMULCPU_ARGS

# Keep $OUT at 8 files: the crossover sweep's JSON goes into matmul_gpu.json when both exist.
if [[ -f $OUT/matmul_gpu.json && -f $OUT/matmul_crossover.json ]]; then
  python3 - "$OUT/matmul_gpu.json" "$OUT/matmul_crossover.json" <<'EOF' && rm -f "$OUT/matmul_crossover.json"
import json, sys
with open(sys.argv[1]) as f:
    main = json.load(f)
with open(sys.argv[2]) as f:
    main["crossover_sweep"] = json.load(f)
with open(sys.argv[1], "w") as f:
    json.dump(main, f, indent=1)
    f.write("\n")
EOF
fi

# ---- end ----------------------------------------------------------------------------
nfiles=$(find "$OUT" -mindepth 1 -maxdepth 1 | wc -l)
if ((nfiles > 7)) && ls "$OUT"/*.log >/dev/null 2>&1; then
  (cd "$OUT" && tar czf logs.tgz ./*.log && rm -f ./*.log)
  nfiles=$(find "$OUT" -mindepth 1 -maxdepth 1 | wc -l)
fi
say "== done in $((SECONDS - START)) s; $nfiles file(s) in \$OUT: $(find "$OUT" -mindepth 1 -maxdepth 1 -printf '%f ' | sort)"
((nfiles > 8)) && say "WARNING: more than 8 files in \$OUT: some will not come back"
if ((FAILED)); then say "== some steps FAILED (see above)"; else say "== all steps run passed"; fi
exit "$FAILED"
