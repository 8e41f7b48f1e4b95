// SPDX-License-Identifier: Apache-2.0
#include <sluice/s3/sigv2.hpp>

#include <doctest/doctest.h>

#include <sluice/s3/error.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using namespace std::chrono_literals;
using sluice::error_code;
using sluice::s3::errc;
using sluice::s3::request_view;
namespace sigv2 = sluice::s3::sigv2;

// The credentials of the AWS SigV2 documentation (RESTAuthentication, "Authentication examples").
const sluice::s3::credentials example_creds{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"};

using header_list = std::vector<std::pair<std::string, std::string>>;

request_view view_of(std::string_view method, std::string_view target, const header_list& headers) {
  request_view view{method, target, {}};
  for (const auto& [name, value] : headers) view.headers.emplace_back(name, value);
  return view;
}

std::optional<std::string> example_secret(std::string_view access_key_id) {
  if (access_key_id == example_creds.access_key_id) return example_creds.secret_access_key;
  return std::nullopt;
}

std::chrono::system_clock::time_point at(std::chrono::year_month_day day, std::chrono::seconds time_of_day) {
  return std::chrono::sys_days{day} + time_of_day;
}

error_code verify_at(std::string_view method, std::string_view target, const header_list& headers,
                     std::string_view host_bucket, std::chrono::system_clock::time_point now,
                     std::string* message = nullptr) {
  error_code ec;
  (void)sigv2::verify(view_of(method, target, headers), host_bucket, example_secret, now, ec, message);
  return ec;
}

// One example of the documentation: the request, its StringToSign and its signature.
struct example {
  std::string_view method;
  std::string_view target;
  header_list headers;  // without Authorization
  std::string_view host_bucket;
  std::string_view string_to_sign;
  std::string_view signature;
  std::chrono::system_clock::time_point time;
};

void check_example(const example& e) {
  const auto view = view_of(e.method, e.target, e.headers);
  CHECK(sigv2::string_to_sign(view, e.host_bucket, std::nullopt) == e.string_to_sign);
  CHECK(sigv2::signature(example_creds.secret_access_key, e.string_to_sign) == e.signature);
  header_list headers = e.headers;
  headers.emplace_back("Authorization", "AWS " + example_creds.access_key_id + ":" + std::string(e.signature));
  CHECK(verify_at(e.method, e.target, headers, e.host_bucket, e.time) == error_code{});
  CHECK(verify_at(e.method, e.target, headers, e.host_bucket, e.time + 14min) == error_code{});
}

}  // namespace

