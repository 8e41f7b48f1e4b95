// SPDX-License-Identifier: Apache-2.0
#include <sluice/cuda/device_registrar.hpp>

#include <sluice/cuda/device.hpp>

#include <doctest/doctest.h>

#include <vector>

// Runs everywhere: the checks that need no GPU hold on every host, and a host without one answers
// no_device for device memory. The GPU half is tests/gpu/device_registrar_test.cpp.
TEST_CASE("device_registrar accepts device memory only, as the CUDA runtime sees it") {
  using namespace sluice;
  static_assert(registrar<cuda::device_registrar>);
  const cuda::device_registrar registrar;
  error_code ec;
  std::vector<std::byte> host(4096);

  auto reg = registrar.register_region(host_region(host), ec);
  CHECK(ec == errc::unsupported_memory);
  CHECK(reg.region().data == nullptr);

  reg = registrar.register_region({nullptr, 0, memory_kind::cuda_device, 0}, ec);
  CHECK(!ec);
  reg = registrar.register_region({nullptr, 16, memory_kind::cuda_device, 0}, ec);
  CHECK(ec == errc::invalid_argument);

  // Host bytes labelled as device memory.
  const region claims{host.data(), host.size(), memory_kind::cuda_device, 0};
  error_code probe;
  if (cuda::device_count(probe) == 0) {
    reg = registrar.register_region(claims, ec);
    CHECK(ec == errc::no_device);
  } else {
    MESSAGE("a GPU is here: tests/gpu/device_registrar_test.cpp checks real device memory");
  }
}
