// SPDX-License-Identifier: Apache-2.0
#include <sluice/region.hpp>

#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

constexpr std::uint64_t u64_max = std::numeric_limits<std::uint64_t>::max();

// A region over no real memory: contains() and subregion() only do arithmetic, so the
// pointer is never dereferenced.
sluice::region sized(std::size_t size) {
  static std::byte storage[1];
  return {storage, size, sluice::memory_kind::host_pageable, -1};
}

}  // namespace

TEST_CASE("a default region is empty host pageable memory") {
  const sluice::region r;
  CHECK(r.data == nullptr);
  CHECK(r.size == 0);
  CHECK(r.kind == sluice::memory_kind::host_pageable);
  CHECK(r.device == -1);
  CHECK(r.host_accessible());
  CHECK(r.contains(0, 0));
  CHECK_FALSE(r.contains(0, 1));
  CHECK_FALSE(r.contains(1, 0));
}

TEST_CASE("host_accessible depends only on the kind") {
  sluice::region r;
  r.kind = sluice::memory_kind::host_pinned;
  CHECK(r.host_accessible());
  r.kind = sluice::memory_kind::cuda_device;
  r.device = 0;
  CHECK_FALSE(r.host_accessible());
}

TEST_CASE("contains accepts exactly the ranges inside the region") {
  const sluice::region r = sized(100);
  CHECK(r.contains(0, 100));
  CHECK(r.contains(0, 0));
  CHECK(r.contains(100, 0));
  CHECK(r.contains(99, 1));
  CHECK(r.contains(50, 50));
  CHECK_FALSE(r.contains(0, 101));
  CHECK_FALSE(r.contains(1, 100));
  CHECK_FALSE(r.contains(100, 1));
  CHECK_FALSE(r.contains(101, 0));
}

TEST_CASE("contains does not overflow near UINT64_MAX") {
  const sluice::region r = sized(100);
  // offset + length wraps around to a small number in each of these.
  CHECK_FALSE(r.contains(u64_max, 2));
  CHECK_FALSE(r.contains(2, u64_max));
  CHECK_FALSE(r.contains(u64_max, 1));
  CHECK_FALSE(r.contains(1, u64_max));
  CHECK_FALSE(r.contains(u64_max, u64_max));
  CHECK_FALSE(r.contains(u64_max, 0));
  CHECK_FALSE(r.contains(0, u64_max));
  CHECK_FALSE(r.contains(u64_max - 49, 100));

  const sluice::region huge = sized(std::numeric_limits<std::size_t>::max());
  CHECK(huge.contains(0, u64_max));
  CHECK(huge.contains(u64_max, 0));
  CHECK(huge.contains(u64_max - 1, 1));
  CHECK_FALSE(huge.contains(u64_max, 1));
  CHECK_FALSE(huge.contains(1, u64_max));
}

TEST_CASE("subregion returns the part and keeps kind and device") {
  std::array<std::byte, 64> buffer{};
  sluice::region r{buffer.data(), buffer.size(), sluice::memory_kind::host_pinned, 3};
  sluice::error_code ec = sluice::errc::declined;  // must be cleared on success
  const sluice::region part = r.subregion(16, 8, ec);
  CHECK_FALSE(ec);
  CHECK(part.data == buffer.data() + 16);
  CHECK(part.bytes() == buffer.data() + 16);
  CHECK(part.size == 8);
  CHECK(part.kind == sluice::memory_kind::host_pinned);
  CHECK(part.device == 3);

  const sluice::region whole = r.subregion(0, 64, ec);
  CHECK_FALSE(ec);
  CHECK(whole == r);

  const sluice::region tail = r.subregion(64, 0, ec);
  CHECK_FALSE(ec);
  CHECK(tail.size == 0);
  CHECK(tail.data == buffer.data() + 64);
}

TEST_CASE("subregion outside the region is bad_range and empty") {
  std::array<std::byte, 64> buffer{};
  const sluice::region r{buffer.data(), buffer.size(), sluice::memory_kind::host_pageable, -1};
  for (auto [offset, length] : std::array<std::pair<std::uint64_t, std::uint64_t>, 6>{
           {{0, 65}, {64, 1}, {65, 0}, {u64_max, 2}, {2, u64_max}, {u64_max, u64_max}}}) {
    CAPTURE(offset);
    CAPTURE(length);
    sluice::error_code ec;
    const sluice::region part = r.subregion(offset, length, ec);
    CHECK(ec == sluice::errc::bad_range);
    CHECK(part == sluice::region{});
  }
}

TEST_CASE("region equality compares every member") {
  std::array<std::byte, 8> buffer{};
  const sluice::region a{buffer.data(), 8, sluice::memory_kind::host_pageable, -1};
  sluice::region b = a;
  CHECK(a == b);
  b.size = 7;
  CHECK(a != b);
  b = a;
  b.kind = sluice::memory_kind::host_pinned;
  CHECK(a != b);
  b = a;
  b.device = 0;
  CHECK(a != b);
  b = a;
  b.data = buffer.data() + 1;
  CHECK(a != b);
}

