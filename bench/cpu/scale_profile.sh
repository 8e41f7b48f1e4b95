#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Where sluice serve's CPU goes under wrk (4 KiB presigned GETs), server on 1 and on 8 cores: user
# vs system CPU per request (/proc) and, where strace exists, syscalls (strace -c -f). Needs 16
# cores (wrk on 8-15). On a GPU host after scripts/device_carry.sh:
#   bench/cpu/scale_profile.sh build/device-carry      (the carried sluice, wrk and lib/)
here=$(cd "${1:-build/device-carry}" && pwd)
export LD_LIBRARY_PATH=${here}/lib
command -v strace gdb perf
C="curl -sS --aws-sigv4 aws:amz:us-east-1:s3 --user AK:SK -H x-amz-content-sha256:UNSIGNED-PAYLOAD"
for k in 1 8; do
  root=/tmp/sp$k; rm -rf $root; mkdir -p $root/store; echo "{\"io_threads\": $k}" > $root/c.json
  port=$((9930 + k))
  taskset -c 0-$((k - 1)) "${here}/sluice" serve --root $root/store --listen 127.0.0.1:$port --fabric off \
    --grant-socket off --access-key AK --secret-key SK --config $root/c.json > $root/s.log 2>&1 &
  SP=$!; sleep 1
  head -c 4096 /dev/urandom > $root/obj; $C -X PUT http://127.0.0.1:$port/bkt; $C -T $root/obj http://127.0.0.1:$port/bkt/small
  URL=$("${here}/sluice" presign s3://bkt/small --endpoint http://127.0.0.1:$port --access-key AK --secret-key SK)
  a=$(awk '{print $14, $15}' /proc/$SP/stat)
  taskset -c 8-15 "${here}/tools/wrk" -t$k -c$((k > 1 ? 8 * k : 16)) -d5s "$URL" > $root/wrk.txt
  b=$(awk '{print $14, $15}' /proc/$SP/stat)
  n=$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' $root/wrk.txt)
  echo "== server on $k core(s): $(grep Requests/sec $root/wrk.txt); ${n} requests; utime stime ticks before ${a} after ${b}"
  echo "$a $b $n" | awk '{printf "user %.1f us/req, system %.1f us/req\n", ($3-$1)*1e4/$5, ($4-$2)*1e4/$5}'
  if command -v strace >/dev/null; then
    taskset -c 8-15 "${here}/tools/wrk" -t$k -c$((k > 1 ? 8 * k : 16)) -d4s "$URL" > $root/wrk2.txt &
    sleep 0.5
    timeout -s INT 3 strace -c -f -p $SP 2>&1 | head -25
    wait
    grep "requests in" $root/wrk2.txt
  fi
  kill $SP; wait $SP 2>/dev/null
done
