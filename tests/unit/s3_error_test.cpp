// SPDX-License-Identifier: Apache-2.0
#include <sluice/s3/error.hpp>

#include <doctest/doctest.h>

#include <set>
#include <string>
#include <string_view>
#include <system_error>

namespace {

using sluice::s3::errc;

constexpr int first_value = static_cast<int>(errc::access_denied);
constexpr int last_value = static_cast<int>(errc::invalid_location_constraint);  // the last enumerator

}  // namespace

TEST_CASE("s3 category is named s3") {
  CHECK(std::string(sluice::s3::s3_category().name()) == "s3");
  CHECK(&sluice::s3::s3_category() == &sluice::s3::s3_category());
  const sluice::error_code ec = errc::no_such_key;
  CHECK(&ec.category() == &sluice::s3::s3_category());
  CHECK(ec.value() == static_cast<int>(errc::no_such_key));
  const std::error_code std_ec = ec;
  CHECK(std::string(std_ec.category().name()) == "s3");
}

TEST_CASE("every s3::errc has a unique code string that round-trips") {
  CHECK(first_value == 1);
  std::set<std::string_view> seen;
  for (int v = first_value; v <= last_value; ++v) {
    const auto e = static_cast<errc>(v);
    const std::string_view code = sluice::s3::code_string(e);
    CAPTURE(v);
    CAPTURE(std::string(code));
    CHECK_FALSE(code.empty());
    CHECK(seen.insert(code).second);
    CHECK(sluice::s3::from_code_string(code) == e);
    const sluice::error_code ec = e;
    CHECK(ec);
    CHECK(ec.message() == code);
    // Every code has a message that says more than the code itself, for error bodies.
    const std::string_view message = sluice::s3::default_message(e);
    CHECK_FALSE(message.empty());
    CHECK(message != code);
    const unsigned status = sluice::s3::http_status(e);
    CHECK(status >= 300);
    CHECK(status < 600);
  }
  CHECK(seen.size() == static_cast<std::size_t>(last_value - first_value + 1));
}

TEST_CASE("s3 codes and statuses that clients depend on") {
  CHECK(sluice::s3::code_string(errc::invalid_range) == "InvalidRange");
  CHECK(sluice::s3::http_status(errc::invalid_range) == 416);
  CHECK(sluice::s3::code_string(errc::no_such_key) == "NoSuchKey");
  CHECK(sluice::s3::http_status(errc::no_such_key) == 404);
  CHECK(sluice::s3::http_status(errc::no_such_bucket) == 404);
  CHECK(sluice::s3::code_string(errc::invalid_rdma_token) == "InvalidRDMAToken");
  CHECK(sluice::s3::http_status(errc::invalid_rdma_token) == 400);
  CHECK(sluice::s3::code_string(errc::rdma_not_supported) == "RDMANotSupported");
  CHECK(sluice::s3::http_status(errc::rdma_not_supported) == 501);
  CHECK(sluice::s3::code_string(errc::rdma_transfer_failed) == "RDMATransferFailed");
  CHECK(sluice::s3::http_status(errc::rdma_transfer_failed) == 500);
  CHECK(sluice::s3::http_status(errc::access_denied) == 403);
  CHECK(sluice::s3::http_status(errc::internal_error) == 500);
  CHECK(sluice::s3::http_status(errc::slow_down) == 503);
  CHECK(sluice::s3::http_status(errc::not_modified) == 304);
  CHECK(sluice::s3::http_status(errc::precondition_failed) == 412);
  CHECK(sluice::s3::code_string(errc::key_too_long) == "KeyTooLongError");
  CHECK(sluice::s3::http_status(errc::method_not_allowed) == 405);
  CHECK(sluice::s3::http_status(errc::missing_content_length) == 411);
  CHECK(sluice::s3::http_status(errc::not_implemented) == 501);
  CHECK(sluice::s3::http_status(errc::bucket_not_empty) == 409);
}

TEST_CASE("values outside the enumeration and unknown code strings") {
  const auto zero = static_cast<errc>(0);
  const auto past = static_cast<errc>(last_value + 1);
  CHECK(sluice::s3::code_string(zero).empty());
  CHECK(sluice::s3::code_string(past).empty());
  CHECK(sluice::s3::default_message(past).empty());
  CHECK(sluice::s3::http_status(past) == 500);
  const sluice::error_code ec{last_value + 1, sluice::s3::s3_category()};
  CHECK(ec.message() == "unknown S3 error " + std::to_string(last_value + 1));

  CHECK(sluice::s3::from_code_string("NoSuchThing") == errc::internal_error);
  CHECK(sluice::s3::from_code_string("") == errc::internal_error);
  CHECK(sluice::s3::from_code_string("nosuchkey") == errc::internal_error);  // codes are case-sensitive
  CHECK(sluice::s3::from_code_string("NoSuchKey ") == errc::internal_error);
}

TEST_CASE("s3 and sluice errors with the same value differ") {
  const sluice::error_code s3_error = errc::access_denied;               // value 1 in "s3"
  const sluice::error_code core_error = sluice::errc::region_too_small;  // value 1 in "sluice"
  CHECK(s3_error.value() == core_error.value());
  CHECK(s3_error != core_error);
  CHECK(s3_error == errc::access_denied);
  CHECK(s3_error != sluice::errc::region_too_small);
}

TEST_CASE("s3 errors compare with the core's shared conditions") {
  using sluice::condition;
  for (const errc e : {errc::no_such_bucket, errc::no_such_key, errc::no_such_upload}) {
    CAPTURE(static_cast<int>(e));
    const sluice::error_code ec = e;
    CHECK(ec == condition::not_found);
    CHECK(ec != condition::declined);
  }
  CHECK(sluice::error_code(errc::rdma_not_supported) == condition::declined);
  CHECK(sluice::error_code(errc::rdma_transfer_failed) == condition::fabric_failed);
  CHECK(sluice::error_code(errc::rdma_transfer_failed) != condition::declined);
  for (int v = first_value; v <= last_value; ++v) {
    const auto e = static_cast<errc>(v);
    if (e == errc::no_such_bucket || e == errc::no_such_key || e == errc::no_such_upload ||
        e == errc::rdma_not_supported || e == errc::rdma_transfer_failed) {
      continue;
    }
    CAPTURE(v);
    const sluice::error_code ec = e;
    CHECK(ec != condition::not_found);
    CHECK(ec != condition::declined);
    CHECK(ec != condition::fabric_failed);
  }
  // The same meaning from either tier: a caller tests once.
  CHECK(sluice::error_code(errc::no_such_key) == sluice::make_error_condition(condition::not_found));
  CHECK(sluice::error_code(sluice::errc::no_such_object) == sluice::make_error_condition(condition::not_found));
}
