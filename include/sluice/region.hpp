// A memory region: the one description of memory that every part of a path shares.
#pragma once

#include <sluice/error.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

namespace sluice {

/// Where the bytes of a region live; decides which registrars and transports can use it.
enum class memory_kind : std::uint8_t {
  host_pageable,  ///< ordinary host memory (malloc, new, std::vector)
  host_pinned,    ///< page-locked host memory (cudaMallocHost, cudaHostRegister)
  cuda_device,    ///< GPU memory of CUDA device `region::device`
};

/// A non-owning view of memory: pointer, size, kind and device.
/// The owner keeps the memory alive until every operation using the region completes.
struct region {
  void* data = nullptr;
  std::size_t size = 0;
  memory_kind kind = memory_kind::host_pageable;
  int device = -1;  ///< CUDA device ordinal for cuda_device, -1 for host memory

  /// The first byte, for arithmetic on host-accessible regions.
  [[nodiscard]] std::byte* bytes() const noexcept { return static_cast<std::byte*>(data); }
  /// True when the CPU may read and write the bytes directly.
  [[nodiscard]] bool host_accessible() const noexcept { return kind != memory_kind::cuda_device; }
  /// True when [offset, offset + length) lies inside the region (overflow-safe).
  [[nodiscard]] bool contains(std::uint64_t offset, std::uint64_t length) const noexcept {
    return offset <= size && length <= size - offset;
  }
  /// The part [offset, offset + length) of this region; errc::bad_range when it does not fit.
  [[nodiscard]] region subregion(std::uint64_t offset, std::uint64_t length, error_code& ec) const {
    if (!contains(offset, length)) {
      ec = errc::bad_range;
      return {};
    }
    ec = {};
    return {bytes() + offset, static_cast<std::size_t>(length), kind, device};
  }

  friend bool operator==(const region&, const region&) = default;
};

namespace detail {
template <class S>
concept writable_trivial_span =
    std::is_trivially_copyable_v<typename S::element_type> && !std::is_const_v<typename S::element_type>;
}  // namespace detail

/// A pageable host region over a contiguous range of trivially copyable objects.
template <class T, std::size_t Extent>
requires std::is_trivially_copyable_v<T> &&(!std::is_const_v<T>) [[nodiscard]] region
    host_region(std::span<T, Extent> s) noexcept {
  return {s.data(), s.size_bytes(), memory_kind::host_pageable, -1};
}

/// host_region for any contiguous container (std::vector, std::array, std::string...).
template <class Container>
requires requires(Container& c) {
  { std::span(c) } -> detail::writable_trivial_span;
}
[[nodiscard]] region host_region(Container& c) noexcept { return host_region(std::span(c)); }

}  // namespace sluice
