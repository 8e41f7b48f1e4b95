// SPDX-License-Identifier: Apache-2.0
// Implementation of include/sluice/s3/sigv4.hpp; included by src/s3/s3.cpp.
#include <sluice/s3/checksum.hpp>
#include <sluice/s3/error.hpp>
#include <sluice/s3/sigv4.hpp>

#include "common/text.hpp"

#include <algorithm>
#include <stdexcept>

namespace sluice::s3 {

namespace {
namespace sigv4_detail {

constexpr std::string_view algorithm = "AWS4-HMAC-SHA256";
constexpr std::string_view scope_terminator = "aws4_request";

using ::sluice::detail::hex_value;
using ::sluice::detail::iequals;
constexpr auto to_lower = ::sluice::detail::to_lower_ascii;

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), to_lower);
  return out;
}

bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }

bool is_unreserved(char c) noexcept {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || is_digit(c) || c == '-' || c == '_' || c == '.' ||
         c == '~';
}

bool is_hex(std::string_view text) noexcept {
  return std::all_of(text.begin(), text.end(), [](char c) { return hex_value(c) >= 0; });
}

// An HTTP token (RFC 9110 tchar+): what a header name may be.
bool is_token(std::string_view text) noexcept {
  if (text.empty()) return false;
  return std::all_of(text.begin(), text.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || is_digit(c) ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
  });
}

bool is_blank(char c) noexcept { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view text) noexcept {
  while (!text.empty() && is_blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_blank(text.back())) text.remove_suffix(1);
  return text;
}

// A header value in canonical form: trimmed, each run of blanks inside it one space.
void append_canonical_value(std::string& out, std::string_view value) {
  value = trim(value);
  bool in_blank = false;
  for (const char c : value) {
    if (is_blank(c)) {
      in_blank = true;
      continue;
    }
    if (in_blank) out.push_back(' ');
    in_blank = false;
    out.push_back(c);
  }
}

// Appends `text` percent-decoded, taking a '%' without two hex digits after it literally.
void append_lenient_decoded(std::string& out, std::string_view text) {
  // Runs without '%' go in whole: a presigned URL's query is mostly such runs.
  out.reserve(out.size() + text.size());
  while (!text.empty()) {
    const auto percent = text.find('%');
    out.append(text.substr(0, percent));
    if (percent == std::string_view::npos) return;
    text.remove_prefix(percent);
    if (text.size() > 2) {
      const int hi = hex_value(text[1]);
      const int lo = hex_value(text[2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        text.remove_prefix(3);
        continue;
      }
    }
    out.push_back('%');
    text.remove_prefix(1);
  }
}

std::string lenient_decode(std::string_view text) {
  std::string out;
  append_lenient_decoded(out, text);
  return out;
}

// Appends `text` with every byte but the unreserved ones (and '/' unless `encode_slash`) as %XX.
void append_uri_encoded(std::string& out, std::string_view text, bool encode_slash) {
  static constexpr std::string_view digits = "0123456789ABCDEF";
  out.reserve(out.size() + text.size());
  const auto kept = [encode_slash](char c) { return is_unreserved(c) || (c == '/' && !encode_slash); };
  while (!text.empty()) {  // runs of kept bytes go in whole
    std::size_t run = 0;
    while (run < text.size() && kept(text[run])) ++run;
    out.append(text.substr(0, run));
    if (run == text.size()) return;
    const auto b = static_cast<unsigned char>(text[run]);
    const char escaped[3] = {'%', digits[b >> 4], digits[b & 0xFu]};
    out.append(escaped, 3);
    text.remove_prefix(run + 1);
  }
}

std::pair<std::string_view, std::string_view> split_target(std::string_view target) noexcept {
  const auto q = target.find('?');
  if (q == std::string_view::npos) return {target, {}};
  return {target.substr(0, q), target.substr(q + 1)};
}

// The decoded (name, value) pairs of a raw query, in order; empty parameters dropped. The text
// lives in one buffer that the next parse() reuses: a thread that keeps one of these (verify()
// does) allocates only while its queries grow.
class query_params {
 public:
  void parse(std::string_view query) {
    text_.clear();
    items_.clear();
    while (!query.empty()) {
      const auto amp = query.find('&');
      const std::string_view part = query.substr(0, amp);
      query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
      if (part.empty()) continue;
      const auto eq = part.find('=');
      item it{};
      it.name = text_.size();
      append_lenient_decoded(text_, part.substr(0, eq));
      it.value = text_.size();
      if (eq != std::string_view::npos) append_lenient_decoded(text_, part.substr(eq + 1));
      it.end = text_.size();
      items_.push_back(it);
    }
  }
  [[nodiscard]] std::size_t size() const noexcept { return items_.size(); }
  [[nodiscard]] std::string_view name(std::size_t i) const noexcept {
    return std::string_view(text_).substr(items_[i].name, items_[i].value - items_[i].name);
  }
  [[nodiscard]] std::string_view value(std::size_t i) const noexcept {
    return std::string_view(text_).substr(items_[i].value, items_[i].end - items_[i].value);
  }

 private:
  struct item {
    std::size_t name, value, end;  // offsets into text_: name at [name, value), value at [value, end)
  };
  std::string text_;
  std::vector<item> items_;
};

// The values of every header named `name` (case-insensitively), in arrival order.
std::vector<std::string_view> header_values(const request_view& request, std::string_view name) {
  std::vector<std::string_view> out;
  for (const auto& [n, v] : request.headers) {
    if (iequals(n, name)) out.push_back(v);
  }
  return out;
}

// Two decimal digits at text[at].
int two_digits(std::string_view text, std::size_t at) noexcept {
  if (!is_digit(text[at]) || !is_digit(text[at + 1])) return -1;
  return (text[at] - '0') * 10 + (text[at + 1] - '0');
}

std::optional<std::chrono::sys_seconds> make_time(int year, int month, int day, int hour, int minute, int second) {
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour < 0 || hour > 23 || minute < 0 || minute > 59 ||
      second < 0 || second > 59) {
    return std::nullopt;
  }
  // system_clock counts nanoseconds in 64 bits: 1677..2262. Dates outside 1970..2200 are refused
  // here so that no caller's conversion can overflow (found by fuzz/sigv4.cpp).
  if (year < 1970 || year > 2200) return std::nullopt;
  const std::chrono::year_month_day ymd{std::chrono::year{year}, std::chrono::month{static_cast<unsigned>(month)},
                                        std::chrono::day{static_cast<unsigned>(day)}};
  if (!ymd.ok()) return std::nullopt;
  return std::chrono::sys_days{ymd} + std::chrono::hours{hour} + std::chrono::minutes{minute} +
         std::chrono::seconds{second};
}

