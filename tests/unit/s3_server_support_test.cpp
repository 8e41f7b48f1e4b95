// SPDX-License-Identifier: Apache-2.0
#include "s3/server/support.hpp"

#include "s3/server/answer_head.hpp"

#include "s3/server/published.hpp"

#include <sluice/s3/router.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
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

TEST_CASE("a route reused for the next request holds that request only") {
  sluice::error_code ec;
  const std::vector<std::string> suffixes{"s3.example"};
  sluice::s3::route r;
  sluice::s3::parse_route(r, "GET", "/bucket/a%2Fkey?versionId=1&partNumber=3&x=%41", "h", suffixes, false, ec);
  CHECK_FALSE(ec);
  CHECK(r.key == "a/key");
  CHECK(r.query.size() == 3);
  // Shorter, virtual-host style, fewer parameters: nothing of the first request stays.
  sluice::s3::parse_route(r, "GET", "/k?uploads", "b.s3.example", suffixes, false, ec);
  CHECK_FALSE(ec);
  CHECK(r.bucket == "b");
  CHECK(r.key == "k");
  CHECK(r.virtual_host);
  REQUIRE(r.query.size() == 1);
  CHECK(r.query[0].first == "uploads");
  CHECK(r.query[0].second.empty());
  CHECK_FALSE(r.param("partNumber"));
  // The same answers as a fresh route, for a bad query and then a good one.
  sluice::s3::parse_route(r, "GET", "/b/k?a=1&bad=%zz", "h", suffixes, false, ec);
  CHECK(ec);
  sluice::s3::parse_route(r, "GET", "/b/k", "h", suffixes, false, ec);
  CHECK_FALSE(ec);
  CHECK(r.query.empty());
  CHECK_FALSE(r.virtual_host);
  const auto fresh = sluice::s3::parse_route("GET", "/b/k", "h", suffixes, false, ec);
  CHECK(fresh.op == r.op);
  CHECK(fresh.bucket == r.bucket);
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
    CHECK(r.problem->code == sluice::s3::errc::invalid_range);  // well formed, past the source: 416
    CHECK(r.problem->message == "Range specified is not valid for source object of size: 100");
  }
  CHECK(parse_copy_source_range("bytes=0-0", 0).problem);  // an empty source has no byte to name
}

TEST_CASE("user metadata in RFC 2047 encoded words") {
  using sluice::s3::detail::header_safe_metadata;
  using sluice::s3::detail::rfc2047_decoded;
  CHECK(rfc2047_decoded("=?UTF-8?B?w6k=?=") == std::optional<std::string>("\xC3\xA9"));
  CHECK(rfc2047_decoded("=?utf-8?b?w6k=?=") == std::optional<std::string>("\xC3\xA9"));
  CHECK(rfc2047_decoded("=?UTF-8?Q?caf=C3=A9_au_lait?=") == std::optional<std::string>("caf\xC3\xA9 au lait"));
  CHECK(rfc2047_decoded("=?UTF-8?B?w6k=?= =?UTF-8?Q?=C3=A9?=") == std::optional<std::string>("\xC3\xA9\xC3\xA9"));
  CHECK(rfc2047_decoded("=?US-ASCII?Q?plain?=") == std::optional<std::string>("plain"));
  for (const std::string_view kept :
       {"", "plain", "a =?UTF-8?B?w6k=?=", "=?UTF-8?B?w6k=?= b", "=?UTF-8?B?w6k?=", "=?UTF-8?B?not base64?=",
        "=?ISO-8859-1?Q?=E9?=", "=?UTF-8?X?abc?=", "=?UTF-8?B?AA==?=", "=?UTF-8?B?wyg=?=", "=?UTF-8?Q?a=0Ab?=",
        "=?UTF-8?Q?=E?=", "=?UTF-8?Q?=G1?=", "=?UTF-8?B?w6k=", "=?UTF-8", "=?"}) {
    CAPTURE(kept);
    CHECK_FALSE(rfc2047_decoded(kept));  // stored as sent
  }
  std::string buffer;
  CHECK(header_safe_metadata("ascii only", buffer) == "ascii only");
  CHECK(header_safe_metadata("\xC3\xA9", buffer) == "=?UTF-8?B?w6k=?=");
  CHECK(rfc2047_decoded(header_safe_metadata("h\xC3\xA9llo \xE2\x9C\x93", buffer)) ==
        std::optional<std::string>("h\xC3\xA9llo \xE2\x9C\x93"));
}

