# SPDX-License-Identifier: Apache-2.0
# Sourced by the bench/cpu probes: `probe_setup BUILD NAME` sets sluice, bench (the binaries of
# BUILD: build/device, or build/device-carry/cpu on a GPU host) and work (a new directory on
# /dev/shm when it is writable, removed at exit with every server started there);
# `start ROOT ARGS...` starts `sluice serve` on work/ROOT (user AK/SK) and prints its port (on
# DIR/ROOT instead when the environment names probe_dir_ROOT=DIR, e.g. probe_dir_gateway=/mnt/x);
# `stop ROOT` stops it and removes its root; `gateway_config SETTINGS PORT` prints a --config file
# for a gateway over the upstream on PORT (SETTINGS: the fields of its "gateway" object, as JSON);
# `field JSON NAME` prints a field of sluice_s3_bench's JSON line; `median N...` the median;
# `ab_setup NAME BUILD OLD_SLUICE [ROUNDS]` reads an A/B probe's arguments: old (the other
# build's sluice), rounds (default 3), then probe_setup, and new (BUILD's sluice).
probe_setup() {
  build=$(cd "$1" && pwd)
  [[ -d ${build}/../lib ]] && export LD_LIBRARY_PATH=${build}/../lib:${LD_LIBRARY_PATH:-}
  sluice=${build}/src/sluice
  bench=${build}/bench/sluice_s3_bench
  work=$(mktemp -d "$( [[ -w /dev/shm ]] && echo /dev/shm || echo /tmp)/sluice-$2.XXXXXX")
  trap 'for f in "${work}"/*.pid; do kill "$(cat "$f")" 2>/dev/null; done; wait; rm -rf "${work}"' EXIT
}
root_of() {
  local dir=probe_dir_$1
  echo "${!dir:-${work}}/$1"
}
start() {
  local root=$1
  shift
  "${sluice}" serve --root "$(root_of "${root}")" --listen 127.0.0.1:0 --access-key AK --secret-key SK "$@" \
    >"${work}/${root}.log" 2>&1 &
  echo $! >"${work}/${root}.pid"
  for _ in $(seq 200); do
    port=$(sed -n 's/^sluice serve: listening on 127\.0\.0\.1:\([0-9]*\),.*/\1/p' "${work}/${root}.log")
    [[ -n ${port} ]] && echo "${port}" && return
    sleep 0.05
  done
  cat "${work}/${root}.log" >&2
  exit 1
}
stop() {
  kill "$(cat "${work}/$1.pid")" 2>/dev/null
  wait "$(cat "${work}/$1.pid")" 2>/dev/null
  rm -rf "$(root_of "$1")" "${work:?}/$1.pid"
}
gateway_config() {
  python3 -c 'import json, sys; print(json.dumps({"gateway": dict(json.loads(sys.argv[1]),
    upstream=sys.argv[2], upstream_access_key_id="AK", upstream_secret_access_key="SK")}))' \
    "$1" "http://127.0.0.1:$2"
}
field() { python3 -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
median() { printf '%s\n' "$@" | sort -g | sed -n "$(( ($# + 1) / 2 ))p"; }
ab_setup() {
  old=$(realpath "$3")
  rounds=${4:-3}
  probe_setup "$2" "$1"
  new=${sluice}
}