std::optional<std::chrono::sys_seconds> parse_basic(std::string_view text) {
  if (text.size() != 16 || text[8] != 'T' || text[15] != 'Z') return std::nullopt;
  const int c = two_digits(text, 0), y = two_digits(text, 2), mo = two_digits(text, 4), d = two_digits(text, 6);
  const int h = two_digits(text, 9), mi = two_digits(text, 11), s = two_digits(text, 13);
  if (c < 0 || y < 0 || mo < 0 || d < 0 || h < 0 || mi < 0 || s < 0) return std::nullopt;
  return make_time(c * 100 + y, mo, d, h, mi, s);
}

// IMF-fixdate (RFC 9110): "Fri, 24 May 2013 00:00:00 GMT".
std::optional<std::chrono::sys_seconds> parse_imf_fixdate(std::string_view text) {
  if (text.size() != 29 || text.substr(3, 2) != ", " || text[7] != ' ' || text[11] != ' ' || text[16] != ' ' ||
      text[19] != ':' || text[22] != ':' || text.substr(25) != " GMT") {
    return std::nullopt;
  }
  constexpr std::string_view days = "MonTueWedThuFriSatSun";
  const auto day_name = days.find(text.substr(0, 3));
  if (day_name == std::string_view::npos || day_name % 3 != 0) return std::nullopt;
  constexpr std::string_view months = "JanFebMarAprMayJunJulAugSepOctNovDec";
  const auto month = months.find(text.substr(8, 3));
  if (month == std::string_view::npos || month % 3 != 0) return std::nullopt;
  const int d = two_digits(text, 5), c = two_digits(text, 12), y = two_digits(text, 14);
  const int h = two_digits(text, 17), mi = two_digits(text, 20), s = two_digits(text, 23);
  if (d < 0 || c < 0 || y < 0 || h < 0 || mi < 0 || s < 0) return std::nullopt;
  const auto time = make_time(c * 100 + y, static_cast<int>(month / 3) + 1, d, h, mi, s);
  if (!time) return std::nullopt;
  // The weekday must agree with the date (sys_days 0, 1970-01-01, was a Thursday).
  const std::chrono::weekday weekday{std::chrono::floor<std::chrono::days>(*time)};
  if (weekday.iso_encoding() != day_name / 3 + 1) return std::nullopt;
  return time;
}

