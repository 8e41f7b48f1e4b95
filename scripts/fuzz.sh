#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A fuzzing campaign: configures the `asan` preset (clang 19, libFuzzer, ASan, UBSan), builds
# its fuzz targets only (build/asan/fuzz/fuzz_<name>), then fuzzes each target for MINUTES
# minutes and merges what it found into the seed corpus.
#   scripts/fuzz.sh MINUTES [TARGET...]     # targets: the fuzz.<name> tests of fuzz/CMakeLists.txt (default: all)
#   SLUICE_FUZZ_JOBS=2 scripts/fuzz.sh 10   # two targets at a time (default 1)
#
# Each target runs with -max_total_time, -timeout=1 (an input that takes over 1 s is a hang),
# -rss_limit_mb=2048 and leak detection on, on a scratch copy of the work (new inputs in
# build/fuzz-scratch/<name>/new, the seeds fuzz/corpus/<name>/ only read). At the end the new
# inputs are merged (-merge=1) against the seeds, and of those that add coverage, the smallest
# SLUICE_FUZZ_MAX_NEW (default 50), each at most 4 KiB, are copied into fuzz/corpus/<name>/
# (commit them). Crash, leak and timeout reproducers stay in build/fuzz-artifacts/<name>/; the
# log of each target is build/fuzz-logs/<name>.log. Prints one line per target and exits 1 when
# any target found a crash, a leak or a timeout, or did not run.
#   SLUICE_BUILD_JOBS=1   build jobs (default: nproc)
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: $0 MINUTES [TARGET...]   (env: SLUICE_FUZZ_JOBS, SLUICE_FUZZ_MAX_NEW, SLUICE_BUILD_JOBS)" >&2
  exit 2
}
(($# >= 1)) || usage
minutes=$1
shift
[[ $minutes =~ ^[0-9]+([.][0-9]+)?$ ]] || usage
seconds=$(awk -v m="$minutes" 'BEGIN { printf "%d", m * 60 }')
((seconds >= 1)) || usage
jobs=${SLUICE_FUZZ_JOBS:-1}
max_new=${SLUICE_FUZZ_MAX_NEW:-50}
max_bytes=4096
[[ $jobs =~ ^[1-9][0-9]*$ && $max_new =~ ^[0-9]+$ ]] || usage
command -v clang++-19 >/dev/null || { echo "sluice: the asan preset needs clang++-19 (scripts/deps.sh installs it)" >&2; exit 1; }

build=build/asan
echo "=== sluice: configuring the asan preset and building its fuzz targets"
cmake --preset asan >/dev/null

# The targets: the fuzz.<name> corpus-replay tests that sluice_add_fuzzer registered.
mapfile -t all < <(ctest --test-dir "$build" -N -L fuzz | sed -n 's/^ *Test *#[0-9]*: fuzz\.\([^.]*\)$/\1/p')
((${#all[@]})) || { echo "sluice: no fuzz targets registered in $build" >&2; exit 1; }
targets=("$@")
((${#targets[@]})) || targets=("${all[@]}")
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] || { echo "sluice: no fuzz target '$t' (have: ${all[*]})" >&2; exit 2; }
done
cmake --build "$build" -j "${SLUICE_BUILD_JOBS:-$(nproc)}" --target "${targets[@]/#/fuzz_}"

export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=1
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
[[ -x /usr/bin/llvm-symbolizer-19 ]] && export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-/usr/bin/llvm-symbolizer-19}
summary=$(mktemp -d)
trap 'rm -rf "$summary"' EXIT

# fuzz_one NAME: fuzzes, merges, and writes NAME's summary line to $summary/NAME.
fuzz_one() {
  local name=$1
  local bin=$build/fuzz/fuzz_$name seeds=fuzz/corpus/$name
  local scratch=build/fuzz-scratch/$name artifacts=build/fuzz-artifacts/$name log=build/fuzz-logs/$name.log
  rm -rf "$scratch"
  mkdir -p "$scratch/new" "$scratch/small" "$scratch/merged" "$artifacts" "$(dirname "$log")"
  touch "$scratch/started"
  local flags=(-timeout=1 -rss_limit_mb=2048 -detect_leaks=1)
  local rc=0
  "$bin" "${flags[@]}" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$artifacts/" \
    "$scratch/new" "$seeds" >"$log" 2>&1 || rc=$?

  local execs
  execs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)
  count() { find "$artifacts" -maxdepth 1 -type f -newer "$scratch/started" \( "$@" \) | wc -l; }
  local crashes leaks timeouts
  crashes=$(count -name 'crash-*' -o -name 'oom-*' -o -name 'deadly-signal-*')
  leaks=$(count -name 'leak-*')
  timeouts=$(count -name 'timeout-*')
  local status=ok
  if ((crashes + leaks + timeouts > 0)); then
    status=FOUND
  elif ((rc != 0)); then
    status="FAILED (exit $rc, no reproducer: see $log)"
  fi

  # New inputs that add coverage to the seeds: merged into a copy of the seeds, then the
  # smallest few that are not seeds already go into the corpus.
  local added=0
  find "$scratch/new" -type f -size -$((max_bytes + 1))c -exec cp -t "$scratch/small" {} +
  if [[ $status == ok && max_new -gt 0 && -n $(ls -A "$scratch/small") ]]; then
    cp -r "$seeds/." "$scratch/merged/"
    if "$bin" "${flags[@]}" -merge=1 -max_len="$max_bytes" "$scratch/merged" "$scratch/small" >>"$log" 2>&1; then
      local file
      while IFS= read -r file; do
        ((added < max_new)) || break
        [[ -e $seeds/$(basename "$file") ]] && continue
        cp "$file" "$seeds/" && added=$((added + 1))
      done < <(find "$scratch/merged" -maxdepth 1 -type f -size -$((max_bytes + 1))c -printf '%s %p\n' | sort -n |
        cut -d' ' -f2-)
    else
      status="FAILED (merge: see $log)"
    fi
  fi
  printf '%-16s %7s %12s %8s %6s %9s %6s  %s\n' "$name" "$minutes" "${execs:-?}" "$crashes" "$leaks" "$timeouts" \
    "$added" "$status" >"$summary/$name"
}

echo "=== sluice: fuzzing ${targets[*]} for $minutes min each, $jobs at a time (logs in build/fuzz-logs/)"
running=0
for t in "${targets[@]}"; do
  if ((running >= jobs)); then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz_one "$t" &
  running=$((running + 1))
done
wait

printf '%-16s %7s %12s %8s %6s %9s %6s  %s\n' target minutes executions crashes leaks timeouts added status
failed=0
for t in "${targets[@]}"; do
  if [[ -s $summary/$t ]]; then
    cat "$summary/$t"
    grep -q ' ok$' "$summary/$t" || failed=1
  else
    echo "$t: no result (the script failed for it)"
    failed=1
  fi
done
if ((failed)); then
  echo "=== sluice: fuzzing found problems: reproducers in build/fuzz-artifacts/<target>/" >&2
  exit 1
fi
echo "=== sluice: no crash, leak or timeout; new inputs (if any) added to fuzz/corpus/<target>/"
