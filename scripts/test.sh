#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's test command: installs what is missing, then for each preset (default: dev, then
# asan: clang 19 with ASan, UBSan and the libFuzzer targets, which also fuzzes each parser for
# 10 s) configures, builds and runs the whole CTest suite. Exits non-zero on any failure.
# Prints the wall time of each phase (deps; configure+build and test of each preset) and a total.
#   SLUICE_TEST_PRESETS="dev" scripts/test.sh     # one preset only
# Compiles go through ccache when it is installed (cmake/SluiceCcache.cmake): a second clone,
# in any folder, rebuilds from the same cache (CCACHE_DIR, default ~/.cache/ccache).
set -euo pipefail
cd "$(dirname "$0")/.."

presets=${SLUICE_TEST_PRESETS:-dev asan}
start=$SECONDS
phases=()
status="FAILED"

# fmt SECONDS: 1234 -> "20m34s"
fmt() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# phase NAME COMMAND...: runs COMMAND, records how long it took under NAME.
phase() {
  local name=$1 t0=$SECONDS rc=0
  shift
  "$@" || rc=$?
  phases+=("$(printf '%-28s %8s%s' "$name" "$(fmt $((SECONDS - t0)))" "$( ((rc == 0)) || echo "  (failed, exit $rc)")")")
  echo "=== sluice: ${name}: $(fmt $((SECONDS - t0)))"
  return "$rc"
}

summary() {
  echo "=== sluice: wall time per phase"
  local p
  for p in "${phases[@]}"; do echo "  $p"; done
  printf '  %-28s %8s\n' total "$(fmt $((SECONDS - start)))"
  if command -v ccache >/dev/null; then
    ccache --print-stats 2>/dev/null | awk -F'\t' '
      $1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" { hit += $2 }
      $1 == "cache_miss" { miss += $2 }
      END { if (hit + miss) printf "  ccache (all time, this cache): %d hits, %d misses\n", hit, miss }'
  fi
  echo "=== sluice: ${status} (${presets})"
}
background=""  # the pid (and process group) of a build running in the background
stop_background() { [[ -z $background ]] || kill -- "-$background" 2>/dev/null || true; }
trap 'stop_background; summary' EXIT

phase deps scripts/deps.sh

# The server's parts as one translation unit (SLUICE_UNITY_SERVER): half their compile time in
# a whole build, which is all this script does. The dev tree with line tables only (-g1: what a
# failing test's backtrace needs; full -g costs 13 % more compile time and 40 % larger objects,
# src/s3/client.cpp). `cmake --preset NAME` alone puts both back.
build() {
  local extra=()
  [[ $1 != dev ]] || extra=(-DCMAKE_CXX_FLAGS_DEBUG=-g1 -DCMAKE_C_FLAGS_DEBUG=-g1)
  cmake --preset "$1" -DSLUICE_UNITY_SERVER=ON "${extra[@]}" && cmake --build --preset "$1" -j "$(nproc)"
}
# Two tests per core: an integration test spends about half its time waiting (on sockets, child
# processes, libfabric's start-up), so one per core leaves a core idle half the time.
test_jobs=$((2 * $(nproc)))
# Each preset's build after the first runs while the preset before it is tested, at the lowest
# CPU priority: the integration tests spend most of their time waiting on sockets and child
# processes, and the build takes only what they leave. Its output goes to build/<preset>.build.log.
set -- ${presets}
echo "=== sluice: preset $1"
phase "$1: configure+build" build "$1"
while (($# > 0)); do
  preset=$1
  shift
  next=${1:-}
  if [[ -n $next ]]; then
    mkdir -p build
    set -m  # the background build gets a process group of its own (stop_background kills it whole)
    (renice -n 19 "$BASHPID" >/dev/null && build "$next") >"build/${next}.build.log" 2>&1 &
    background=$!
    set +m
    echo "=== sluice: preset ${next} builds meanwhile (build/${next}.build.log)"
  fi
  phase "${preset}: test" ctest --preset "${preset}" -j "${test_jobs}"
  if [[ -n $next ]]; then
    echo "=== sluice: preset ${next}"
    waited() { wait "$background" || { tail -n 60 "build/${next}.build.log"; return 1; }; }
    phase "${next}: rest of the build" waited
    background=""
  fi
done
status="all presets passed"