// Where verify() wants the reason for a failure said (its `why`), for the duration of the call;
// null otherwise. One verify() runs on one thread from start to end.
thread_local std::string* failure_reason = nullptr;

void fail(error_code& ec, errc e, std::string_view why = {}) {
  ec = make_error_code(e);
  if (failure_reason != nullptr && !why.empty()) failure_reason->assign(why);
}

bool contains(const std::vector<std::string>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Headers sign() leaves unsigned: hop-by-hop or rewritten by proxies and SDK layers.
bool unsigned_by_default(std::string_view lower_name) noexcept {
  static constexpr std::array<std::string_view, 6> names{"authorization", "user-agent",        "expect",
                                                         "connection",    "transfer-encoding", "x-amzn-trace-id"};
  return std::find(names.begin(), names.end(), lower_name) != names.end();
}

std::string make_scope(std::string_view date, std::string_view region) {
  std::string out;
  out.append(date).append("/").append(region).append("/s3/").append(scope_terminator);
  return out;
}

}  // namespace sigv4_detail
}  // namespace

std::string uri_encode(std::string_view text, bool encode_slash) {
  std::string out;
  out.reserve(text.size());
  sigv4_detail::append_uri_encoded(out, text, encode_slash);
  return out;
}

bool append_percent_decoded(std::string& out, std::string_view text) {
  out.reserve(out.size() + text.size());
  while (!text.empty()) {  // runs without '%' go in whole
    const auto percent = text.find('%');
    out.append(text.substr(0, percent));
    if (percent == std::string_view::npos) return true;
    text.remove_prefix(percent);
    if (text.size() < 3) return false;
    const int hi = sigv4_detail::hex_value(text[1]);
    const int lo = sigv4_detail::hex_value(text[2]);
    if (hi < 0 || lo < 0) return false;
    out.push_back(static_cast<char>(hi * 16 + lo));
    text.remove_prefix(3);
  }
  return true;
}

std::optional<std::string> percent_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  if (!append_percent_decoded(out, text)) return std::nullopt;
  return out;
}

namespace {
namespace sigv4_detail {

// The canonical forms appended to `out`. Their scratch is the calling thread's, reused by every
// call: a server verifying requests allocates here only while requests grow.
void append_canonical_uri(std::string& out, std::string_view raw_path) {
  if (raw_path.empty()) {
    out.push_back('/');
    return;
  }
  thread_local std::string decoded;
  decoded.clear();
  append_lenient_decoded(decoded, raw_path);
  append_uri_encoded(out, decoded, false);
}

void append_canonical_query(std::string& out, std::string_view raw_query, bool drop_signature) {
  thread_local query_params params;
  thread_local std::string encoded;
  thread_local std::vector<std::array<std::size_t, 3>> pairs;  // name at [0], value at [1], end [2]
  params.parse(raw_query);
  encoded.clear();
  pairs.clear();
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (drop_signature && params.name(i) == "X-Amz-Signature") continue;
    const std::size_t name = encoded.size();
    append_uri_encoded(encoded, params.name(i), true);
    const std::size_t value = encoded.size();
    append_uri_encoded(encoded, params.value(i), true);
    pairs.push_back({name, value, encoded.size()});
  }
  const std::string_view text(encoded);
  const auto name_of = [&](const auto& p) { return text.substr(p[0], p[1] - p[0]); };
  const auto value_of = [&](const auto& p) { return text.substr(p[1], p[2] - p[1]); };
  std::sort(pairs.begin(), pairs.end(), [&](const auto& x, const auto& y) {
    const int by_name = name_of(x).compare(name_of(y));
    return by_name != 0 ? by_name < 0 : value_of(x) < value_of(y);
  });
  bool first = true;
  for (const auto& p : pairs) {
    if (!first) out.push_back('&');
    first = false;
    out.append(name_of(p)).append("=").append(value_of(p));
  }
}

void append_canonical_request(std::string& out, const request_view& request,
                              std::span<const std::string> signed_headers, std::string_view payload_hash,
                              bool presigned) {
  const auto [path, query] = split_target(request.target);
  out.append(request.method).append("\n");
  append_canonical_uri(out, path);
  out.append("\n");
  append_canonical_query(out, query, presigned);
  out.append("\n");
  const auto append_lower = [&](std::string_view name) {
    for (const char c : name) out.push_back(to_lower(c));
  };
  for (const auto& name : signed_headers) {
    append_lower(name);
    out.push_back(':');
    bool first = true;
    for (const auto& [n, v] : request.headers) {
      if (!iequals(n, name)) continue;
      if (!first) out.push_back(',');
      first = false;
      append_canonical_value(out, v);
    }
    out.append("\n");
  }
  out.append("\n");
  bool first = true;
  for (const auto& name : signed_headers) {
    if (!first) out.push_back(';');
    first = false;
    append_lower(name);
  }
  out.append("\n").append(payload_hash);
}

void append_string_to_sign(std::string& out, std::string_view amz_date, std::string_view scope,
                           std::string_view canonical_request) {
  out.append(algorithm).append("\n");
  out.append(amz_date).append("\n");
  out.append(scope).append("\n");
  append_hex(out, sha256(std::as_bytes(std::span(canonical_request.data(), canonical_request.size()))));
}

}  // namespace sigv4_detail
}  // namespace

