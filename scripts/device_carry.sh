#!/usr/bin/env bash
# Packs what the GPU suite needs to run on the device machine (CUDA runtime present; no
# libfabric headers, simdjson or liburing there): the test binary built here, and a runner.
#   here:   scripts/device_carry.sh [BUILD_DIR]     (default build/dev) → build/device-carry/
#   there:  build/device-carry/run.sh [doctest options]   (carry build/device-carry)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/dev}
cmake --build "$build" --target sluice_gpu_tests
out=build/device-carry
rm -rf "$out"
mkdir -p "$out"
cp "$build/tests/gpu/sluice_gpu_tests" "$out/"
cat >"$out/run.sh" <<'RUN'
#!/usr/bin/env bash
set -uo pipefail
cd "$(dirname "$0")"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
./sluice_gpu_tests "$@"
RUN
chmod +x "$out/run.sh"
du -sh "$out"
