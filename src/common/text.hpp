// SPDX-License-Identifier: Apache-2.0
// ASCII text helpers shared by the library's translation units (src/common/: internal headers
// every tier may include; nothing here is installed): case-insensitive comparison, hex digits,
// quotes. None allocates except where it appends to a string it is given.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace sluice::detail {

constexpr char to_lower_ascii(char c) noexcept { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

/// ASCII case-insensitive equality (header names, "100-continue", "REPLACE").
constexpr bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (to_lower_ascii(a[i]) != to_lower_ascii(b[i])) return false;
  }
  return true;
}

inline constexpr std::string_view hex_digits = "0123456789abcdef";

/// The value of a hex digit of either case; -1 for anything else.
constexpr int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/// The value of a lower-case hex digit; -1 for anything else (upper case included: one spelling
/// per byte string).
constexpr int lower_hex_value(char c) noexcept { return (c >= 'A' && c <= 'F') ? -1 : hex_value(c); }

/// Writes the lower-case hex of `bytes` to `out`, which holds 2 * bytes.size() characters.
constexpr void hex_into(char* out, std::span<const std::byte> bytes) noexcept {
  for (const std::byte b : bytes) {
    const auto v = static_cast<unsigned>(b);
    *out++ = hex_digits[v >> 4U];
    *out++ = hex_digits[v & 0xFU];
  }
}

/// Appends the lower-case hex of `bytes` to `out`.
inline void append_hex(std::string& out, std::span<const std::byte> bytes) {
  const std::size_t at = out.size();
  out.resize(at + 2 * bytes.size());
  hex_into(out.data() + at, bytes);
}

/// `text` without one pair of surrounding double quotes, if it has them.
constexpr std::string_view unquote(std::string_view text) noexcept {
  if (text.size() >= 2 && text.front() == '"' && text.back() == '"') text = text.substr(1, text.size() - 2);
  return text;
}

/// An ETag's opaque value: a weak validator's "W/" and the quotes taken off.
constexpr std::string_view unquote_etag(std::string_view etag) noexcept {
  if (etag.starts_with("W/")) etag.remove_prefix(2);
  return unquote(etag);
}

}  // namespace sluice::detail
