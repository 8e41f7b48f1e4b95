#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's main-job command: installs what is missing, builds the release preset, starts
# `sluice serve` on a free loopback port with a temporary store (libfabric tcp, and the same-host
# grant socket), and runs the S3 RDMA demo against it: a generated object PUT by RDMA, then GET
# back by RDMA over tcp;ofi_rxm, by a same-host grant (the server reads the object straight into
# the demo's memfd buffer), by HTTP and automatically, each verified and timed. Stops the server
# on exit and exits with the demo's status. (shm is left out: it lets any local process reach any
# other's memory; `--fabric shm` on both ends still shows it.)
# Extra arguments go to the demo (e.g. --size 64MiB, --repeat 3).
#   SLUICE_BUILD_DIR=build/mine scripts/demo.sh   # build the release preset elsewhere
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh

build=${SLUICE_BUILD_DIR:-build/release}
cmake --preset release -B "${build}" >/dev/null
cmake --build "${build}" -j "$(nproc)" --target sluice_cli sluice_s3_rdma_demo

root=$(mktemp -d "${TMPDIR:-/tmp}/sluice-demo.XXXXXX")
server_pid=""
cleanup() {
  if [[ -n ${server_pid} ]]; then
    kill "${server_pid}" 2>/dev/null || true
    wait "${server_pid}" 2>/dev/null || true
  fi
  rm -rf "${root}"
}
trap cleanup EXIT

access_key=demo-access-key
secret_key=demo-secret-key
# Port 0: the kernel picks a free port and the server prints it once it listens.
: >"${root}/serve.log"
"${build}/src/sluice" serve --root "${root}/store" --listen 127.0.0.1:0 --fabric auto \
  --grant-socket "${root}/grants.sock" --access-key "${access_key}" --secret-key "${secret_key}" \
  >"${root}/serve.log" 2>&1 &
server_pid=$!
port=""
for _ in $(seq 1 200); do
  port=$(sed -n 's/^sluice serve: listening on 127\.0\.0\.1:\([0-9]*\),.*/\1/p' "${root}/serve.log")
  [[ -n ${port} ]] && break
  if ! kill -0 "${server_pid}" 2>/dev/null; then break; fi
  sleep 0.05
done
if [[ -z ${port} ]]; then
  echo "demo: sluice serve did not start:" >&2
  cat "${root}/serve.log" >&2
  exit 1
fi
sed 's/^/server: /' "${root}/serve.log"

status=0
"${build}/examples/s3_rdma_demo/sluice_s3_rdma_demo" --endpoint "http://127.0.0.1:${port}" \
  --access-key "${access_key}" --secret-key "${secret_key}" --server-pid "${server_pid}" \
  --fabric tcp --grant-socket "${root}/grants.sock" "$@" || status=$?
exit "${status}"
