#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Packs what the GPU work needs on the device machine (CUDA runtime and Ubuntu's libfabric there,
# built without CUDA; no libfabric headers, simdjson or liburing): release binaries built here,
# stripped, the few shared libraries the device image lacks, libfabric v2.6.0 built with CUDA
# (FI_HMEM), and a runner.
#   here:   scripts/device_carry.sh [BUILD_DIR [OUT_DIR [LIBFABRIC_GIT]]]   (default build/device → build/device-carry)
#   there:  OUT_DIR/run.sh [all|tests|bench|example|file|restart|python|go|cpu|gateway] [args]   (carry OUT_DIR)
# run.sh all (one 600 s device call): the GPU suite, the 4 GiB file → GPU rates, `sluice serve` on
# loopback with the GPU benchmark's same-host grant rows (first GETs, registered, processes) and
# examples/vectors_from_s3 against it, then the first GET after a restart (3 rounds).
# run.sh bench: the GPU benchmark's every path (S3 GET 4 GiB → GPU each path, PUT, file → GPU,
# H2D ceilings), then the restart rounds.
# run.sh python: the Python package pip-installed there for its python3 (torch), tests/python with torch,
# and GET → CUDA tensor through Python against the C API in the same run (bench/gpu/python_get.py).
# run.sh cpu: bench/run.py's CPU groups with the carried binaries, wrk and nginx (default the core
# scaling of 4 KiB GETs against nginx on the same cores; SLUICE_BENCH_ONLY picks groups), results
# in $OUT/bench_cpu.
# run.sh go: bindings/go's tests (a test binary built here with -tags cuda), its GPU test included.
# run.sh gateway: the GPU benchmark (1 GiB) against a local store and against `sluice serve
# --upstream` in front of a second sluice serve, in one run: a gateway cache hit into GPU memory
# against the same GET from the local store (issue 16); JSON in $OUT/gpu_gateway_{local,gateway}.json.
# SLUICE_GATEWAY_ROUNDS=N runs N paired rounds (local and gateway alternating) and prints each
# row's median per-round ratio ($OUT/gpu_gateway_pairs.json).
# run.sh file: the 4 GiB file → GPU rates of the GPU suite (resident and cold file, the pinned
# H2D ceiling and the disk's O_DIRECT rate measured in the same run, the mapped method's shape).
#
# libfabric (SLUICE_LIBFABRIC): the sluice binaries link libfabric.so.1 (Debian's 1.17 here,
# Ubuntu's there, both without CUDA). v2.6.0 keeps that soname, so run.sh puts its lib directory
# first in LD_LIBRARY_PATH and every GPU-host run exercises FI_HMEM (shm with CUDA IPC):
#   prebuilt (default)  configure + make here (once per build directory, cached in
#                       BUILD_DIR/libfabric-v2.6.0/), carry the installed library (~3 MiB);
#   source              carry the autogen'd source (~6 MiB tarball); run.sh configures and
#                       builds it on the device machine once (/tmp/sluice-libfabric, ~1 min);
#   system              carry nothing: the device image's libfabric (no FI_HMEM).
# The source comes only from the third argument, else SLUICE_LIBFABRIC_GIT, else the public
# https://github.com/ofiwg/libfabric.git: a git directory holding the v2.6.0 tag (a local mirror of
# yours) or a URL to clone. autogen.sh needs autoconf, automake and libtool here.
# CI never runs this: it keeps Debian's libfabric.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/device}
out=${2:-build/device-carry}
libfabric_git=${3:-${SLUICE_LIBFABRIC_GIT:-https://github.com/ofiwg/libfabric.git}}
libfabric=${SLUICE_LIBFABRIC:-prebuilt}
libfabric_version=v2.6.0
cuda_root=${CUDAToolkit_ROOT:-/usr/local/cuda}
case ${libfabric} in
  prebuilt | source | system) ;;
  *) echo "device_carry.sh: SLUICE_LIBFABRIC must be prebuilt, source or system" >&2 && exit 2 ;;
esac
if [[ ! -f ${build}/CMakeCache.txt ]]; then
  cmake --preset release -B "${build}" -DSLUICE_BUILD_TESTS=ON -DSLUICE_BUILD_FUZZ=OFF >/dev/null
