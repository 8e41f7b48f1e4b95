// SPDX-License-Identifier: Apache-2.0
#include <sluice/s3/sigv4.hpp>

#include <doctest/doctest.h>

#include <sluice/s3/error.hpp>

#include <chrono>
#include <initializer_list>
#include <optional>
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

// The AWS documentation's examples (sig-v4-header-based-auth, sigv4-query-string-auth,
// sigv4-streaming): example credentials, 2013-05-24T00:00:00Z, us-east-1.
const sluice::s3::credentials example_creds{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"};
constexpr std::string_view example_host = "examplebucket.s3.amazonaws.com";
constexpr std::string_view example_scope = "20130524/us-east-1/s3/aws4_request";
constexpr std::string_view empty_hash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

const std::chrono::system_clock::time_point example_time = std::chrono::sys_days{std::chrono::year{2013} / 5 / 24};

using header_list = std::vector<std::pair<std::string, std::string>>;

request_view view_of(std::string_view method, std::string_view target, const header_list& headers) {
  request_view view{method, target, {}};
  for (const auto& [name, value] : headers) view.headers.emplace_back(name, value);
  return view;
}

// The secret of the example key, nothing for any other.
std::optional<std::string> example_secret(std::string_view access_key_id) {
  if (access_key_id == example_creds.access_key_id) return example_creds.secret_access_key;
  return std::nullopt;
}

std::string signature_of(const header_list& headers) {
  for (const auto& [name, value] : headers) {
    if (name == "authorization") return value.substr(value.rfind('=') + 1);
  }
  return {};
}

error_code verify_at(std::string_view method, std::string_view target, const header_list& headers,
                     std::chrono::system_clock::time_point now, std::optional<std::string_view> region = std::nullopt) {
  error_code ec;
  (void)sluice::s3::verify(view_of(method, target, headers), example_secret, now, region, ec);
  return ec;
}

// Signs a request the way the documentation's examples are signed: through sign().
header_list signed_example(std::string_view method, std::string_view target, header_list headers,
                           std::string_view payload_hash) {
  sluice::s3::sign(method, target, headers, payload_hash, example_creds, "us-east-1", example_time);
  return headers;
}

}  // namespace

TEST_CASE("sigv4: uri_encode keeps the unreserved characters only") {
  CHECK(sluice::s3::uri_encode("AZaz09-_.~", true) == "AZaz09-_.~");
  CHECK(sluice::s3::uri_encode("a b+c/d", true) == "a%20b%2Bc%2Fd");
  CHECK(sluice::s3::uri_encode("a b+c/d", false) == "a%20b%2Bc/d");
  CHECK(sluice::s3::uri_encode("$&=*%", true) == "%24%26%3D%2A%25");
  CHECK(sluice::s3::uri_encode("\xe2\x82\xac", true) == "%E2%82%AC");
  CHECK(sluice::s3::uri_encode(std::string_view("\0\xff", 2), true) == "%00%FF");
  CHECK(sluice::s3::uri_encode("", true).empty());
}

TEST_CASE("sigv4: percent_decode") {
  CHECK(sluice::s3::percent_decode("a%20b%2Fc") == "a b/c");
  CHECK(sluice::s3::percent_decode("%e2%82%AC") == "\xe2\x82\xac");
  CHECK(sluice::s3::percent_decode("a+b") == "a+b");
  CHECK(sluice::s3::percent_decode("") == "");
  CHECK(sluice::s3::percent_decode("%00") == std::string(1, '\0'));
  CHECK_FALSE(sluice::s3::percent_decode("%").has_value());
  CHECK_FALSE(sluice::s3::percent_decode("%2").has_value());
  CHECK_FALSE(sluice::s3::percent_decode("a%zz").has_value());
  CHECK_FALSE(sluice::s3::percent_decode("a%2g").has_value());
}

TEST_CASE("sigv4: canonical_uri decodes once and re-encodes, without normalizing") {
  CHECK(sluice::s3::canonical_uri("") == "/");
  CHECK(sluice::s3::canonical_uri("/") == "/");
  CHECK(sluice::s3::canonical_uri("/test.txt") == "/test.txt");
  CHECK(sluice::s3::canonical_uri("/test$file.text") == "/test%24file.text");
  CHECK(sluice::s3::canonical_uri("/test%24file.text") == "/test%24file.text");
  CHECK(sluice::s3::canonical_uri("/bucket/a%20b+c") == "/bucket/a%20b%2Bc");
  CHECK(sluice::s3::canonical_uri("/bucket/a b") == "/bucket/a%20b");
  CHECK(sluice::s3::canonical_uri("/b//x/./../y") == "/b//x/./../y");
  CHECK(sluice::s3::canonical_uri("/b/%e2%82%ac") == "/b/%E2%82%AC");
  CHECK(sluice::s3::canonical_uri("/b/%7Ekey") == "/b/~key");
  CHECK(sluice::s3::canonical_uri("/b/%zz%") == "/b/%25zz%25");
  // Idempotent: canonicalizing a canonical URI changes nothing.
  for (const std::string_view path : {"/a b/%zz", "/%2F%2f", "/x?y", "/%25%"}) {
    const auto once = sluice::s3::canonical_uri(path);
    CHECK(sluice::s3::canonical_uri(once) == once);
  }
}

