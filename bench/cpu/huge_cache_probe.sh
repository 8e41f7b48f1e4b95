#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Does a gateway's cache fill faster on a tmpfs with 2 MiB pages? A miss is bound by how fast the
# host adds fresh 4 KiB tmpfs pages to one file (docs/history/performance-2026-11.md); a tmpfs mounted
# huge=within_size adds a 2 MiB folio per insertion. Needs root (mount). Prints the kernel's
# shmem THP setting, page_fill_probe on tmpfs mounts with each huge= option, then
# gateway_miss_probe.sh with the gateway's root on /dev/shm as it is, on a huge=within_size tmpfs,
# and on the disk under /var/tmp (its file system is printed).
#   bench/cpu/huge_cache_probe.sh BUILD    (BUILD as gateway_miss_probe.sh's)
set -u
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
echo "kernel $(uname -r); shmem_enabled: $(cat /sys/kernel/mm/transparent_hugepage/shmem_enabled 2>&1)"
df -T /dev/shm /var/tmp | sed 's/^/  /'
g++ -O2 -std=c++20 -pthread "${here}/page_fill_probe.cpp" -o /tmp/page_fill_probe || exit 1
mnt=$(mktemp -d)
trap 'umount "${mnt}" 2>/dev/null; rm -rf "${mnt}"' EXIT
for opts in huge=never huge=within_size huge=advise; do
  mount -t tmpfs -o "size=4g,${opts}" tmpfs "${mnt}" || exit 1
  echo "== page_fill_probe on a tmpfs with ${opts}"
  /tmp/page_fill_probe "${mnt}" 8 "$([[ ${opts} == huge=advise ]] && echo huge)"
  umount "${mnt}"
done
echo "== gateway_miss_probe: the gateway's cache on /dev/shm as it is"
bash "${here}/gateway_miss_probe.sh" "${build}"
mount -t tmpfs -o size=8g,huge=within_size tmpfs "${mnt}" || exit 1
echo "== gateway_miss_probe: the gateway's cache on a tmpfs with huge=within_size"
probe_dir_gateway=${mnt} bash "${here}/gateway_miss_probe.sh" "${build}"
umount "${mnt}"
disk=$(mktemp -d /var/tmp/sluice-disk.XXXXXX)
echo "== gateway_miss_probe: the gateway's cache on $(df --output=fstype "${disk}" | tail -1) (/var/tmp)"
probe_dir_gateway=${disk} bash "${here}/gateway_miss_probe.sh" "${build}"
rm -rf "${disk}"