fi
targets=(sluice_cli sluice_gpu_tests sluice_gpu_bench sluice_gpu_regprobe sluice_c sluice_s3_bench sluice_ceilings
  sluice_http_load)
if grep -q vectors_from_s3 "${build}/build.ninja" 2>/dev/null; then targets+=(vectors_from_s3); fi
cmake --build "${build}" -j "$(nproc)" --target "${targets[@]}"

# libfabric's autogen'd source (a tarball without .git, autom4te.cache, fabtests and the Windows
# project files) and, for prebuilt, its installation; both cached in the build directory.
lf_work=${build}/libfabric-${libfabric_version}
# libfabric's CUDA support includes nvml.h for three NVML calls it makes through dlopen; a
# toolkit without NVML's header gets those declarations from here.
write_nvml_shim() {
  mkdir -p "$1"
  cat >"$1/nvml.h" <<'NVML'
/* The part of NVML's header that libfabric's CUDA support uses: nvml.h is missing here. */
#ifndef SLUICE_NVML_SHIM_H
#define SLUICE_NVML_SHIM_H
typedef enum nvmlReturn_enum { NVML_SUCCESS = 0 } nvmlReturn_t;
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount);
nvmlReturn_t nvmlShutdown(void);
#endif
NVML
}
if [[ ${libfabric} != system && ! -f ${lf_work}/src.tar.gz ]]; then
  for tool in autoconf automake libtoolize; do
    command -v "${tool}" >/dev/null || { echo "device_carry.sh: ${tool} missing (apt-get install autoconf automake libtool)" >&2 && exit 1; }
  done
  git_source=${libfabric_git}
  rm -rf "${lf_work}"
  mkdir -p "${lf_work}/src"
  if [[ -d ${git_source} ]]; then
    git --git-dir="${git_source}" archive "${libfabric_version}" | tar -x -C "${lf_work}/src"
  else
    git clone -q --depth 1 --branch "${libfabric_version}" "${git_source}" "${lf_work}/clone"
    git --git-dir="${lf_work}/clone/.git" archive "${libfabric_version}" | tar -x -C "${lf_work}/src"
    rm -rf "${lf_work}/clone"
  fi
  (cd "${lf_work}/src" && ./autogen.sh >../autogen.log 2>&1) || { echo "device_carry.sh: libfabric autogen.sh failed: ${lf_work}/autogen.log" >&2 && exit 1; }
  tar -C "${lf_work}/src" --exclude=./autom4te.cache --exclude=./.github --exclude=./fabtests \
    --exclude='*.vcxproj*' --exclude='*.sln' -czf "${lf_work}/src.tar.gz.part" .
  mv "${lf_work}/src.tar.gz.part" "${lf_work}/src.tar.gz"
fi
# The configure line, also used by run.sh for `source`: CUDA loaded with dlopen (as Debian's
# build does), only the providers sluice opens.
lf_configure_flags=(--with-cuda="${cuda_root}" --enable-cuda-dlopen --enable-only --enable-shm --enable-tcp
  --enable-rxm --disable-verbs --disable-static)
if [[ ${libfabric} == prebuilt && ! -f ${lf_work}/install/lib/libfabric.so.1 ]]; then
  echo "building libfabric ${libfabric_version} here (${lf_work}/build.log)"
  rm -rf "${lf_work}/build" "${lf_work}/install"
  mkdir -p "${lf_work}/build"
  tar -C "${lf_work}/build" -xzf "${lf_work}/src.tar.gz"
  cppflags="-I${cuda_root}/include"
  if [[ ! -f ${cuda_root}/include/nvml.h ]]; then
    write_nvml_shim "${lf_work}/nvml-shim"
    cppflags+=" -I$(pwd)/${lf_work}/nvml-shim"
  fi
  # The prefix names a directory neither machine has, so libfabric finds no stray dl providers.
  (cd "${lf_work}/build" && ./configure --prefix=/opt/sluice-libfabric "${lf_configure_flags[@]}" &&
    make -j "$(nproc)" CPPFLAGS="${cppflags}" && make install DESTDIR="$(pwd)/../destdir") \
    >"${lf_work}/build.log" 2>&1 || { echo "device_carry.sh: libfabric build failed: ${lf_work}/build.log" >&2 && exit 1; }
  mv "${lf_work}/destdir/opt/sluice-libfabric" "${lf_work}/install"
  rm -rf "${lf_work}/build" "${lf_work}/destdir"
