// SPDX-License-Identifier: Apache-2.0
#include <sluice/host_registrar.hpp>

#include <doctest/doctest.h>

#include "conformance/host_fixtures.hpp"
#include "conformance/registrar_conformance.hpp"

#include <array>
#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

static_assert(sluice::registrar<sluice::host_registrar>);
static_assert(sluice::registration<sluice::host_registration>);
static_assert(!std::is_copy_constructible_v<sluice::host_registration>);
static_assert(!std::is_copy_assignable_v<sluice::host_registration>);
static_assert(std::is_nothrow_move_constructible_v<sluice::host_registration>);
static_assert(std::is_nothrow_move_assignable_v<sluice::host_registration>);

/// host_registrar in the registrar conformance suite: pageable host memory; device memory refused.
struct host_registrar_fixture {
  using registrar_type = sluice::host_registrar;
  static constexpr bool overlapping = true;
  static registrar_type make_registrar() { return {}; }
  static sluice::testing::page_buffer make_memory(std::size_t size) { return sluice::testing::page_buffer(size); }
  static sluice::region refused(std::span<std::byte> scratch) {
    return {scratch.data(), scratch.size(), sluice::memory_kind::cuda_device, 0};
  }
};

}  // namespace

TEST_CASE_TEMPLATE_INVOKE(registrar_conformance, host_registrar_fixture);

TEST_CASE("host pageable memory is accepted as it is") {
  std::vector<std::byte> buffer(128);
  const sluice::region mem = sluice::host_region(buffer);
  sluice::error_code ec = sluice::errc::declined;  // success must clear it
  const auto reg = sluice::host_registrar{}.register_region(mem, ec);
  CHECK_FALSE(ec);
  CHECK(reg.region() == mem);
}

TEST_CASE("host pinned memory is accepted and stays pinned") {
  std::array<std::byte, 64> buffer{};
  const sluice::region mem{buffer.data(), buffer.size(), sluice::memory_kind::host_pinned, -1};
  sluice::error_code ec;
  const auto reg = sluice::host_registrar{}.register_region(mem, ec);
  CHECK_FALSE(ec);
  CHECK(reg.region() == mem);
  CHECK(reg.region().kind == sluice::memory_kind::host_pinned);
}

TEST_CASE("an empty region is accepted, null or not") {
  sluice::error_code ec = sluice::errc::declined;
  const auto reg = sluice::host_registrar{}.register_region(sluice::region{}, ec);
  CHECK_FALSE(ec);
  CHECK(reg.region() == sluice::region{});
}

TEST_CASE("device memory is unsupported_memory with an empty registration") {
  std::array<std::byte, 16> not_really_device{};
  const sluice::region mem{not_really_device.data(), not_really_device.size(), sluice::memory_kind::cuda_device, 0};
  sluice::error_code ec;
  const auto reg = sluice::host_registrar{}.register_region(mem, ec);
  CHECK(ec == sluice::errc::unsupported_memory);
  CHECK(reg.region() == sluice::region{});
  CHECK(reg.region().data == nullptr);
  CHECK(reg.region().size == 0);
}

TEST_CASE("a null pointer with a size is invalid_argument") {
  for (auto kind : {sluice::memory_kind::host_pageable, sluice::memory_kind::host_pinned}) {
    const sluice::region mem{nullptr, 16, kind, -1};
    sluice::error_code ec;
    const auto reg = sluice::host_registrar{}.register_region(mem, ec);
    CHECK(ec == sluice::errc::invalid_argument);
    CHECK(reg.region() == sluice::region{});
  }
}

TEST_CASE("moving a registration leaves the source empty") {
  std::vector<std::byte> buffer(32);
  const sluice::region mem = sluice::host_region(buffer);
  sluice::error_code ec;
  auto reg = sluice::host_registrar{}.register_region(mem, ec);
  REQUIRE_FALSE(ec);

  sluice::host_registration moved(std::move(reg));
  CHECK(moved.region() == mem);
  CHECK(reg.region() == sluice::region{});  // NOLINT(bugprone-use-after-move): checking the moved-from state

  sluice::host_registration assigned;
  CHECK(assigned.region() == sluice::region{});
  assigned = std::move(moved);
  CHECK(assigned.region() == mem);
  CHECK(moved.region() == sluice::region{});  // NOLINT(bugprone-use-after-move)
}