TEST_CASE("composite checksums of multipart uploads") {
  using sluice::s3::base64_decode;
  using sluice::s3::base64_encode;
  using sluice::s3::digest;
  using sluice::s3::digest_kind;
  using sluice::s3::detail::composite_checksum;
  const auto crc32c = [](std::string_view data) {
    digest d(digest_kind::crc32c);
    d.update(data);
    return base64_encode(d.finish());
  };
  sluice::object_attributes upload;
  upload.checksums["crc32c"] = "";  // created with x-amz-checksum-algorithm: CRC32C
  composite_checksum composite(upload);
  sluice::part_info one{1, 3, "e1", {}, {{"crc32c", crc32c("abc")}}};
  sluice::part_info two{2, 3, "e2", {}, {{"crc32c", crc32c("def")}}};
  CHECK_FALSE(composite.add(one, {}));
  CHECK_FALSE(composite.add(two, {{"crc32c", crc32c("def")}}));
  sluice::object_attributes object = upload;
  composite.finish(object);
  digest whole(digest_kind::crc32c);
  whole.update(*base64_decode(crc32c("abc")));
  whole.update(*base64_decode(crc32c("def")));
  CHECK(object.checksums == std::map<std::string, std::string>{{"crc32c", base64_encode(whole.finish()) + "-2"}});
  CHECK(object.part_checksums == std::vector<std::string>{crc32c("abc"), crc32c("def")});

  composite_checksum refusing(upload);
  sluice::part_info bare{1, 3, "e1", {}, {}};
  const auto missing = refusing.add(bare, {});
  REQUIRE(missing);
  CHECK(missing->code == sluice::s3::errc::invalid_request);
  const auto other = refusing.add(one, {{"crc32c", crc32c("xyz")}});
  REQUIRE(other);
  CHECK(other->code == sluice::s3::errc::invalid_part);

  composite_checksum none(sluice::object_attributes{});  // no algorithm: nothing asked, none made
  CHECK_FALSE(none.add(bare, {}));
  sluice::object_attributes plain;
  none.finish(plain);
  CHECK(plain.checksums.empty());
  CHECK(plain.part_checksums.empty());
}

