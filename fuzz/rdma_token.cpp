// SPDX-License-Identifier: Apache-2.0
// Fuzz target for sluice::s3::decode_rdma_token. Each input is tried twice: as the header value
// itself, and as the binary form (encoded here with a reference base64url, so that mutations
// reach the field parser instead of dying in the base64 layer). The decoder must never crash
// or read out of bounds, and must keep its contract:
//   - a rejection is exactly s3::errc::invalid_rdma_token with an empty token;
//   - an accepted token is canonical: encode_rdma_token gives back the very same text, and that
//     text decodes to an equal token;
//   - an accepted token passes check_rdma_token for its own op, total length and a time before
//     it expires.
#include <sluice/s3/error.hpp>
#include <sluice/s3/rdma_token.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

using sluice::s3::rdma_token;

void check(bool condition) {
  if (!condition) std::abort();
}

std::string base64url(std::string_view bytes) {
  constexpr std::string_view alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  unsigned value = 0;
  unsigned bits = 0;
  for (const char c : bytes) {
    value = value << 8 | static_cast<unsigned char>(c);
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out.push_back(alphabet[(value >> bits) & 63u]);
    }
    value &= (1u << bits) - 1;
  }
  if (bits > 0) out.push_back(alphabet[(value << (6 - bits)) & 63u]);
  return out;
}

void check_text(std::string_view text) {
  sluice::error_code ec = sluice::s3::errc::access_denied;  // decode must set or clear it
  const rdma_token token = sluice::s3::decode_rdma_token(text, ec);
  if (ec) {
    check(ec == sluice::s3::errc::invalid_rdma_token);
    check(token == rdma_token{});
    return;
  }
  check(text.size() <= sluice::s3::max_rdma_token_chars);
  check(token.segments.size() <= sluice::s3::max_rdma_token_segments);
  const std::string again = sluice::s3::encode_rdma_token(token);  // throws (and fails) if invalid
  check(again == text);
  sluice::error_code ec2;
  check(sluice::s3::decode_rdma_token(again, ec2) == token);
  check(!ec2);
  if (token.expires > 0) {
    sluice::error_code ec3;
    sluice::s3::check_rdma_token(token, token.op, token.total_length(), token.expires - 1, ec3);
    check(!ec3);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // An owned copy of exactly `size` bytes, so that ASan catches a read past the end.
  const std::string bytes = size == 0 ? std::string() : std::string(data, data + size);
  check_text(bytes);
  check_text(base64url(bytes));
  return 0;
}