TEST_CASE("sigv4: canonical_query sorts, encodes and fills in empty values") {
  CHECK(sluice::s3::canonical_query("", false).empty());
  CHECK(sluice::s3::canonical_query("lifecycle", false) == "lifecycle=");
  CHECK(sluice::s3::canonical_query("uploads", false) == sluice::s3::canonical_query("uploads=", false));
  CHECK(sluice::s3::canonical_query("prefix=J&max-keys=2", false) == "max-keys=2&prefix=J");
  CHECK(sluice::s3::canonical_query("a=2&a=1&B=3", false) == "B=3&a=1&a=2");
  CHECK(sluice::s3::canonical_query("x=a%20b+c", false) == "x=a%20b%2Bc");
  CHECK(sluice::s3::canonical_query("x=a b/c", false) == "x=a%20b%2Fc");
  CHECK(sluice::s3::canonical_query("a=b=c", false) == "a=b%3Dc");
  CHECK(sluice::s3::canonical_query("&&a=1&", false) == "a=1");
  CHECK(sluice::s3::canonical_query("list-type=2&delimiter=&prefix=", false) == "delimiter=&list-type=2&prefix=");
  CHECK(sluice::s3::canonical_query("x-id=PutObject", false) == "x-id=PutObject");
  CHECK(sluice::s3::canonical_query("k=%7e%2a", false) == "k=~%2A");
  CHECK(sluice::s3::canonical_query("X-Amz-Signature=abc&b=1", true) == "b=1");
  CHECK(sluice::s3::canonical_query("X-Amz-Signature=abc&b=1", false) == "X-Amz-Signature=abc&b=1");
  // Sorted by encoded name, then value: "a%20b" (%) sorts before "a-b" (-) and "ab".
  CHECK(sluice::s3::canonical_query("ab=1&a-b=2&a b=3", false) == "a%20b=3&a-b=2&ab=1");
  for (const std::string_view query : {"b=%zz&a", "c=1=2&c=1", "%41=%42&a=&&"}) {
    const auto once = sluice::s3::canonical_query(query, false);
    CHECK(sluice::s3::canonical_query(once, false) == once);
  }
}

TEST_CASE("sigv4: canonical_request joins duplicate headers and collapses spaces") {
  const header_list headers{
      {"Host", "h"}, {"X-Amz-Meta-A", "  one  "}, {"x-amz-meta-a", "two   three\t four"}, {"x-amz-meta-b", ""}};
  const std::vector<std::string> signed_headers{"host", "x-amz-meta-a", "x-amz-meta-b", "x-amz-meta-missing"};
  CHECK(
      sluice::s3::canonical_request(view_of("PUT", "/b/k?z=1&a", headers), signed_headers, "UNSIGNED-PAYLOAD", false) ==
      "PUT\n/b/k\na=&z=1\n"
      "host:h\nx-amz-meta-a:one,two three four\nx-amz-meta-b:\nx-amz-meta-missing:\n\n"
      "host;x-amz-meta-a;x-amz-meta-b;x-amz-meta-missing\nUNSIGNED-PAYLOAD");
}

