// SPDX-License-Identifier: Apache-2.0
#include "s3/server/get_plan.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace {

using namespace sluice::s3::detail;  // NOLINT(google-build-using-namespace)
namespace http = boost::beast::http;

// An object of 1000 bytes, ETag "abc", last modified at 2020-01-01 00:00:00 UTC.
sluice::object_info object_of(std::uint64_t size = 1000, std::vector<std::uint64_t> parts = {}) {
  sluice::object_info info;
  info.size = size;
  info.last_modified = std::chrono::system_clock::time_point(std::chrono::seconds(1577836800));
  info.attributes.etag = "abc";
  info.attributes.part_sizes = std::move(parts);
  return info;
}

get_plan plan(const get_request& request, const sluice::object_info& info) {
  return plan_get(request, {&info, 0, info.size});
}

// The error an answer is, or none.
std::optional<sluice::s3::errc> error_of(const get_plan& p) {
  if (const auto* e = std::get_if<answer_error>(&p)) return e->code;
  return std::nullopt;
}

}  // namespace

TEST_CASE("plan_get: preconditions in RFC 7232 order") {
  const auto info = object_of();
  struct row {
    std::string_view if_match, if_unmodified_since, if_none_match, if_modified_since;
    std::string_view expect;  // "200", "304" or "412"
  };
  const std::string_view before = "Tue, 01 Jan 2019 00:00:00 GMT";
  const std::string_view after = "Fri, 01 Jan 2021 00:00:00 GMT";
  const row rows[] = {
      {"\"abc\"", "", "", "", "200"},
      {"\"other\"", "", "", "", "412"},
      {"W/\"x\", \"abc\"", "", "", "", "200"},
      {"*", "", "", "", "200"},
      {"", before, "", "", "412"},  // modified since the date
      {"", after, "", "", "200"},
      {"\"abc\"", before, "", "", "200"},  // If-Match holds: If-Unmodified-Since is not asked
      {"", "", "\"abc\"", "", "304"},
      {"", "", "*", "", "304"},
      {"", "", "\"other\"", "", "200"},
      {"", "", "", after, "304"},  // not modified since the date
      {"", "", "", before, "200"},
      {"", "", "\"other\"", after, "200"},      // If-None-Match present: If-Modified-Since is not asked
      {"\"other\"", "", "\"abc\"", "", "412"},  // If-Match first
      {"", "", "", "not a date", "200"},
  };
  for (const row& r : rows) {
    CAPTURE(r.if_match);
    CAPTURE(r.if_unmodified_since);
    CAPTURE(r.if_none_match);
    CAPTURE(r.if_modified_since);
    get_request request;
    request.if_match = r.if_match;
    request.if_unmodified_since = r.if_unmodified_since;
    request.if_none_match = r.if_none_match;
    request.if_modified_since = r.if_modified_since;
    const get_plan p = plan(request, info);
    if (r.expect == "200") CHECK(std::holds_alternative<get_answer>(p));
    if (r.expect == "304") CHECK(std::holds_alternative<not_modified>(p));
    if (r.expect == "412") CHECK(error_of(p) == sluice::s3::errc::precondition_failed);
  }
}

TEST_CASE("plan_get: ranges and their status") {
  const auto info = object_of();
  struct row {
    std::string_view range;
    bool ranged;
    std::uint64_t offset, length;
  };
  const row rows[] = {
      {"", false, 0, 1000},          {"bytes=0-99", true, 0, 100},      {"bytes=900-", true, 900, 100},
      {"bytes=-10", true, 990, 10},  {"bytes=990-5000", true, 990, 10}, {"bytes=0-1,5-6", false, 0, 1000},
      {"items=0-1", false, 0, 1000}, {"bytes=-5000", true, 0, 1000},
  };
  for (const row& r : rows) {
    CAPTURE(r.range);
    get_request request;
    request.range = r.range;
    const get_plan p = plan(request, info);
    const auto* answer = std::get_if<get_answer>(&p);
    REQUIRE(answer != nullptr);
    CHECK(answer->ranged == r.ranged);
    CHECK(answer->status == (r.ranged ? http::status::partial_content : http::status::ok));
    CHECK(answer->offset == r.offset);
    CHECK(answer->length == r.length);
    CHECK(answer->size == 1000);
  }
  get_request past;
  past.range = "bytes=1000-";
  const get_plan p = plan(past, info);
  REQUIRE(std::holds_alternative<range_unsatisfiable>(p));
  CHECK(std::get<range_unsatisfiable>(p).size == 1000);
}

