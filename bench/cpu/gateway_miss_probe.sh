#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What shapes a gateway miss: an upstream `sluice serve` holding a 1 GiB object, its own HTTP GET
# with sluice_s3_bench (the baseline, 3 runs), then for each SETTINGS (the fields of a --config
# file's "gateway" object, as JSON) 3 runs of one GET through a new, empty gateway (a miss each),
# over http and by RDMA (shm). Prints each row's median and its ratio to the baseline.
#   bench/cpu/gateway_miss_probe.sh BUILD [SETTINGS ...]   (default SETTINGS: {})
# BUILD holds src/sluice and bench/sluice_s3_bench: build/device, or build/device-carry/cpu on a
# GPU host. Example: gateway_miss_probe.sh build/device '{}' '{"fetch_streams": 8}'
set -u
build=$(cd "$1" && pwd)
shift
[[ $# -eq 0 ]] && set -- '{}'
source "$(dirname "$0")/probe_lib.sh"
probe_setup "${build}" miss-probe
common=(--bucket bench --key probe --size 1073741824 --access-key AK --secret-key SK)
upstream_port=$(start upstream --fabric off --grant-socket off)
"${bench}" --endpoint "http://127.0.0.1:${upstream_port}" --op put "${common[@]}" --repeat 1 >/dev/null 2>&1
line=$("${bench}" --endpoint "http://127.0.0.1:${upstream_port}" --op get "${common[@]}" --via http --repeat 3 \
  2>/dev/null | tail -1)
baseline=$(field "${line}" gib_per_s)
echo "upstream's own http GET: ${baseline} GiB/s (median of 3)"
for settings in "$@"; do
  gateway_config "${settings}" "${upstream_port}" >"${work}/config.json" || exit 1
  for via in http rdma; do
    runs=()
    for _ in 1 2 3; do
      port=$(start gateway --fabric shm --grant-socket off --config "${work}/config.json")
      line=$("${bench}" --endpoint "http://127.0.0.1:${port}" --op get "${common[@]}" --via "${via}" --fabric shm \
        --repeat 1 2>/dev/null | tail -1)
      runs+=("$(field "${line}" gib_per_s)")
      stop gateway
    done
    m=$(median "${runs[@]}")
    echo "miss ${via} ${settings}: ${m} GiB/s (runs ${runs[*]}), $(python3 -c "print('%.2f' % (${m} / ${baseline}))")x"
  done
done