TEST_CASE("LocationConstraint names") {
  using sluice::s3::detail::is_location_name;
  CHECK(is_location_name(""));
  CHECK(is_location_name("eu-west-1"));
  CHECK(is_location_name("EU"));
  CHECK(is_location_name(std::string(64, 'a')));
  CHECK_FALSE(is_location_name(std::string(65, 'a')));
  CHECK_FALSE(is_location_name("eu west"));
  CHECK_FALSE(is_location_name("eu_west"));
  CHECK_FALSE(is_location_name("\xC3\xA9"));
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

TEST_CASE("object and bucket tagging routes: GET, PUT and DELETE of ?tagging") {
  sluice::error_code ec;
  const std::vector<std::string> suffixes;
  using sluice::s3::operation;
  CHECK(sluice::s3::parse_route("GET", "/b/k?tagging", "h", suffixes, false, ec).op == operation::get_object_tagging);
  CHECK(sluice::s3::parse_route("PUT", "/b/k?tagging", "h", suffixes, false, ec).op == operation::put_object_tagging);
  CHECK(sluice::s3::parse_route("DELETE", "/b/k?tagging", "h", suffixes, false, ec).op ==
        operation::delete_object_tagging);
  CHECK(sluice::s3::parse_route("POST", "/b/k?tagging", "h", suffixes, false, ec).op == operation::not_implemented);
  CHECK(sluice::s3::parse_route("GET", "/b?tagging", "h", suffixes, false, ec).op == operation::get_bucket_tagging);
  CHECK(sluice::s3::parse_route("PUT", "/b?tagging", "h", suffixes, false, ec).op == operation::put_bucket_tagging);
  CHECK(sluice::s3::parse_route("DELETE", "/b?tagging", "h", suffixes, false, ec).op ==
        operation::delete_bucket_tagging);
  CHECK(sluice::s3::operation_name(operation::put_object_tagging) == "PutObjectTagging");
  CHECK(sluice::s3::operation_name(operation::delete_bucket_tagging) == "DeleteBucketTagging");
}

TEST_CASE("ACL and attributes routes, and the names of what is not implemented") {
  sluice::error_code ec;
  const std::vector<std::string> suffixes;
  using sluice::s3::operation;
  const auto op = [&](std::string_view method, std::string_view target) {
    return sluice::s3::parse_route(method, target, "h", suffixes, false, ec).op;
  };
  CHECK(op("GET", "/b/k?acl") == operation::get_object_acl);
  CHECK(op("PUT", "/b/k?acl") == operation::put_object_acl);
  CHECK(op("GET", "/b?acl") == operation::get_bucket_acl);
  CHECK(op("PUT", "/b?acl") == operation::put_bucket_acl);
  CHECK(op("DELETE", "/b?acl") == operation::not_implemented);
  CHECK(op("GET", "/b/k?attributes") == operation::get_object_attributes);
  CHECK(op("HEAD", "/b/k?attributes") == operation::not_implemented);
  const auto name = [&](std::string_view method, std::string_view target) {
    return sluice::s3::unimplemented_operation_name(method,
                                                    sluice::s3::parse_route(method, target, "h", suffixes, false, ec));
  };
  CHECK(name("PUT", "/b?cors") == "PutBucketCors");
  CHECK(name("DELETE", "/b?cors") == "DeleteBucketCors");
  CHECK(name("GET", "/b/k?retention") == "GetObjectRetention");
  CHECK(name("PUT", "/b/k?legal-hold") == "PutObjectLegalHold");
  CHECK(name("POST", "/b/k?restore") == "RestoreObject");
  CHECK(name("POST", "/b/k?select&select-type=2") == "SelectObjectContent");
  CHECK(name("PUT", "/b?versioning") == "PutBucketVersioning");
  CHECK(name("GET", "/b?policyStatus") == "GetBucketPolicyStatus");
  CHECK(name("DELETE", "/b?acl") == "DeleteBucketAcl");
  CHECK(name("GET", "/b/k?cors") == "?cors on an object with GET");
  CHECK(name("PATCH", "/b/k") == "PATCH on an object");
  CHECK(name("POST", "/b") == "POST on a bucket");
  CHECK(name("PUT", "/") == "PUT on the service");
}

TEST_CASE("x-amz-tagging headers and tag sets as S3 takes them") {
  using sluice::s3::detail::checked_tags;
  using sluice::s3::detail::parse_tagging_header;
  using pairs = std::vector<std::pair<std::string, std::string>>;
  CHECK(parse_tagging_header("a=1&b=two%20words&c=x+y&d") ==
        pairs{{"a", "1"}, {"b", "two words"}, {"c", "x y"}, {"d", ""}});
  CHECK(parse_tagging_header("") == pairs{});
  CHECK(parse_tagging_header("k=%2B%26%3D") == pairs{{"k", "+&="}});
  CHECK_FALSE(parse_tagging_header("k=%zz"));
  CHECK_FALSE(parse_tagging_header("%=v"));
  std::string why;
  CHECK(checked_tags({{"a", "1"}, {"b", ""}}, why) == std::map<std::string, std::string>{{"a", "1"}, {"b", ""}});
  pairs ten;
  for (int i = 0; i < 10; ++i) ten.emplace_back("k" + std::to_string(i), "v");
  CHECK(checked_tags(ten, why));
  ten.emplace_back("k10", "v");
  CHECK_FALSE(checked_tags(ten, why));
  CHECK(why == "Object tags cannot be greater than 10");
  CHECK_FALSE(checked_tags({{"a", "1"}, {"a", "2"}}, why));
  CHECK_FALSE(checked_tags({{"", "1"}}, why));
  CHECK(checked_tags({{std::string(128, 'k'), std::string(256, 'v')}}, why));
  CHECK_FALSE(checked_tags({{std::string(129, 'k'), "v"}}, why));
  CHECK_FALSE(checked_tags({{"k", std::string(257, 'v')}}, why));
  // Characters, not bytes: 128 two-byte characters are a valid key.
  std::string wide;
  for (int i = 0; i < 128; ++i) wide += "\xc3\xa9";
  CHECK(checked_tags({{wide, "v"}}, why));
  CHECK_FALSE(checked_tags({{wide + "e", "v"}}, why));
  CHECK_FALSE(checked_tags({{"aws:x", "v"}}, why));
  CHECK_FALSE(checked_tags({{"k", std::string("\x01", 1)}}, why));
  CHECK_FALSE(checked_tags({{"\xff", "v"}}, why));
}

TEST_CASE("conditional write headers, ETag lists and header values") {
  using sluice::s3::detail::etag_list_matches;
  using sluice::s3::detail::is_safe_header_value;
  using sluice::s3::detail::write_precondition_of;
  CHECK(write_precondition_of("", "")->none());
  CHECK(write_precondition_of("", "*")->if_absent);
  CHECK(write_precondition_of("", " * ")->if_absent);
  CHECK(write_precondition_of("\"abc\"", "")->if_etag == std::optional<std::string>("abc"));
  CHECK(write_precondition_of("abc", "")->if_etag == std::optional<std::string>("abc"));
  CHECK_FALSE(write_precondition_of("", "\"abc\""));  // If-None-Match other than *
  CHECK_FALSE(write_precondition_of("*", ""));
  CHECK_FALSE(write_precondition_of("\"a\", \"b\"", ""));
  CHECK_FALSE(write_precondition_of("\"\"", ""));
  const sluice::write_precondition absent{.if_absent = true};
  const std::string etag = "abc";
  CHECK(absent.met_by(nullptr));
  CHECK_FALSE(absent.met_by(&etag));
  const sluice::write_precondition match{.if_etag = "abc"};
  CHECK(match.met_by(&etag));
  CHECK_FALSE(match.met_by(nullptr));

  CHECK(etag_list_matches("*", "x"));
  CHECK(etag_list_matches("\"a\", W/\"x\"", "x"));
  CHECK(etag_list_matches("x", "x"));
  CHECK_FALSE(etag_list_matches("\"a\",\"b\"", "x"));
  CHECK_FALSE(etag_list_matches("", "x"));

  CHECK(is_safe_header_value("text/plain; charset=utf-8"));
  CHECK(is_safe_header_value("a\tb"));
  CHECK_FALSE(is_safe_header_value("text/plain\r\nX-Evil: 1"));
  CHECK_FALSE(is_safe_header_value("a\nb"));
  CHECK_FALSE(is_safe_header_value(std::string("a\0b", 3)));
  CHECK_FALSE(is_safe_header_value("a\x7f"));
}

TEST_CASE("published: readers see each publish, across threads and instances") {
  using sluice::s3::detail::published;
  published<std::vector<int>> a({1});
  published<std::vector<int>> b({2});
  CHECK(a.read() == std::vector<int>{1});
  CHECK(b.read() == std::vector<int>{2});
  a.publish({3});
  CHECK(a.read() == std::vector<int>{3});  // this thread held version 1: it reads the new one
  b.update([](std::vector<int>& v) { v.push_back(4); });
  CHECK(b.read() == std::vector<int>{2, 4});
  // More instances than a thread keeps copies of: each still reads its own value.
  std::vector<std::unique_ptr<published<int>>> many;
  for (int i = 0; i < 20; ++i) many.push_back(std::make_unique<published<int>>(i));
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 20; ++i) CHECK(many[static_cast<std::size_t>(i)]->read() == i);
  }
  // A writer and readers on other threads: a reader never sees a value go back, and sees the last.
  published<int> counter(0);
  std::atomic<bool> done{false};
  std::atomic<int> backwards{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&] {
      int last = 0;
      while (!done.load()) {
        const int now = counter.read();
        if (now < last) ++backwards;
        last = now;
      }
      if (counter.read() != 1000) ++backwards;
    });
  }
  for (int i = 1; i <= 1000; ++i) counter.update([](int& v) { ++v; });
  done = true;
  for (auto& r : readers) r.join();
  CHECK(backwards.load() == 0);
  CHECK(counter.read() == 1000);
}

