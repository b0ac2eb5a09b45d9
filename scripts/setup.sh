#!/usr/bin/env bash
# setup.sh: make this checkout ready to build and test, installing only what is
# missing, so that it is a no-op (and needs no network) on a prepared machine.
#   1. Debian packages (apt-get only if something is missing)
#   2. .venv (python3 -m venv --system-site-packages)
#   3. Python packages whose import fails (pip)
#   4. pip install of fusemath itself into .venv, when sources changed since last time
# Usage: scripts/setup.sh [--tools-only | --fuzz | --run]   (the first two skip step 4; --fuzz also wants
#   clang; --run, for `make run`, leaves out the test-only Python packages, pytest and scipy)
# Env: PYTHON (interpreter for the venv, default python3), VENV (default .venv),
#   SETUP_VERBOSE=1 (the tools' own output on the terminal; by default it goes to $VENV/setup.log
#   and only one line per step is printed, with the log's tail when a step fails).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
# The venv's own bin dir (the Makefile puts it first on PATH) must not be taken for
# the outer interpreter: drop it from PATH, then resolve python3 once and for all.
PATH=$(tr ':' '\n' <<<"$PATH" | grep -vxF "$PWD/$VENV/bin" | paste -sd: -)
PYTHON=$(command -v "$PYTHON") || { echo "setup: $PYTHON not found" >&2; exit 1; }
CMAKE_MIN=3.20 # keep in sync with cmake_minimum_required in CMakeLists.txt
TOOLS_ONLY=0 FUZZ=0 RUN_ONLY=0
# FUSEMATH_SETUP_OFFLINE=1: no attempt at the optional packages (an offline machine, the GPU one, where
# a download can only wait for its timeout); the required ones are still checked.
OFFLINE=${FUSEMATH_SETUP_OFFLINE:-0}
[[ ${1:-} == --run ]] && RUN_ONLY=1
[[ ${1:-} == --tools-only ]] && TOOLS_ONLY=1
[[ ${1:-} == --fuzz ]] && TOOLS_ONLY=1 FUZZ=1 # make fuzz: clang with libFuzzer and OpenMP too

log() { echo "setup: $*" >&2; }
SETUP_LOG=$VENV/setup.log
[[ -f $SETUP_LOG ]] && : >"$SETUP_LOG" # this run's output only
# quiet CMD...: run a step's tool with its output in $SETUP_LOG; on failure show the log's tail.
quiet() {
  [[ ${SETUP_VERBOSE:-0} == 1 ]] && { "$@"; return; }
  mkdir -p "$(dirname "$SETUP_LOG")"
  echo "+ $*" >>"$SETUP_LOG"
  "$@" >>"$SETUP_LOG" 2>&1 && return
  local rc=$?
  ((${OPTIONAL:-0})) && return $rc # the caller says what it does without it
  log "failed (exit $rc): $*; the last lines of $SETUP_LOG:"
  tail -n 60 "$SETUP_LOG" >&2
  return $rc
}

