// SPDX-License-Identifier: Apache-2.0
// Fuzz target for the S3 XML request-body parsers (sluice::s3::xml) and the HTTP date parser
// beside them. All take untrusted bytes from a request; none may crash, and each result must
// keep its documented contract:
//   - parse_complete_multipart_upload succeeds only with 1..10000 parts, numbered 1..10000 in
//     strictly ascending order; it fails with malformed_xml, invalid_argument or
//     invalid_part_order and then returns nothing;
//   - parse_delete_objects succeeds only with 1..1000 objects and fails only with malformed_xml,
//     returning an empty, non-quiet result;
//   - parse_create_bucket_configuration fails only with malformed_xml (returning ""), and
//     succeeds on every all-whitespace input; what it returns is trimmed;
//   - a date parse_http_date accepts is one that http_date writes back and that parses again to
//     the same instant.
#include <sluice/s3/xml.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

namespace xml = sluice::s3::xml;
using sluice::s3::errc;

void check(bool condition) {
  if (!condition) std::abort();
}

bool is_xml_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

void fuzz_complete_multipart_upload(std::string_view body) {
  sluice::error_code ec = errc::internal_error;
  const auto parts = xml::parse_complete_multipart_upload(body, ec);
  if (ec) {
    check(ec == errc::malformed_xml || ec == errc::invalid_argument || ec == errc::invalid_part_order);
    check(parts.empty());
    return;
  }
  check(!parts.empty() && parts.size() <= 10000);
  std::uint32_t previous = 0;
  for (const auto& part : parts) {
    check(part.number > previous && part.number <= 10000);
    previous = part.number;
    for (const auto& [name, value] : part.checksums) {
      check(name == "crc32" || name == "crc32c" || name == "sha1" || name == "sha256" || name == "crc64nvme");
    }
  }
}

void fuzz_delete_objects(std::string_view body) {
  sluice::error_code ec = errc::internal_error;
  const auto result = xml::parse_delete_objects(body, ec);
  if (ec) {
    check(ec == errc::malformed_xml);
    check(result.objects.empty() && !result.quiet);
    return;
  }
  check(!result.objects.empty() && result.objects.size() <= xml::max_delete_objects);
}

void fuzz_create_bucket_configuration(std::string_view body) {
  sluice::error_code ec = errc::internal_error;
  const std::string location = xml::parse_create_bucket_configuration(body, ec);
  bool blank = true;
  for (const char c : body) blank = blank && is_xml_space(c);
  if (blank) check(!ec && location.empty());
  if (ec) {
    check(ec == errc::malformed_xml);
    check(location.empty());
    return;
  }
  check(location.empty() || (!is_xml_space(location.front()) && !is_xml_space(location.back())));
}

void fuzz_parse_http_date(std::string_view text) {
  const auto t = xml::parse_http_date(text);
  if (!t) return;
  const std::string written = xml::http_date(*t);
  const auto again = xml::parse_http_date(written);
  check(again.has_value() && *again == *t);
  check(xml::http_date(*again) == written);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // An owned copy of exactly `size` bytes, so that ASan catches a read past the end.
  const std::string bytes = size == 0 ? std::string() : std::string(data, data + size);
  fuzz_complete_multipart_upload(bytes);
  fuzz_delete_objects(bytes);
  fuzz_create_bucket_configuration(bytes);
  fuzz_parse_http_date(bytes);
  return 0;
}
