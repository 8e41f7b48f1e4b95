// SPDX-License-Identifier: Apache-2.0
// Fuzz target for the SigV4 code of sluice::s3 (canonical_uri, canonical_query,
// parse_authorization, verify, sign, presign). The input is a request in a loose text form:
//   METHOD SP TARGET '\n' (NAME ':' VALUE '\n')*
// None of them may crash, and their results must keep the documented contract:
//   - canonical_uri and canonical_query write only unreserved characters and upper-case %XX
//     escapes (plus '/' and '=' '&' where they belong), and canonicalizing twice changes nothing;
//   - uri_encode round-trips through percent_decode;
//   - parse_authorization and verify fail only with the documented s3::errc values, and what
//     parse_authorization accepts is well-formed;
//   - a request signed by sign() (or a URL made by presign()) verifies, and no longer does once
//     its method changes.
#include <sluice/s3/error.hpp>
#include <sluice/s3/sigv4.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using sluice::s3::errc;

void check(bool condition) {
  if (!condition) std::abort();
}

const std::chrono::system_clock::time_point fixed_now = std::chrono::sys_days{std::chrono::year{2013} / 5 / 24};
const sluice::s3::credentials fuzz_creds{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"};

std::optional<std::string> fuzz_secret(std::string_view access_key_id) {
  if (access_key_id == fuzz_creds.access_key_id) return fuzz_creds.secret_access_key;
  return std::nullopt;
}

bool is_upper_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); }

bool is_unreserved(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
         c == '.' || c == '~';
}

// Only unreserved characters, `extra` and %XX escapes.
bool is_encoded(std::string_view text, std::string_view extra) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (is_unreserved(c) || extra.find(c) != std::string_view::npos) continue;
    if (c != '%' || i + 2 >= text.size() || !is_upper_hex(text[i + 1]) || !is_upper_hex(text[i + 2])) return false;
    i += 2;
  }
  return true;
}

std::string_view next_line(std::string_view& rest) {
  const auto nl = rest.find('\n');
  const std::string_view line = rest.substr(0, nl);
  rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
  return line;
}

void fuzz_canonical(std::string_view target) {
  const auto q = target.find('?');
  const std::string_view path = target.substr(0, q);
  const std::string_view query = q == std::string_view::npos ? std::string_view() : target.substr(q + 1);

  const std::string uri = sluice::s3::canonical_uri(path);
  check(!uri.empty());
  check(is_encoded(uri, "/"));
  check(sluice::s3::canonical_uri(uri) == uri);

  for (const bool drop : {false, true}) {
    const std::string canonical = sluice::s3::canonical_query(query, drop);
    check(is_encoded(canonical, "=&"));
    check(sluice::s3::canonical_query(canonical, drop) == canonical);
    // Dropped by name: a parameter whose name only ends in X-Amz-Signature stays.
    if (drop)
      check(!canonical.starts_with("X-Amz-Signature=") && canonical.find("&X-Amz-Signature=") == std::string::npos);
  }

  for (const bool slash : {false, true}) {
    const std::string encoded = sluice::s3::uri_encode(target, slash);
    check(is_encoded(encoded, slash ? "" : "/"));
    check(sluice::s3::percent_decode(encoded) == std::string(target));
  }
  (void)sluice::s3::percent_decode(target);
}

void fuzz_parse(const sluice::s3::request_view& view) {
  sluice::error_code ec;
  const auto auth = sluice::s3::parse_authorization(view, ec);
  if (ec) {
    check(ec == errc::access_denied || ec == errc::invalid_request || ec == errc::invalid_argument ||
          ec == errc::authorization_header_malformed || ec == errc::authorization_query_parameters_error);
    check(auth.signature.empty());
  } else {
    check(auth.signature.size() == 64);
    check(!auth.signed_headers.empty());
    check(!auth.access_key_id.empty() && !auth.region.empty() && !auth.service.empty());
    check(sluice::s3::parse_amz_date(auth.amz_date).has_value());
    check(auth.amz_date.starts_with(auth.date));
    check(!auth.payload_hash.empty());
    check(auth.presigned ? (auth.expires >= 1 && auth.expires <= sluice::s3::max_presigned_expiry) : auth.expires == 0);
    (void)sluice::s3::canonical_request(view, auth.signed_headers, auth.payload_hash, auth.presigned);
  }

  const auto result = sluice::s3::verify(view, fuzz_secret, fixed_now, "us-east-1", ec);
  if (ec) {
    check(ec == errc::access_denied || ec == errc::invalid_request || ec == errc::invalid_argument ||
          ec == errc::authorization_header_malformed || ec == errc::authorization_query_parameters_error ||
          ec == errc::request_time_too_skewed || ec == errc::invalid_access_key_id ||
          ec == errc::signature_does_not_match);
  } else {
    check(result.access_key_id == fuzz_creds.access_key_id);
    check(result.seed_signature.size() == 64);
  }
}

