#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Two builds of `sluice serve` on one store, in turns: a 1 GiB object, then ROUNDS rounds of one
# server of each build serving 3 HTTP GETs of it to sluice_s3_bench (8 MiB × 4 parts), which
# prints each GET's rate and the server's CPU. Prints each build's median and their ratio.
#   bench/cpu/ab_http_probe.sh BUILD OLD_SLUICE [ROUNDS]
# BUILD holds src/sluice (the new build) and bench/sluice_s3_bench: build/device, or
# build/device-carry/cpu on a GPU host; OLD_SLUICE is the other build's sluice binary.
# Each side's serve flags for its planes (default "--fabric off --grant-socket off") come from
# ab_flags_old and ab_flags_new: with OLD_SLUICE the same binary, one build with and without a
# plane (e.g. ab_flags_new="--fabric shm,tcp").
set -u
source "$(dirname "$0")/probe_lib.sh"
ab_setup ab-http "$@"
common=(--bucket bench --key probe --size 1073741824 --access-key AK --secret-key SK)
port=$(start store --fabric off --grant-socket off)
"${bench}" --endpoint "http://127.0.0.1:${port}" --op put "${common[@]}" --repeat 1 >/dev/null 2>&1
ended() {  # stops the server of pid $1 and waits until it is gone (start ran it in a subshell)
  kill "$1"
  while kill -0 "$1" 2>/dev/null; do sleep 0.05; done
}
ended "$(cat "${work}/store.pid")"
declare -A rates cpu
for round in $(seq "${rounds}"); do
  for which in old new; do
    if [[ ${which} == old ]]; then sluice=${old} flags=${ab_flags_old:-}; else sluice=${new} flags=${ab_flags_new:-}; fi
    # shellcheck disable=SC2086
    port=$(start store ${flags:---fabric off --grant-socket off})
    pid=$(cat "${work}/store.pid")
    before=$(awk '{print $14 + $15}' "/proc/${pid}/stat")
    line=$("${bench}" --endpoint "http://127.0.0.1:${port}" --op get "${common[@]}" --via http --repeat 3 \
      2>/dev/null | tail -1)
    after=$(awk '{print $14 + $15}' "/proc/${pid}/stat")
    ended "${pid}"
    rate=$(field "${line}" gib_per_s)
    server=$(python3 -c "print('%.2f' % ((${after} - ${before}) / $(getconf CLK_TCK) / 3))")  # 3 GiB
    echo "round ${round} ${which}: ${rate} GiB/s, server CPU ${server} s/GiB"
    rates[${which}]+="${rate} "
    cpu[${which}]+="${server} "
  done
done
# shellcheck disable=SC2086
o=$(median ${rates[old]}) n=$(median ${rates[new]}) oc=$(median ${cpu[old]}) nc=$(median ${cpu[new]})
echo "old: ${o} GiB/s, ${oc} s/GiB server CPU; new: ${n} GiB/s, ${nc} s/GiB; new ÷ old $(python3 -c "print('%.2f' % (${n} / ${o}))")x"