TEST_CASE("sigv2: the documentation's examples") {
  using std::chrono::March;
  SUBCASE("object GET, virtual-hosted") {
    check_example(
        {"GET",
         "/photos/puppy.jpg",
         {{"Host", "awsexamplebucket1.us-west-1.s3.amazonaws.com"}, {"Date", "Tue, 27 Mar 2007 19:36:42 +0000"}},
         "awsexamplebucket1",
         "GET\n\n\nTue, 27 Mar 2007 19:36:42 +0000\n/awsexamplebucket1/photos/puppy.jpg",
         "qgk2+6Sv9/oM7G3qLEjTH1a1l1g=",
         at(2007y / March / 27, 19h + 36min + 42s)});
  }
  SUBCASE("object PUT with Content-Type") {
    check_example({"PUT",
                   "/photos/puppy.jpg",
                   {{"Content-Type", "image/jpeg"},
                    {"Content-Length", "94328"},
                    {"Host", "awsexamplebucket1.s3.us-west-1.amazonaws.com"},
                    {"Date", "Tue, 27 Mar 2007 21:15:45 +0000"}},
                   "awsexamplebucket1",
                   "PUT\n\nimage/jpeg\nTue, 27 Mar 2007 21:15:45 +0000\n/awsexamplebucket1/photos/puppy.jpg",
                   "iqRzw+ileNPu1fhspnRs8nOjjIA=",
                   at(2007y / March / 27, 21h + 15min + 45s)});
  }
  SUBCASE("list with prefix: the query is not in the resource") {
    check_example({"GET",
                   "/?prefix=photos&max-keys=50&marker=puppy",
                   {{"User-Agent", "Mozilla/5.0"},
                    {"Host", "awsexamplebucket1.s3.us-west-1.amazonaws.com"},
                    {"Date", "Tue, 27 Mar 2007 19:42:41 +0000"}},
                   "awsexamplebucket1",
                   "GET\n\n\nTue, 27 Mar 2007 19:42:41 +0000\n/awsexamplebucket1/",
                   "m0WP8eCtspQl5Ahe6L1SozdX9YA=",
                   at(2007y / March / 27, 19h + 42min + 41s)});
  }
  SUBCASE("fetch ?acl: the sub-resource is") {
    check_example(
        {"GET",
         "/?acl",
         {{"Host", "awsexamplebucket1.s3.us-west-1.amazonaws.com"}, {"Date", "Tue, 27 Mar 2007 19:44:46 +0000"}},
         "awsexamplebucket1",
         "GET\n\n\nTue, 27 Mar 2007 19:44:46 +0000\n/awsexamplebucket1/?acl",
         "82ZHiFIjc+WbcwFKGUVEQspPn+0=",
         at(2007y / March / 27, 19h + 44min + 46s)});
  }
  SUBCASE("DELETE, path style, with x-amz-date") {
    // The documentation's text: with x-amz-date the Date position is empty, and x-amz-date is
    // one of the canonical x-amz- headers. (Its example table shows the x-amz-date value in the
    // Date position and no x-amz- header, which contradicts the text; botocore, MinIO and this
    // server follow the text. The signature below is HMAC-SHA1 of the string shown.)
    check_example({"DELETE",
                   "/awsexamplebucket1/photos/puppy.jpg",
                   {{"User-Agent", "dotnet"},
                    {"Host", "s3.us-west-1.amazonaws.com"},
                    {"Date", "Tue, 27 Mar 2007 21:20:27 +0000"},
                    {"x-amz-date", "Tue, 27 Mar 2007 21:20:26 +0000"}},
                   "",
                   "DELETE\n\n\n\nx-amz-date:Tue, 27 Mar 2007 21:20:26 +0000\n/awsexamplebucket1/photos/puppy.jpg",
                   "Ri1hpB1zpS9pGqR7y8kuNFCl4sE=",
                   at(2007y / March / 27, 21h + 20min + 26s)});
  }
  SUBCASE("upload: Content-MD5, x-amz- headers sorted, lower-cased, duplicates joined, CNAME bucket") {
    // The signature of this example as the documentation's earlier edition gave it (bucket
    // static.johnsmith.net); the current edition renamed the host but kept a signature that
    // matches neither string.
    check_example({"PUT",
                   "/db-backup.dat.gz",
                   {{"User-Agent", "curl/7.15.5"},
                    {"Host", "static.johnsmith.net:8080"},
                    {"Date", "Tue, 27 Mar 2007 21:06:08 +0000"},
                    {"x-amz-acl", "public-read"},
                    {"content-type", "application/x-download"},
                    {"Content-MD5", "4gJE4saaMU4BqNR0kLY+lw=="},
                    {"X-Amz-Meta-ReviewedBy", "joe@johnsmith.net"},
                    {"X-Amz-Meta-ReviewedBy", "jane@johnsmith.net"},
                    {"X-Amz-Meta-FileChecksum", "0x02661779"},
                    {"X-Amz-Meta-ChecksumAlgorithm", "crc32"},
                    {"Content-Disposition", "attachment; filename=database.dat"},
                    {"Content-Encoding", "gzip"},
                    {"Content-Length", "5913339"}},
                   "static.johnsmith.net",
                   "PUT\n4gJE4saaMU4BqNR0kLY+lw==\napplication/x-download\nTue, 27 Mar 2007 21:06:08 +0000\n"
                   "x-amz-acl:public-read\nx-amz-meta-checksumalgorithm:crc32\nx-amz-meta-filechecksum:0x02661779\n"
                   "x-amz-meta-reviewedby:joe@johnsmith.net,jane@johnsmith.net\n/static.johnsmith.net/db-backup.dat.gz",
                   "ilyl83RwaSoYIEdixDQcA4OnAnc=",
                   at(2007y / March / 27, 21h + 6min + 8s)});
  }
  SUBCASE("list all my buckets") {
    check_example({"GET",
                   "/",
                   {{"Host", "s3.us-west-1.amazonaws.com"}, {"Date", "Wed, 28 Mar 2007 01:29:59 +0000"}},
                   "",
                   "GET\n\n\nWed, 28 Mar 2007 01:29:59 +0000\n/",
                   "qGdzdERIC03wnaRNKh6OqZehG9s=",
                   at(2007y / March / 28, 1h + 29min + 59s)});
  }
  SUBCASE("unicode keys: the path as on the wire, escapes and their case kept") {
    check_example({"GET",
                   "/dictionary/fran%C3%A7ais/pr%c3%a9f%c3%a8re",
                   {{"Host", "s3.us-west-1.amazonaws.com"}, {"Date", "Wed, 28 Mar 2007 01:49:49 +0000"}},
                   "",
                   "GET\n\n\nWed, 28 Mar 2007 01:49:49 +0000\n/dictionary/fran%C3%A7ais/pr%c3%a9f%c3%a8re",
                   "DNEZGsoieTZ92F3bUfSPQcbGmlM=",
                   at(2007y / March / 28, 1h + 49min + 49s)});
  }
}