fi

rm -rf "${out}"
mkdir -p "${out}/lib"
cp "${build}/src/sluice" "${build}/tests/gpu/sluice_gpu_tests" "${build}/bench/sluice_gpu_bench" "${build}/bench/sluice_gpu_regprobe" "${out}/"
if [[ -f ${build}/examples/vectors_from_s3/vectors_from_s3 ]]; then
  cp "${build}/examples/vectors_from_s3/vectors_from_s3" "${out}/"
fi
strip "${out}"/sluice* "${out}"/vectors_from_s3 2>/dev/null || true
# bench/run.py's CPU groups (run.sh cpu): a build directory's layout (src/sluice,
# bench/sluice_s3_bench, bench/sluice_ceilings) and wrk with its LuaJIT from this machine.
mkdir -p "${out}/cpu/src" "${out}/cpu/bench" "${out}/tools"
cp "${out}/sluice" "${out}/cpu/src/sluice"
cp "${build}/bench/sluice_s3_bench" "${build}/bench/sluice_ceilings" "${build}/bench/sluice_http_load" "${out}/cpu/bench/"
strip "${out}"/cpu/bench/* 2>/dev/null || true
if command -v wrk >/dev/null; then
  cp "$(command -v wrk)" "${out}/tools/"
  ldd "$(command -v wrk)" | awk '/libluajit/ {print $3}' | xargs -r cp -L -t "${out}/lib"
fi
# Debian's nginx, the baseline of the core scaling (bench/run.py runs it with its own
# configuration, no module and no file of /etc): the binary and the two libraries the GPU host
# lacks (its libssl, libcrypto and zlib serve).
nginx=$(command -v nginx || echo /usr/sbin/nginx)
if [[ -x ${nginx} ]]; then
  cp "${nginx}" "${out}/tools/nginx"
  ldd "${nginx}" | awk '/libpcre2-8|libcrypt\.so/ {print $3}' | xargs -r cp -L -t "${out}/lib"
fi
# The C API library and pybind11's headers (Debian's): run.sh python builds the Python module
# there, for the device's own python3 (the one that holds torch).
cp -L "${build}/src/libsluice_c.so.0" "${out}/lib/"
strip --strip-unneeded "${out}/lib/libsluice_c.so.0" 2>/dev/null || true
ln -sf libsluice_c.so.0 "${out}/lib/libsluice_c.so"  # the name the linker looks for
if [[ -d /usr/include/pybind11 ]]; then
  mkdir -p "${out}/python/include"
  cp -r /usr/include/pybind11 "${out}/python/include/"
fi
# The Go package's test binary with its GPU test (build tag cuda), for run.sh go: the device
# image has no Go toolchain.
if command -v go >/dev/null; then
  # cgo takes sluice's flags from pkg-config (bindings/go: `#cgo pkg-config: sluice-c`): a
  # sluice-c.pc over this checkout's headers and the carried library.
  mkdir -p "${build}/go-pkgconfig"
  printf 'Name: sluice-c\nDescription: sluice C API (carried)\nVersion: 0\nLibs: -L%s -lsluice_c\nCflags: -I%s\n' \
    "$(pwd)/${out}/lib" "$(pwd)/include" >"${build}/go-pkgconfig/sluice-c.pc"
  (cd bindings/go && env CGO_ENABLED=1 GOPROXY=off GOTOOLCHAIN=local GOFLAGS=-mod=mod \
    GOCACHE="$(pwd)/../../${build}/gocache" GOPATH="$(pwd)/../../${build}/gopath" \
    PKG_CONFIG_PATH="$(pwd)/../../${build}/go-pkgconfig" \
    CGO_CFLAGS="-I${cuda_root}/include" CGO_LDFLAGS="-L${cuda_root}/lib64" \
    go test -c -tags cuda -o "../../${out}/sluice_go_test" .) || echo "device_carry.sh: the Go test binary was not built"
fi
# Libraries of Debian 12 that the device image (Ubuntu 24.04) has not, or has in another version.
for binary in "${out}"/sluice* "${out}/lib/libsluice_c.so.0"; do
  ldd "${binary}" | awk '/libsimdjson|libpugixml|libisal|liburing/ {print $3}'
done | sort -u | xargs -r cp -L -t "${out}/lib"
case ${libfabric} in
  prebuilt)
    mkdir -p "${out}/libfabric/lib" "${out}/libfabric/bin"
    cp -a "${lf_work}"/install/lib/libfabric.so* "${out}/libfabric/lib/"
    cp "${lf_work}/install/bin/fi_info" "${out}/libfabric/bin/"
    strip "${out}/libfabric/bin/fi_info" "${out}"/libfabric/lib/libfabric.so.*.* 2>/dev/null || true
    ;;
  source)
    cp "${lf_work}/src.tar.gz" "${out}/libfabric-src.tar.gz"
    printf '%s\n' "${lf_configure_flags[*]}" >"${out}/libfabric-configure-flags"
    ;;
  system) ;;
esac

cat >"${out}/run.sh" <<'RUN'
#!/usr/bin/env bash
# On the device machine: run.sh [all|tests|bench|example|file|python|go] [extra args for that step]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=${here}/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}
# libfabric v2.6.0 with CUDA (FI_HMEM): carried built, or built here once from the carried source
# (kept in /tmp while this machine stays up). Its lib directory goes first, ahead of the image's
# libfabric.so.1, which has no CUDA.
libfabric=""
if [[ -f ${here}/libfabric/lib/libfabric.so.1 ]]; then
  libfabric=${here}/libfabric
elif [[ -f ${here}/libfabric-src.tar.gz ]]; then
  libfabric=/tmp/sluice-libfabric
  if [[ ! -f ${libfabric}/lib/libfabric.so.1 ]] || ! cmp -s "${here}/libfabric-src.tar.gz" "${libfabric}/src.tar.gz"; then
    echo "building libfabric from the carried source (${libfabric}/build.log)"
    start=$(date +%s)
    rm -rf "${libfabric}" && mkdir -p "${libfabric}/src"
    tar -C "${libfabric}/src" -xzf "${here}/libfabric-src.tar.gz"
    cuda_root=/usr/local/cuda
    cppflags="-I${cuda_root}/include"
    if [[ ! -f ${cuda_root}/include/nvml.h ]]; then  # three NVML calls made through dlopen
      mkdir -p "${libfabric}/nvml-shim"
      printf '%s\n' 'typedef enum nvmlReturn_enum { NVML_SUCCESS = 0 } nvmlReturn_t;' \
        'nvmlReturn_t nvmlInit_v2(void);' 'nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount);' \
        'nvmlReturn_t nvmlShutdown(void);' >"${libfabric}/nvml-shim/nvml.h"
      cppflags+=" -I${libfabric}/nvml-shim"
    fi
    # shellcheck disable=SC2046
    if (cd "${libfabric}/src" && ./configure --prefix="${libfabric}" $(cat "${here}/libfabric-configure-flags") &&
      make -j "$(nproc)" CPPFLAGS="${cppflags}" && make install) >"${libfabric}/build.log" 2>&1; then
      cp "${here}/libfabric-src.tar.gz" "${libfabric}/src.tar.gz"
      echo "built libfabric in $(($(date +%s) - start)) s"
    else
      tail -20 "${libfabric}/build.log"
      echo "libfabric build failed: the device image's libfabric is used (no FI_HMEM)"
      libfabric=""
    fi
  fi
fi
if [[ -n ${libfabric} ]]; then
  export LD_LIBRARY_PATH=${libfabric}/lib:${LD_LIBRARY_PATH}
  echo "libfabric: $("${libfabric}/bin/fi_info" --version | tr '\n' ' ')from ${libfabric}/lib"
  "${libfabric}/bin/fi_info" -l | paste -sd ' ' | sed 's/^/libfabric providers: /'
fi
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
SECONDS=0
# Each step's header says when it started (seconds since run.sh began): one call has 600 s.
step() { echo "== [t+${SECONDS}s] $*"; }
if [[ ${what} == all || ${what} == tests ]]; then
  step "GPU suite"
  "${here}/sluice_gpu_tests" "$@" || status=1
fi
if [[ ${what} == all || ${what} == file ]]; then
  # The suite's skipped 4 GiB case: writes a 4 GiB file under /tmp, drops it from the page cache
  # for each cold run (fsync + POSIX_FADV_DONTNEED), prints a table and checks the targets.
  step "file -> GPU rates"
  "${here}/sluice_gpu_tests" --no-skip -tc='file to device: 4 GiB rates*' "$@" || status=1
fi
if [[ ${what} == python ]]; then
  # The Python module built here for this machine's python3 (torch's), over the carried C API
  # library; then tests/python with torch on the GPU, and GET -> CUDA tensor against the C API
  # (bench/gpu/python_get.py, which also builds on bench/gpu/capi_get.c).
  echo "== Python module and torch"
  repo=$(cd "${here}/../.." && pwd)
  mod=/tmp/sluice-python
  mkdir -p "${mod}"
  pyinc=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  suffix=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
  python3 -c 'import torch, numpy; print("python", __import__("sys").version.split()[0], "torch", torch.__version__, "numpy", numpy.__version__)'
  # As an embedder installs it: pip install --no-build-isolation ./bindings/python against a prefix
  # of the carried library (setup.py: SLUICE_PREFIX), into ${mod}; g++ straight when pip is missing.
  prefix=/tmp/sluice-prefix
  # pip install --target refuses a sluice/ that exists already: only the g++ way makes it.
  rm -rf "${mod}" "${prefix}" && mkdir -p "${mod}" "${prefix}/lib/pkgconfig"
  ln -s "${repo}/include" "${prefix}/include"
  cp -a "${here}"/lib/libsluice_c.so* "${prefix}/lib/"
  printf 'prefix=%s\nlibdir=${prefix}/lib\nincludedir=${prefix}/include\nName: sluice-c\nDescription: sluice C API\nVersion: %s\nLibs: -L${libdir} -lsluice_c\nCflags: -I${includedir}\n' \
    "${prefix}" "$(sed -n 's/^project(sluice VERSION \([0-9.]*\).*/\1/p' "${repo}/CMakeLists.txt")" >"${prefix}/lib/pkgconfig/sluice-c.pc"
  if python3 -m pip --version >/dev/null 2>&1; then
    SLUICE_PREFIX=${prefix} SLUICE_PYBIND11_INCLUDE=${here}/python/include PIP_NO_INDEX=1 \
      python3 -m pip install -q --no-build-isolation --no-deps --target "${mod}" "${repo}/bindings/python"
  else
    mkdir -p "${mod}/sluice" &&
      g++ -O2 -std=c++20 -shared -fPIC "${repo}/bindings/python/src/_sluice.cpp" -I"${repo}/include" \
      -I"${here}/python/include" -I"${pyinc}" -L"${prefix}/lib" -lsluice_c -Wl,-rpath,"${prefix}/lib" \
      -o "${mod}/sluice/_sluice${suffix}" && cp "${repo}"/bindings/python/sluice/*.py* "${mod}/sluice/"
  fi
  if [[ -f ${mod}/sluice/__init__.py ]] &&
    gcc -O2 "${repo}/bench/gpu/capi_get.c" -I"${repo}/include" -I/usr/local/cuda/include -L"${here}/lib" -lsluice_c \
      -L/usr/local/cuda/lib64 -lcudart -Wl,-rpath,"${here}/lib" -o "${mod}/capi_get"; then
    PYTHONPATH=${mod} python3 "${repo}/tests/python/test_sluice.py" "${here}/sluice" || status=1
    PYTHONPATH=${mod} python3 "${repo}/bench/gpu/python_get.py" "${here}/sluice" "${mod}/capi_get" "$@" || status=1
  else
    echo "could not build the Python module or capi_get here"
    status=1
  fi
fi
if [[ ${what} == go ]] && [[ -x ${here}/sluice_go_test ]]; then
  # bindings/go's tests, built here with -tags cuda: the segment round trips, and GET into / PUT
  # from GPU memory through the grant socket.
  echo "== Go package (cgo, libsluice_c), with its GPU test"
  LD_LIBRARY_PATH=${LD_LIBRARY_PATH}:/usr/local/cuda/lib64 SLUICE_BINARY=${here}/sluice \
    "${here}/sluice_go_test" -test.v -test.count=1 "$@" || status=1
fi
if [[ ${what} == cpu ]]; then
  # bench/run.py's CPU groups on this host with the carried binaries (default: the core scaling
  # of 4 KiB GETs; SLUICE_BENCH_ONLY=group,group picks others); results under $OUT/bench_cpu.
  echo "== bench/run.py --only ${SLUICE_BENCH_ONLY:-core_scaling}"
  repo=$(cd "${here}/../.." && pwd)
  PATH=${here}/tools:${PATH} python3 "${repo}/bench/run.py" --build "${here}/cpu" \
    --only "${SLUICE_BENCH_ONLY:-core_scaling}" --out "${OUT:-/tmp}/bench_cpu" "$@" || status=1
fi
# Starts `sluice serve` with ROOT and the rest as its arguments, logging to ROOT.log; prints its port.
start_serve() {
  local root=$1
  shift
  "${here}/sluice" serve --root "${root}" --listen 127.0.0.1:0 "$@" >"${root}.log" 2>&1 &
  echo $! >"${root}.pid"
  for _ in $(seq 1 200); do
    port=$(sed -n 's/^sluice serve: listening on 127\.0\.0\.1:\([0-9]*\),.*/\1/p' "${root}.log")
    [[ -n ${port} ]] && echo "${port}" && return 0
    sleep 0.05
  done
  cat "${root}.log" >&2
  return 1
}
if [[ ${what} == gateway ]]; then
  root=$(mktemp -d /tmp/sluice-gateway.XXXXXX)
  keys=(--access-key SLUICEBENCH --secret-key sluice-bench-secret)
  local_port=$(start_serve "${root}/local" --fabric shm,tcp --grant-socket "${root}/local.sock" "${keys[@]}")
  upstream_port=$(start_serve "${root}/upstream" --fabric off --grant-socket off "${keys[@]}")
  gateway_port=$(start_serve "${root}/gateway" --fabric shm,tcp --grant-socket "${root}/gateway.sock" "${keys[@]}" \
    --upstream "http://127.0.0.1:${upstream_port}" --upstream-access-key SLUICEBENCH \
    --upstream-secret-key sluice-bench-secret)
  # SLUICE_GATEWAY_ROUNDS=N (N > 1): N paired rounds instead of one run of each; each round runs
  # the benchmark once against the local store and once against the gateway, the order swapped
  # every round (ABBA), so host drift falls on both alike. Each row's ratio is then the median of
  # its per-round ratios (gpu_gateway_pairs.json), as bench/run.py pairs the gateway's misses.
  rounds=${SLUICE_GATEWAY_ROUNDS:-1}
  for round in $(seq 1 "${rounds}"); do
    order=(local gateway)
    if ((round % 2 == 0)); then order=(gateway local); fi
    suffix=""
    if ((rounds > 1)); then suffix="_r${round}"; fi
    for name in "${order[@]}"; do
      port_var=${name}_port
      echo "== GPU benchmark, 1 GiB, ${name}${suffix} ($(sed -n 's/^sluice serve: listening on //p' "${root}/${name}.log"))"
      "${here}/sluice_gpu_bench" --endpoint "http://127.0.0.1:${!port_var}" --size 1GiB \
        --json "${OUT:-/tmp}/gpu_gateway_${name}${suffix}.json" --grant-socket "${root}/${name}.sock" \
        --server-pid "$(cat "${root}/${name}.pid")" "${keys[@]}" "$@" || status=1
    done
  done
  if ((rounds > 1)); then
    python3 - "${OUT:-/tmp}" "${rounds}" <<'PAIRS' || status=1
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
ratios, rates = {}, {}
for r in range(1, rounds + 1):
    local = {(x["group"], x["path"]): x for x in json.load(open(f"{out}/gpu_gateway_local_r{r}.json"))}
    for row in json.load(open(f"{out}/gpu_gateway_gateway_r{r}.json")):
        key = (row["group"], row["path"])
        if key in local and local[key]["gib_per_s"] > 0:
            ratios.setdefault(key, []).append(row["gib_per_s"] / local[key]["gib_per_s"])
            rates.setdefault(key, []).append((local[key]["gib_per_s"], row["gib_per_s"]))