std::string canonical_uri(std::string_view raw_path) {
  std::string out;
  sigv4_detail::append_canonical_uri(out, raw_path);
  return out;
}

std::string canonical_query(std::string_view raw_query, bool drop_signature) {
  std::string out;
  sigv4_detail::append_canonical_query(out, raw_query, drop_signature);
  return out;
}

std::string canonical_request(const request_view& request, std::span<const std::string> signed_headers,
                              std::string_view payload_hash, bool presigned) {
  std::string out;
  sigv4_detail::append_canonical_request(out, request, signed_headers, payload_hash, presigned);
  return out;
}

std::string string_to_sign(std::string_view amz_date, std::string_view scope, std::string_view canonical_request) {
  std::string out;
  sigv4_detail::append_string_to_sign(out, amz_date, scope, canonical_request);
  return out;
}

std::array<std::byte, 32> signing_key(std::string_view secret, std::string_view date, std::string_view region,
                                      std::string_view service) {
  // A server verifies many requests of few users a day: each thread keeps the last few keys it
  // derived (four HMACs each), shared with no other thread. The secret is part of the match, so
  // a user whose secret changed never meets the old key; a client that varies its scope only
  // turns the table over.
  struct derived {
    std::string secret, date, region, service;
    std::array<std::byte, 32> key{};
  };
  thread_local std::array<derived, 8> recent;
  thread_local std::size_t next = 0;
  for (const auto& d : recent) {
    if (!d.date.empty() && d.date == date && d.region == region && d.service == service && d.secret == secret) {
      return d.key;
    }
  }
  const std::string initial = "AWS4" + std::string(secret);
  auto key = hmac_sha256(std::as_bytes(std::span(initial.data(), initial.size())), date);
  key = hmac_sha256(key, region);
  key = hmac_sha256(key, service);
  key = hmac_sha256(key, sigv4_detail::scope_terminator);
  if (!date.empty()) {
    recent[next++ % recent.size()] = {std::string(secret), std::string(date), std::string(region), std::string(service),
                                      key};
  }
  return key;
}

std::string signature(const std::array<std::byte, 32>& key, std::string_view string_to_sign) {
  return to_hex(hmac_sha256(key, string_to_sign));
}

std::string format_amz_date(std::chrono::system_clock::time_point time) {
  const auto seconds = std::chrono::floor<std::chrono::seconds>(time);
  const auto days = std::chrono::floor<std::chrono::days>(seconds);
  const std::chrono::year_month_day ymd{days};
  const std::chrono::hh_mm_ss hms{seconds - days};
  const auto put = [](std::string& out, long value, int width) {
    std::string digits(static_cast<std::size_t>(width), '0');
    for (int i = width - 1; i >= 0 && value > 0; --i, value /= 10) {
      digits[static_cast<std::size_t>(i)] = static_cast<char>('0' + value % 10);
    }
    out += digits;
  };
  std::string out;
  out.reserve(16);
  put(out, static_cast<int>(ymd.year()), 4);
  put(out, static_cast<unsigned>(ymd.month()), 2);
  put(out, static_cast<unsigned>(ymd.day()), 2);
  out.push_back('T');
  put(out, hms.hours().count(), 2);
  put(out, hms.minutes().count(), 2);
  put(out, static_cast<long>(hms.seconds().count()), 2);
  out.push_back('Z');
  return out;
}