TEST_CASE("sigv2: the documentation's query-string example (Expires in the Date position)") {
  // As the documentation's earlier edition gave it (bucket johnsmith; the current edition renamed
  // the bucket and kept this signature).
  const std::string_view target =
      "/photos/puppy.jpg?AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Signature=NpgCjnDzrM%2BWFzoENXmpNDUsSn8%3D&"
      "Expires=1175139620";
  const header_list headers{{"Host", "johnsmith.s3.amazonaws.com"}, {"Date", "Mon, 26 Mar 2007 19:37:58 +0000"}};
  const auto view = view_of("GET", target, headers);
  CHECK(sigv2::string_to_sign(view, "johnsmith", "1175139620") == "GET\n\n\n1175139620\n/johnsmith/photos/puppy.jpg");
  CHECK(sigv2::signature(example_creds.secret_access_key, "GET\n\n\n1175139620\n/johnsmith/photos/puppy.jpg") ==
        "NpgCjnDzrM+WFzoENXmpNDUsSn8=");
  const auto expires = std::chrono::system_clock::time_point{std::chrono::seconds{1175139620}};
  CHECK(verify_at("GET", target, headers, "johnsmith", expires - 1h) == error_code{});
  CHECK(verify_at("GET", target, headers, "johnsmith", expires) == error_code{});
  // The Date header does not matter to a presigned URL, however old.
  CHECK(verify_at("GET", target, {{"Host", "johnsmith.s3.amazonaws.com"}}, "johnsmith", expires - 30 * 24h) ==
        error_code{});
  // Expired: 403 AccessDenied, "Request has expired".
  std::string message;
  CHECK(verify_at("GET", target, headers, "johnsmith", expires + 1s, &message) == errc::access_denied);
  CHECK(message == "Request has expired");
  // Another bucket, method or path: another string to sign.
  CHECK(verify_at("GET", target, headers, "", expires - 1h) == errc::signature_does_not_match);
  CHECK(verify_at("HEAD", target, headers, "johnsmith", expires - 1h) == errc::signature_does_not_match);
  // A later Expires than was signed.
  const std::string later =
      "/photos/puppy.jpg?AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Signature=NpgCjnDzrM%2BWFzoENXmpNDUsSn8%3D&"
      "Expires=1175139621";
  CHECK(verify_at("GET", later, headers, "johnsmith", expires - 1h) == errc::signature_does_not_match);
}

