#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Where a gateway miss's CPU goes: user and system seconds and page faults of the gateway, the
# upstream and the client for one 1 GiB GET over http through a new, empty gateway, per SETTINGS.
#   bench/cpu/miss_cpu_probe.sh BUILD [SETTINGS ...]
set -u
build=$(cd "$1" && pwd)
shift
[[ $# -eq 0 ]] && set -- '{}'
source "$(dirname "$0")/probe_lib.sh"
probe_setup "${build}" miss-cpu
common=(--bucket bench --key probe --size 1073741824 --access-key AK --secret-key SK)
upstream_port=$(start upstream --fabric off --grant-socket off)
"${bench}" --endpoint "http://127.0.0.1:${upstream_port}" --op put "${common[@]}" --repeat 1 >/dev/null 2>&1
cpu() {  # utime stime minflt of PID, in seconds and faults
  awk -v hz="$(getconf CLK_TCK)" '{ print ($14 / hz), ($15 / hz), $10 }' "/proc/$1/stat"
}
diff3() { python3 -c 'import sys; a = sys.argv[1].split(); b = sys.argv[2].split(); print("user %.2f s, sys %.2f s, minflt %d" % (float(b[0]) - float(a[0]), float(b[1]) - float(a[1]), int(b[2]) - int(a[2])))' "$1" "$2"; }
up=$(cat "${work}/upstream.pid")
u0=$(cpu "${up}")
line=$("${bench}" --endpoint "http://127.0.0.1:${upstream_port}" --op get "${common[@]}" --via http --repeat 1 2>/dev/null | tail -1)
echo "baseline: $(python3 -c 'import json, sys; d = json.loads(sys.argv[1]); print("%.2f GiB/s, client cpu %.2f s/GiB" % (d["gib_per_s"], d["cpu_s_per_gib"]))' "${line}"); upstream $(diff3 "${u0}" "$(cpu "${up}")")"
for settings in "$@"; do
  gateway_config "${settings}" "${upstream_port}" >"${work}/config.json" || exit 1
  for via in http rdma; do
    port=$(start gateway --fabric shm --grant-socket off --config "${work}/config.json")
    gw=$(cat "${work}/gateway.pid")
    g0=$(cpu "${gw}"); u0=$(cpu "${up}")
    line=$("${bench}" --endpoint "http://127.0.0.1:${port}" --op get "${common[@]}" --via "${via}" --fabric shm --repeat 1 2>/dev/null | tail -1)
    echo "miss ${via} ${settings}: $(python3 -c 'import json, sys; d = json.loads(sys.argv[1]); print("%.2f GiB/s, client cpu %.2f s/GiB" % (d["gib_per_s"], d["cpu_s_per_gib"]))' "${line}")"
    echo "   gateway $(diff3 "${g0}" "$(cpu "${gw}")"); upstream $(diff3 "${u0}" "$(cpu "${up}")")"
    stop gateway
  done
done
