#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A perf profile of the gateway over one 1 GiB miss over http (kernel symbols included); with
# PERF_ALL=1, of the whole machine (every process, idle included), reported per process too.
# probe_dir_gateway=DIR puts the gateway's cache on DIR (probe_lib.sh).
#   bench/cpu/miss_perf_probe.sh BUILD PERF_DIR   (PERF_DIR: perf and its libraries)
set -u
build=$(cd "$1" && pwd)
perf_dir=$(cd "$2" && pwd)
source "$(dirname "$0")/probe_lib.sh"
probe_setup "${build}" miss-perf
perf() { LD_LIBRARY_PATH=${perf_dir}/lib "${perf_dir}/perf" "$@"; }
common=(--bucket bench --key probe --size "${SLUICE_PROBE_BYTES:-1073741824}" --access-key AK --secret-key SK)
upstream_port=$(start upstream --fabric off --grant-socket off)
"${bench}" --endpoint "http://127.0.0.1:${upstream_port}" --op put "${common[@]}" --repeat 1 >/dev/null 2>&1
port=$(start gateway --fabric off --grant-socket off --upstream "http://127.0.0.1:${upstream_port}" \
  --upstream-access-key AK --upstream-secret-key SK)
gw=$(cat "${work}/gateway.pid")
scope=(-p "${gw}")
[[ ${PERF_ALL:-0} == 1 ]] && scope=(-a)
(LD_LIBRARY_PATH=${perf_dir}/lib exec "${perf_dir}/perf" record -g -o "${work}/perf.data" "${scope[@]}" \
  2>"${work}/perf.err") &
pp=$!
sleep 1
"${bench}" --endpoint "http://127.0.0.1:${port}" --op get "${common[@]}" --via http --repeat 1 2>/dev/null | tail -1
kill -INT "${pp}"
timeout 30 tail --pid="${pp}" -f /dev/null
tail -3 "${work}/perf.err"
perf report -i "${work}/perf.data" --no-children --sort sym --stdio -g none 2>/dev/null | grep -E "^ +[0-9]" | head -40
echo "-- with children"
perf report -i "${work}/perf.data" --children --sort sym --stdio -g none 2>/dev/null | grep -E "^ +[0-9]" | head -60
if [[ ${PERF_ALL:-0} == 1 ]]; then
  echo "-- per process (gateway ${gw}, upstream $(cat "${work}/upstream.pid"); the recording began 1 s before the GET)"
  perf report -i "${work}/perf.data" --no-children --sort pid --stdio -g none 2>/dev/null | grep -E "^ +[0-9]" | head -20
  echo "-- per process and symbol"
  perf report -i "${work}/perf.data" --no-children --sort pid,sym --stdio -g none 2>/dev/null | grep -E "^ +[0-9]" | head -60
fi