TEST_CASE("sigv2: canonical x-amz- headers: lower case, sorted, duplicates joined, unfolded, trimmed") {
  const header_list headers{{"X-Amz-Meta-B", "  two\r\n\t lines  "},
                            {"x-amz-meta-a", "1"},
                            {"Content-Type", "text/plain"},
                            {"X-AMZ-META-A", " 2 "},
                            {"x-amz-meta-c", "inner  blanks kept"},
                            {"x-amz-meta-empty", ""},
                            {"X-Amz-Date", "Tue, 27 Mar 2007 19:36:42 GMT"},
                            {"x-amzfoo", "not an amz header"}};
  CHECK(sigv2::canonical_amz_headers(view_of("PUT", "/b/k", headers)) ==
        "x-amz-date:Tue, 27 Mar 2007 19:36:42 GMT\nx-amz-meta-a:1,2\nx-amz-meta-b:two lines\n"
        "x-amz-meta-c:inner  blanks kept\nx-amz-meta-empty:\n");
  CHECK(sigv2::canonical_amz_headers(view_of("GET", "/", {{"Host", "h"}})).empty());
  // With x-amz-date, the Date position is empty.
  CHECK(sigv2::string_to_sign(view_of("PUT", "/b/k", {{"Date", "d"}, {"x-amz-date", "x"}}), "", std::nullopt) ==
        "PUT\n\n\n\nx-amz-date:x\n/b/k");
  CHECK(sigv2::string_to_sign(view_of("PUT", "/b/k", {{"Date", " d "}}), "", std::nullopt) == "PUT\n\n\nd\n/b/k");
}

TEST_CASE("sigv2: the canonical resource keeps the path as sent and the sub-resources, decoded and sorted") {
  CHECK(sigv2::canonical_resource("/b/k", "") == "/b/k");
  CHECK(sigv2::canonical_resource("", "") == "/");
  CHECK(sigv2::canonical_resource("/", "bucket") == "/bucket/");
  CHECK(sigv2::canonical_resource("/k", "bucket") == "/bucket/k");
  CHECK(sigv2::canonical_resource("/b/a%20b+c%2f", "") == "/b/a%20b+c%2f");
  // A path-style bucket alone: "/bucket/", as botocore signs it (it sends "/bucket").
  CHECK(sigv2::canonical_resource("/b", "") == "/b/");
  CHECK(sigv2::canonical_resource("/b?acl", "") == "/b/?acl");
  CHECK(sigv2::canonical_resource("/b?acl=", "") == "/b/?acl=");
  CHECK(sigv2::canonical_resource("/b/", "") == "/b/");
  CHECK(sigv2::canonical_resource("/k", "b") == "/b/k");
  CHECK(sigv2::canonical_resource("/b/k?uploads", "") == "/b/k?uploads");
  CHECK(sigv2::canonical_resource("/b/k?uploadId=abc%2Fd%2B&partNumber=3", "") == "/b/k?partNumber=3&uploadId=abc/d+");
  CHECK(sigv2::canonical_resource("/b/k?tagging", "") == "/b/k?tagging");
  CHECK(sigv2::canonical_resource("/b/k?versionId=v1&acl", "") == "/b/k?acl&versionId=v1");
  CHECK(sigv2::canonical_resource("/b/k?response-content-type=text%2Fplain%3B%20charset%3Dutf-8&x-id=GetObject", "") ==
        "/b/k?response-content-type=text/plain; charset=utf-8");
  CHECK(sigv2::canonical_resource("/b/k?response-expires=a&response-cache-control=no-cache", "") ==
        "/b/k?response-cache-control=no-cache&response-expires=a");
  CHECK(sigv2::canonical_resource("/b?prefix=a&delimiter=%2F&max-keys=2&list-type=2", "") == "/b/");
  CHECK(sigv2::canonical_resource("/b?delete", "") == "/b/?delete");
  CHECK(sigv2::canonical_resource("/b/k?AWSAccessKeyId=A&Expires=1&Signature=x&uploadId=u", "") == "/b/k?uploadId=u");
  // Names are case-sensitive: "ACL" is not a sub-resource.
  CHECK(sigv2::canonical_resource("/b?ACL", "") == "/b/");
  CHECK(sigv2::is_subresource("partNumber"));
  CHECK(sigv2::is_subresource("website"));
  CHECK_FALSE(sigv2::is_subresource("partnumber"));
  CHECK_FALSE(sigv2::is_subresource("x-id"));
  CHECK_FALSE(sigv2::is_subresource(""));
}

