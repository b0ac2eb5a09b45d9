#!/usr/bin/env bash
# run.sh BUILD_DIR: install BUILD_DIR into a temporary prefix, build the README's C snippet against it
# once with find_package(fusemath) and once with pkg-config, and run both without LD_LIBRARY_PATH.
# The snippet is taken from README.md here, so the README cannot drift from what is tested.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${1:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "install test: $*" >&2; exit 1; }

# The first ```c block after the "## C" heading.
awk '/^## C$/ {c = 1} c && /^```c$/ {on = 1; next} on && /^```$/ {exit} on' README.md >"$tmp/main.c"
grep -q 'int main' "$tmp/main.c" || fail "no C program found under README.md's '## C' heading"

cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }
pcdir=$(dirname "$(find "$tmp/prefix" -name fusemath.pc -print -quit)")
[[ -f $pcdir/fusemath.pc ]] || fail "no fusemath.pc under the prefix"

check() { # check NAME EXE: it runs without LD_LIBRARY_PATH, prints OK and exits 0
  local out
  out=$(env -u LD_LIBRARY_PATH "$2" 2>&1) || fail "$1 consumer failed: $out"
  [[ $out == OK:* ]] || fail "$1 consumer printed '$out', expected 'OK: ...'"
  echo "install test ($1): $out"
}

cmake -S tests/install -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCONSUMER_SOURCE="$tmp/main.c" \
  -DCMAKE_BUILD_TYPE=Release >"$tmp/cmake.log" 2>&1 &&
  cmake --build "$tmp/cmake-build" >>"$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log"; fail "find_package build"; }
check find_package "$tmp/cmake-build/consumer"

flags=$(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs fusemath) || fail "pkg-config --cflags --libs fusemath"
# shellcheck disable=SC2086 # the flags are words
cc -std=c11 -Wall -Werror -o "$tmp/consumer-pc" "$tmp/main.c" $flags || fail "cc main.c $flags"
check pkg-config "$tmp/consumer-pc"
