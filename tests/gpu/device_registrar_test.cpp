#include <sluice/cuda/device_registrar.hpp>

#include <sluice/cuda/device_memory.hpp>

#include <doctest/doctest.h>

#include <vector>

// The GPU half of tests/unit/cuda_device_registrar_test.cpp, which CI runs without a GPU.
TEST_CASE("device_registrar on a GPU: device memory passes, memory that only claims to be fails") {
  using namespace sluice;
  const cuda::device_registrar registrar;
  error_code ec;
  std::vector<std::byte> host(4096);
  auto reg = registrar.register_region({host.data(), host.size(), memory_kind::cuda_device, 0}, ec);
  CHECK(ec == errc::invalid_argument);
  CHECK(reg.region().data == nullptr);

  auto device = cuda::device_buffer::allocate(8192);
  reg = registrar.register_region(device.region(), ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  CHECK(reg.region() == device.region());
  const region inside = device.region().subregion(4096, 100, ec);
  CHECK(registrar.register_region(inside, ec).region() == inside);
  CHECK(!ec);

  region elsewhere = device.region();
  elsewhere.device = device.region().device + 1;  // the right pointer, the wrong device
  reg = registrar.register_region(elsewhere, ec);
  CHECK(ec == errc::invalid_argument);

  reg = registrar.register_region(host_region(host), ec);
  CHECK(ec == errc::unsupported_memory);
}
