#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Two builds of a gateway on misses, in turns: an upstream `sluice serve` (of BUILD) holding a
# 1 GiB object, then ROUNDS rounds of: the upstream's own HTTP GET (the baseline of the round),
# and for each build a new, empty gateway serving one GET (a miss) over http and one by RDMA
# (shm), with sluice_s3_bench (8 MiB × 4 parts). Each gateway's access log gives its shape: how long
# the first part (the one that starts the fetch) took, and how long the later parts took.
# Prints each row's median rate and its ratio to the baseline's median.
#   bench/cpu/ab_miss_probe.sh BUILD OLD_SLUICE [ROUNDS]
# BUILD holds src/sluice (the new build) and bench/sluice_s3_bench: build/device, or
# build/device-carry/cpu on a GPU host; OLD_SLUICE is the other build's sluice binary. The cache
# goes where probe_dir_gateway says (probe_lib.sh), e.g. a tmpfs mounted huge=within_size; with
# probe_keep=DIR each gateway's access log is kept there (ROUND-BUILD-VIA.access).
set -u
source "$(dirname "$0")/probe_lib.sh"
ab_setup ab-miss "$@"
common=(--bucket bench --key probe --size 1073741824 --access-key AK --secret-key SK)
log_args=(--access-log-format json --access-log)
upstream_port=$(start upstream --fabric off --grant-socket off)
"${bench}" --endpoint "http://127.0.0.1:${upstream_port}" --op put "${common[@]}" --repeat 1 >/dev/null 2>&1
gateway_config '{}' "${upstream_port}" >"${work}/config.json" || exit 1

# The GETs of 1 MiB or more in access log $1 (one download): the first part's duration, the
# median and largest of the others, and the span from the first one's start to the last one's end.
shape() {
  python3 - "$1" <<'EOF'
import datetime, json, sys
rows = []
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["operation"] != "GetObject" or r["bytes_sent"] + r["bytes_direct"] < 1 << 20:
        continue
    t = datetime.datetime.strptime(r["time"], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp() * 1e3
    rows.append((t, r["duration_us"] / 1e3))
rows.sort()
if not rows:
    print("no GETs logged")
    sys.exit()
rest = sorted(d for _, d in rows[1:]) or [0]
span = max(t + d for t, d in rows) - rows[0][0]
print("first part %.1f ms; %d others: median %.1f ms, max %.1f ms; span %.0f ms"
      % (rows[0][1], len(rows) - 1, rest[len(rest) // 2], rest[-1], span))
EOF
}
# One GET of the object from the server on port $1 by $2 (http or rdma): prints its rate, or
# sluice_s3_bench's complaint on stderr and fails.
get() {
  local line
  line=$("${bench}" --endpoint "http://127.0.0.1:$1" --op get "${common[@]}" --via "$2" --fabric shm --repeat 1 \
    2>"${work}/bench.err" | tail -1)
  field "${line}" gib_per_s 2>/dev/null || { echo "GET by $2 failed: $(tail -3 "${work}/bench.err")" >&2 && return 1; }
}
declare -A rates
for round in $(seq "${rounds}"); do
  rate=$(get "${upstream_port}" http) || exit 1
  rates[upstream]+="${rate} "
  echo "round ${round} upstream http: ${rate} GiB/s"
  for which in old new; do
    if [[ ${which} == old ]]; then sluice=${old}; else sluice=${new}; fi
    for via in http rdma; do
      port=$(start gateway --fabric shm --grant-socket off --config "${work}/config.json" "${log_args[@]}" \
        "${work}/gateway.access")
      rate=$(get "${port}" "${via}")
      stop gateway
      [[ -n ${rate} ]] || exit 1
      rates[${which}_${via}]+="${rate} "
      echo "round ${round} ${which} ${via}: ${rate} GiB/s; $(shape "${work}/gateway.access")"
      [[ -n ${probe_keep:-} ]] && cp "${work}/gateway.access" "${probe_keep}/${round}-${which}-${via}.access"
      rm -f "${work}/gateway.access"
    done
  done
done
# shellcheck disable=SC2086
base=$(median ${rates[upstream]})
echo "upstream's own http GET: ${base} GiB/s (median of ${rounds})"
for row in old_http new_http old_rdma new_rdma; do
  # shellcheck disable=SC2086
  m=$(median ${rates[${row}]})
  echo "${row/_/ } miss: ${m} GiB/s (runs ${rates[${row}]% }), $(python3 -c "print('%.2f' % (${m} / ${base}))")x"
done
