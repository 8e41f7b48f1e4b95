#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages sluice builds and tests with, when any is missing.
# Usage: scripts/deps.sh            (sourced or run by scripts/test.sh and scripts/demo.sh)
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config git liburing-dev  # build (liburing: the file tier)
  libboost1.81-dev                           # Asio, Beast, System (core, s3); not libboost-dev (1.74)
  libsimdjson-dev                            # JSON config and metadata
  libpugixml-dev                             # S3 XML bodies
  libisal-dev                                # CRC32/CRC32C (S3 flexible checksums)
  libssl-dev                                 # SigV4 crypto (s3)
  libfabric-dev libfabric-bin                # RDMA data plane (fabric)
  libcli11-dev                               # the sluice CLI's command line
  doctest-dev                                # tests
  ccache                                     # compiler cache (cmake/SluiceCcache.cmake)
  clang-19 libclang-rt-19-dev llvm-19        # asan preset: clang 19, its ASan/UBSan/libFuzzer runtimes, llvm-symbolizer-19
  clang-format clang-tidy                    # lint
  curl awscli python3-boto3 s3cmd rclone     # S3 interop tests (real clients)
  openssl util-linux                         # hardening tests: a test certificate (tls), unshare (full)
  nginx wrk hyperfine python3-matplotlib     # bench/run.py: the nginx baseline, small objects, start times, plots
  nodejs npm                                 # JS SDK interop, s3rver (npm packages fetched by the tests)
  golang-go pybind11-dev python3-pybind11 python3-numpy  # embedding: Go (cgo) and Python bindings, their tests
  python3-venv python3-setuptools python3-pip  # install.python: pip install ./bindings/python into a venv
  ceph-mon ceph-mgr ceph-osd radosgw ceph-common  # gateway.rgw.*: a single-node Ceph RGW (tests/ceph/rgw_fixture.py)
)

missing=()
for p in "${packages[@]}"; do
  # node and npm may come from elsewhere than Debian (NodeSource, nvm): a working command is enough.
  if [[ $p == nodejs || $p == npm ]] && command -v "${p/nodejs/node}" >/dev/null; then continue; fi
  # Any nginx flavour (nginx-light, nginx-core) serves the benchmark's files.
  if [[ $p == nginx ]] && { command -v nginx >/dev/null || [[ -x /usr/sbin/nginx ]]; }; then continue; fi
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "sluice: installing missing packages: ${missing[*]}"
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "sluice: need root or sudo to install ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The CUDA toolkit image keeps CUDA in /usr/local/cuda; CMake finds it there (SLUICE_WITH_CUDA=AUTO).
if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  echo "sluice: CUDA toolkit $(/usr/local/cuda/bin/nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p') found"
else
  echo "sluice: no CUDA toolkit found; building without sluice::cuda"
fi