# version_ge A B: true when version A >= B
version_ge() { [[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" == "$2" ]]; }

cmake_version() { "$1" --version 2>/dev/null | awk 'NR==1 {print $3}'; }

# --- 1. system packages -------------------------------------------------------
# A package counts as present when dpkg has it OR what it provides is usable, so
# machines that got cmake/pkg-config some other way (pip, /usr/local) need no apt.
missing_deb=()
have_deb() { dpkg -s "$1" >/dev/null 2>&1; }
pc_ok() { command -v pkg-config >/dev/null 2>&1 && pkg-config --exists "$@"; }
have_deb libopenblas-dev || pc_ok openblas || missing_deb+=(libopenblas-dev)
have_deb liblapacke-dev || pc_ok lapacke || missing_deb+=(liblapacke-dev)
have_deb libfftw3-dev || pc_ok fftw3 fftw3f || missing_deb+=(libfftw3-dev)
# The distributed layer (libfusemath_mpi, fusemath.distributed) needs Open MPI and FFTW-MPI, and takes
# ScaLAPACK (Open MPI's build; BLACS is inside it) for its dense linear algebra: installed below when
# missing, but never fatal (an offline machine, the GPU one, builds the rest without them).
missing_mpi=()
have_deb libopenmpi-dev || command -v mpicc >/dev/null 2>&1 || missing_mpi+=(libopenmpi-dev)
have_deb openmpi-bin || command -v mpirun >/dev/null 2>&1 || missing_mpi+=(openmpi-bin)
have_deb libfftw3-mpi-dev || [[ -f /usr/include/fftw3-mpi.h ]] || missing_mpi+=(libfftw3-mpi-dev)
missing_scalapack=() # apart: where it cannot be had, MPI and FFTW-MPI still are
have_deb libscalapack-openmpi-dev || compgen -G "/usr/lib/*/libscalapack-openmpi.so" >/dev/null ||
  missing_scalapack+=(libscalapack-openmpi-dev)
have_deb pkg-config || command -v pkg-config >/dev/null 2>&1 || missing_deb+=(pkg-config)
have_deb cmake || command -v cmake >/dev/null 2>&1 || [[ -x $VENV/bin/cmake ]] || missing_deb+=(cmake)
# A bare machine may also lack a C compiler, or Python's venv module / headers.
command -v cc >/dev/null 2>&1 || missing_deb+=(build-essential)
# test_fft_kernel runs the generated CUDA kernels on the host through the C++ compiler
command -v c++ >/dev/null 2>&1 || missing_deb+=(g++)
if ((FUZZ)); then
  command -v clang >/dev/null 2>&1 || missing_deb+=(clang)
  have_deb libomp-dev || compgen -G "/usr/lib/llvm-*/lib/libomp.so" >/dev/null || missing_deb+=(libomp-dev)
  # libFuzzer and the sanitizer runtimes: only Recommended by clang, so --no-install-recommends skips them
  { command -v clang >/dev/null 2>&1 && [[ -f $(clang -print-file-name=libclang_rt.fuzzer-x86_64.a) ]]; } ||
    have_deb libclang-rt-dev || missing_deb+=(libclang-rt-dev)
fi
if [[ ! -x $VENV/bin/python ]] && ! "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1; then
  missing_deb+=(python3-venv)
fi
if ! "$PYTHON" -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' >/dev/null 2>&1; then
  missing_deb+=(python3-dev)
fi

if ((${#missing_deb[@]})); then
  log "installing Debian packages: ${missing_deb[*]}"
  if ! command -v apt-get >/dev/null 2>&1; then
    log "no apt-get here: install ${missing_deb[*]} (or equivalents) by hand"
    exit 1
  fi
  SUDO=()
  if [[ $(id -u) -ne 0 ]]; then SUDO=(sudo); fi
  quiet "${SUDO[@]}" apt-get update
  quiet "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing_deb[@]}"
fi

if ((!RUN_ONLY && !OFFLINE && ${#missing_mpi[@]})) && command -v apt-get >/dev/null 2>&1; then
  log "installing Open MPI / FFTW-MPI (optional: fusemath.distributed): ${missing_mpi[*]}"
  MPI_SUDO=()
  if [[ $(id -u) -ne 0 ]]; then MPI_SUDO=(sudo -n); fi
  apt_mpi() { OPTIONAL=1 quiet "${MPI_SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing_mpi[@]}"; }
  apt_mpi || { OPTIONAL=1 quiet "${MPI_SUDO[@]}" apt-get update && apt_mpi; } ||
    log "no Open MPI / FFTW-MPI: fusemath.distributed is not built, its tests skip"
fi
if ((!RUN_ONLY && !OFFLINE && ${#missing_scalapack[@]})) && command -v apt-get >/dev/null 2>&1; then
  log "installing ScaLAPACK (optional: fusemath.distributed's matmul / solve / cholesky): ${missing_scalapack[*]}"
  SL_SUDO=()
  if [[ $(id -u) -ne 0 ]]; then SL_SUDO=(sudo -n); fi
  OPTIONAL=1 quiet "${SL_SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    "${missing_scalapack[@]}" ||
    log "no ScaLAPACK: fusemath.distributed's ScaLAPACK functions raise UnavailableError, their tests skip"
fi

# dieharder is optional (tests/python/test_random_stats.py's slow dieharder test skips without it):
# tried only when missing, never fatal (offline, no root: the test skips).
if ((!RUN_ONLY && !TOOLS_ONLY && !OFFLINE)) && ! command -v dieharder >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  log "installing dieharder (optional)"
  OPT_SUDO=()
  if [[ $(id -u) -ne 0 ]]; then OPT_SUDO=(sudo -n); fi
  apt_dh() { OPTIONAL=1 quiet "${OPT_SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends dieharder; }
  apt_dh || { OPTIONAL=1 quiet "${OPT_SUDO[@]}" apt-get update && apt_dh; } || log "no dieharder: its slow test skips"
fi

# --- 2. virtual environment ---------------------------------------------------
if [[ -x $VENV/bin/python ]] && ! "$VENV/bin/python" -c '' >/dev/null 2>&1; then
  log "$VENV is broken (its interpreter does not run): recreating it"
  rm -rf "$VENV"
fi
if [[ ! -x $VENV/bin/python ]]; then
  log "creating $VENV with $("$PYTHON" -c 'import sys; print(sys.executable)')"
  if ! quiet "$PYTHON" -m venv --system-site-packages "$VENV"; then
    # e.g. ensurepip unavailable: a pip visible through the outer site-packages still works
    rm -rf "$VENV"
    "$PYTHON" -m venv --system-site-packages --without-pip "$VENV"
  fi
fi
VPY=$VENV/bin/python
export PATH="$PWD/$VENV/bin:$PATH" # pip-installed cmake/ninja, for scikit-build-core too

# When $PYTHON is itself a venv (sys.prefix != sys.base_prefix), the new venv's
# --system-site-packages exposes only the *base* interpreter's packages. Add the
# outer venv's site-packages through a .pth (with site.addsitedir, so their own .pth
# files run too) so its numpy/torch/cupy/... stay importable. Rewritten every run.
outer_sites=$("$PYTHON" -c 'import site, sys; print(repr(site.getsitepackages()) if sys.prefix != sys.base_prefix else "")')
venv_site=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
pth=$venv_site/_fusemath_outer_venv.pth
if [[ -n $outer_sites ]]; then
  # One line, no comprehension: .pth lines are exec'd where a comprehension cannot see "site".
  echo "import os, site; list(map(site.addsitedir, filter(os.path.isdir, $outer_sites)))" >"$pth"
else
  rm -f "$pth"
fi

# --- 3. Python packages -------------------------------------------------------
# Each is pip-installed only when its import fails (import name -> pip name).
missing_py=$("$VPY" - "$RUN_ONLY" <<'EOF'
import importlib, sys
need = {"numpy": "numpy", "scipy": "scipy", "pytest": "pytest",
        "matplotlib": "matplotlib", "scikit_build_core": "scikit-build-core"}
if sys.argv[1] == "1":  # make run: the sweep and the build, not the tests
    del need["scipy"], need["pytest"]
out = []
for mod, pkg in need.items():
    try:
        importlib.import_module(mod)
    except Exception:
        out.append(pkg)
print(" ".join(out))
EOF
)
read -r -a missing_py <<<"$missing_py"

cmake_bin=$(command -v cmake || true)
if [[ -z $cmake_bin ]] || ! version_ge "$(cmake_version "$cmake_bin")" "$CMAKE_MIN"; then
  missing_py+=("cmake>=$CMAKE_MIN")
fi

if ((${#missing_py[@]})); then
  log "pip installing into $VENV: ${missing_py[*]}"
  quiet "$VPY" -m pip install --disable-pip-version-check "${missing_py[@]}"
fi
# mpi4py (fusemath.distributed's communicators; its wheel loads the system MPI, libmpi.so.40) is
# optional like the MPI packages: where MPI is and mpi4py cannot be had, the distributed tests skip.
if ((!RUN_ONLY && !OFFLINE)) && command -v mpirun >/dev/null 2>&1 && ! "$VPY" -c 'import mpi4py' >/dev/null 2>&1; then
  log "pip installing mpi4py (optional)"
  OPTIONAL=1 quiet "$VPY" -m pip install --disable-pip-version-check mpi4py || log "no mpi4py: the distributed Python tests skip"
fi
# ninja is optional (make is the fallback generator): try, never fail on it.
if ((!OFFLINE)) && ! command -v ninja >/dev/null 2>&1 && ! "$VPY" -c 'import ninja' >/dev/null 2>&1; then
  log "pip installing ninja (optional)"
  OPTIONAL=1 quiet "$VPY" -m pip install --disable-pip-version-check ninja || log "no ninja: using make"
fi
# scipy-openblas32 is optional too: a current OpenBLAS that fusemath uses where the system one does
# not know the CPU (backends/cpu/blas_provider.c). Offline machines go on without it.
if ((!OFFLINE)) && ! "$VPY" -c 'import scipy_openblas32' >/dev/null 2>&1; then
  log "pip installing scipy-openblas32 (optional)"
  OPTIONAL=1 quiet "$VPY" -m pip install --disable-pip-version-check scipy-openblas32 || log "no scipy-openblas32: the system OpenBLAS only"
fi

((TOOLS_ONLY)) && exit 0

# --- 4. build + install fusemath into the venv --------------------------------
# Re-run only when an input is newer than the stamp, or the build settings (kept in
# the stamp) changed. The stamp is taken *before* building, so edits made during a
# build trigger the next one. FUSEMATH_WERROR (CI: ON) applies to the wheel build
# too: that is where python/src/fmpy_*.c (the _fusemath extension) is compiled.
stamp=$VENV/.fusemath-installed
settings="FUSEMATH_WERROR=${FUSEMATH_WERROR:-OFF} FUSEMATH_WITH_DIST_GPU=${FUSEMATH_WITH_DIST_GPU:-AUTO}"
inputs=()
for p in core fusion backends distributed python CMakeLists.txt cmake pyproject.toml; do
  [[ -e $p ]] && inputs+=("$p")
done
if [[ -f $stamp && $(<"$stamp") == "$settings" ]] &&
  [[ -z $(find "${inputs[@]}" -newer "$stamp" -type f ! -path '*/__pycache__/*' -print -quit) ]]; then
  log "fusemath in $VENV is up to date"
  exit 0
fi
log "building and installing fusemath into $VENV (pip install --no-build-isolation --no-deps ., $settings)"
echo "$settings" >"$stamp.new"
quiet "$VPY" -m pip install --disable-pip-version-check --no-build-isolation --no-deps \
  --config-settings=cmake.define.FUSEMATH_WERROR="${FUSEMATH_WERROR:-OFF}" \
  --config-settings=cmake.define.FUSEMATH_WITH_DIST_GPU="${FUSEMATH_WITH_DIST_GPU:-AUTO}" .
mv -f "$stamp.new" "$stamp"
