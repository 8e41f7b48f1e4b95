#!/usr/bin/env bash
# The README's test command: installs what is missing, then for each preset (default: dev,
# asan, fuzz: a 10 s libFuzzer run of each parser) configures, builds and runs the whole CTest
# suite. Exits non-zero on any failure.
#   SLUICE_TEST_PRESETS="dev" scripts/test.sh     # one preset only
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh

jobs=$(nproc)
for preset in ${SLUICE_TEST_PRESETS:-dev asan fuzz}; do
  echo "=== sluice: preset ${preset}"
  cmake --preset "${preset}"
  cmake --build --preset "${preset}" -j "${jobs}"
  ctest --preset "${preset}" -j "${jobs}"
done
echo "=== sluice: all presets passed (${SLUICE_TEST_PRESETS:-dev asan fuzz})"
