#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What a HEAD costs straight to an upstream `sluice serve` and through a gateway in front of it, and a
# 100-byte ranged GET of the cached copy through the gateway (each one a revalidation), for a 64 KiB and
# a 1 GiB object; curl --aws-sigv4, 6 requests each (seconds, new connection per request).
#   bench/cpu/gateway_head_probe.sh BUILD   (BUILD holds src/sluice and bench/sluice_s3_bench: build/device,
#                                            or build/device-carry/cpu on a GPU host)
set -u
build=$(cd "$1" && pwd)
[[ -d ${build}/../lib ]] && export LD_LIBRARY_PATH=${build}/../lib:${LD_LIBRARY_PATH:-}
S=${build}/src/sluice; B=${build}/bench/sluice_s3_bench
w=$(mktemp -d /dev/shm/hp.XXXX)
trap 'kill $(jobs -p) 2>/dev/null; wait; rm -rf $w' EXIT
port_of() { for _ in $(seq 100); do p=$(sed -n 's/^sluice serve: listening on 127\.0\.0\.1:\([0-9]*\),.*/\1/p' $1); [[ -n $p ]] && echo $p && return; sleep 0.05; done; }
$S serve --root $w/up --listen 127.0.0.1:0 --access-key AK --secret-key SK --fabric off --grant-socket off >$w/log 2>&1 &
port=$(port_of $w/log)
$S serve --root $w/gw --listen 127.0.0.1:0 --access-key AK --secret-key SK --fabric off --grant-socket off --upstream http://127.0.0.1:$port --upstream-access-key AK --upstream-secret-key SK >$w/glog 2>&1 &
gport=$(port_of $w/glog)
for size in 65536 1073741824; do
  $B --endpoint http://127.0.0.1:$port --op put --bucket bench --key k$size --size $size --access-key AK --secret-key SK --repeat 1 >/dev/null 2>&1
  curl -s -o /dev/null --aws-sigv4 "aws:amz:us-east-1:s3" --user AK:SK http://127.0.0.1:$gport/bench/k$size
  for target in $port $gport; do
    echo -n "HEAD $size via $([[ $target == $port ]] && echo upstream || echo gateway): "
    for i in 1 2 3 4 5 6; do curl -s -o /dev/null -w "%{time_total} " -I --aws-sigv4 "aws:amz:us-east-1:s3" --user AK:SK http://127.0.0.1:$target/bench/k$size; done; echo
  done
  echo -n "GET range 0-99 $size via gateway: "
  for i in 1 2 3 4 5 6; do curl -s -o /dev/null -w "%{time_total} " -H "Range: bytes=0-99" --aws-sigv4 "aws:amz:us-east-1:s3" --user AK:SK http://127.0.0.1:$gport/bench/k$size; done; echo
done
