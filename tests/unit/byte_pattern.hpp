// SPDX-License-Identifier: Apache-2.0
// Deterministic test bytes (xorshift64 from a seed): objects whose every part differs, so that a
// part moved to the wrong place is seen.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice::testing {

/// `size` bytes from `seed`.
inline std::vector<std::byte> pattern(std::size_t size, std::uint64_t seed) {
  std::vector<std::byte> out(size);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (auto& b : out) {
    x ^= x << 13U;
    x ^= x >> 7U;
    x ^= x << 17U;
    b = static_cast<std::byte>(x & 0xFFU);
  }
  return out;
}

}  // namespace sluice::testing