TEST_CASE("sigv2: a path-style bucket is signed as /bucket/ or, as sent, /bucket") {
  const auto now = std::chrono::sys_days{std::chrono::year{2024} / 1 / 2};
  const header_list base{{"Host", "127.0.0.1:9000"}, {"Date", "Tue, 02 Jan 2024 00:00:00 GMT"}};
  for (const std::string_view resource : {"/b/?uploads", "/b?uploads"}) {
    header_list headers = base;
    const std::string sig = sigv2::signature(example_creds.secret_access_key,
                                             "GET\n\n\nTue, 02 Jan 2024 00:00:00 GMT\n" + std::string(resource));
    headers.emplace_back("Authorization", "AWS " + example_creds.access_key_id + ":" + sig);
    CHECK(verify_at("GET", "/b?uploads", headers, "", now) == error_code{});
    // Only for a bucket alone: a key's path is signed as sent.
    CHECK(verify_at("GET", "/b/?uploads", headers, "", now) ==
          (resource == "/b/?uploads" ? error_code{} : make_error_code(errc::signature_does_not_match)));
    CHECK(verify_at("GET", "/c?uploads", headers, "", now) == errc::signature_does_not_match);
  }
}

TEST_CASE("sigv2: HTTP dates") {
  using std::chrono::March;
  const auto t = at(2007y / March / 27, 19h + 36min + 42s);
  CHECK(sigv2::parse_http_date("Tue, 27 Mar 2007 19:36:42 GMT") == t);
  CHECK(sigv2::parse_http_date("Tue, 27 Mar 2007 19:36:42 +0000") == t);
  CHECK(sigv2::parse_http_date("Tue, 27 Mar 2007 21:36:42 +0200") == t);
  CHECK(sigv2::parse_http_date("Tue, 27 Mar 2007 14:36:42 -0500") == t);
  CHECK(sigv2::parse_http_date("27 Mar 2007 19:36:42 UTC") == t);
  CHECK(sigv2::parse_http_date("Tuesday, 27-Mar-07 19:36:42 GMT") == t);
  CHECK(sigv2::parse_http_date("Tue Mar 27 19:36:42 2007") == t);
  CHECK(sigv2::parse_http_date("Tue Mar  7 19:36:42 2007") == at(2007y / March / 7, 19h + 36min + 42s));
  CHECK(sigv2::parse_http_date("20070327T193642Z") == t);
  // Well-formed dates outside 1970..2200 stand as the first or last second of that span (far
  // from now: RequestTimeTooSkewed, not a malformed date).
  CHECK(sigv2::parse_http_date("Tue, 27 Mar 1969 19:36:42 GMT") == at(1970y / std::chrono::January / 1, 0s));
  CHECK(sigv2::parse_http_date("Fri, 31 Dec 9999 23:59:59 GMT") ==
        at(2200y / std::chrono::December / 31, 23h + 59min + 59s));
  for (const std::string_view bad :
       {"", "Tue", "Tue, 27 Mar 2007 19:36:42", "Tue, 32 Mar 2007 19:36:42 GMT", "Tue, 27 Foo 2007 19:36:42 GMT",
        "Tue, 27 Mar 2007 24:00:00 GMT", "Tue, 27 Mar 2007 19:36 GMT", "Tue, 29 Feb 9999 19:36:42 GMT",
        "Tue, 27 Mar 9999 24:36:42 GMT", "Tue, 27 Mar 2007 19:36:42 +2500", "Tue, 27 Mar 2007 19:36:42 EST5",
        "Mon, 29 Feb 2007 00:00:00 GMT", "1 2 3 4 5 6 7 8 9", "-27-Mar-07", "27-Mar-07-1 19:36:42 GMT"}) {
    CHECK_MESSAGE(!sigv2::parse_http_date(bad).has_value(), bad);
  }
}

TEST_CASE("sigv2: claims") {
  CHECK(sigv2::claims(view_of("GET", "/", {{"Authorization", "AWS a:b"}})));
  CHECK(sigv2::claims(view_of("GET", "/", {{"authorization", "  AWS\ta:b"}})));
  CHECK(sigv2::claims(view_of("GET", "/b/k?AWSAccessKeyId=a", {})));
  CHECK(sigv2::claims(view_of("GET", "/b/k?x=1&Signature=s", {})));
  CHECK_FALSE(sigv2::claims(view_of("GET", "/", {{"Authorization", "AWS4-HMAC-SHA256 Credential=x"}})));
  CHECK_FALSE(sigv2::claims(view_of("GET", "/", {{"Authorization", "AWSa:b"}})));
  CHECK_FALSE(sigv2::claims(view_of("GET", "/", {{"Authorization", "AWS  "}})));
  CHECK_FALSE(sigv2::claims(view_of("GET", "/b/k?X-Amz-Signature=s&X-Amz-Credential=c", {})));
  CHECK_FALSE(sigv2::claims(view_of("GET", "/b/k?signature=s", {})));
  CHECK_FALSE(sigv2::claims(view_of("GET", "/", {})));
}

