// SPDX-License-Identifier: Apache-2.0
// Test data for the GPU suite: fast deterministic bytes (gigabytes of them) and device-memory
// helpers that copy back through the CUDA runtime to compare.
#pragma once

#include <sluice/cuda/device_memory.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace sluice::testing {

/// `n` bytes of xorshift64* output: fast enough for 4 GiB, different for each seed.
inline std::vector<std::byte> fast_random_bytes(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> out(n);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    const std::uint64_t v = x * 0x2545F4914F6CDD1DULL;
    std::memcpy(out.data() + i, &v, 8);
  }
  for (; i < n; ++i) out[i] = static_cast<std::byte>(i * 131 + seed);
  return out;
}

/// Read-only host bytes as a region (a copy source).
inline region source_region(const std::vector<std::byte>& bytes) {
  return {const_cast<std::byte*>(bytes.data()), bytes.size(), memory_kind::host_pageable, -1};
}

/// Device memory of `n` bytes plus a poisoned guard of `guard` bytes on each side.
struct guarded_device {
  static constexpr std::byte poison{0xAB};
  explicit guarded_device(std::size_t n, std::size_t guard_length = 4096)
      : buffer(cuda::device_buffer::allocate(n + 2 * guard_length)), size(n), guard(guard_length) {
    REQUIRE(!cuda::fill(buffer.region(), poison));
  }
  /// The n bytes between the guards.
  [[nodiscard]] region inner() const {
    return {static_cast<std::byte*>(buffer.native_handle()) + guard, size, memory_kind::cuda_device, buffer.device()};
  }
  /// Everything, guards included, copied to the host.
  [[nodiscard]] std::vector<std::byte> all() const {
    std::vector<std::byte> out(buffer.size());
    REQUIRE(!cuda::copy(host_region(out), buffer.region()));
    return out;
  }
  /// The inner bytes equal `expected` and the guards are untouched.
  [[nodiscard]] bool holds(const std::vector<std::byte>& expected) const {
    const auto got = all();
    const auto* first = got.data() + guard;
    const bool guards =
        std::all_of(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(guard),
                    [](std::byte b) { return b == poison; }) &&
        std::all_of(got.end() - static_cast<std::ptrdiff_t>(guard), got.end(), [](std::byte b) { return b == poison; });
    return guards && expected.size() == size && std::memcmp(first, expected.data(), size) == 0;
  }

  cuda::device_buffer buffer;
  std::size_t size;
  std::size_t guard;
};

/// Local memory for a conformance fixture on the GPU, seen through the CUDA runtime.
class device_local {
 public:
  explicit device_local(std::size_t n) : buffer_(cuda::device_buffer::allocate(n == 0 ? 1 : n)), size_(n) {}
  [[nodiscard]] sluice::region region() const {
    return {buffer_.native_handle(), size_, memory_kind::cuda_device, buffer_.device()};
  }
  [[nodiscard]] std::vector<std::byte> contents() const {
    std::vector<std::byte> out(size_);
    if (size_ != 0) REQUIRE(!cuda::copy(host_region(out), region()));
    return out;
  }
  void fill(std::span<const std::byte> data) { fill_at(0, data); }
  void fill_at(std::size_t offset, std::span<const std::byte> data) {
    if (data.empty()) return;
    std::vector<std::byte> bytes(data.begin(), data.end());
    error_code ec;
    REQUIRE(!cuda::copy(region().subregion(offset, bytes.size(), ec), host_region(bytes)));
  }

 private:
  cuda::device_buffer buffer_;
  std::size_t size_;
};

}  // namespace sluice::testing
