#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What a gateway cache hit costs over a local store's GET, and how much of it is the revalidation
# HEAD: a local `sluice serve`, an upstream, a gateway that asks the upstream on every read and
# one with --revalidate-after 600; 1 GiB GETs through the same-host memfd grant, 5 runs each
# (the first one of a gateway is its miss), twice in turn.
#   bench/cpu/gateway_probe.sh BUILD   (BUILD holds src/sluice and bench/sluice_s3_bench: build/device,
#                                       or build/device-carry/cpu on a GPU host)
# SLUICE_PROBE_BYTES: another object size; SLUICE_PROBE_PART: another part size (default 8MiB: a
# 1 GiB GET is 128 ranged GETs, each of which a gateway revalidates).
set -u
source "$(dirname "$0")/probe_lib.sh"
probe_setup "${1:-build/device}" gateway-probe
local_port=$(start local --fabric off --grant-socket "${work}/local.sock")
upstream_port=$(start upstream --fabric off --grant-socket off)
upstream=(--upstream "http://127.0.0.1:${upstream_port}" --upstream-access-key AK --upstream-secret-key SK)
gateway_port=$(start gateway --fabric off --grant-socket "${work}/gateway.sock" "${upstream[@]}")
gateway_ttl_port=$(start gateway-ttl --fabric off --grant-socket "${work}/gateway-ttl.sock" "${upstream[@]}" \
  --revalidate-after 600)
common=(--bucket bench --key probe --size "${SLUICE_PROBE_BYTES:-1073741824}" --part-size "${SLUICE_PROBE_PART:-8MiB}"
  --access-key AK --secret-key SK)
"${bench}" --endpoint "http://127.0.0.1:${local_port}" --op put "${common[@]}" --repeat 1 >/dev/null 2>&1
"${bench}" --endpoint "http://127.0.0.1:${upstream_port}" --op put "${common[@]}" --repeat 1 >/dev/null 2>&1
for round in 1 2; do
  for name in local gateway gateway-ttl; do
    port_var=${name//-/_}_port
    line=$("${bench}" --endpoint "http://127.0.0.1:${!port_var}" --op get "${common[@]}" --repeat 5 \
      --grant-socket "${work}/${name}.sock" 2>/dev/null | tail -1)
    echo "round ${round} ${name}: $(python3 -c 'import json, sys; d = json.loads(sys.argv[1]); print("%.2f GiB/s (median), runs %s s" % (d["gib_per_s"], d["seconds_all"]))' "${line}")"
  done
done
