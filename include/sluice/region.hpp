// SPDX-License-Identifier: Apache-2.0
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

/// A non-owning view of memory that an operation only reads: the source of a put. Every region
/// converts to one; nothing converts back except inside the library, where a registrar registers
/// the bytes for reading only (detail::readable_as_region).
struct const_region {
  const void* data = nullptr;
  std::size_t size = 0;
  memory_kind kind = memory_kind::host_pageable;
  int device = -1;  ///< CUDA device ordinal for cuda_device, -1 for host memory

  // Implicit: a writable region may always be read.
  constexpr const_region(const region& r) noexcept : data(r.data), size(r.size), kind(r.kind), device(r.device) {}
  constexpr const_region(const void* d = nullptr, std::size_t n = 0, memory_kind k = memory_kind::host_pageable,
                         int dev = -1) noexcept
      : data(d), size(n), kind(k), device(dev) {}

  [[nodiscard]] const std::byte* bytes() const noexcept { return static_cast<const std::byte*>(data); }
  [[nodiscard]] bool host_accessible() const noexcept { return kind != memory_kind::cuda_device; }
  [[nodiscard]] bool contains(std::uint64_t offset, std::uint64_t length) const noexcept {
    return offset <= size && length <= size - offset;
  }
  /// The part [offset, offset + length); errc::bad_range when it does not fit.
  [[nodiscard]] const_region subregion(std::uint64_t offset, std::uint64_t length, error_code& ec) const {
    if (!contains(offset, length)) {
      ec = errc::bad_range;
      return {};
    }
    ec = {};
    return {bytes() + offset, static_cast<std::size_t>(length), kind, device};
  }

  friend bool operator==(const const_region&, const const_region&) = default;
};

namespace detail {
template <class S>
concept writable_trivial_span =
    std::is_trivially_copyable_v<typename S::element_type> && !std::is_const_v<typename S::element_type>;
template <class S>
concept readable_trivial_span = std::is_trivially_copyable_v<std::remove_const_t<typename S::element_type>>;
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

/// A pageable host region over a contiguous range of trivially copyable objects, read only.
template <class T, std::size_t Extent>
requires std::is_trivially_copyable_v<T>
[[nodiscard]] const_region host_region(std::span<const T, Extent> s) noexcept {
  return {s.data(), s.size_bytes(), memory_kind::host_pageable, -1};
}

/// host_region for a const contiguous container: a region a put may read.
template <class Container>
requires requires(const Container& c) {
  { std::span(c) } -> detail::readable_trivial_span;
}
[[nodiscard]] const_region host_region(const Container& c) noexcept { return host_region(std::span(c)); }

namespace detail {
/// The library's one way back from const_region to region, for parts whose interfaces take a
/// region for both directions (registrars, transports, RDMA planes): the caller promises that
/// the bytes are only read (a put's source registered for the peer to read, a body sent).
[[nodiscard]] inline region readable_as_region(const const_region& r) noexcept {
  return {const_cast<void*>(r.data), r.size, r.kind, r.device};
}
}  // namespace detail

}  // namespace sluice