TEST_CASE("sigv4: the AWS GET object example, step by step") {
  const header_list headers{{"Host", std::string(example_host)},
                            {"Range", "bytes=0-9"},
                            {"x-amz-content-sha256", std::string(empty_hash)},
                            {"x-amz-date", "20130524T000000Z"}};
  const std::vector<std::string> signed_headers{"host", "range", "x-amz-content-sha256", "x-amz-date"};
  const std::string canonical =
      sluice::s3::canonical_request(view_of("GET", "/test.txt", headers), signed_headers, empty_hash, false);
  CHECK(canonical ==
        "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
        "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
        "x-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n"
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string to_sign = sluice::s3::string_to_sign("20130524T000000Z", example_scope, canonical);
  CHECK(to_sign ==
        "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
        "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  const auto key = sluice::s3::signing_key(example_creds.secret_access_key, "20130524", "us-east-1", "s3");
  CHECK(sluice::s3::signature(key, to_sign) == "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  // Derived keys are remembered per thread: the same inputs give the same key again, and any
  // other secret, date, region or service its own, also after the table turned over.
  CHECK(sluice::s3::signing_key(example_creds.secret_access_key, "20130524", "us-east-1", "s3") == key);
  for (int round = 0; round < 3; ++round) {
    CHECK(sluice::s3::signing_key("another secret", "20130524", "us-east-1", "s3") != key);
    CHECK(sluice::s3::signing_key(example_creds.secret_access_key, "20130525", "us-east-1", "s3") != key);
    CHECK(sluice::s3::signing_key(example_creds.secret_access_key, "20130524", "eu-west-1", "s3") != key);
    CHECK(sluice::s3::signing_key(example_creds.secret_access_key, "20130524", "us-east-1", "s4") != key);
    for (int i = 0; i < 10; ++i) (void)sluice::s3::signing_key("churn", std::to_string(20130500 + i), "r", "s");
    CHECK(sluice::s3::signature(sluice::s3::signing_key(example_creds.secret_access_key, "20130524", "us-east-1", "s3"),
                                to_sign) == "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  }
}

TEST_CASE("sigv4: sign() reproduces the AWS header examples") {
  SUBCASE("GET object with Range") {
    const auto headers =
        signed_example("GET", "/test.txt", {{"Host", std::string(example_host)}, {"Range", "bytes=0-9"}}, empty_hash);
    CHECK(signature_of(headers) == "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
    const auto& auth = headers.back();
    CHECK(auth.first == "authorization");
    CHECK(auth.second ==
          "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
          "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
          "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
    CHECK(verify_at("GET", "/test.txt", headers, example_time) == error_code());
  }
  SUBCASE("PUT object, a '$' in the key, a Date header and a storage class") {
    const std::string payload_hash = "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072";
    for (const std::string_view target : {"/test$file.text", "/test%24file.text"}) {
      const auto headers = signed_example("PUT", target,
                                          {{"Host", std::string(example_host)},
                                           {"Date", "Fri, 24 May 2013 00:00:00 GMT"},
                                           {"x-amz-storage-class", "REDUCED_REDUNDANCY"}},
                                          payload_hash);
      CHECK(signature_of(headers) == "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
      CHECK(verify_at("PUT", target, headers, example_time) == error_code());
    }
  }
  SUBCASE("GET bucket lifecycle") {
    const auto headers = signed_example("GET", "/?lifecycle", {{"Host", std::string(example_host)}}, empty_hash);
    CHECK(signature_of(headers) == "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
    CHECK(verify_at("GET", "/?lifecycle", headers, example_time) == error_code());
    CHECK(verify_at("GET", "/?lifecycle=", headers, example_time) == error_code());
  }
  SUBCASE("GET bucket (list objects)") {
    const auto headers =
        signed_example("GET", "/?max-keys=2&prefix=J", {{"Host", std::string(example_host)}}, empty_hash);
    CHECK(signature_of(headers) == "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
    CHECK(verify_at("GET", "/?prefix=J&max-keys=2", headers, example_time) == error_code());
  }
  SUBCASE("streaming PUT: the seed signature of sigv4-streaming") {
    const auto headers = signed_example("PUT", "/examplebucket/chunkObject.txt",
                                        {{"Host", "s3.amazonaws.com"},
                                         {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
                                         {"Content-Encoding", "aws-chunked"},
                                         {"x-amz-decoded-content-length", "66560"},
                                         {"Content-Length", "66824"}},
                                        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD");
    CHECK(signature_of(headers) == "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9");
    error_code ec;
    const auto result = sluice::s3::verify(view_of("PUT", "/examplebucket/chunkObject.txt", headers), example_secret,
                                           example_time, "us-east-1", ec);
    REQUIRE_FALSE(ec);
    CHECK(result.seed_signature == "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9");
    CHECK(result.payload_hash == "STREAMING-AWS4-HMAC-SHA256-PAYLOAD");
    CHECK(result.scope == example_scope);
    CHECK(result.amz_date == "20130524T000000Z");
    CHECK(result.access_key_id == example_creds.access_key_id);
    CHECK(result.key == sluice::s3::signing_key(example_creds.secret_access_key, "20130524", "us-east-1", "s3"));
  }
}

TEST_CASE("sigv4: the AWS streaming-trailer example's seed signature") {
  // sigv4-streaming-trailers: the same PUT with STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER; there
  // x-amz-trailer is signed and Content-Length is not.
  header_list headers = signed_example("PUT", "/examplebucket/chunkObject.txt",
                                       {{"Host", "s3.amazonaws.com"},
                                        {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
                                        {"Content-Encoding", "aws-chunked"},
                                        {"x-amz-decoded-content-length", "66560"},
                                        {"x-amz-trailer", "x-amz-checksum-crc32c"}},
                                       "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER");
  CHECK(signature_of(headers) == "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e");
  headers.emplace_back("Content-Length", "66946");  // sent, not signed
  error_code ec;
  const auto result = sluice::s3::verify(view_of("PUT", "/examplebucket/chunkObject.txt", headers), example_secret,
                                         example_time, "us-east-1", ec);
  CHECK(ec == error_code());
  CHECK(result.seed_signature == "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e");
  CHECK(result.payload_hash == "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER");
}

TEST_CASE("sigv4: presign() reproduces the AWS query-string example") {
  const std::string query = sluice::s3::presign("GET", example_host, "/test.txt", "", example_creds, "us-east-1",
                                                example_time, std::chrono::seconds(86400));
  CHECK(query ==
        "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_"
        "request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host&X-Amz-Signature="
        "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404");
  const std::string target = "/test.txt?" + query;
  const header_list headers{{"Host", std::string(example_host)}};
  error_code ec;
  const auto result =
      sluice::s3::verify(view_of("GET", target, headers), example_secret, example_time, "us-east-1", ec);
  REQUIRE(ec == error_code());
  CHECK(result.payload_hash == "UNSIGNED-PAYLOAD");
  CHECK(result.seed_signature == "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404");

  // The parsed claims.
  const auto auth = sluice::s3::parse_authorization(view_of("GET", target, headers), ec);
  REQUIRE(ec == error_code());
  CHECK(auth.presigned);
  CHECK(auth.expires == 86400);
  CHECK(auth.access_key_id == "AKIAIOSFODNN7EXAMPLE");
  CHECK(auth.scope() == example_scope);
  CHECK(auth.signed_headers == std::vector<std::string>{"host"});
}

TEST_CASE("sigv4: presigned expiry boundaries") {
  const std::string target = "/test.txt?" + sluice::s3::presign("GET", example_host, "/test.txt", "x-id=GetObject",
                                                                example_creds, "us-east-1", example_time, 3600s);
  const header_list headers{{"host", std::string(example_host)}};
  CHECK(verify_at("GET", target, headers, example_time) == error_code());
  CHECK(verify_at("GET", target, headers, example_time + 3600s) == error_code());
  CHECK(verify_at("GET", target, headers, example_time + 3601s) == errc::access_denied);
  CHECK(verify_at("GET", target, headers, example_time - 15min) == error_code());
  CHECK(verify_at("GET", target, headers, example_time - 15min - 1s) == errc::access_denied);
  // The extra parameter is signed.
  std::string changed = target;
  changed.replace(changed.find("GetObject"), 9, "PutObject");
  CHECK(verify_at("GET", changed, headers, example_time) == errc::signature_does_not_match);
  CHECK_THROWS_AS((void)sluice::s3::presign("GET", example_host, "/", "", example_creds, "us-east-1", example_time, 0s),
                  std::invalid_argument);
  CHECK_THROWS_AS(
      (void)sluice::s3::presign("GET", example_host, "/", "", example_creds, "us-east-1", example_time, 604801s),
      std::invalid_argument);
  CHECK_NOTHROW(
      (void)sluice::s3::presign("GET", example_host, "/", "", example_creds, "us-east-1", example_time, 604800s));
}

TEST_CASE("sigv4: presigned query parameters are checked") {
  const header_list headers{{"host", std::string(example_host)}};
  const std::string good =
      sluice::s3::presign("GET", example_host, "/k", "", example_creds, "us-east-1", example_time, 60s);
  const auto replace = [&](std::string_view from, std::string_view to) {
    std::string q = good;
    q.replace(q.find(from), from.size(), to);
    return "/k?" + q;
  };
  CHECK(verify_at("GET", "/k?" + good, headers, example_time) == error_code());
  // S3's code for malformed presigned parameters.
  CHECK(verify_at("GET", replace("X-Amz-Expires=60", "X-Amz-Expires=0"), headers, example_time) ==
        errc::authorization_query_parameters_error);
  CHECK(verify_at("GET", replace("X-Amz-Expires=60", "X-Amz-Expires=604801"), headers, example_time) ==
        errc::authorization_query_parameters_error);
  CHECK(verify_at("GET", replace("X-Amz-Expires=60", "X-Amz-Expires=-1"), headers, example_time) ==
        errc::authorization_query_parameters_error);
  CHECK(verify_at("GET", replace("X-Amz-Expires=60&", ""), headers, example_time) ==
        errc::authorization_query_parameters_error);
  CHECK(verify_at("GET", replace("AWS4-HMAC-SHA256", "AWS4-HMAC-SHA1"), headers, example_time) ==
        errc::authorization_query_parameters_error);
  CHECK(verify_at("GET", replace("X-Amz-Date=20130524T000000Z", "X-Amz-Date=20130525T000000Z"), headers,
                  example_time) == errc::authorization_query_parameters_error);  // not the credential's date
  CHECK(verify_at("GET", replace("X-Amz-SignedHeaders=host", "X-Amz-SignedHeaders=host&X-Amz-SignedHeaders=host"),
                  headers, example_time) == errc::authorization_query_parameters_error);
  CHECK(verify_at("GET", "/k?" + good + "&extra=1", headers, example_time) == errc::signature_does_not_match);
  // Both mechanisms at once.
  header_list with_header = headers;
  with_header.emplace_back("Authorization", "AWS4-HMAC-SHA256 Credential=x");
  CHECK(verify_at("GET", "/k?" + good, with_header, example_time) == errc::invalid_argument);
}

TEST_CASE("sigv4: sign() then verify() round-trips, any change breaks it") {
  const std::string target = "/bucket/some%20key+x?partNumber=3&uploadId=abc%2Fdef&x-id=UploadPart";
  const header_list original = signed_example("PUT", target,
                                              {{"Host", "127.0.0.1:9000"},
                                               {"Content-Type", "application/octet-stream"},
                                               {"X-Amz-Meta-Color", "  blue   green "},
                                               {"x-amz-rdma-token", "token-bytes"},
                                               {"Content-MD5", "1B2M2Y8AsgTpgAmY7PhCfg=="},
                                               {"User-Agent", "test/1.0"},
                                               {"Expect", "100-continue"}},
                                              "UNSIGNED-PAYLOAD");
  error_code ec;
  const auto result =
      sluice::s3::verify(view_of("PUT", target, original), example_secret, example_time, std::nullopt, ec);
  REQUIRE(ec == error_code());
  CHECK(result.signed_headers == std::vector<std::string>{"content-md5", "content-type", "host", "x-amz-content-sha256",
                                                          "x-amz-date", "x-amz-meta-color", "x-amz-rdma-token"});
  CHECK(result.payload_hash == "UNSIGNED-PAYLOAD");

  // Unsigned headers may change, be added or go.
  {
    header_list headers = original;
    for (auto& [name, value] : headers) {
      if (name == "User-Agent") value = "other/2.0";
    }
    headers.emplace_back("x-amz-trailer", "x-amz-checksum-crc32");
    headers.emplace_back("X-Forwarded-For", "10.0.0.1");
    CHECK(verify_at("PUT", target, headers, example_time) == error_code());
    // Whitespace inside and around a signed value is canonicalized away.
    for (auto& [name, value] : headers) {
      if (name == "X-Amz-Meta-Color") value = "blue green";
    }
    CHECK(verify_at("PUT", target, headers, example_time) == error_code());
  }
  // Every signed header, changed.
  for (std::size_t i = 0; i < original.size(); ++i) {
    const std::string name = original[i].first;
    if (name == "User-Agent" || name == "Expect" || name == "authorization") continue;
    CAPTURE(name);
    header_list headers = original;
    headers[i].second += "x";
    const auto ec_changed = verify_at("PUT", target, headers, example_time);
    if (name == "x-amz-date") {
      CHECK(ec_changed != error_code());  // no longer a valid date
    } else if (name == "x-amz-content-sha256") {
      CHECK(ec_changed == errc::invalid_argument);  // no longer a valid payload hash
    } else {
      CHECK(ec_changed == errc::signature_does_not_match);
    }
    // A duplicate of a signed header changes its canonical value too.
    headers = original;
    headers.emplace_back(name, "dup");
    const auto ec_dup = verify_at("PUT", target, headers, example_time);
    CHECK(ec_dup != error_code());
  }
  // The method, the path and the query.
  CHECK(verify_at("POST", target, original, example_time) == errc::signature_does_not_match);
  CHECK(verify_at("put", target, original, example_time) == errc::signature_does_not_match);
  for (const std::string_view other :
       {"/bucket/some%20key+y?partNumber=3&uploadId=abc%2Fdef&x-id=UploadPart",
        "/bucket/some%20key?partNumber=3&uploadId=abc%2Fdef&x-id=UploadPart",
        "/bucket/some%20key+x?partNumber=4&uploadId=abc%2Fdef&x-id=UploadPart",
        "/bucket/some%20key+x?partNumber=3&uploadId=abc&x-id=UploadPart",
        "/bucket/some%20key+x?partNumber=3&uploadId=abc%2Fdef",
        "/bucket/some%20key+x?partNumber=3&uploadId=abc%2Fdef&x-id=UploadPart&acl", "/bucket/some%20key+x"}) {
    CAPTURE(other);
    CHECK(verify_at("PUT", other, original, example_time) == errc::signature_does_not_match);
  }
  // Equivalent encodings of the same target verify.
  CHECK(verify_at("PUT", "/bucket/some key%2Bx?x-id=UploadPart&uploadId=abc/def&partNumber=3", original,
                  example_time) == error_code());
  // One hex digit of the signature.
  {
    header_list headers = original;
    std::string& auth = headers.back().second;
    REQUIRE(headers.back().first == "authorization");
    for (const std::size_t at : {auth.size() - 1, auth.size() - 64, auth.size() - 30}) {
      header_list flipped = headers;
      char& c = flipped.back().second[at];
      c = c == '0' ? '1' : '0';
      CHECK(verify_at("PUT", target, flipped, example_time) == errc::signature_does_not_match);
    }
  }
  // An unknown key, another secret.
  {
    header_list headers = original;
    std::string& auth = headers.back().second;
    auth.replace(auth.find("AKIAIOSFODNN7EXAMPLE"), 20, "AKIAIOSFODNN7EXAMPLF");
    CHECK(verify_at("PUT", target, headers, example_time) == errc::invalid_access_key_id);
    error_code other_ec;
    (void)sluice::s3::verify(
        view_of("PUT", target, original),
        [](std::string_view) -> std::optional<std::string> { return std::string("another secret"); }, example_time,
        std::nullopt, other_ec);
    CHECK(other_ec == errc::signature_does_not_match);
  }
}

TEST_CASE("sigv4: header-signed requests must be within 15 minutes of now") {
  const auto headers = signed_example("GET", "/b/k", {{"host", "h"}}, empty_hash);
  CHECK(verify_at("GET", "/b/k", headers, example_time + 15min) == error_code());
  CHECK(verify_at("GET", "/b/k", headers, example_time - 15min) == error_code());
  CHECK(verify_at("GET", "/b/k", headers, example_time + 15min + 1s) == errc::request_time_too_skewed);
  CHECK(verify_at("GET", "/b/k", headers, example_time - 15min - 1s) == errc::request_time_too_skewed);
  CHECK(verify_at("GET", "/b/k", headers, example_time + 15min + 1ms) == errc::request_time_too_skewed);
  CHECK(verify_at("GET", "/b/k", headers, example_time + 24h) == errc::request_time_too_skewed);
}

TEST_CASE("sigv4: region and service of the scope") {
  const auto headers = signed_example("GET", "/b/k", {{"host", "h"}}, empty_hash);
  CHECK(verify_at("GET", "/b/k", headers, example_time, "us-east-1") == error_code());
  CHECK(verify_at("GET", "/b/k", headers, example_time, "eu-west-1") == errc::authorization_header_malformed);
  header_list other_service = headers;
  std::string& auth = other_service.back().second;
  auth.replace(auth.find("/s3/"), 4, "/ec2/");
  CHECK(verify_at("GET", "/b/k", other_service, example_time) == errc::authorization_header_malformed);
  // A presigned URL's scope: S3's AuthorizationQueryParametersError.
  const std::string target =
      "/b/k?" + sluice::s3::presign("GET", "h", "/b/k", "", example_creds, "us-east-1", example_time, 60s);
  CHECK(verify_at("GET", target, {{"host", "h"}}, example_time, "us-east-1") == error_code());
  CHECK(verify_at("GET", target, {{"host", "h"}}, example_time, "eu-west-1") ==
        errc::authorization_query_parameters_error);
}

TEST_CASE("sigv4: host and x-amz-content-sha256 must be signed") {
  const std::string sig(64, 'a');
  const auto with_signed = [&](std::string_view list) {
    return header_list{{"host", "h"},
                       {"x-amz-date", "20130524T000000Z"},
                       {"x-amz-content-sha256", std::string(empty_hash)},
                       {"Authorization",
                        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
                        "aws4_request, SignedHeaders=" +
                            std::string(list) + ", Signature=" + sig}};
  };
  CHECK(verify_at("GET", "/", with_signed("x-amz-content-sha256;x-amz-date"), example_time) == errc::access_denied);
  CHECK(verify_at("GET", "/", with_signed("host;x-amz-date"), example_time) == errc::access_denied);
  CHECK(verify_at("GET", "/", with_signed("host;x-amz-content-sha256;x-amz-date"), example_time) ==
        errc::signature_does_not_match);
}

TEST_CASE("sigv4: parse_authorization") {
  const std::string sig = "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41";
  const auto request = [&](std::string auth, std::string date = "20130524T000000Z",
                           std::string hash = std::string(empty_hash)) {
    header_list headers{{"host", "h"}};
    if (!auth.empty()) headers.emplace_back("Authorization", std::move(auth));
    if (!date.empty()) headers.emplace_back("X-Amz-Date", std::move(date));
    if (!hash.empty()) headers.emplace_back("X-Amz-Content-Sha256", std::move(hash));
    return headers;
  };
  const auto parse = [](const header_list& headers, error_code& ec) {
    return sluice::s3::parse_authorization(view_of("GET", "/", headers), ec);
  };
  error_code ec;

  SUBCASE("spaces after the commas are optional") {
    for (const std::string& value :
         {"AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
          "SignedHeaders=host;range;x-amz-date, Signature=" +
              sig,
          "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
          "SignedHeaders=host;range;x-amz-date,Signature=" +
              sig,
          "  AWS4-HMAC-SHA256   Signature=" + sig +
              " ,  SignedHeaders=Host;Range;X-Amz-Date ,Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
              "aws4_request  "}) {
      CAPTURE(value);
      const auto auth = parse(request(value), ec);
      REQUIRE(ec == error_code());
      CHECK(auth.access_key_id == "AKIAIOSFODNN7EXAMPLE");
      CHECK(auth.date == "20130524");
      CHECK(auth.region == "us-east-1");
      CHECK(auth.service == "s3");
      CHECK(auth.signed_headers == std::vector<std::string>{"host", "range", "x-amz-date"});
      CHECK(auth.signature == sig);
      CHECK(auth.amz_date == "20130524T000000Z");
      CHECK(auth.payload_hash == empty_hash);
      CHECK_FALSE(auth.presigned);
      CHECK(auth.expires == 0);
      CHECK(auth.scope() == example_scope);
    }
  }
  SUBCASE("an access key with a slash keeps it") {
    const auto auth = parse(request("AWS4-HMAC-SHA256 Credential=tenant/user/20130524/us-east-1/s3/aws4_request, "
                                    "SignedHeaders=host, Signature=" +
                                    sig),
                            ec);
    REQUIRE(ec == error_code());
    CHECK(auth.access_key_id == "tenant/user");
  }
  SUBCASE("no authorization at all") {
    (void)parse(request(""), ec);
    CHECK(ec == errc::access_denied);
  }
  SUBCASE("other schemes") {
    (void)parse(request("AWS AKIAIOSFODNN7EXAMPLE:frJIUN8DYpKDtOLCwo//yllqDzg="), ec);
    CHECK(ec == errc::invalid_request);
    (void)parse(request("Bearer abc"), ec);
    CHECK(ec == errc::invalid_argument);
    (void)parse(request("AWS4-HMAC-SHA256"), ec);
    CHECK(ec == errc::authorization_header_malformed);
    (void)parse(request("AWS4-HMAC-SHA256x Credential=a"), ec);
    CHECK(ec == errc::invalid_argument);
    (void)parse(request("AWS4-ECDSA-P256-SHA256 Credential=AK/20130524/s3/aws4_request, SignedHeaders=host, "
                        "Signature=" +
                        sig),
                ec);
    CHECK(ec == errc::invalid_argument);
  }
  SUBCASE("malformed components") {
    const std::string cred = "Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request";
    for (const std::string& value : {
             "AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=host",                              // no signature
             "AWS4-HMAC-SHA256 " + cred + ", Signature=" + sig,                                // no signed headers
             "AWS4-HMAC-SHA256 SignedHeaders=host, Signature=" + sig,                          // no credential
             "AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=host, Signature=" + sig.substr(1),  // short signature
             "AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=host, Signature=" + sig + "0",      // long signature
             "AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=host, Signature=" + sig.substr(1) + "g",  // not hex
             "AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=host;;date, Signature=" + sig,            // empty name
             "AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=, Signature=" + sig,                      // empty list
             "AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=host, Signature=" + sig + ",",            // trailing comma
             "AWS4-HMAC-SHA256 " + cred + ", " + cred + ", SignedHeaders=host, Signature=" + sig,    // twice
             "AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=host, Signature=" + sig + ", Extra=1",    // unknown
             "AWS4-HMAC-SHA256 " + cred + " SignedHeaders=host, Signature=" + sig,                   // no comma
             "AWS4-HMAC-SHA256 credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
             "SignedHeaders=host, Signature=" +
                 sig,  // keys are case-sensitive
             "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_requesx, "
             "SignedHeaders=host, Signature=" +
                 sig,
             "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/aws4_request, "
             "SignedHeaders=host, Signature=" +
                 sig,
             "AWS4-HMAC-SHA256 Credential=/20130524/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=" + sig,
             "AWS4-HMAC-SHA256 Credential=AK/2013052/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=" + sig,
             "AWS4-HMAC-SHA256 Credential=AK/20131324/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=" + sig,
             "AWS4-HMAC-SHA256 Credential=AK/20130524//s3/aws4_request, SignedHeaders=host, Signature=" + sig,
             "AWS4-HMAC-SHA256 Credential=AK/20130523/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=" +
                 sig,  // not the request's date
         }) {
      CAPTURE(value);
      (void)parse(request(value), ec);
      CHECK(ec == errc::authorization_header_malformed);
    }
  }
  const std::string good =
      "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
      "SignedHeaders=host, Signature=" +
      sig;
  SUBCASE("dates") {
    for (const std::string_view bad :
         {"20130524T000000z", "20130524 000000Z", "2013-05-24T00:00:00Z", "20130532T000000Z", "20130229T000000Z",
          "20130524T240000Z", "20130524T006000Z", "20130524T000060Z", "20130524T000000Z0"}) {
      CAPTURE(bad);
      (void)parse(request(good, std::string(bad)), ec);
      CHECK(ec == errc::access_denied);
    }
    // The Date header stands in for x-amz-date, in either form.
    header_list headers{{"host", "h"}, {"Authorization", good}, {"x-amz-content-sha256", "UNSIGNED-PAYLOAD"}};
    (void)parse(headers, ec);
    CHECK(ec == errc::access_denied);
    headers.emplace_back("Date", "Fri, 24 May 2013 00:00:00 GMT");
    auto auth = parse(headers, ec);
    CHECK(ec == error_code());
    CHECK(auth.amz_date == "20130524T000000Z");
    headers.back().second = "Thu, 24 May 2013 00:00:00 GMT";  // wrong weekday
    (void)parse(headers, ec);
    CHECK(ec == errc::access_denied);
    headers.back().second = "20130524T000000Z";
    auth = parse(headers, ec);
    CHECK(ec == error_code());
    // x-amz-date wins over Date.
    headers.back().second = "Sat, 25 May 2013 00:00:00 GMT";
    headers.emplace_back("x-amz-date", "20130524T000000Z");
    auth = parse(headers, ec);
    CHECK(ec == error_code());
    headers.emplace_back("x-amz-date", "20130524T000000Z");
    (void)parse(headers, ec);
    CHECK(ec == errc::invalid_argument);
  }
  SUBCASE("payload hashes") {
    (void)parse(request(good, "20130524T000000Z", ""), ec);
    CHECK(ec == errc::invalid_request);
    for (const std::string_view ok : std::initializer_list<std::string_view>{
             "UNSIGNED-PAYLOAD", "STREAMING-UNSIGNED-PAYLOAD-TRAILER", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
             "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER", empty_hash}) {
      const auto auth = parse(request(good, "20130524T000000Z", std::string(ok)), ec);
      CHECK(ec == error_code());
      CHECK(auth.payload_hash == ok);
    }
    for (const std::string_view bad : {"unsigned-payload", "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD", "abc",
                                       "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b85"}) {
      (void)parse(request(good, "20130524T000000Z", std::string(bad)), ec);
      CHECK(ec == errc::invalid_argument);
    }
  }
  SUBCASE("two Authorization headers") {
    header_list headers = request(good);
    headers.emplace_back("authorization", good);
    (void)parse(headers, ec);
    CHECK(ec == errc::invalid_argument);
  }
}

TEST_CASE("sigv4: sign() replaces what it adds and checks its input") {
  header_list headers{
      {"Host", "h"}, {"X-Amz-Date", "19990101T000000Z"}, {"Authorization", "old"}, {"x-amz-content-sha256", "old"}};
  sluice::s3::sign("GET", "/", headers, empty_hash, example_creds, "us-east-1", example_time);
  CHECK(headers.size() == 4);
  CHECK(verify_at("GET", "/", headers, example_time) == error_code());
  header_list no_host{{"x-amz-meta-a", "b"}};
  CHECK_THROWS_AS(sluice::s3::sign("GET", "/", no_host, empty_hash, example_creds, "us-east-1", example_time),
                  std::invalid_argument);
  header_list bad_name{{"host", "h"}, {"bad name", "b"}};
  CHECK_THROWS_AS(sluice::s3::sign("GET", "/", bad_name, empty_hash, example_creds, "us-east-1", example_time),
                  std::invalid_argument);
}

TEST_CASE("sigv4: amz dates") {
  CHECK(sluice::s3::format_amz_date(example_time) == "20130524T000000Z");
  CHECK(sluice::s3::format_amz_date(example_time + 23h + 59min + 59s + 999ms) == "20130524T235959Z");
  CHECK(sluice::s3::format_amz_date(std::chrono::system_clock::time_point{}) == "19700101T000000Z");
  CHECK(sluice::s3::parse_amz_date("20130524T000000Z") == example_time);
  CHECK(sluice::s3::parse_amz_date("20240229T123456Z") ==
        std::chrono::sys_days{std::chrono::year{2024} / 2 / 29} + 12h + 34min + 56s);
  CHECK_FALSE(sluice::s3::parse_amz_date("20230229T123456Z").has_value());
  CHECK_FALSE(sluice::s3::parse_amz_date("").has_value());
  CHECK_FALSE(sluice::s3::parse_amz_date("2013052400000Z").has_value());
  CHECK_FALSE(sluice::s3::parse_amz_date("2013O524T000000Z").has_value());
  for (int i = 0; i < 1000; ++i) {
    // Up to about nine years on: system_clock counts nanoseconds in 64 bits (about 292 years).
    const auto t = example_time + std::chrono::seconds(static_cast<long long>(i) * 7919 * 37);
    CHECK(sluice::s3::parse_amz_date(sluice::s3::format_amz_date(t)) == t);
  }
}

TEST_CASE("sigv4 verify says why for failures S3 explains") {
  const auto secret_for = [](std::string_view) { return std::optional<std::string>("secret"); };
  const std::string authorization =
      "AWS4-HMAC-SHA256 Credential=AK/20240101/us-east-1/s3/aws4_request, "
      "SignedHeaders=host;x-amz-date, Signature=" +
      std::string(64, '0');
  sluice::s3::request_view view{"PUT", "/b/k", {}};
  view.headers = {{"host", "h"}, {"x-amz-date", "20240101T000000Z"}, {"authorization", authorization}};
  sluice::error_code ec;
  std::string why;
  (void)sluice::s3::verify(view, secret_for, std::chrono::system_clock::now(), std::nullopt, ec, &why);
  CHECK(ec == sluice::s3::errc::invalid_request);
  CHECK(why == "Missing required header for this request: x-amz-content-sha256");
  // Without a sink the failure is the same, and nothing is said anywhere.
  (void)sluice::s3::verify(view, secret_for, std::chrono::system_clock::now(), std::nullopt, ec);
  CHECK(ec == sluice::s3::errc::invalid_request);
}