TEST_CASE("sigv2: refusals") {
  using std::chrono::March;
  const auto now = at(2007y / March / 27, 19h + 36min + 42s);
  const header_list good{{"Host", "awsexamplebucket1.us-west-1.s3.amazonaws.com"},
                         {"Date", "Tue, 27 Mar 2007 19:36:42 +0000"},
                         {"Authorization", "AWS AKIAIOSFODNN7EXAMPLE:qgk2+6Sv9/oM7G3qLEjTH1a1l1g="}};
  const auto with = [&](std::string_view name, std::string_view value) {
    header_list out;
    for (const auto& h : good) {
      if (h.first != name) out.push_back(h);
    }
    if (!value.empty()) out.emplace_back(name, value);
    return out;
  };
  const auto check = [&](const header_list& headers, errc expected, std::string_view target = "/photos/puppy.jpg") {
    std::string message;
    CHECK(verify_at("GET", target, headers, "awsexamplebucket1", now, &message) == expected);
    CHECK_FALSE(message.empty());
  };
  REQUIRE(verify_at("GET", "/photos/puppy.jpg", good, "awsexamplebucket1", now) == error_code{});

  SUBCASE("a wrong signature") {
    check(with("Authorization", "AWS AKIAIOSFODNN7EXAMPLE:qgk2+6Sv9/oM7G3qLEjTH1a1l1h="),
          errc::signature_does_not_match);
    check(with("Authorization", "AWS AKIAIOSFODNN7EXAMPLE:qgk2+6Sv9/oM7G3qLEjTH1a1l1g"),
          errc::signature_does_not_match);
    check(with("Date", "Tue, 27 Mar 2007 19:36:43 +0000"), errc::signature_does_not_match);
    check(with("Content-Type", "text/plain"), errc::signature_does_not_match);
    check(with("x-amz-meta-added", "1"), errc::signature_does_not_match);
    check(good, errc::signature_does_not_match, "/photos/puppy.JPG");
    check(good, errc::signature_does_not_match, "/photos/puppy.jpg?acl");
    // The same signature under another secret: the key matters.
    error_code ec;
    (void)sigv2::verify(
        view_of("GET", "/photos/puppy.jpg", good), "awsexamplebucket1",
        [](std::string_view) { return std::optional<std::string>("another secret"); }, now, ec);
    CHECK(ec == errc::signature_does_not_match);
  }
  SUBCASE("an unknown access key") {
    check(with("Authorization", "AWS AKIAUNKNOWN:qgk2+6Sv9/oM7G3qLEjTH1a1l1g="), errc::invalid_access_key_id);
    error_code ec;
    (void)sigv2::verify(view_of("GET", "/photos/puppy.jpg", good), "awsexamplebucket1", nullptr, now, ec);
    CHECK(ec == errc::invalid_access_key_id);
  }
  SUBCASE("a missing or unreadable Date") {
    check(with("Date", ""), errc::access_denied);
    check(with("Date", "yesterday"), errc::access_denied);
    header_list two = good;
    two.emplace_back("Date", "Tue, 27 Mar 2007 19:36:42 +0000");
    check(two, errc::access_denied);
    // x-amz-date wins over Date: an unreadable one is not saved by a good Date.
    check(with("x-amz-date", "soon"), errc::access_denied);
  }
  SUBCASE("a request time too far from now") {
    std::string message;
    CHECK(verify_at("GET", "/photos/puppy.jpg", good, "awsexamplebucket1", now + 16min, &message) ==
          errc::request_time_too_skewed);
    CHECK(verify_at("GET", "/photos/puppy.jpg", good, "awsexamplebucket1", now - 16min) ==
          errc::request_time_too_skewed);
  }
  SUBCASE("malformed Authorization headers") {
    for (const std::string_view value : {"AWS AKIAIOSFODNN7EXAMPLE", "AWS :sig", "AWS key:", "AWS :", "AWS \t:"}) {
      check(with("Authorization", value), errc::authorization_header_malformed);
    }
  }
  SUBCASE("two mechanisms, or two headers") {
    check(good, errc::invalid_argument, "/photos/puppy.jpg?Signature=x&AWSAccessKeyId=a&Expires=1");
    check(good, errc::invalid_argument, "/photos/puppy.jpg?X-Amz-Signature=x");
    header_list two = good;
    two.emplace_back("Authorization", "AWS AKIAIOSFODNN7EXAMPLE:qgk2+6Sv9/oM7G3qLEjTH1a1l1g=");
    check(two, errc::invalid_argument);
    check({}, errc::invalid_argument, "/photos/puppy.jpg?Signature=x&AWSAccessKeyId=a&Expires=1&X-Amz-Credential=c");
  }
  SUBCASE("malformed query parameters") {
    for (const std::string_view target :
         {"/k?AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Signature=x", "/k?AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Expires=1",
          "/k?Signature=x&Expires=1", "/k?AWSAccessKeyId=&Signature=x&Expires=1",
          "/k?AWSAccessKeyId=A&Signature=x&Expires=", "/k?AWSAccessKeyId=A&Signature=x&Expires=-1",
          "/k?AWSAccessKeyId=A&Signature=x&Expires=1e9", "/k?AWSAccessKeyId=A&Signature=x&Expires=+1",
          "/k?AWSAccessKeyId=A&Signature=x&Expires=99999999999999999999",
          "/k?AWSAccessKeyId=A&Signature=x&Signature=y&Expires=1",
          "/k?AWSAccessKeyId=A&AWSAccessKeyId=A&Signature=x&Expires=1"}) {
      std::string message;
      CHECK_MESSAGE(verify_at("GET", target, {}, "", now, &message) == errc::authorization_query_parameters_error,
                    target);
      CHECK_FALSE(message.empty());
    }
  }
  SUBCASE("an aws-chunked payload claimed under SigV2") {
    check(with("x-amz-content-sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"), errc::invalid_request);
    check(with("x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER"), errc::invalid_request);
  }
}

