#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What a gateway miss must at least do, without a gateway: GET 1 GiB from a `sluice serve` into
# memory the client reuses (sluice_s3_bench, the miss rows' baseline) and into a new file on tmpfs
# (`sluice get` to /dev/shm: fresh page-cache pages, as a miss's cache copy), 3 runs each, then
# three gateway misses over http for comparison.
#   bench/cpu/fresh_copy_probe.sh BUILD   (BUILD holds src/sluice and bench/sluice_s3_bench:
#                                          build/device, or build/device-carry/cpu on a GPU host)
set -u
source "$(dirname "$0")/probe_lib.sh"
probe_setup "$1" fresh-probe
keys=(--access-key AK --secret-key SK)
port=$(start up --fabric off --grant-socket off)
url=http://127.0.0.1:${port}
common=(--bucket bench --key probe --size 1073741824 "${keys[@]}")
"${bench}" --endpoint "${url}" --op put "${common[@]}" --repeat 1 >/dev/null 2>&1
echo -n "GET into reused memory (sluice_s3_bench): "
"${bench}" --endpoint "${url}" --op get "${common[@]}" --via http --repeat 3 2>/dev/null | tail -1 |
  python3 -c 'import json, sys; d = json.load(sys.stdin); print("%.2f GiB/s (median), runs %s s" % (d["gib_per_s"], d["seconds_all"]))'
for run in 1 2 3; do
  start=$(date +%s.%N)
  "${sluice}" get s3://bench/probe "${work}/copy" --endpoint "${url}" "${keys[@]}" --via http --no-progress || exit 1
  end=$(date +%s.%N)
  echo "sluice get into a new tmpfs file, run ${run}: $(python3 -c "print('%.2f GiB/s (%.3f s)' % (1 / (${end} - ${start}), ${end} - ${start}))")"
  rm -f "${work}/copy"
done
for run in 1 2 3; do
  gw=$(start "gw${run}" --fabric off --grant-socket off --upstream "${url}" --upstream-access-key AK \
    --upstream-secret-key SK)
  echo -n "gateway miss (http), run ${run}: "
  "${bench}" --endpoint "http://127.0.0.1:${gw}" --op get "${common[@]}" --via http --repeat 1 2>/dev/null | tail -1 |
    python3 -c 'import json, sys; d = json.load(sys.stdin); print("%.2f GiB/s" % d["gib_per_s"])'
done
