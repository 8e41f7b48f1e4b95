#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Where the CPU goes in a 1 GiB GET over HTTP: perf record -a -g over five GETs by sluice_s3_bench
# from `sluice serve` and from nginx (sendfile), then one `sluice get` into a tmpfs file. Needs
# perf, nginx, curl and a release build (default build/release):
#   bench/cpu/http_get_profile.sh [BUILD_DIR]
set -u
B=$(cd "${1:-build/release}" && pwd)
W=/dev/shm/gp; rm -rf $W; mkdir -p $W/store $W/www/bkt $W/nginx
$B/src/sluice serve --root $W/store --listen 127.0.0.1:9961 --fabric off --grant-socket off --access-key AK --secret-key SK > $W/s.log 2>&1 &
SP=$!; sleep 1
curl -sS --aws-sigv4 aws:amz:us-east-1:s3 --user AK:SK -H x-amz-content-sha256:UNSIGNED-PAYLOAD -X PUT http://127.0.0.1:9961/bkt -o /dev/null
A="--access-key AK --secret-key SK"
$B/bench/sluice_s3_bench --endpoint http://127.0.0.1:9961 --bucket bkt --key big --op put --size 1073741824 $A --via http > /dev/null
$B/bench/sluice_s3_bench --endpoint http://127.0.0.1:9961 --bucket bkt --key big --op gen --size 1073741824 --out $W/www/bkt/big > /dev/null
cat > $W/nginx/nginx.conf <<NG
user root;
worker_processes 2;
pid $W/nginx/nginx.pid;
error_log $W/nginx/error.log warn;
events { worker_connections 1024; }
http { sendfile on; tcp_nopush on; tcp_nodelay on; access_log off; keepalive_requests 1000000;
  client_body_temp_path $W/nginx/b; proxy_temp_path $W/nginx/p; fastcgi_temp_path $W/nginx/f; uwsgi_temp_path $W/nginx/u; scgi_temp_path $W/nginx/s;
  server { listen 127.0.0.1:9962; root $W/www; } }
NG
nginx -p $W/nginx -c $W/nginx/nginx.conf -e $W/nginx/error.log -g "daemon off;" &
NP=$!; sleep 1
for which in sluice nginx; do
  if [[ $which == sluice ]]; then E="--endpoint http://127.0.0.1:9961 $A"; else E="--endpoint http://127.0.0.1:9962 --anonymous"; fi
  echo "== $which"
  perf record -a -g -o $W/$which.data -- $B/bench/sluice_s3_bench $E --bucket bkt --key big --op get --size 1073741824 --via http --repeat 5 2>&1 | grep -o '"seconds_all":\[[^]]*\],"gib_per_s":[0-9.]*'
  perf report -i $W/$which.data --no-children --sort comm,dso -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -12
  perf report -i $W/$which.data --no-children --sort sym -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | cut -c1-120 | head -16
done
echo "== sluice get to a tmpfs file"
perf record -a -g -o $W/cli.data -- $B/src/sluice get s3://bkt/big $W/out --endpoint http://127.0.0.1:9961 $A --via http --no-progress
perf report -i $W/cli.data --no-children --sort comm,dso -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -10
perf report -i $W/cli.data --no-children --sort sym -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | cut -c1-120 | head -16
rm -f $W/out
kill $SP; kill -QUIT $NP; wait
rm -rf $W