summary = []
print(f"== gateway ÷ local store, {rounds} paired rounds (median of the per-round ratios)")
for key, values in ratios.items():
    median = statistics.median(values)
    summary.append({"group": key[0], "path": key[1], "median_ratio": round(median, 4),
                    "ratios": [round(v, 4) for v in values],
                    "gib_per_s_local_gateway": [[round(a, 2), round(b, 2)] for a, b in rates[key]]})
    print(f"  {median:5.2f}x  [{' '.join(f'{v:.2f}' for v in values)}]  {key[0]}: {key[1]}")
json.dump(summary, open(f"{out}/gpu_gateway_pairs.json", "w"), indent=1)
PAIRS
  fi
  grep -h "gateway_store" "${root}"/*.log | head -20 || true
  for name in gateway upstream local; do kill "$(cat "${root}/${name}.pid")" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "${root}"
fi
if [[ ${what} == all || ${what} == bench || ${what} == example ]]; then
  root=$(mktemp -d /tmp/sluice-device.XXXXXX)
  # shm is named (auto no longer opens it) so the staged-RDMA rows stay comparable with earlier
  # runs; the grant socket serves the same-host CUDA IPC grants.
  # SLUICE_SERVE_ARGS: more arguments for sluice serve (--grant-copy-threads 0, say).
  # SLUICE_GRANT_TRACE: the server prints one line per grant copy (registration waits, times);
  # the first ones (the first GETs and the registered ones) are shown after the benchmark.
  SLUICE_GRANT_TRACE=1 "${here}/sluice" serve --root "${root}/store" --listen 127.0.0.1:0 --fabric shm,tcp \
    --grant-socket "${root}/grants.sock" ${SLUICE_SERVE_ARGS:-} \
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
    # all: the same-host grant rows only (the first GETs, registered, processes); bench: every path.
    only=()
    [[ ${what} == all ]] && only=(--only grant)
    step "GPU benchmark ${only[*]}"
    "${here}/sluice_gpu_bench" --endpoint "${endpoint}" --json "${OUT:-/tmp}/gpu_bench.json" \
      --file "${root}/bench.bin" --grant-socket "${root}/grants.sock" --server-pid "${server}" "${only[@]}" "$@" ||
      status=1
  fi
  if [[ ${what} == all || ${what} == example ]] && [[ -x ${here}/vectors_from_s3 ]]; then
    step "examples/vectors_from_s3"
    "${here}/vectors_from_s3" --endpoint "${endpoint}" --bucket vectors --access-key SLUICEBENCH \
      --secret-key sluice-bench-secret --fabric auto --grant-socket "${root}/grants.sock" --upload || status=1
  fi
  # SLUICE_PROBE_STORE=1: the registration probe on the store's largest object file, as the
  # benchmark's PUT left it (the probe writes its own files otherwise).
  if [[ -n ${SLUICE_PROBE_STORE:-} ]]; then
    object=$(find "${root}/store" -type f -printf '%s %p\n' | sort -n | tail -1 | cut -d' ' -f2-)
    echo "== registration probe on the store's object file ${object}"
    "${here}/sluice_gpu_regprobe" --file "${object}" --existing yes --repeat 3 || status=1
  fi
  kill "${server}" 2>/dev/null
  wait "${server}" 2>/dev/null
  echo "== the server's first grant copies"
  grep '^sluice grant:' "${root}/serve.log" | head -40 | sed 's/^/server: /'
  rm -rf "${root}"
fi
if [[ ${what} == all || ${what} == bench || ${what} == restart ]]; then
  # The first GET after a restart, 3 rounds: a 4 GiB "object" PUT once, then each round the
  # server started again on the same store with the object's file in the page cache (× pinned
  # H2D), and again with it dropped from the cache (fsync + POSIX_FADV_DONTNEED; × dd
  # iflag=direct of the file in that round, the disk being the bound there).
  root=$(mktemp -d /tmp/sluice-restart.XXXXXX)
  serve_args=(--fabric off --grant-socket "${root}/grants.sock" --access-key SLUICEBENCH
    --secret-key sluice-bench-secret)
  bench_args=(--grant-socket "${root}/grants.sock" --access-key SLUICEBENCH --secret-key sluice-bench-secret)
  stop_serve() { # not this shell's child (started in a command substitution): no wait
    kill "$1" 2>/dev/null
    while kill -0 "$1" 2>/dev/null; do sleep 0.05; done
  }
  drop='import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.fsync(fd)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)'
  port=$(start_serve "${root}/store" "${serve_args[@]}") &&
    "${here}/sluice_gpu_bench" --endpoint "http://127.0.0.1:${port}" "${bench_args[@]}" "$@" --only upload ||
    status=1
  stop_serve "$(cat "${root}/store.pid")"
  object=$(find "${root}/store" -type f -size +1G -printf '%s %p\n' | sort -n | tail -1 | cut -d' ' -f2-)
  : >"${OUT:-/tmp}/gpu_restart_dd.txt"
  for round in 1 2 3; do
    for state in resident dropped; do
      if [[ ${state} == dropped ]]; then
        python3 -c "${drop}" "${object}"
        dd if="${object}" of=/dev/null bs=64M iflag=direct 2>&1 | tail -1 | tee -a "${OUT:-/tmp}/gpu_restart_dd.txt"
        python3 -c "${drop}" "${object}"
      fi
      port=$(start_serve "${root}/store" "${serve_args[@]}") || {
        status=1
        break
      }
      step "GPU benchmark, first GET after a restart, object ${state}, round ${round}"
      "${here}/sluice_gpu_bench" --endpoint "http://127.0.0.1:${port}" "${bench_args[@]}" \
        --json "${OUT:-/tmp}/gpu_restart_${state}_r${round}.json" --server-pid "$(cat "${root}/store.pid")" \
        "$@" --only restart | grep -E "since the server|pinned H2D" || status=1
      stop_serve "$(cat "${root}/store.pid")"
    done
  done
  python3 - "${OUT:-/tmp}" <<'RESTART' || status=1
import json, re, statistics, sys
out = sys.argv[1]
dd = [float(m.group(1)) / float(m.group(2)) / 2**30
      for m in (re.match(r"(\d+) bytes .* copied, ([\d.]+) s", l) for l in open(f"{out}/gpu_restart_dd.txt")) if m]
for state in ("resident", "dropped"):
    rates, ratios = [], []
    for r in (1, 2, 3):
        rows = json.load(open(f"{out}/gpu_restart_{state}_r{r}.json"))
        ceiling = next(x["gib_per_s"] for x in rows if x["group"] == "ceiling" and x["path"].startswith("pinned"))
        get = next((x for x in rows if "since the server started" in x["path"] and x.get("gib_per_s")), None)
        if get is None:
            continue
        rates.append(get["gib_per_s"])
        ratios.append(get["gib_per_s"] / (dd[r - 1] if state == "dropped" else ceiling))
    against = "dd iflag=direct of the object's file" if state == "dropped" else "pinned H2D"
    print(f"first GET after a restart, object {state}: median {statistics.median(rates):.2f} GiB/s, "
          f"{statistics.median(ratios):.2f}x {against} (rounds: {' '.join(f'{x:.2f}' for x in ratios)}"
          + (f"; dd {' '.join(f'{x:.2f}' for x in dd)} GiB/s)" if state == "dropped" else ")"))
RESTART
  rm -rf "${root}"
fi
step "done, status ${status}"
exit "${status}"
RUN
chmod +x "${out}/run.sh"
du -sh "${out}"
