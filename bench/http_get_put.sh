#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# GET and PUT of one object over loopback with curl: `sluice serve` against nginx serving the
# same file (sendfile) in the same run. Prints MiB/s and the ratio sluice/nginx.
#   bench/http_get_put.sh [SLUICE_BINARY] [SIZE_MIB]     (defaults: build/release/src/sluice, 1024)
set -euo pipefail
sluice=${1:-build/release/src/sluice}
size_mib=${2:-1024}
runs=3
work=$(mktemp -d /tmp/sluice-bench.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; nginx -p "$work/nginx" -c "$work/nginx.conf" -s stop 2>/dev/null || true; rm -rf "$work"' EXIT
command -v nginx >/dev/null || { echo "nginx is not installed (apt-get install nginx-light)"; exit 77; }

head -c $((size_mib * 1024 * 1024)) /dev/urandom > "$work/object.bin"
AK=BENCHAK SK=bench-secret-key

"$sluice" serve --root "$work/root" --listen 127.0.0.1:0 --access-key $AK --secret-key $SK > "$work/serve.log" 2>&1 &
for _ in $(seq 50); do grep -q listening "$work/serve.log" && break; sleep 0.1; done
port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$work/serve.log")
s3="curl -sS --aws-sigv4 aws:amz:us-east-1:s3 --user $AK:$SK -H x-amz-content-sha256:UNSIGNED-PAYLOAD"
$s3 -X PUT "http://127.0.0.1:$port/bench" >/dev/null

mkdir -p "$work/nginx/logs" "$work/www"
cp "$work/object.bin" "$work/www/object.bin"
cat > "$work/nginx.conf" <<CONF
user root; daemon on; worker_processes 1; error_log $work/nginx/error.log; pid $work/nginx/nginx.pid;
events { worker_connections 64; }
http { sendfile on; tcp_nopush on; access_log off; client_max_body_size 0; client_body_temp_path $work/nginx/body;
       server { listen 127.0.0.1:18081; root $work/www;
                location /upload/ { dav_methods PUT; create_full_put_path on; } } }
CONF
nginx -p "$work/nginx" -c "$work/nginx.conf"

best() { sort -n | tail -1; }
rate() { awk -v b=$((size_mib * 1024 * 1024)) '{ printf "%.0f\n", b / $1 / 1048576 }'; }
measure() {  # best of $runs of a curl command printing time_total
  for _ in $(seq $runs); do "$@" -f -o /dev/null -w '%{time_total}\n'; done | rate | best
}
sluice_put=$(measure $s3 -T "$work/object.bin" "http://127.0.0.1:$port/bench/object.bin")
sluice_get=$(measure $s3 "http://127.0.0.1:$port/bench/object.bin")
nginx_put=$(measure curl -sS -T "$work/object.bin" "http://127.0.0.1:18081/upload/object.bin")
nginx_get=$(measure curl -sS "http://127.0.0.1:18081/object.bin")
cmp <($s3 "http://127.0.0.1:$port/bench/object.bin") "$work/object.bin" && echo "sluice GET verified byte-exact"

printf '\n%-28s %10s %10s %8s\n' "$size_mib MiB over loopback" "sluice" "nginx" "ratio"
printf '%-28s %7s MiB/s %5s MiB/s %8.2f\n' "GET (curl, best of $runs)" "$sluice_get" "$nginx_get" "$(echo "$sluice_get / $nginx_get" | bc -l)"
printf '%-28s %7s MiB/s %5s MiB/s %8.2f\n' "PUT (curl, best of $runs)" "$sluice_put" "$nginx_put" "$(echo "$sluice_put / $nginx_put" | bc -l)"