// Whether a query could carry presigned parameters (which make a header-signed request
// ambiguous); '%' because an escape may spell them.
bool may_hold_query_auth(std::string_view target) {
  const auto q = target.find('?');
  if (q == std::string_view::npos) return false;
  const auto query = target.substr(q);
  return query.find('%') != std::string_view::npos || query.find("X-Amz-") != std::string_view::npos;
}

void fuzz_sign(std::string_view method, std::string_view target,
               const std::vector<std::pair<std::string, std::string>>& input_headers) {
  if (method.empty() || may_hold_query_auth(target)) return;
  std::vector<std::pair<std::string, std::string>> headers = input_headers;
  headers.emplace_back("Host", "example.com");
  try {
    sluice::s3::sign(method, target, headers, sluice::s3::unsigned_payload, fuzz_creds, "us-east-1", fixed_now);
  } catch (const std::invalid_argument&) {
    return;  // a header name that is not a token
  }
  sluice::s3::request_view view{method, target, {}};
  for (const auto& [name, value] : headers) view.headers.emplace_back(name, value);
  sluice::error_code ec;
  (void)sluice::s3::verify(view, fuzz_secret, fixed_now, "us-east-1", ec);
  check(!ec);
  const std::string other_method = std::string(method) + "X";
  view.method = other_method;
  (void)sluice::s3::verify(view, fuzz_secret, fixed_now, "us-east-1", ec);
  check(ec == errc::signature_does_not_match);
}

void fuzz_presign(std::string_view method, std::string_view target, std::string_view host) {
  const auto q = target.find('?');
  const std::string_view path = target.substr(0, q);
  const std::string_view query = q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
  if (method.empty() || may_hold_query_auth(target) || path.find('#') != std::string_view::npos) return;
  const std::string signed_query =
      sluice::s3::presign(method, host, path, query, fuzz_creds, "us-east-1", fixed_now, std::chrono::seconds(60));
  const std::string url_target = std::string(path) + "?" + signed_query;
  const sluice::s3::request_view view{method, url_target, {{"host", host}}};
  sluice::error_code ec;
  (void)sluice::s3::verify(view, fuzz_secret, fixed_now + std::chrono::seconds(60), "us-east-1", ec);
  check(!ec);
  (void)sluice::s3::verify(view, fuzz_secret, fixed_now + std::chrono::seconds(61), "us-east-1", ec);
  check(ec == errc::access_denied);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // An owned copy of exactly `size` bytes, so that ASan catches a read past the end.
  const std::string bytes = size == 0 ? std::string() : std::string(data, data + size);
  std::string_view rest = bytes;
  const std::string_view request_line = next_line(rest);
  const auto space = request_line.find(' ');
  const std::string_view method = request_line.substr(0, space);
  const std::string_view target = space == std::string_view::npos ? std::string_view() : request_line.substr(space + 1);

  std::vector<std::pair<std::string, std::string>> headers;
  sluice::s3::request_view view{method, target, {}};
  std::string_view host = "example.com";
  while (!rest.empty()) {
    const std::string_view line = next_line(rest);
    const auto colon = line.find(':');
    const std::string_view name = line.substr(0, colon);
    const std::string_view value = colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
    view.headers.emplace_back(name, value);
    headers.emplace_back(name, value);
    if (name == "host") host = value;
  }

  fuzz_canonical(target);
  fuzz_parse(view);
  fuzz_sign(method, target, headers);
  fuzz_presign(method, target, host);
  return 0;
}
