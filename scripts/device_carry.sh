#!/usr/bin/env bash
# Packs what the GPU work needs on the device machine (CUDA runtime and libfabric 1.17 there; no
# libfabric headers, simdjson or liburing): release binaries built here, stripped, the few shared
# libraries the device image lacks, and a runner.
#   here:   scripts/device_carry.sh [BUILD_DIR]        (default build/device) → build/device-carry/
#   there:  build/device-carry/run.sh [all|tests|bench|example] [args]   (carry build/device-carry)
# run.sh all: the GPU suite, then `sluice serve --fabric auto` on loopback with the GPU benchmark
# (S3 GET 4 GiB → GPU each path, file → GPU, H2D ceilings) and examples/vectors_from_s3 against it.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/device}
if [[ ! -f ${build}/CMakeCache.txt ]]; then
  cmake --preset release -B "${build}" -DSLUICE_BUILD_TESTS=ON -DSLUICE_BUILD_FUZZ=OFF >/dev/null
fi
targets=(sluice_cli sluice_gpu_tests sluice_gpu_bench)
if grep -q vectors_from_s3 "${build}/build.ninja" 2>/dev/null; then targets+=(vectors_from_s3); fi
cmake --build "${build}" -j "$(nproc)" --target "${targets[@]}"

out=build/device-carry
rm -rf "${out}"
mkdir -p "${out}/lib"
cp "${build}/src/sluice" "${build}/tests/gpu/sluice_gpu_tests" "${build}/bench/sluice_gpu_bench" "${out}/"
if [[ -f ${build}/examples/vectors_from_s3/vectors_from_s3 ]]; then
  cp "${build}/examples/vectors_from_s3/vectors_from_s3" "${out}/"
fi
strip "${out}"/sluice* "${out}"/vectors_from_s3 2>/dev/null || true
# Libraries of Debian 12 that the device image (Ubuntu 24.04) has not, or has in another version.
for binary in "${out}"/sluice*; do
  ldd "${binary}" | awk '/libsimdjson|libpugixml|libisal|liburing/ {print $3}'
done | sort -u | xargs -r cp -L -t "${out}/lib"

cat >"${out}/run.sh" <<'RUN'
#!/usr/bin/env bash
# On the device machine: run.sh [all|tests|bench|example] [extra args for that step]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=${here}/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}
# libfabric 1.17 loads CUDA with dlopen("libcuda.so") and dlopen("libcudart.so"): the names of
# the development packages. Without them its FI_HMEM providers fail every device registration
# (FI_ENOSYS). Point those names at the driver's and the runtime's libraries.
for name in libcuda.so libcudart.so; do
  if ! ldconfig -p | grep -q " ${name} "; then
    target=$(ldconfig -p | awk -v n="${name}." '$1 ~ "^"n {print $NF; exit}')
    [[ -z ${target} ]] && target=$(ls /usr/local/cuda/lib64/${name}.* 2>/dev/null | head -1)
    [[ -n ${target} ]] && ln -sf "${target}" "${here}/lib/${name}" && echo "linked ${name} -> ${target}"
  fi
done
what=${1:-all}
shift || true
nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current \
  --format=csv,noheader || true
# cuFile classifies a file's block device through the udev database, which a container
# lacks: registering a file reads the udev properties ID_FS_USAGE and ID_FS_TYPE of the
# device under it (libudev, /run/udev/data/b<major>:<minor>), and without them every
# registration fails ("udev property not found: ID_FS_USAGE" in cufile.log, then "file
# descriptor not registered"), even in compat mode. Describe the device under /tmp (the
# suite's and the benchmark's files) there as udev's blkid builtin would, and say so.
source_dev=$(df --output=source /tmp | tail -1)
if [[ ! -e /run/udev/data && ${source_dev} == /dev/* && -b ${source_dev} ]]; then
  id=$((16#$(stat -L -c %t "${source_dev}"))):$((16#$(stat -L -c %T "${source_dev}")))
  fstype=$(df --output=fstype /tmp | tail -1)
  mkdir -p /run/udev/data
  printf 'E:ID_FS_TYPE=%s\nE:ID_FS_USAGE=filesystem\n' "${fstype}" >"/run/udev/data/b${id}"
  echo "cuFile: no udev database here; described ${source_dev} (${fstype}) in /run/udev/data/b${id}:" \
    "$(paste -sd ' ' "/run/udev/data/b${id}")"
fi
status=0
if [[ ${what} == all || ${what} == tests ]]; then
  echo "== GPU suite"
  "${here}/sluice_gpu_tests" "$@" || status=1
fi
if [[ ${what} == all || ${what} == bench || ${what} == example ]]; then
  root=$(mktemp -d /tmp/sluice-device.XXXXXX)
  # shm is named (auto no longer opens it) so the staged-RDMA rows stay comparable with earlier
  # runs; the grant socket serves the same-host CUDA IPC grants.
  "${here}/sluice" serve --root "${root}/store" --listen 127.0.0.1:0 --fabric shm,tcp \
    --grant-socket "${root}/grants.sock" \
    --access-key SLUICEBENCH --secret-key sluice-bench-secret >"${root}/serve.log" 2>&1 &
  server=$!
  port=""
  for _ in $(seq 1 200); do
    port=$(sed -n 's/^sluice serve: listening on 127\.0\.0\.1:\([0-9]*\),.*/\1/p' "${root}/serve.log")
    [[ -n ${port} ]] && break
    sleep 0.05
  done
  sed 's/^/server: /' "${root}/serve.log"
  endpoint=http://127.0.0.1:${port}
  if [[ ${what} == all || ${what} == bench ]]; then
    echo "== GPU benchmark"
    "${here}/sluice_gpu_bench" --endpoint "${endpoint}" --json "${OUT:-/tmp}/gpu_bench.json" \
      --file "${root}/bench.bin" --grant-socket "${root}/grants.sock" --server-pid "${server}" "$@" || status=1
  fi
  if [[ ${what} == all || ${what} == example ]] && [[ -x ${here}/vectors_from_s3 ]]; then
    echo "== examples/vectors_from_s3"
    "${here}/vectors_from_s3" --endpoint "${endpoint}" --bucket vectors --access-key SLUICEBENCH \
      --secret-key sluice-bench-secret --fabric auto --grant-socket "${root}/grants.sock" --upload || status=1
  fi
  kill "${server}" 2>/dev/null
  wait "${server}" 2>/dev/null
  rm -rf "${root}"
fi
exit "${status}"
RUN
chmod +x "${out}/run.sh"
du -sh "${out}"