TEST_CASE("sigv2: what a verified request carries") {
  using std::chrono::March;
  const auto now = at(2007y / March / 27, 21h + 6min + 8s);
  header_list headers{{"Host", "127.0.0.1"},
                      {"Content-Type", "application/octet-stream"},
                      {"x-amz-rdma-token", "token"},
                      {"X-Amz-Meta-A", "1"},
                      {"x-amz-meta-a", "2"},
                      {"x-amz-content-sha256", "0000000000000000000000000000000000000000000000000000000000000000"}};
  sigv2::sign("PUT", "/b/k", headers, "", example_creds, now);
  error_code ec;
  const auto v = sigv2::verify(view_of("PUT", "/b/k", headers), "", example_secret, now, ec);
  REQUIRE(ec == error_code{});
  CHECK(v.access_key_id == example_creds.access_key_id);
  // SigV2 does not sign the payload: x-amz-content-sha256 means nothing (it is only a signed
  // x-amz- header), the body is checked against Content-MD5 alone.
  CHECK(v.payload_hash == "UNSIGNED-PAYLOAD");
  CHECK(v.signed_headers ==
        std::vector<std::string>{"content-type", "x-amz-content-sha256", "x-amz-meta-a", "x-amz-rdma-token"});
  CHECK(v.scope.empty());
  CHECK(v.amz_date.empty());
  CHECK(v.key == std::array<std::byte, 32>{});
  CHECK_FALSE(v.seed_signature.empty());
}