TEST_CASE("host_region over a std::vector") {
  std::vector<std::uint32_t> v(10);
  const sluice::region r = sluice::host_region(v);
  CHECK(r.data == v.data());
  CHECK(r.size == 10 * sizeof(std::uint32_t));
  CHECK(r.kind == sluice::memory_kind::host_pageable);
  CHECK(r.device == -1);

  std::vector<std::uint32_t> empty;
  CHECK(sluice::host_region(empty).size == 0);
}

TEST_CASE("host_region over a std::string") {
  std::string s = "hello world";
  const sluice::region r = sluice::host_region(s);
  CHECK(r.data == s.data());
  CHECK(r.size == s.size());
  CHECK(r.kind == sluice::memory_kind::host_pageable);
}

TEST_CASE("host_region over a std::array through a dynamic span") {
  // host_region(std::array&) itself does not compile: std::span(array) has a static extent
  // and the span overload only takes std::span<T> (dynamic extent). See the bug report.
  std::array<double, 4> a{};
  const sluice::region r = sluice::host_region(std::span<double>(a));
  CHECK(r.data == a.data());
  CHECK(r.size == sizeof(a));
  CHECK(r.kind == sluice::memory_kind::host_pageable);
}

TEST_CASE("host_region over a span of part of a buffer") {
  std::vector<std::byte> v(32);
  const sluice::region r = sluice::host_region(std::span<std::byte>(v).subspan(8, 4));
  CHECK(r.data == v.data() + 8);
  CHECK(r.size == 4);
}

TEST_CASE("host_region lets the CPU write through the region") {
  std::vector<std::byte> v(4);
  const sluice::region r = sluice::host_region(v);
  r.bytes()[2] = std::byte{0x5a};
  CHECK(v[2] == std::byte{0x5a});
}

namespace {
template <class C>
concept host_region_callable = requires(C& c) {
  sluice::host_region(c);
};
template <class T>
concept host_region_span_callable = requires(std::span<T> s) {
  sluice::host_region(s);
};
}  // namespace

TEST_CASE("host_region rejects non-trivially-copyable elements, const elements give a const_region") {
  static_assert(host_region_span_callable<int>);
  static_assert(!host_region_span_callable<std::string>);
  static_assert(!host_region_span_callable<const std::string>);
  static_assert(host_region_callable<std::vector<int>>);
  static_assert(!host_region_callable<int>);
  static_assert(std::is_same_v<decltype(sluice::host_region(std::declval<std::span<int>>())), sluice::region>);
  static_assert(
      std::is_same_v<decltype(sluice::host_region(std::declval<std::span<const int>>())), sluice::const_region>);
  static_assert(std::is_same_v<decltype(sluice::host_region(std::declval<std::vector<int>&>())), sluice::region>);
  static_assert(
      std::is_same_v<decltype(sluice::host_region(std::declval<const std::vector<int>&>())), sluice::const_region>);
  CHECK(true);
}

// A put's source: read only. A region converts to one; nothing converts back.
TEST_CASE("const_region: from a region, from const memory, and never back to a region") {
  static_assert(std::is_convertible_v<sluice::region, sluice::const_region>);
  static_assert(!std::is_convertible_v<sluice::const_region, sluice::region>);
  static_assert(!std::is_constructible_v<sluice::region, sluice::const_region>);

  std::array<std::byte, 64> buffer{};
  const sluice::region writable{buffer.data(), buffer.size(), sluice::memory_kind::host_pinned, 2};
  const sluice::const_region r = writable;
  CHECK(r.data == buffer.data());
  CHECK(r.size == 64);
  CHECK(r.kind == sluice::memory_kind::host_pinned);
  CHECK(r.device == 2);
  CHECK(r.host_accessible());

  const std::vector<std::uint16_t> constant(5, 7);
  const sluice::const_region c = sluice::host_region(constant);
  CHECK(c.data == constant.data());
  CHECK(c.size == 10);
  CHECK(c.kind == sluice::memory_kind::host_pageable);
  CHECK(c.device == -1);
  CHECK(c.bytes() == reinterpret_cast<const std::byte*>(constant.data()));

  const sluice::const_region device{buffer.data(), 8, sluice::memory_kind::cuda_device, 0};
  CHECK_FALSE(device.host_accessible());
  CHECK(sluice::const_region{} == sluice::const_region{nullptr, 0, sluice::memory_kind::host_pageable, -1});
}

TEST_CASE("const_region subregion keeps kind and device, and refuses what does not fit") {
  std::array<std::byte, 64> buffer{};
  const sluice::const_region r{buffer.data(), buffer.size(), sluice::memory_kind::host_pinned, 3};
  sluice::error_code ec = sluice::errc::declined;
  const sluice::const_region part = r.subregion(16, 8, ec);
  CHECK_FALSE(ec);
  CHECK(part.bytes() == buffer.data() + 16);
  CHECK(part.size == 8);
  CHECK(part.kind == sluice::memory_kind::host_pinned);
  CHECK(part.device == 3);
  for (auto [offset, length] :
       std::array<std::pair<std::uint64_t, std::uint64_t>, 4>{{{0, 65}, {64, 1}, {u64_max, 2}, {2, u64_max}}}) {
    CAPTURE(offset);
    CAPTURE(length);
    CHECK(r.subregion(offset, length, ec) == sluice::const_region{});
    CHECK(ec == sluice::errc::bad_range);
  }
}
