// SPDX-License-Identifier: Apache-2.0
#include <sluice/cuda/device_registrar.hpp>

#include <sluice/cuda/device_memory.hpp>

#include <doctest/doctest.h>

#include "conformance/registrar_conformance.hpp"

#include <cstddef>
#include <span>
#include <vector>

namespace {

/// device_registrar in the registrar conformance suite: memory from cudaMalloc; host memory refused.
struct device_registrar_fixture {
  using registrar_type = sluice::cuda::device_registrar;
  static constexpr bool overlapping = true;
  static registrar_type make_registrar() { return {}; }
  static sluice::cuda::device_buffer make_memory(std::size_t size) {
    return sluice::cuda::device_buffer::allocate(size);
  }
  static sluice::region refused(std::span<std::byte> scratch) { return sluice::host_region(scratch); }
};

}  // namespace

TEST_CASE_TEMPLATE_INVOKE(registrar_conformance, device_registrar_fixture);

TEST_CASE("device_registrar: a region that runs past its allocation is invalid_argument") {
  using namespace sluice;
  const cuda::device_registrar registrar;
  constexpr std::size_t size = std::size_t{2} << 20;  // a whole 2 MiB: no rounding up hides the end
  auto device = cuda::device_buffer::allocate(size);
  auto next = cuda::device_buffer::allocate(size);  // something may lie just past it
  const region all = device.region();
  error_code ec;
  CHECK(registrar.register_region(all, ec).region() == all);
  CHECK_MESSAGE(!ec, ec.message());
  struct span {
    std::size_t offset;
    std::size_t length;
  };
  for (const span past_end :
       {span{0, size + 1}, span{size - 4096, 4097}, span{size - 1, 2}, span{4096, ~std::size_t{0} - 1}}) {
    CAPTURE(past_end.offset);
    CAPTURE(past_end.length);
    const region past{all.bytes() + past_end.offset, past_end.length, memory_kind::cuda_device, all.device};
    const auto reg = registrar.register_region(past, ec);
    CHECK(ec == errc::invalid_argument);
    CHECK(reg.region().data == nullptr);
  }
  const region last{all.bytes() + size - 1, 1, memory_kind::cuda_device, all.device};
  CHECK(registrar.register_region(last, ec).region() == last);
  CHECK_MESSAGE(!ec, ec.message());
}

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
