// SPDX-License-Identifier: Apache-2.0
#include <sluice/cuda/device.hpp>

#include <sluice/cuda/error.hpp>
#include <sluice/cuda/pinned.hpp>

#include <doctest/doctest.h>

#include <vector>

// Runs everywhere: on a host without a GPU every GPU entry point must answer no_device (with a
// reason), never crash; on a GPU host the same calls must succeed.
TEST_CASE("cuda entry points report no_device cleanly, or work when a device exists") {
  using namespace sluice;
  error_code ec;
  const int devices = cuda::device_count(ec);
  std::vector<std::byte> pageable(4096);
  if (devices == 0) {
    MESSAGE("no CUDA device here: " << cuda::no_device_reason());
    CHECK(ec == errc::no_device);
    CHECK_FALSE(cuda::no_device_reason().empty());
    auto buffer = cuda::pinned_buffer::allocate(4096, ec);
    CHECK(ec == errc::no_device);
    CHECK(buffer.native_handle() == nullptr);
    CHECK_THROWS_AS((void)cuda::pinned_buffer::allocate(4096), sluice::system_error);
    auto reg = cuda::pinning_registrar{}.register_region(host_region(pageable), ec);
    CHECK(ec == errc::no_device);
    CHECK(reg.region().data == nullptr);
  } else {
    CHECK(!ec);
    auto buffer = cuda::pinned_buffer::allocate(4096, ec);
    CHECK(!ec);
    CHECK(buffer.region().kind == memory_kind::host_pinned);
    auto reg = cuda::pinning_registrar{}.register_region(host_region(pageable), ec);
    CHECK(!ec);
  }
}

TEST_CASE("cuda error category names CUDA's errors") {
  const auto ec = sluice::cuda::make_cuda_error(2);  // cudaErrorMemoryAllocation
  CHECK(std::string(ec.category().name()) == "cuda");
  CHECK(ec.message() == "out of memory");
  CHECK_FALSE(sluice::cuda::make_cuda_error(0));
}