TEST_CASE("sigv2: sign and presign round-trip through verify") {
  const auto now = std::chrono::sys_days{std::chrono::year{2024} / 1 / 2} + 3h + 4min + 5s;
  SUBCASE("header auth, hostile key and sub-resources") {
    const std::string target = "/b/a%20b+c%E2%82%AC%2F..%2F?uploadId=x%2By%20z&partNumber=2&prefix=ignored";
    header_list headers{
        {"Host", "b.localhost:9000"}, {"Content-MD5", "1B2M2Y8AsgTpgAmY7PhCfg=="}, {"x-amz-meta-k", "v"}};
    sigv2::sign("PUT", target, headers, "", example_creds, now);
    CHECK(headers[headers.size() - 2] == std::pair<std::string, std::string>{"Date", "Tue, 02 Jan 2024 03:04:05 GMT"});
    CHECK(verify_at("PUT", target, headers, "", now) == error_code{});
    // A parameter that is not a sub-resource is not signed; a sub-resource is.
    CHECK(verify_at("PUT", "/b/a%20b+c%E2%82%AC%2F..%2F?uploadId=x%2By%20z&partNumber=2&prefix=other", headers, "",
                    now) == error_code{});
    CHECK(verify_at("PUT", "/b/a%20b+c%E2%82%AC%2F..%2F?uploadId=x%2By%20z&partNumber=3", headers, "", now) ==
          errc::signature_does_not_match);
    // The path is signed as sent: another encoding of the same key is another string.
    CHECK(verify_at("PUT", "/b/a%20b%2Bc%E2%82%AC%2F..%2F?uploadId=x%2By%20z&partNumber=2", headers, "", now) ==
          errc::signature_does_not_match);
    // Virtual-hosted: the bucket must be where the signer put it.
    header_list virtual_headers{{"Host", "b.localhost:9000"}};
    sigv2::sign("GET", "/k?tagging", virtual_headers, "b", example_creds, now);
    CHECK(verify_at("GET", "/k?tagging", virtual_headers, "b", now) == error_code{});
    CHECK(verify_at("GET", "/k?tagging", virtual_headers, "", now) == errc::signature_does_not_match);
    header_list bad_name{{"bad name", "v"}};
    CHECK_THROWS_AS(sigv2::sign("GET", "/", bad_name, "", example_creds, now), std::invalid_argument);
  }
  SUBCASE("presigned") {
    const std::string query =
        sigv2::presign("GET", "/b/k%20%2B", "response-content-type=text%2Fplain", "", example_creds, now + 1h);
    CHECK(
        query.starts_with("response-content-type=text%2Fplain&AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Expires=1704168245"
                          "&Signature="));
    const std::string target = "/b/k%20%2B?" + query;
    CHECK(verify_at("GET", target, {}, "", now) == error_code{});
    CHECK(verify_at("GET", target, {}, "", now + 1h) == error_code{});
    CHECK(verify_at("GET", target, {}, "", now + 1h + 1s) == errc::access_denied);
    CHECK(verify_at("PUT", target, {}, "", now) == errc::signature_does_not_match);
    CHECK(verify_at("GET", target, {{"Content-Type", "x"}}, "", now) == errc::signature_does_not_match);
  }
}

TEST_CASE("sigv2: hostile bytes never throw") {
  std::mt19937 rng(12);
  const auto random_text = [&](std::size_t max) {
    std::string out(rng() % (max + 1), '\0');
    for (auto& c : out) c = static_cast<char>(rng() % 256);
    return out;
  };
  const std::vector<std::string> seeds{"AWS AKIAIOSFODNN7EXAMPLE:qgk2+6Sv9/oM7G3qLEjTH1a1l1g=", "AWS ",
                                       "AWS :", "AWS a:b:c", "AWS \r\n:"};
  const auto now = std::chrono::sys_days{std::chrono::year{2007} / 3 / 27};
  for (int i = 0; i < 3000; ++i) {
    const std::string auth = seeds[static_cast<std::size_t>(i) % seeds.size()] + random_text(8);
    const std::string target = "/" + random_text(24) + "?AWSAccessKeyId=" + random_text(6) +
                               "&Expires=" + random_text(4) + "&Signature=" + random_text(6) + "&" + random_text(12);
    const std::string date = random_text(32);
    const header_list headers{
        {"Authorization", auth}, {"Date", date}, {"x-amz-" + random_text(4), random_text(16)}, {"x-amz-date", date}};
    error_code ec;
    CHECK_NOTHROW((void)sigv2::verify(view_of("GET", target, headers), random_text(6), example_secret, now, ec));
    CHECK_NOTHROW((void)sigv2::verify(view_of("GET", target, {}), "", example_secret, now, ec));
    CHECK_NOTHROW((void)sigv2::verify(view_of("GET", "/k", headers), "", example_secret, now, ec));
    CHECK_NOTHROW((void)sigv2::parse_http_date(date));
  }
}
