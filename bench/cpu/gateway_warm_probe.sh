#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Is a gateway's first miss slower than its later ones? An upstream `sluice serve` holding three
# 1 GiB objects, its own HTTP GET (the baseline, 3 runs), then one new gateway serving one GET of
# each object in turn (three misses of one process), by VIA (http or rdma). Prints each miss's
# rate and, from the gateway's access log, how many 8 MiB parts had been answered after each
# 10 ms of it (a miss that starts slowly shows as a flat beginning).
#   bench/cpu/gateway_warm_probe.sh BUILD [VIA]   (default VIA: http; warm_probe_delay below)
# BUILD holds src/sluice and bench/sluice_s3_bench: build/device, or build/device-carry/cpu on a
# GPU host. The cache goes where probe_dir_gateway says (probe_lib.sh).
# Per-step times of each fetch and each GET: `git apply bench/cpu/gateway_trace.patch`, build,
# and run with SLUICE_GATEWAY_TRACE=1 (the servers print them on stderr; not for main).
set -u
build=$(cd "$1" && pwd)
via=${2:-http}
source "$(dirname "$0")/probe_lib.sh"
probe_setup "${build}" warm-probe
common=(--bucket bench --size 1073741824 --access-key AK --secret-key SK)
upstream_port=$(start upstream --fabric off --grant-socket off)
for key in a b c; do
  "${bench}" --endpoint "http://127.0.0.1:${upstream_port}" --op put "${common[@]}" --key "${key}" --repeat 1 \
    >/dev/null 2>&1
done
line=$("${bench}" --endpoint "http://127.0.0.1:${upstream_port}" --op get "${common[@]}" --key a --via http \
  --repeat 3 2>/dev/null | tail -1)
echo "upstream's own http GET: $(field "${line}" gib_per_s) GiB/s (median of 3)"
gateway_config '{}' "${upstream_port}" >"${work}/config.json" || exit 1
port=$(start gateway --fabric shm --grant-socket off --config "${work}/config.json" --access-log-format json \
  --access-log "${work}/gateway.access")
# warm_probe_delay=SECONDS: the gateway idles this long before its first miss (is it the first
# miss, or a young process, that is late?).
sleep "${warm_probe_delay:-0}"
for key in a b c; do
  line=$("${bench}" --endpoint "http://127.0.0.1:${port}" --op get "${common[@]}" --key "${key}" --via "${via}" \
    --fabric shm --repeat 1 2>/dev/null | tail -1)
  echo "miss ${key} (${via}): $(field "${line}" gib_per_s) GiB/s"
done
stop gateway  # its access log is written out
python3 - "${work}/gateway.access" <<'EOF'
import collections, datetime, json, sys
ends = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["operation"] != "GetObject" or r["bytes_sent"] + r["bytes_direct"] < 1 << 20:
        continue
    t = datetime.datetime.strptime(r["time"], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp() * 1e3
    ends[r["key"]].append((t, t + r["duration_us"] / 1e3))
for key, parts in sorted(ends.items()):
    start = min(s for s, _ in parts)
    done = [e - start for _, e in parts]
    print("miss %s: parts answered after each 10 ms: %s"
          % (key, [sum(1 for e in done if e <= ms) for ms in range(10, int(max(done)) + 20, 10)]))
EOF
