// SPDX-License-Identifier: Apache-2.0
// Runner of the GPU suite: exits 77 (CTest: skipped) with the reason when there is no device.
#define DOCTEST_CONFIG_IMPLEMENT
#include <sluice/cuda/device.hpp>

#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>

// grant_process_test.cpp: the client process of the cross-process grant tests.
int sluice_gpu_grant_child(int argc, char** argv);

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--grant-child") == 0) return sluice_gpu_grant_child(argc, argv);
  sluice::error_code ec;
  const int devices = sluice::cuda::device_count(ec);
  if (devices == 0) {
    std::printf("SKIPPED: GPU suite needs a CUDA device: %s\n", sluice::cuda::no_device_reason().c_str());
    return 77;
  }
  for (int i = 0; i < devices; ++i) {
    const auto p = sluice::cuda::properties(i, ec);
    std::printf("device %d: %s, %zu MiB, sm_%d%d\n", i, p.name.c_str(), p.total_memory >> 20, p.compute_major,
                p.compute_minor);
  }
  doctest::Context context(argc, argv);
  return context.run();
}
