// SPDX-License-Identifier: Apache-2.0
// Implementation of include/sluice/s3/sigv2.hpp; included by src/s3/s3.cpp after sigv4.ipp,
// whose helpers (sigv4_detail: trimming, percent-decoding, query splitting, dates) it shares.
#include <sluice/s3/checksum.hpp>
#include <sluice/s3/error.hpp>
#include <sluice/s3/sigv2.hpp>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <climits>
#include <stdexcept>
#include <system_error>

namespace sluice::s3 {

namespace {
namespace sigv2_detail {

using sigv4_detail::iequals;
using sigv4_detail::is_digit;

// The sub-resources of the canonical resource, sorted (binary search): S3's documented list, the
// response-* overrides, and every other name botocore's HmacV1Auth signs.
constexpr auto subresources = std::to_array<std::string_view>({
    "accelerate",
    "acl",
    "analytics",
    "cors",
    "defaultObjectAcl",
    "delete",
    "inventory",
    "lifecycle",
    "location",
    "logging",
    "metrics",
    "notification",
    "object-lock",
    "partNumber",
    "policy",
    "replication",
    "requestPayment",
    "response-cache-control",
    "response-content-disposition",
    "response-content-encoding",
    "response-content-language",
    "response-content-type",
    "response-expires",
    "restore",
    "select",
    "select-type",
    "storageClass",
    "tagging",
    "torrent",
    "uploadId",
    "uploads",
    "versionId",
    "versioning",
    "versions",
    "website",
});
static_assert(std::is_sorted(subresources.begin(), subresources.end()));

bool is_blank_or_break(char c) noexcept { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// A header value unfolded and trimmed: each line break, with the blanks around it, becomes one
// space; blanks inside a line are kept (botocore and MinIO keep them).
std::string unfold(std::string_view value) {
  while (!value.empty() && is_blank_or_break(value.front())) value.remove_prefix(1);
  while (!value.empty() && is_blank_or_break(value.back())) value.remove_suffix(1);
  std::string out;
  out.reserve(value.size());
  for (std::size_t i = 0; i < value.size(); ++i) {
    if (value[i] != '\r' && value[i] != '\n') {
      out.push_back(value[i]);
      continue;
    }
    while (!out.empty() && (out.back() == ' ' || out.back() == '\t')) out.pop_back();
    while (i + 1 < value.size() && is_blank_or_break(value[i + 1])) ++i;
    out.push_back(' ');
  }
  return out;
}

// The values of every header named `name`, unfolded and trimmed, joined with ','.
std::string joined_values(const request_view& request, std::string_view name) {
  std::string out;
  bool first = true;
  for (const auto& [n, v] : request.headers) {
    if (!iequals(n, name)) continue;
    if (!first) out.push_back(',');
    first = false;
    out += unfold(v);
  }
  return out;
}

bool has_header(const request_view& request, std::string_view name) {
  return std::any_of(request.headers.begin(), request.headers.end(),
                     [name](const auto& h) { return iequals(h.first, name); });
}

// A path-style target that names a bucket and nothing else ("/bucket"): S3 signs its resource
// as "/bucket/" (botocore signs that while it sends "/bucket").
bool is_bucket_only(std::string_view path, std::string_view virtual_host_bucket) noexcept {
  return virtual_host_bucket.empty() && path.size() > 1 && path.front() == '/' &&
         path.find('/', 1) == std::string_view::npos;
}

bool is_amz_header(std::string_view name) noexcept { return name.size() >= 6 && iequals(name.substr(0, 6), "x-amz-"); }

// The raw query's parameters, names decoded, in order, with whether the wire had an '=' and the
// value decoded (lenient: a '%' without two hex digits stays itself, '+' stays '+').
struct parameter {
  std::string name;
  std::string value;
  bool has_value = false;
};

std::vector<parameter> raw_parameters(std::string_view query) {
  std::vector<parameter> out;
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view part = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (part.empty()) continue;
    const auto eq = part.find('=');
    if (eq == std::string_view::npos) {
      out.push_back({sigv4_detail::lenient_decode(part), std::string(), false});
    } else {
      out.push_back(
          {sigv4_detail::lenient_decode(part.substr(0, eq)), sigv4_detail::lenient_decode(part.substr(eq + 1)), true});
    }
  }
  return out;
}

// --- HTTP dates -------------------------------------------------------------------------------

int month_of(std::string_view name) noexcept {
  static constexpr std::array<std::string_view, 12> months{"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                           "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  for (std::size_t i = 0; i < months.size(); ++i) {
    if (iequals(name, months[i])) return static_cast<int>(i) + 1;
  }
  return 0;
}

bool is_weekday(std::string_view name) noexcept {
  static constexpr std::array<std::string_view, 7> days{"Monday", "Tuesday",  "Wednesday", "Thursday",
                                                        "Friday", "Saturday", "Sunday"};
  return std::any_of(days.begin(), days.end(),
                     [name](std::string_view day) { return iequals(name, day) || iequals(name, day.substr(0, 3)); });
}

bool all_digits(std::string_view text) noexcept {
  return !text.empty() && std::all_of(text.begin(), text.end(), is_digit);
}

int number(std::string_view digits) noexcept {
  int n = 0;
  for (const char c : digits) n = n * 10 + (c - '0');
  return n;
}

// "HH:MM:SS" into its three numbers; false when it is not that.
bool parse_clock(std::string_view text, int& h, int& m, int& s) noexcept {
  if (text.size() != 8 || text[2] != ':' || text[5] != ':') return false;
  if (!all_digits(text.substr(0, 2)) || !all_digits(text.substr(3, 2)) || !all_digits(text.substr(6, 2))) {
    return false;
  }
  h = number(text.substr(0, 2));
  m = number(text.substr(3, 2));
  s = number(text.substr(6, 2));
  return true;
}

// A zone's offset east of UTC in seconds: GMT, UTC, UT, Z, or +HHMM / -HHMM.
std::optional<int> zone_offset(std::string_view zone) noexcept {
  if (iequals(zone, "GMT") || iequals(zone, "UTC") || iequals(zone, "UT") || iequals(zone, "Z")) return 0;
  if (zone.size() != 5 || (zone[0] != '+' && zone[0] != '-') || !all_digits(zone.substr(1))) return std::nullopt;
  const int hours = number(zone.substr(1, 2));
  const int minutes = number(zone.substr(3, 2));
  if (hours > 23 || minutes > 59) return std::nullopt;
  const int offset = hours * 3600 + minutes * 60;
  return zone[0] == '+' ? offset : -offset;
}

std::optional<std::chrono::sys_seconds> parse_http_date(std::string_view text) {
  text = sigv4_detail::trim(text);
  if (auto basic = sigv4_detail::parse_basic(text)) return basic;
  // Tokens split at blanks and commas; an RFC 850 date ("27-Mar-07") splits at its dashes.
  std::array<std::string_view, 8> tokens;
  std::size_t n = 0;
  const auto push = [&](std::string_view token) {
    if (n == tokens.size()) return false;
    tokens[n++] = token;
    return true;
  };
  while (!text.empty()) {
    const auto end = text.find_first_of(" \t,");
    const std::string_view token = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    if (token.empty()) continue;
    const auto dash = token.find('-');
    const auto second_dash = dash == std::string_view::npos ? dash : token.find('-', dash + 1);
    if (dash != std::string_view::npos && dash > 0 && second_dash != std::string_view::npos &&
        token.find('-', second_dash + 1) == std::string_view::npos) {
      if (!push(token.substr(0, dash)) || !push(token.substr(dash + 1, second_dash - dash - 1)) ||
          !push(token.substr(second_dash + 1))) {
        return std::nullopt;
      }
    } else if (!push(token)) {
      return std::nullopt;
    }
  }
  std::size_t i = 0;
  if (n > 0 && is_weekday(tokens[0])) i = 1;
  int day = 0, month = 0, year = 0, h = 0, m = 0, s = 0, offset = 0;
  if (n - i == 5 && all_digits(tokens[i]) && tokens[i].size() <= 2) {
    // RFC 1123 "27 Mar 2007 19:36:42 GMT" or RFC 850 "27 Mar 07 19:36:42 GMT".
    day = number(tokens[i]);
    month = month_of(tokens[i + 1]);
    const std::string_view y = tokens[i + 2];
    if (!all_digits(y) || (y.size() != 4 && y.size() != 2)) return std::nullopt;
    year = number(y);
    if (y.size() == 2) year += year < 70 ? 2000 : 1900;
    if (!parse_clock(tokens[i + 3], h, m, s)) return std::nullopt;
    const auto zone = zone_offset(tokens[i + 4]);
    if (!zone) return std::nullopt;
    offset = *zone;
  } else if (n - i == 4 && month_of(tokens[i]) != 0) {
    // asctime "Mar 27 19:36:42 2007" (always GMT).
    month = month_of(tokens[i]);
    if (!all_digits(tokens[i + 1]) || tokens[i + 1].size() > 2 || !all_digits(tokens[i + 3]) ||
        tokens[i + 3].size() != 4) {
      return std::nullopt;
    }
    day = number(tokens[i + 1]);
    year = number(tokens[i + 3]);
    if (!parse_clock(tokens[i + 2], h, m, s)) return std::nullopt;
  } else {
    return std::nullopt;
  }
  if (month == 0) return std::nullopt;
  // A well-formed date outside the years make_time takes (1970..2200: "Fri, 31 Dec 9999 ...")
  // is a time far from now, which the caller answers with RequestTimeTooSkewed, not a malformed
  // one: it stands as the first or last second make_time knows.
  if (year < 1970 || year > 2200) {
    const std::chrono::year_month_day date{std::chrono::year{year}, std::chrono::month{static_cast<unsigned>(month)},
                                           std::chrono::day{static_cast<unsigned>(day)}};
    if (!date.ok() || h > 23 || m > 59 || s > 59) return std::nullopt;
    return year < 1970 ? sigv4_detail::make_time(1970, 1, 1, 0, 0, 0)
                       : sigv4_detail::make_time(2200, 12, 31, 23, 59, 59);
  }
  const auto time = sigv4_detail::make_time(year, month, day, h, m, s);
  if (!time) return std::nullopt;
  return *time - std::chrono::seconds(offset);
}

// --- HMAC-SHA1 --------------------------------------------------------------------------------

std::array<std::byte, 20> hmac_sha1(std::string_view key, std::string_view data) {
  std::array<std::byte, 20> out{};
  unsigned int length = 0;
  // An empty buffer may have a null data(); HMAC() wants a valid pointer even for length 0.
  static constexpr unsigned char empty = 0;
  const auto* key_bytes = key.empty() ? &empty : reinterpret_cast<const unsigned char*>(key.data());
  const auto* data_bytes = data.empty() ? &empty : reinterpret_cast<const unsigned char*>(data.data());
  if (key.size() > static_cast<std::size_t>(INT_MAX) ||
      HMAC(EVP_sha1(), key_bytes, static_cast<int>(key.size()), data_bytes, data.size(),
           reinterpret_cast<unsigned char*>(out.data()), &length) == nullptr ||
      length != out.size()) {
    throw std::system_error(make_error_code(errc::internal_error), "HMAC-SHA1");
  }
  return out;
}

// --- Claims -----------------------------------------------------------------------------------

// An Authorization value of the SigV2 scheme: "AWS" and a blank.
bool is_v2_header(std::string_view value) noexcept {
  value = sigv4_detail::trim(value);
  return value.size() > 3 && value.substr(0, 3) == "AWS" && sigv4_detail::is_blank(value[3]);
}

bool is_v2_parameter(std::string_view name) noexcept { return name == "AWSAccessKeyId" || name == "Signature"; }

bool is_v4_parameter(std::string_view name) noexcept {
  return name == "X-Amz-Algorithm" || name == "X-Amz-Credential" || name == "X-Amz-Signature";
}

void fail(error_code& ec, std::string* message, errc e, std::string_view why) {
  ec = make_error_code(e);
  if (message != nullptr) *message = why;
}

}  // namespace sigv2_detail
}  // namespace

namespace sigv2 {

bool is_subresource(std::string_view name) noexcept {
  return std::binary_search(sigv2_detail::subresources.begin(), sigv2_detail::subresources.end(), name);
}

std::string canonical_resource(std::string_view target, std::string_view virtual_host_bucket) {
  const auto [path, query] = sigv4_detail::split_target(target);
  std::string out;
  if (!virtual_host_bucket.empty()) out.append("/").append(virtual_host_bucket);
  out.append(path.empty() ? std::string_view("/") : path);
  if (sigv2_detail::is_bucket_only(path, virtual_host_bucket)) out.push_back('/');
  auto params = sigv2_detail::raw_parameters(query);
  std::erase_if(params, [](const auto& p) { return !is_subresource(p.name); });
  std::stable_sort(params.begin(), params.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  char separator = '?';
  for (const auto& p : params) {
    out.push_back(separator);
    separator = '&';
    out.append(p.name);
    if (p.has_value) out.append("=").append(p.value);
  }
  return out;
}

std::string canonical_amz_headers(const request_view& request) {
  std::vector<std::pair<std::string, std::string>> headers;  // lower-case name, unfolded value
  for (const auto& [name, value] : request.headers) {
    if (sigv2_detail::is_amz_header(name)) headers.emplace_back(sigv4_detail::lower(name), sigv2_detail::unfold(value));
  }
  // Stable: the values of one name stay in arrival order.
  std::stable_sort(headers.begin(), headers.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string out;
  for (std::size_t i = 0; i < headers.size(); ++i) {
    if (i > 0 && headers[i].first == headers[i - 1].first) {
      out.back() = ',';  // the previous value's newline
    } else {
      out.append(headers[i].first).append(":");
    }
    out.append(headers[i].second).append("\n");
  }
  return out;
}

std::string string_to_sign(const request_view& request, std::string_view virtual_host_bucket,
                           std::optional<std::string_view> expires) {
  std::string out;
  out.append(request.method).append("\n");
  out.append(sigv2_detail::joined_values(request, "content-md5")).append("\n");
  out.append(sigv2_detail::joined_values(request, "content-type")).append("\n");
  if (expires) {
    out.append(*expires);
  } else if (!sigv2_detail::has_header(request, "x-amz-date")) {
    out.append(sigv2_detail::joined_values(request, "date"));
  }
  out.append("\n");
  out.append(canonical_amz_headers(request));
  out.append(canonical_resource(request.target, virtual_host_bucket));
  return out;
}

std::string signature(std::string_view secret, std::string_view string_to_sign) {
  return base64_encode(sigv2_detail::hmac_sha1(secret, string_to_sign));
}

std::optional<std::chrono::system_clock::time_point> parse_http_date(std::string_view text) {
  const auto time = sigv2_detail::parse_http_date(text);
  if (!time) return std::nullopt;
  return std::chrono::system_clock::time_point{*time};
}

bool claims(const request_view& request) {
  for (const auto& [name, value] : request.headers) {
    if (sigv2_detail::iequals(name, "authorization") && sigv2_detail::is_v2_header(value)) return true;
  }
  thread_local sigv4_detail::query_params params;  // every request asks: nothing allocated per call
  params.parse(sigv4_detail::split_target(request.target).second);
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (sigv2_detail::is_v2_parameter(params.name(i))) return true;
  }
  return false;
}

authorization parse_authorization(const request_view& request, error_code& ec) {
  ec.clear();
  const auto headers = sigv4_detail::header_values(request, "authorization");
  sigv4_detail::query_params params;
  params.parse(sigv4_detail::split_target(request.target).second);
  bool v2_query = false, v4_query = false;
  for (std::size_t i = 0; i < params.size(); ++i) {
    v2_query = v2_query || sigv2_detail::is_v2_parameter(params.name(i));
    v4_query = v4_query || sigv2_detail::is_v4_parameter(params.name(i));
  }
  if (headers.size() > 1 || (!headers.empty() && (v2_query || v4_query)) || (v2_query && v4_query)) {
    ec = make_error_code(errc::invalid_argument);  // S3: "Only one auth mechanism allowed"
    return {};
  }
  authorization out;
  if (headers.size() == 1) {
    std::string_view value = sigv4_detail::trim(headers.front());
    if (!sigv2_detail::is_v2_header(value)) {
      ec = make_error_code(errc::access_denied);  // another scheme: no SigV2 claim
      return {};
    }
    value = sigv4_detail::trim(value.substr(3));
    const auto colon = value.rfind(':');
    if (colon == std::string_view::npos || colon == 0 || colon + 1 == value.size()) {
      ec = make_error_code(errc::authorization_header_malformed);
      return {};
    }
    out.access_key_id = value.substr(0, colon);
    out.signature = value.substr(colon + 1);
    return out;
  }
  if (!v2_query) {
    ec = make_error_code(errc::access_denied);
    return {};
  }
  // Each of the three exactly once and not empty.
  const auto one = [&](std::string_view name) -> std::optional<std::string_view> {
    std::optional<std::string_view> found;
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (params.name(i) != name) continue;
      if (found) return std::nullopt;
      found = params.value(i);
    }
    if (found && found->empty()) return std::nullopt;
    return found;
  };
  const auto key = one("AWSAccessKeyId");
  const auto sig = one("Signature");
  const auto expires = one("Expires");
  std::uint64_t expires_at = 0;
  const bool ok = key && sig && expires && expires->size() <= 19 &&
                  std::all_of(expires->begin(), expires->end(), sigv2_detail::is_digit) &&
                  std::from_chars(expires->data(), expires->data() + expires->size(), expires_at).ec == std::errc{};
  if (!ok) {
    ec = make_error_code(errc::authorization_query_parameters_error);
    return {};
  }
  out.access_key_id = *key;
  out.signature = *sig;
  out.presigned = true;
  out.expires = *expires;
  out.expires_at = expires_at;
  return out;
}

verified verify(const request_view& request, std::string_view virtual_host_bucket, const secret_lookup& secret_for,
                std::chrono::system_clock::time_point now, error_code& ec, std::string* message) {
  using sigv2_detail::fail;
  authorization auth = sigv2::parse_authorization(request, ec);
  if (ec) {
    if (message != nullptr) {
      if (ec == errc::invalid_argument) {
        *message =
            "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, Signature query "
            "string parameter or the Authorization header should be specified.";
      } else if (ec == errc::authorization_header_malformed) {
        *message = "AWS authorization header is invalid. Expected AwsAccessKeyId:signature";
      } else if (ec == errc::authorization_query_parameters_error) {
        *message = "Query-string authentication requires the Signature, Expires and AWSAccessKeyId parameters";
      } else {
        *message = "Access Denied";
      }
    }
    return {};
  }
  if (auth.presigned) {
    const auto now_s = std::chrono::floor<std::chrono::seconds>(now).time_since_epoch().count();
    if (now_s < 0 || static_cast<std::uint64_t>(now_s) > auth.expires_at) {
      fail(ec, message, errc::access_denied, "Request has expired");
      return {};
    }
  } else {
    const auto amz_dates = sigv4_detail::header_values(request, "x-amz-date");
    const auto dates = amz_dates.empty() ? sigv4_detail::header_values(request, "date") : amz_dates;
    const auto time = dates.size() == 1 ? parse_http_date(dates.front()) : std::nullopt;
    if (!time) {
      fail(ec, message, errc::access_denied, "AWS authentication requires a valid Date or x-amz-date header");
      return {};
    }
    if (now - *time > max_clock_skew || *time - now > max_clock_skew) {
      fail(ec, message, errc::request_time_too_skewed,
           "The difference between the request time and the current time is too large.");
      return {};
    }
  }
  const auto hashes = sigv4_detail::header_values(request, "x-amz-content-sha256");
  if (std::any_of(hashes.begin(), hashes.end(),
                  [](std::string_view h) { return sigv4_detail::trim(h).starts_with("STREAMING-"); })) {
    fail(ec, message, errc::invalid_request,
         "aws-chunked (STREAMING-*) payloads need AWS Signature Version 4; SigV2 does not sign the payload.");
    return {};
  }
  const auto secret = secret_for ? secret_for(auth.access_key_id) : std::nullopt;
  if (!secret) {
    fail(ec, message, errc::invalid_access_key_id, "The AWS Access Key Id you provided does not exist in our records.");
    return {};
  }
  const std::optional<std::string_view> expires =
      auth.presigned ? std::optional<std::string_view>(auth.expires) : std::nullopt;
  std::string to_sign = sigv2::string_to_sign(request, virtual_host_bucket, expires);
  bool match = constant_time_equal(signature(*secret, to_sign), auth.signature);
  const std::string_view path = sigv4_detail::split_target(request.target).first;
  if (!match && sigv2_detail::is_bucket_only(path, virtual_host_bucket)) {
    // Also the resource as the documentation's rule reads, the path exactly as sent ("/bucket").
    const std::size_t slash =
        to_sign.size() - canonical_resource(request.target, virtual_host_bucket).size() + path.size();
    to_sign.erase(slash, 1);
    match = constant_time_equal(signature(*secret, to_sign), auth.signature);
  }
  if (!match) {
    fail(ec, message, errc::signature_does_not_match,
         "The request signature we calculated does not match the signature you provided. Check your key and "
         "signing method.");
    return {};
  }
  verified out;
  out.access_key_id = std::move(auth.access_key_id);
  out.payload_hash = unsigned_payload;
  out.seed_signature = std::move(auth.signature);
  for (const auto& [name, value] : request.headers) {
    std::string lname = sigv4_detail::lower(name);
    if (sigv2_detail::is_amz_header(lname) || lname == "content-md5" || lname == "content-type") {
      out.signed_headers.push_back(std::move(lname));
    }
  }
  std::sort(out.signed_headers.begin(), out.signed_headers.end());
  out.signed_headers.erase(std::unique(out.signed_headers.begin(), out.signed_headers.end()), out.signed_headers.end());
  return out;
}

void sign(std::string_view method, std::string_view target, std::vector<std::pair<std::string, std::string>>& headers,
          std::string_view virtual_host_bucket, const credentials& creds, std::chrono::system_clock::time_point now) {
  for (const auto& [name, value] : headers) {
    if (!sigv4_detail::is_token(name)) throw std::invalid_argument("sigv2::sign: header name is not an HTTP token");
  }
  std::erase_if(headers, [](const auto& h) {
    return sigv2_detail::iequals(h.first, "date") || sigv2_detail::iequals(h.first, "authorization");
  });
  // RFC 1123 in GMT: "Tue, 27 Mar 2007 19:36:42 GMT".
  static constexpr std::array<std::string_view, 7> days{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static constexpr std::array<std::string_view, 12> months{"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                           "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  const std::string basic = format_amz_date(now);  // 20070327T193642Z
  const auto day = std::chrono::floor<std::chrono::days>(now);
  const std::chrono::year_month_day ymd{day};
  std::string date;
  date.append(days[std::chrono::weekday{day}.c_encoding()]).append(", ");
  date.append(basic, 6, 2).append(" ");
  date.append(months[static_cast<unsigned>(ymd.month()) - 1]).append(" ");
  date.append(basic, 0, 4).append(" ");
  date.append(basic, 9, 2).append(":").append(basic, 11, 2).append(":").append(basic, 13, 2).append(" GMT");
  headers.emplace_back("Date", std::move(date));

  request_view view{method, target, {}};
  for (const auto& [name, value] : headers) view.headers.emplace_back(name, value);
  const std::string sig =
      signature(creds.secret_access_key, sigv2::string_to_sign(view, virtual_host_bucket, std::nullopt));
  headers.emplace_back("Authorization", "AWS " + creds.access_key_id + ":" + sig);
}

std::string presign(std::string_view method, std::string_view path, std::string_view extra_query,
                    std::string_view virtual_host_bucket, const credentials& creds,
                    std::chrono::system_clock::time_point expires_at) {
  const std::string expires =
      std::to_string(std::chrono::floor<std::chrono::seconds>(expires_at).time_since_epoch().count());
  std::string target(path);
  if (!extra_query.empty()) target.append("?").append(extra_query);
  const request_view view{method, target, {}};
  const std::string sig = signature(creds.secret_access_key, sigv2::string_to_sign(view, virtual_host_bucket, expires));
  std::string query(extra_query);
  if (!query.empty()) query.push_back('&');
  query.append("AWSAccessKeyId=").append(uri_encode(creds.access_key_id, true));
  query.append("&Expires=").append(expires);
  query.append("&Signature=").append(uri_encode(sig, true));
  return query;
}

}  // namespace sigv2
}  // namespace sluice::s3