TEST_CASE("plan_get: partNumber") {
  const auto multipart = object_of(1000, {400, 600});
  get_request request;
  request.part_number = "2";
  get_plan p = plan(request, multipart);
  auto* answer = std::get_if<get_answer>(&p);
  REQUIRE(answer != nullptr);
  CHECK(answer->ranged);
  CHECK(answer->offset == 400);
  CHECK(answer->length == 600);
  CHECK(answer->parts_count == 2);
  // Any other object is its own part 1, whole.
  const auto single = object_of();
  request.part_number = "1";
  p = plan(request, single);
  answer = std::get_if<get_answer>(&p);
  REQUIRE(answer != nullptr);
  CHECK_FALSE(answer->ranged);
  CHECK_FALSE(answer->parts_count);
  request.part_number = "2";
  CHECK(error_of(plan(request, single)) == sluice::s3::errc::invalid_part);
  request.part_number = "3";
  CHECK(error_of(plan(request, multipart)) == sluice::s3::errc::invalid_part);
  request.part_number = "0";
  CHECK(error_of(plan(request, multipart)) == sluice::s3::errc::invalid_argument);
  request.part_number = "1";
  request.range = "bytes=0-1";
  CHECK(error_of(plan(request, multipart)) == sluice::s3::errc::invalid_request);
  // Stored part sizes that do not add up to the object: a fault, never an extent past it.
  request.range = {};
  request.part_number = "2";
  CHECK(error_of(plan(request, object_of(500, {400, 600}))) == sluice::s3::errc::internal_error);
}

TEST_CASE("plan_get: response-* overrides need a signature and a safe value") {
  const auto info = object_of();
  get_request request;
  request.overrides[0] = "text/plain";
  CHECK(error_of(plan(request, info)) == sluice::s3::errc::invalid_request);
  request.signed_request = true;
  get_plan p = plan(request, info);
  const auto* answer = std::get_if<get_answer>(&p);
  REQUIRE(answer != nullptr);
  REQUIRE(answer->overridden_count == 1);
  CHECK(answer->overridden[0].first == http::field::content_type);
  CHECK(answer->overridden[0].second == "text/plain");
  request.overrides[4] = "attachment\r\nSet-Cookie: x";
  p = plan(request, info);
  REQUIRE(error_of(p) == sluice::s3::errc::invalid_argument);
  CHECK(std::get<answer_error>(p).message.find("response-content-disposition") != std::string::npos);
}

TEST_CASE("plan_get: checksums only on a whole object, extent inside the mapping") {
  const auto info = object_of();
  get_request request;
  request.checksum_mode = "enabled";
  get_plan p = plan(request, info);
  CHECK(std::get<get_answer>(p).checksums);
  request.range = "bytes=0-9";
  p = plan(request, info);
  CHECK_FALSE(std::get<get_answer>(p).checksums);
  // A store that mapped [500, 600) of the object (map_range): that range only.
  request.range = "bytes=500-599";
  CHECK(std::holds_alternative<get_answer>(plan_get(request, {&info, 500, 100})));
  request.range = "bytes=499-599";
  CHECK(error_of(plan_get(request, {&info, 500, 100})) == sluice::s3::errc::internal_error);
  request.range = "bytes=500-600";
  CHECK(error_of(plan_get(request, {&info, 500, 100})) == sluice::s3::errc::internal_error);
  // A HEAD reads no bytes: a description without a region is enough.
  request.head = true;
  CHECK(std::holds_alternative<get_answer>(plan_get(request, {&info, 0, 0})));
}

TEST_CASE("route_body: how a body leaves") {
  get_answer small;
  small.length = 4096;
  get_answer medium;
  medium.length = 64 * 1024;
  get_answer large;
  large.length = 64 * sluice::mib;
  get_answer empty;
  CHECK(route_body(small, {}) == body_route::with_head);
  CHECK(route_body(small, {.head = true}) == body_route::none);
  CHECK(route_body(empty, {}) == body_route::none);
  CHECK(route_body(small, {.file = true}) == body_route::sendfile);
  CHECK(route_body(small, {.tls = true, .file = true}) == body_route::with_head);  // no sendfile under TLS
  CHECK(route_body(medium, {}) == body_route::with_head);
  CHECK(route_body(medium, {.tls = true}) == body_route::sealed);
  CHECK(route_body(large, {}) == body_route::slices);
  CHECK(route_body(large, {.tls = true}) == body_route::sealed);
  CHECK(route_body(small, {.growing = true}) == body_route::slices);
  CHECK(route_body(small, {.tls = true, .awaiting = true}) == body_route::sealed);
}
