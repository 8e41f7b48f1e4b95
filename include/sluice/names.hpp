// Which bucket names and object keys sluice accepts (the S3 rules, shared by every store).
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>

namespace sluice {

/// Longest object key S3 allows, in bytes.
inline constexpr std::size_t max_key_bytes = 1024;

/// S3 bucket naming rules: 3–63 characters of a-z, 0-9, '.', '-'; starts and ends with a
/// letter or digit; no "..", and not shaped like an IPv4 address.
[[nodiscard]] constexpr bool is_valid_bucket_name(std::string_view name) noexcept {
  if (name.size() < 3 || name.size() > 63) return false;
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

}  // namespace sluice
