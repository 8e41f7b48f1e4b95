#include <sluice/s3/server_impl.hpp>

#include <sluice/s3/router.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

using sluice::s3::detail::copy_extent;
using sluice::s3::detail::parse_copy_source;
using sluice::s3::detail::parse_copy_source_range;
using sluice::s3::detail::parse_part_number;

}  // namespace

TEST_CASE("UploadPartCopy routes to its own operation") {
  sluice::error_code ec;
  const std::vector<std::string> suffixes;
  const auto copy = sluice::s3::parse_route("PUT", "/b/k?partNumber=2&uploadId=U", "h", suffixes, true, ec);
  CHECK_FALSE(ec);
  CHECK(copy.op == sluice::s3::operation::upload_part_copy);
  CHECK(sluice::s3::operation_name(copy.op) == "UploadPartCopy");
  const auto part = sluice::s3::parse_route("PUT", "/b/k?partNumber=2&uploadId=U", "h", suffixes, false, ec);
  CHECK(part.op == sluice::s3::operation::upload_part);
}

TEST_CASE("x-amz-copy-source-range: bytes=first-last inside the source, nothing else") {
  const auto whole = parse_copy_source_range(std::nullopt, 100);
  CHECK_FALSE(whole.problem);
  CHECK(whole.offset == 0);
  CHECK(whole.length == 100);
  const auto middle = parse_copy_source_range("bytes=10-19", 100);
  CHECK_FALSE(middle.problem);
  CHECK(middle.offset == 10);
  CHECK(middle.length == 10);
  const auto last = parse_copy_source_range("bytes=99-99", 100);
  CHECK_FALSE(last.problem);
  CHECK(last.length == 1);
  const auto all = parse_copy_source_range("bytes=0-18446744073709551614", UINT64_MAX);
  CHECK_FALSE(all.problem);
  CHECK(all.length == UINT64_MAX);  // no overflow at the top of the range

  for (const std::string_view bad :
       {"", "bytes=", "bytes=-", "bytes=5-1", "bytes=-5", "bytes=0-", "0-5", "bytes=a-b", "bytes= 0-5", "bytes=0 -5",
        "bytes=+0-5", "bytes=0--5", "bytes=0-5,7-9", "bytes=0-18446744073709551616", "bytes=99999999999999999999-1",
        "Bytes=0-5", "bytes=0x1-5", "bytes=0-5 "}) {
    CAPTURE(bad);
    const copy_extent r = parse_copy_source_range(bad, 100);
    REQUIRE(r.problem);
    CHECK(r.problem->code == sluice::s3::errc::invalid_argument);
    CHECK(r.problem->message.find("bytes=first-last") != std::string::npos);
  }
  for (const std::string_view outside : {"bytes=0-100", "bytes=100-100", "bytes=50-18446744073709551615"}) {
    CAPTURE(outside);
    const copy_extent r = parse_copy_source_range(outside, 100);
    REQUIRE(r.problem);
    CHECK(r.problem->code == sluice::s3::errc::invalid_argument);
    CHECK(r.problem->message == "Range specified is not valid for source object of size: 100");
  }
  CHECK(parse_copy_source_range("bytes=0-0", 0).problem);  // an empty source has no byte to name
}

TEST_CASE("x-amz-copy-source and partNumber") {
  const auto plain = parse_copy_source("/bkt/dir/a%20b?versionId=null");
  REQUIRE(plain);
  CHECK(plain->bucket == "bkt");
  CHECK(plain->key == "dir/a b");
  const auto no_slash = parse_copy_source("bkt/k");
  REQUIRE(no_slash);
  CHECK(no_slash->key == "k");
  for (const std::string_view bad : {"", "/", "bkt", "bkt/", "/bkt/", "//k", "bkt%2", "%ZZ/k"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_copy_source(bad));
  }
  CHECK(parse_part_number("1") == 1U);
  CHECK(parse_part_number("10000") == 10000U);
  for (const std::string_view bad : {"", "0", "10001", "-1", "+1", "1x", " 1", "4294967297"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_part_number(bad));
  }
}
