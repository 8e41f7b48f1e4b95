// SPDX-License-Identifier: Apache-2.0
#include <sluice/request.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <optional>

namespace {

constexpr std::uint64_t u64_max = std::numeric_limits<std::uint64_t>::max();

struct resolve_case {
  const char* what;
  sluice::byte_range range;
  std::uint64_t size;
  bool ok;
  sluice::extent expected;
};

}  // namespace

TEST_CASE("resolve covers every edge of a range against an object") {
  const resolve_case cases[] = {
      {"whole empty object", {0, std::nullopt}, 0, true, {0, 0}},
      {"zero length of an empty object", {0, 0}, 0, true, {0, 0}},
      {"one byte of an empty object", {0, 1}, 0, false, {}},
      {"offset past an empty object", {1, std::nullopt}, 0, false, {}},
      {"whole object", {0, std::nullopt}, 100, true, {0, 100}},
      {"to the end from the middle", {40, std::nullopt}, 100, true, {40, 60}},
      {"offset == size, open length", {100, std::nullopt}, 100, true, {100, 0}},
      {"offset == size, zero length", {100, 0}, 100, true, {100, 0}},
      {"offset == size, one byte", {100, 1}, 100, false, {}},
      {"offset > size", {101, std::nullopt}, 100, false, {}},
      {"offset > size, zero length", {101, 0}, 100, false, {}},
      {"exact fit from 0", {0, 100}, 100, true, {0, 100}},
      {"exact fit from the middle", {30, 70}, 100, true, {30, 70}},
      {"explicit length one past the end", {30, 71}, 100, false, {}},
      {"explicit length past the end from 0", {0, 101}, 100, false, {}},
      {"inside", {10, 20}, 100, true, {10, 20}},
      {"offset near UINT64_MAX", {u64_max, 1}, 100, false, {}},
      {"length near UINT64_MAX (offset + length wraps)", {2, u64_max}, 100, false, {}},
      {"largest object, whole", {0, std::nullopt}, u64_max, true, {0, u64_max}},
      {"largest object, last byte", {u64_max - 1, 1}, u64_max, true, {u64_max - 1, 1}},
      {"largest object, one past", {u64_max, 1}, u64_max, false, {}},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    sluice::error_code ec = sluice::errc::declined;  // success must clear it
    const sluice::extent got = sluice::resolve(c.range, c.size, ec);
    if (c.ok) {
      CHECK_FALSE(ec);
      CHECK(got == c.expected);
    } else {
      CHECK(ec == sluice::errc::bad_range);
      CHECK(got == sluice::extent{});
    }
  }
}

TEST_CASE("byte_range defaults to the whole object") {
  const sluice::byte_range range;
  CHECK(range.offset == 0);
  CHECK_FALSE(range.length.has_value());
  sluice::error_code ec;
  CHECK(sluice::resolve(range, 4096, ec) == sluice::extent{0, 4096});
  CHECK_FALSE(ec);
}

TEST_CASE("byte_range equality tells an open length from an explicit one") {
  CHECK(sluice::byte_range{0, std::nullopt} == sluice::byte_range{});
  CHECK(sluice::byte_range{0, 0} != sluice::byte_range{});
  CHECK(sluice::byte_range{5, 10} == sluice::byte_range{5, 10});
  CHECK(sluice::byte_range{5, 10} != sluice::byte_range{6, 10});
}

TEST_CASE("object_ref and extent compare member-wise") {
  CHECK(sluice::object_ref{"b", "k"} == sluice::object_ref{"b", "k"});
  CHECK(sluice::object_ref{"b", "k"} != sluice::object_ref{"b", "k2"});
  CHECK(sluice::object_ref{"b", "k"} != sluice::object_ref{"b2", "k"});
  CHECK(sluice::extent{1, 2} == sluice::extent{1, 2});
  CHECK(sluice::extent{1, 2} != sluice::extent{2, 1});
}

TEST_CASE("request defaults") {
  const sluice::transfer_request request;
  CHECK(request.dir == sluice::direction::get);
  CHECK(request.range == sluice::byte_range{});
  CHECK(request.object.bucket.empty());

  const sluice::list_request list;
  CHECK(list.max_keys == 1000);
  CHECK(list.prefix.empty());
  CHECK(list.start_after.empty());

  const sluice::list_result result;
  CHECK_FALSE(result.truncated);
  CHECK(result.objects.empty());

  const sluice::transfer_result transfer;
  CHECK(transfer.bytes == 0);
  CHECK(transfer.negotiator.empty());
  CHECK(transfer.transport.empty());
}
