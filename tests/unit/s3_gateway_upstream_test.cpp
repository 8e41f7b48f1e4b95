// SPDX-License-Identifier: Apache-2.0
#include <sluice/s3/gateway_upstream.hpp>

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace {

namespace s3 = sluice::s3;
using s3::detail::check_upstream_get;
using s3::detail::check_upstream_listing;
using s3::detail::listing_next;
using s3::detail::upstream_get_fields;
using s3::detail::upstream_get_request;

constexpr std::string_view md5 = "0123456789abcdef0123456789abcdef";

s3::xml::list_bucket_result page_of(std::vector<std::string> keys, bool truncated, std::string next_token = {}) {
  s3::xml::list_bucket_result page;
  page.truncated = truncated;
  page.next_continuation_token = std::move(next_token);
  for (auto& key : keys) page.objects.push_back(sluice::object_info{std::move(key), 1, {}, {}});
  return page;
}

}  // namespace

TEST_CASE("gateway upstream: single-part MD5 ETags") {
  CHECK(s3::detail::is_md5_etag(md5));
  CHECK(s3::detail::is_md5_etag("0123456789ABCDEF0123456789abcdef"));
  CHECK_FALSE(s3::detail::is_md5_etag("0123456789abcdef0123456789abcdef-2"));
  CHECK_FALSE(s3::detail::is_md5_etag("0123456789abcdef0123456789abcdeg"));
  CHECK_FALSE(s3::detail::is_md5_etag(""));
}

TEST_CASE("gateway upstream: a GET answer must be the version, range and size asked") {
  const upstream_get_request asked{md5, 100, 50, 1000};
  sluice::error_code ec;
  auto answer =
      check_upstream_get({206, "\"" + std::string(md5) + "\"", "50", "bytes 100-149/1000", {}, {}}, asked, ec);
  CHECK_FALSE(ec);
  CHECK(answer.total == 1000);
  CHECK_FALSE(answer.other_size);
  // If-Match ignored: another version's ETag.
  (void)check_upstream_get({206, "\"ffffffffffffffffffffffffffffffff\"", "50", "bytes 100-149/1000", {}, {}}, asked,
                           ec);
  CHECK(ec == s3::errc::bad_gateway);
  // A range outside the one asked, a range that is not one, a length that contradicts it.
  (void)check_upstream_get({206, md5, "50", "bytes 0-49/1000", {}, {}}, asked, ec);
  CHECK(ec == s3::errc::bad_gateway);
  (void)check_upstream_get({206, md5, "50", "bytes banana", {}, {}}, asked, ec);
  CHECK(ec == s3::errc::bad_gateway);
  (void)check_upstream_get({206, md5, "49", "bytes 100-149/1000", {}, {}}, asked, ec);
  CHECK(ec == s3::errc::bad_gateway);
  // A 200 (Range ignored) is only of use from the first byte.
  (void)check_upstream_get({200, md5, "1000", {}, {}, {}}, asked, ec);
  CHECK(ec == s3::errc::bad_gateway);
  answer = check_upstream_get({200, md5, "1000", {}, {}, {}}, {md5, 0, 50, 1000}, ec);
  CHECK_FALSE(ec);
  // The GET's size wins over the HEAD's: refused, and the size to fetch again with said.
  answer = check_upstream_get({206, md5, "50", "bytes 100-149/2000", {}, {}}, asked, ec);
  CHECK(ec == s3::errc::bad_gateway);
  CHECK(answer.other_size);
  CHECK(answer.total == 2000);
  answer = check_upstream_get({206, md5, "50", "bytes 100-149/2000", {}, {}}, {md5, 100, 50, 1000, 1500}, ec);
  CHECK(ec == s3::errc::bad_gateway);
  CHECK_FALSE(answer.other_size);  // over max_object_bytes
  // SSE-KMS and SSE-C: the ETag is not the MD5 of the bytes.
  answer = check_upstream_get({206, md5, "50", "bytes 100-149/1000", "aws:kms", {}}, asked, ec);
  CHECK_FALSE(ec);
  CHECK(answer.encrypted);
}

TEST_CASE("gateway upstream: listings are answered honestly") {
  sluice::error_code ec;
  listing_next next = listing_next::done;
  const sluice::list_request request{"b", "p/", "p/a", 2};
  // More keys than asked, marked complete: the first ones, truncated.
  auto page = page_of({"p/b", "p/c", "p/d"}, false);
  auto out = check_upstream_listing(page, request, 2, {}, next, ec);
  CHECK_FALSE(ec);
  CHECK(out.truncated);
  REQUIRE(out.objects.size() == 2);
  CHECK(out.objects[1].key == "p/c");
  CHECK(next == listing_next::done);
  // A full page marked the last: probed.
  page = page_of({"p/b", "p/c"}, false);
  out = check_upstream_listing(page, request, 2, {}, next, ec);
  CHECK_FALSE(ec);
  CHECK_FALSE(out.truncated);
  CHECK(next == listing_next::probe);
  // Fewer than asked, marked the last: believed.
  page = page_of({"p/b"}, false);
  out = check_upstream_listing(page, request, 2, {}, next, ec);
  CHECK_FALSE(ec);
  CHECK(next == listing_next::done);
  // An empty page marked truncated: its token, when it is a new one.
  page = page_of({}, true, "t2");
  out = check_upstream_listing(page, request, 2, "t1", next, ec);
  CHECK_FALSE(ec);
  CHECK(next == listing_next::follow_token);
  page = page_of({}, true, "t1");
  (void)check_upstream_listing(page, request, 2, "t1", next, ec);
  CHECK(ec == s3::errc::bad_gateway);
  // Out of order, not after start-after, outside the prefix: garbage.
  for (const std::vector<std::string>& keys :
       {std::vector<std::string>{"p/c", "p/b"}, std::vector<std::string>{"p/a"}, std::vector<std::string>{"q/x"}}) {
    page = page_of(keys, false);
    out = check_upstream_listing(page, request, 2, {}, next, ec);
    CHECK(ec == s3::errc::bad_gateway);
    CHECK(out.objects.empty());
  }
}