TEST_CASE("answer_head: the bytes of a GET's head, overrides first, and nothing a header cannot carry") {
  namespace http = boost::beast::http;
  sluice::s3::detail::answer_head head;
  head.start(http::status::partial_content);
  head.set(http::field::content_type, "text/plain");  // an override, set before the object's fields
  sluice::object_info info;
  info.attributes.etag = "abc";
  info.attributes.content_type = "binary/stored";
  info.attributes.metadata = {{"colour", "blue"}};
  info.last_modified = std::chrono::system_clock::time_point(std::chrono::seconds(784111777));
  sluice::s3::detail::object_fields(head, info, false);
  head.set("x-amz-mp-parts-count", std::uint64_t{3});
  CHECK(head.has(http::field::content_type));
  CHECK_FALSE(head.has(http::field::content_encoding));
  CHECK(head.valid());
  CHECK(head.finish(4096, false) ==
        "HTTP/1.1 206 Partial Content\r\n"
        "Content-Type: text/plain\r\n"
        "ETag: \"abc\"\r\n"
        "Last-Modified: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
        "Accept-Ranges: bytes\r\n"
        "x-amz-meta-colour: blue\r\n"
        "x-amz-mp-parts-count: 3\r\n"
        "Content-Length: 4096\r\n"
        "Connection: close\r\n\r\n");
  // The head is rewritten from the start for the next answer, kept alive.
  head.start(http::status::ok);
  CHECK(head.finish(0, true) == "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
  CHECK_FALSE(head.has(http::field::content_type));

  // Stored bytes that would end the header early (an upstream's, an old store's) make the head
  // invalid: the server answers 500 rather than send them.
  for (const std::string_view bad : {std::string_view("a\r\nSet-Cookie: x=1"), std::string_view("a\nb"),
                                     std::string_view("a\0b", 3), std::string_view("\x7f")}) {
    head.start(http::status::ok);
    head.set("x-amz-meta-", "k", bad);
    CHECK_FALSE(head.valid());
  }
  for (const std::string_view bad_name : {"a b", "a:b", "a\r\nb", ""}) {
    head.start(http::status::ok);
    head.set("x-amz-meta-", bad_name.empty() ? bad_name : bad_name, "v");
    if (!bad_name.empty()) CHECK_FALSE(head.valid());
  }
  head.start(http::status::ok);
  head.set("x-amz-meta-", "tab-and-utf8", "a\tb \xc3\xa9");  // tab and non-ASCII bytes pass, as Beast sends them
  CHECK(head.valid());
}
