# Quick start:  make run   |   make test
# Everything goes through scripts/setup.sh first, which installs only what is
# missing (Debian packages, .venv, Python packages, the fusemath package itself).
#
# Targets: setup build test run asan fuzz clean distclean
# Variables (also from the environment): FUSEMATH_WERROR=ON|OFF (CI: ON),
#   FUSEMATH_WITH_CUDA=AUTO|ON|OFF, BUILD_TYPE, JOBS.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

VENV ?= .venv
PY := $(VENV)/bin/python
BUILD_DIR ?= build
ASAN_DIR ?= build-asan
BUILD_TYPE ?= Release
FUSEMATH_WERROR ?= OFF
FUSEMATH_WITH_CUDA ?= AUTO
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
export FUSEMATH_WERROR # setup.sh passes it on to the wheel build

# pip-installed cmake/ninja (if setup had to add them) come first.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

# Ninja when available; an already-configured build dir keeps its generator.
GENERATOR = $$(if [ ! -f $(1)/CMakeCache.txt ] && command -v ninja >/dev/null; then echo -G Ninja; fi)
# gpu-labelled tests only run where a GPU is visible.
CTEST_LABELS = $$(if nvidia-smi -L >/dev/null 2>&1; then echo ""; else echo "-LE gpu"; fi)

.PHONY: all setup build test run asan fuzz clean distclean

all: build

setup:
	bash scripts/setup.sh

build: setup
	cmake -S . -B $(BUILD_DIR) $(call GENERATOR,$(BUILD_DIR)) \
	  -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DFUSEMATH_WERROR=$(FUSEMATH_WERROR) \
	  -DFUSEMATH_WITH_CUDA=$(FUSEMATH_WITH_CUDA) \
	  -DFUSEMATH_SANITIZE=OFF -DBUILD_TESTING=ON
	cmake --build $(BUILD_DIR) --parallel $(JOBS)

# Both suites and the install test (the README's C snippet built against `cmake --install`) always
# run; the target fails if any failed.
# pytest exit 5 = "no tests collected": not a failure while tests/python is empty.
test: build
	@rc=0; \
	ctest --test-dir $(BUILD_DIR) --output-on-failure $(CTEST_LABELS) || rc=1; \
	if [ -d tests/python ]; then \
	  prc=0; $(PY) -m pytest -q tests/python || prc=$$?; \
	  if [ $$prc -eq 5 ]; then echo "make test: no Python tests collected"; prc=0; fi; \
	  [ $$prc -eq 0 ] || rc=1; \
	else \
	  echo "make test: no tests/python directory, no Python tests run"; \
	fi; \
	bash tests/install/run.sh $(BUILD_DIR) || rc=1; \
	if [ $$rc -ne 0 ]; then echo "make test: FAILED (see above)"; fi; \
	exit $$rc

# The sweep needs only the library and the extension, which setup.sh's pip install builds: not build/
# (C tests, examples).
run:
	bash scripts/setup.sh --run
	$(PY) benchmarks/crossover.py

# Sanitizer build: its own tree, -O1 -g with assertions on, warnings are errors.
# LSan ignores leaks inside the third-party runtimes listed in cmake/lsan.supp;
# protect_shadow_gap=0 lets the CUDA runtime map device memory under ASan.
asan:
	bash scripts/setup.sh --tools-only
	cmake -S . -B $(ASAN_DIR) $(call GENERATOR,$(ASAN_DIR)) \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" \
	  -DFUSEMATH_SANITIZE=ON -DFUSEMATH_WERROR=ON \
	  -DFUSEMATH_WITH_CUDA=$(FUSEMATH_WITH_CUDA) -DBUILD_TESTING=ON
	cmake --build $(ASAN_DIR) --parallel $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:protect_shadow_gap=0 \
	LSAN_OPTIONS=suppressions=$(CURDIR)/cmake/lsan.supp:print_suppressions=0 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(ASAN_DIR) --output-on-failure $(CTEST_LABELS)

# libFuzzer over the C API's validation and planning (tests/fuzz/fuzz_api.c): clang, ASan + UBSan,
# CPU backends only; FUZZ_SECONDS bounds the run (CI: 60), FUZZ_RUNS=N stops after N inputs instead.
# A sparse layout (4 elements, strides of 2^30) is planned on scratch of its span: virtual memory
# that planning does not touch, so the limit is on resident memory, not on one allocation's size.
FUZZ_DIR ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_RUNS ?=
fuzz:
	bash scripts/setup.sh --fuzz
	cmake -S . -B $(FUZZ_DIR) $(call GENERATOR,$(FUZZ_DIR)) -DCMAKE_C_COMPILER=clang \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" \
	  -DFUSEMATH_FUZZ=ON -DFUSEMATH_WITH_CUDA=OFF -DBUILD_TESTING=OFF
	cmake --build $(FUZZ_DIR) --parallel $(JOBS) --target fuzz_api
	mkdir -p $(FUZZ_DIR)/corpus
	ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
	LSAN_OPTIONS=suppressions=$(CURDIR)/cmake/lsan.supp:print_suppressions=0 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  $(FUZZ_DIR)/tests/fuzz/fuzz_api -max_len=512 -timeout=60 -rss_limit_mb=4096 -malloc_limit_mb=1000000 \
	  -print_final_stats=1 -artifact_prefix=$(FUZZ_DIR)/ \
	  $(if $(FUZZ_RUNS),-runs=$(FUZZ_RUNS),-max_total_time=$(FUZZ_SECONDS)) $(FUZZ_DIR)/corpus

# Build trees (the wheel's build/{wheel_tag} too) and the install stamp; keeps .venv.
clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(FUZZ_DIR) $(VENV)/.fusemath-installed

distclean: clean
	rm -rf $(VENV) .pytest_cache
