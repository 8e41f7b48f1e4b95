#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the vectors_from_s3 example end to end: starts `sluice serve --fabric auto` on a free
# loopback port with a temporary store, runs the example with --upload against it (generate and
# PUT the vector set, load it into GPU memory by sluice and naively, search both copies), stops
# the server on exit and exits with the example's status.
#
#   examples/vectors_from_s3/run.sh [path/to/sluice] [example options, e.g. --vectors 4000000 --fabric shm]
#
# The `sluice` CLI is the first argument when it is not an option, else $SLUICE_BUILD_DIR/src/sluice,
# else the first build directory under build/ that holds both it and the example (build/release
# first: `cmake --preset release && cmake --build build/release --target sluice_cli vectors_from_s3`).
# The example is <build dir>/examples/vectors_from_s3/vectors_from_s3 of the CLI's build directory.
# Exit status: the example's; 77 (skipped) when there is no CUDA device; 1 when a binary is missing
# or the server does not start.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
example_path=examples/vectors_from_s3/vectors_from_s3

sluice_bin=""
if [[ $# -gt 0 && $1 != -* ]]; then
  sluice_bin=$1
  shift
fi
if [[ -z ${sluice_bin} ]]; then
  candidates=()
  [[ -n ${SLUICE_BUILD_DIR:-} ]] && candidates+=("${SLUICE_BUILD_DIR}")
  candidates+=("${repo}/build/release" "${repo}"/build/*)
  for dir in "${candidates[@]}"; do
    if [[ -x ${dir}/src/sluice && -x ${dir}/${example_path} ]]; then
      sluice_bin=${dir}/src/sluice
      break
    fi
  done
fi
example=""
if [[ -n ${sluice_bin} ]]; then
  example=$(dirname "${sluice_bin}")/../${example_path}
  [[ -x ${example} ]] || example=""
fi

# No GPU: nothing to measure. Ask the example (the CUDA runtime it links decides), or the driver
# when the example is not built.
if [[ -n ${example} ]]; then
  check_status=0
  check=$("${example}" --check-device 2>&1) || check_status=$?
  if [[ ${check_status} -eq 77 ]]; then
    echo "run.sh: needs a CUDA device: ${check#vectors_from_s3: }"
    exit 77
  elif [[ ${check_status} -ne 0 ]]; then
    echo "run.sh: ${example} --check-device failed (${check_status}): ${check}" >&2
    exit 1
  fi
elif ! { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }; then
  echo "run.sh: needs a CUDA device (no GPU found by nvidia-smi)"
  exit 77
fi
if [[ -z ${sluice_bin} || ! -x ${sluice_bin} || -z ${example} ]]; then
  echo "run.sh: cannot find the sluice CLI and the vectors_from_s3 example; build them with" >&2
  echo "  cmake --preset release && cmake --build build/release --target sluice_cli vectors_from_s3" >&2
  echo "and pass the CLI's path (build/release/src/sluice) or set SLUICE_BUILD_DIR" >&2
  exit 1
fi
echo "run.sh: ${check}"

root=$(mktemp -d "${TMPDIR:-/tmp}/sluice-vectors.XXXXXX")
server_pid=""
cleanup() {
  if [[ -n ${server_pid} ]]; then
    kill "${server_pid}" 2>/dev/null || true
    wait "${server_pid}" 2>/dev/null || true
  fi
  rm -rf "${root}"
}
trap cleanup EXIT

access_key=vectors-access-key
secret_key=vectors-secret-key
# Port 0: the kernel picks a free port and the server prints it once it listens.
: >"${root}/serve.log"
"${sluice_bin}" serve --root "${root}/store" --listen 127.0.0.1:0 --fabric auto \
  --access-key "${access_key}" --secret-key "${secret_key}" >"${root}/serve.log" 2>&1 &
server_pid=$!
port=""
for _ in $(seq 1 200); do
  port=$(sed -n 's/^sluice serve: listening on 127\.0\.0\.1:\([0-9]*\),.*/\1/p' "${root}/serve.log")
  [[ -n ${port} ]] && break
  if ! kill -0 "${server_pid}" 2>/dev/null; then break; fi
  sleep 0.05
done
if [[ -z ${port} ]]; then
  echo "run.sh: sluice serve did not start:" >&2
  cat "${root}/serve.log" >&2
  exit 1
fi
sed 's/^/server: /' "${root}/serve.log"

status=0
"${example}" --endpoint "http://127.0.0.1:${port}" --access-key "${access_key}" --secret-key "${secret_key}" \
  --upload "$@" || status=$?
exit "${status}"