std::optional<std::chrono::system_clock::time_point> parse_amz_date(std::string_view text) {
  const auto time = sigv4_detail::parse_basic(text);
  if (!time) return std::nullopt;
  return std::chrono::system_clock::time_point{*time};
}

void sign(std::string_view method, std::string_view target, std::vector<std::pair<std::string, std::string>>& headers,
          std::string_view payload_hash, const credentials& creds, std::string_view region,
          std::chrono::system_clock::time_point now) {
  bool have_host = false;
  for (const auto& [name, value] : headers) {
    if (!sigv4_detail::is_token(name)) throw std::invalid_argument("sign: header name is not an HTTP token");
    have_host = have_host || sigv4_detail::iequals(name, "host");
  }
  if (!have_host) throw std::invalid_argument("sign: no host header");
  std::erase_if(headers, [](const auto& h) {
    return sigv4_detail::iequals(h.first, "x-amz-date") || sigv4_detail::iequals(h.first, "x-amz-content-sha256") ||
           sigv4_detail::iequals(h.first, "authorization");
  });
  const std::string amz_date = format_amz_date(now);
  const std::string date = amz_date.substr(0, 8);
  headers.emplace_back("x-amz-date", amz_date);
  headers.emplace_back("x-amz-content-sha256", std::string(payload_hash));

  std::vector<std::string> signed_headers;
  request_view view{method, target, {}};
  for (const auto& [name, value] : headers) {
    view.headers.emplace_back(name, value);
    std::string lname = sigv4_detail::lower(name);
    if (!sigv4_detail::unsigned_by_default(lname)) signed_headers.push_back(std::move(lname));
  }
  std::sort(signed_headers.begin(), signed_headers.end());
  signed_headers.erase(std::unique(signed_headers.begin(), signed_headers.end()), signed_headers.end());

  const std::string scope = sigv4_detail::make_scope(date, region);
  const auto key = signing_key(creds.secret_access_key, date, region, "s3");
  const std::string sig =
      signature(key, string_to_sign(amz_date, scope, canonical_request(view, signed_headers, payload_hash, false)));
  std::string list;
  for (const auto& name : signed_headers) {
    if (!list.empty()) list.push_back(';');
    list.append(name);
  }
  std::string value;
  value.append(sigv4_detail::algorithm).append(" Credential=").append(creds.access_key_id).append("/").append(scope);
  value.append(", SignedHeaders=").append(list).append(", Signature=").append(sig);
  headers.emplace_back("authorization", std::move(value));
}

std::string presign(std::string_view method, std::string_view host, std::string_view path, std::string_view extra_query,
                    const credentials& creds, std::string_view region, std::chrono::system_clock::time_point now,
                    std::chrono::seconds expires) {
  if (expires.count() < 1 || static_cast<std::uint64_t>(expires.count()) > max_presigned_expiry) {
    throw std::invalid_argument("presign: expiry outside 1 s to 7 days");
  }
  const std::string amz_date = format_amz_date(now);
  const std::string date = amz_date.substr(0, 8);
  const std::string scope = sigv4_detail::make_scope(date, region);
  std::string query(extra_query);
  if (!query.empty()) query.push_back('&');
  query.append("X-Amz-Algorithm=").append(sigv4_detail::algorithm);
  query.append("&X-Amz-Credential=").append(uri_encode(creds.access_key_id + "/" + scope, true));
  query.append("&X-Amz-Date=").append(amz_date);
  query.append("&X-Amz-Expires=").append(std::to_string(expires.count()));
  query.append("&X-Amz-SignedHeaders=host");
  std::string canonical = canonical_query(query, true);

  const std::string target = std::string(path) + "?" + canonical;
  const request_view view{method, target, {{"host", host}}};
  static const std::array<std::string, 1> signed_headers{"host"};
  const auto key = signing_key(creds.secret_access_key, date, region, "s3");
  const std::string sig =
      signature(key, string_to_sign(amz_date, scope, canonical_request(view, signed_headers, unsigned_payload, true)));
  canonical.append("&X-Amz-Signature=").append(sig);
  return canonical;
}

}  // namespace sluice::s3
