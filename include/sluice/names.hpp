// SPDX-License-Identifier: Apache-2.0
// Which bucket names and object keys sluice accepts (the S3 rules, shared by every store).
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>

namespace sluice {

/// Longest object key S3 allows, in bytes.
inline constexpr std::size_t max_key_bytes = 1024;

/// S3 bucket naming rules: 3–63 characters of a-z, 0-9, '.', '-'; starts and ends with a
/// letter or digit; no "..", not shaped like an IPv4 address, and none of the prefixes and
/// suffixes AWS reserves ("xn--", "sthree-", "amzn-s3-demo-"; "-s3alias", "--ol-s3", "--x-s3").
[[nodiscard]] constexpr bool is_valid_bucket_name(std::string_view name) noexcept {
  if (name.size() < 3 || name.size() > 63) return false;
  for (const std::string_view prefix : {"xn--", "sthree-", "amzn-s3-demo-"}) {
    if (name.substr(0, prefix.size()) == prefix) return false;
  }
  for (const std::string_view suffix : {"-s3alias", "--ol-s3", "--x-s3"}) {
    if (name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix) return false;
  }
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(name.front()) || !alnum(name.back())) return false;
  bool all_digits_and_dots = true;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (!alnum(c) && c != '.' && c != '-') return false;
    if (c == '.' && i + 1 < name.size() && name[i + 1] == '.') return false;
    if (c != '.' && (c < '0' || c > '9')) all_digits_and_dots = false;
  }
  const auto dots = std::count(name.begin(), name.end(), '.');
  return !(all_digits_and_dots && dots == 3);
}

/// S3 object keys: 1 to 1024 bytes, any byte values (stores must never turn a key into a
/// file path as-is).
[[nodiscard]] constexpr bool is_valid_object_key(std::string_view key) noexcept {
  return !key.empty() && key.size() <= max_key_bytes;
}

/// Whether `text` is UTF-8 (shortest forms, no surrogates, at most U+10FFFF) made only of the
/// characters XML 1.0 can carry (tab, newline, carriage return, U+0020–U+D7FF, U+E000–U+FFFD,
/// U+10000–U+10FFFF). The S3 server takes only such object keys at PUT, so that a plain
/// listing (XML without encoding-type=url) always parses.
[[nodiscard]] constexpr bool is_xml_safe_utf8(std::string_view text) noexcept {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto b0 = static_cast<unsigned char>(text[i]);
    char32_t cp = 0;
    std::size_t n = 0;
    if (b0 < 0x80) {
      cp = b0;
      n = 1;
    } else if (b0 >= 0xC2 && b0 <= 0xDF) {
      cp = b0 & 0x1FU;
      n = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      cp = b0 & 0x0FU;
      n = 3;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      cp = b0 & 0x07U;
      n = 4;
    } else {
      return false;  // a continuation byte first, an overlong 2-byte lead, or past U+10FFFF
    }
    if (i + n > text.size()) return false;
    for (std::size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(text[i + k]);
      if ((b & 0xC0U) != 0x80U) return false;
      cp = (cp << 6U) | (b & 0x3FU);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return false;  // overlong
    const bool allowed = cp == 0x9 || cp == 0xA || cp == 0xD || (cp >= 0x20 && cp <= 0xD7FF) ||
                         (cp >= 0xE000 && cp <= 0xFFFD) || cp >= 0x10000;
    if (!allowed) return false;  // C0 controls, surrogates, U+FFFE, U+FFFF
    i += n;
  }
  return true;
}

}  // namespace sluice
