// SPDX-License-Identifier: Apache-2.0
#include <sluice/cuda/pinned.hpp>

#include <sluice/loopback.hpp>

#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include "conformance/host_fixtures.hpp"
#include "conformance/registrar_conformance.hpp"
#include "conformance/transport_conformance.hpp"

namespace {

using namespace sluice;

// Local memory that the fixture's registrar must pin: pageable vectors pinned by
// pinning_registrar, so the loopback transport runs over page-locked memory.
struct pinned_loopback_fixture {
  using transport_type = loopback_transport;
  using registrar_type = cuda::pinning_registrar;
  transport_type transport;
  registrar_type registrar;

  class local {
   public:
    explicit local(std::size_t n) : buffer_(cuda::pinned_buffer::allocate(n == 0 ? 1 : n)), size_(n) {}
    [[nodiscard]] sluice::region region() const {
      return {buffer_.native_handle(), size_, memory_kind::host_pinned, -1};
    }
    [[nodiscard]] std::vector<std::byte> contents() const {
      const auto* p = static_cast<const std::byte*>(buffer_.native_handle());
      return {p, p + size_};
    }
    void fill(std::span<const std::byte> data) {
      std::copy(data.begin(), data.end(), static_cast<std::byte*>(buffer_.native_handle()));
    }
    void fill_at(std::size_t offset, std::span<const std::byte> data) {
      std::copy(data.begin(), data.end(), static_cast<std::byte*>(buffer_.native_handle()) + offset);
    }

   private:
    cuda::pinned_buffer buffer_;
    std::size_t size_;
  };
  static local make_local(std::size_t n) { return local(n); }

  class remote {
   public:
    explicit remote(std::span<const std::byte> initial) : bytes_(initial.begin(), initial.end()) {}
    [[nodiscard]] sluice::region descriptor() { return host_region(bytes_); }
    [[nodiscard]] std::vector<std::byte> contents() const { return bytes_; }

   private:
    std::vector<std::byte> bytes_;
  };
  static remote make_remote(std::span<const std::byte> initial) { return remote(initial); }
};

bool is_pinned(const void* p) {
  cudaPointerAttributes attributes{};
  return cudaPointerGetAttributes(&attributes, p) == cudaSuccess && attributes.type == cudaMemoryTypeHost;
}

/// pinning_registrar in the registrar conformance suite: pageable memory, which it pins.
struct pinning_registrar_fixture {
  using registrar_type = cuda::pinning_registrar;
  static constexpr bool overlapping = false;  // cudaHostRegister pins a page once
  static registrar_type make_registrar() { return {}; }
  static testing::page_buffer make_memory(std::size_t size) { return testing::page_buffer(size); }
  static region refused(std::span<std::byte> scratch) {
    return {scratch.data(), scratch.size(), memory_kind::cuda_device, 0};
  }
};

}  // namespace

TEST_CASE_TEMPLATE_INVOKE(transport_conformance, pinned_loopback_fixture);
TEST_CASE_TEMPLATE_INVOKE(registrar_conformance, pinning_registrar_fixture);

TEST_CASE("pinning_registrar pins pageable memory in place and unpins it on destruction") {
  std::vector<std::byte> pageable(1 << 20, std::byte{1});
  CHECK_FALSE(is_pinned(pageable.data()));
  {
    error_code ec;
    auto reg = cuda::pinning_registrar{}.register_region(host_region(pageable), ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    CHECK(reg.region().kind == memory_kind::host_pinned);
    CHECK(reg.region().data == pageable.data());
    CHECK(is_pinned(pageable.data()));
    auto moved = std::move(reg);
    CHECK(reg.region().data == nullptr);
    CHECK(is_pinned(pageable.data()));
  }
  CHECK_FALSE(is_pinned(pageable.data()));
}

TEST_CASE("pinning_registrar passes pinned memory through and refuses device memory") {
  auto buffer = cuda::pinned_buffer::allocate(4096);
  error_code ec;
  {
    auto reg = cuda::pinning_registrar{}.register_region(buffer.region(), ec);
    CHECK(!ec);
  }
  CHECK(is_pinned(buffer.native_handle()));  // it did not pin it, so it must not unpin it

  void* device = nullptr;
  REQUIRE(cudaMalloc(&device, 4096) == cudaSuccess);
  auto reg = cuda::pinning_registrar{}.register_region({device, 4096, memory_kind::cuda_device, 0}, ec);
  CHECK(ec == errc::unsupported_memory);
  cudaFree(device);
}

TEST_CASE("pinned memory copies to the device") {
  auto buffer = cuda::pinned_buffer::allocate(1 << 20);
  auto data = testing::random_bytes(1 << 20, 77);
  std::copy(data.begin(), data.end(), static_cast<std::byte*>(buffer.native_handle()));
  void* device = nullptr;
  REQUIRE(cudaMalloc(&device, 1 << 20) == cudaSuccess);
  REQUIRE(cudaMemcpy(device, buffer.native_handle(), 1 << 20, cudaMemcpyHostToDevice) == cudaSuccess);
  std::vector<std::byte> back(1 << 20);
  REQUIRE(cudaMemcpy(back.data(), device, 1 << 20, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(back == data);
  cudaFree(device);
}
