#!/usr/bin/env bash
# The README's main-job command: installs what is missing, builds the release preset and runs
# the demo. Extra arguments go to the demo (e.g. --size 64MiB).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target sluice_demo
exec build/release/examples/in_process/sluice_demo "$@"
