// SPDX-License-Identifier: Apache-2.0
// Implementation of include/sluice/s3/rdma_token.hpp; included by src/s3/s3.cpp.
#include <sluice/s3/error.hpp>
#include <sluice/s3/rdma_token.hpp>

#include <algorithm>
#include <limits>
#include <span>
#include <stdexcept>

namespace sluice::s3 {

namespace {
namespace rdma_token_detail {

constexpr std::uint8_t version = 1;
constexpr std::uint8_t flag_virtual_addresses = 0x01;
constexpr std::uint64_t u64_max = std::numeric_limits<std::uint64_t>::max();

// base64url (RFC 4648 section 5) without padding. OpenSSL's EVP codec speaks only the standard
// alphabet and tolerates what we must reject, so this one is strict and canonical.
constexpr std::string_view base64url_alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

// The 6-bit value of a base64url character; -1 for anything else ('+', '/' and '=' included).
int base64url_value(char c) noexcept {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '-') return 62;
  if (c == '_') return 63;
  return -1;
}

std::string base64url_encode(std::span<const std::byte> bytes) {
  std::string out;
  out.reserve((bytes.size() * 4 + 2) / 3);
  std::uint32_t bits = 0;
  unsigned held = 0;  // bits in `bits` not yet written
  for (const std::byte b : bytes) {
    bits = bits << 8 | std::to_integer<std::uint32_t>(b);
    held += 8;
    while (held >= 6) {
      held -= 6;
      out.push_back(base64url_alphabet[(bits >> held) & 63u]);
    }
    bits &= (1u << held) - 1;
  }
  if (held > 0) out.push_back(base64url_alphabet[(bits << (6 - held)) & 63u]);
  return out;
}

// The bytes of canonical unpadded base64url `text`; false on any other character, a length of
// 1 mod 4 (no whole byte in the last group), or non-zero bits after the last byte.
bool base64url_decode(std::string_view text, std::vector<std::byte>& out) {
  if (text.size() % 4 == 1) return false;
  out.clear();
  out.reserve(text.size() * 3 / 4);
  std::uint32_t bits = 0;
  unsigned held = 0;
  for (const char c : text) {
    const int value = base64url_value(c);
    if (value < 0) return false;
    bits = bits << 6 | static_cast<std::uint32_t>(value);
    held += 6;
    if (held >= 8) {
      held -= 8;
      out.push_back(static_cast<std::byte>((bits >> held) & 0xFFu));
      bits &= (1u << held) - 1;
    }
  }
  return bits == 0;  // the 2 or 4 unused bits of a partial last group
}

bool is_provider_char(char c) noexcept { return c >= 0x21 && c <= 0x7e; }

// Whether `token` has the shape the binary form can carry and the server may trust: the checks
// decode_rdma_token applies, on an already built token.
bool valid_shape(const rdma_token& token) noexcept {
  if (token.op != rdma_op::write && token.op != rdma_op::read) return false;
  if (token.provider.empty() || token.provider.size() > max_rdma_provider_chars) return false;
  if (!std::all_of(token.provider.begin(), token.provider.end(), is_provider_char)) return false;
  if (token.endpoint.empty() || token.endpoint.size() > max_rdma_endpoint_bytes) return false;
  if (token.segments.size() > max_rdma_token_segments) return false;
  std::uint64_t total = 0;
  for (const auto& segment : token.segments) {
    if (segment.length == 0) return false;
    if (segment.length > u64_max - segment.address) return false;  // address + length wraps
    if (segment.length > u64_max - total) return false;            // the total wraps
    total += segment.length;
  }
  return true;
}

void put_u8(std::vector<std::byte>& out, std::uint8_t v) { out.push_back(static_cast<std::byte>(v)); }

void put_le(std::vector<std::byte>& out, std::uint64_t v, unsigned bytes) {
  for (unsigned i = 0; i < bytes; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xFFu));
}

// A bounds-checked little-endian cursor over the binary form; every read fails past the end.
class reader {
 public:
  explicit reader(std::span<const std::byte> in) noexcept : in_(in) {}

  bool u8(std::uint8_t& v) noexcept {
    std::uint64_t wide = 0;
    if (!le(wide, 1)) return false;
    v = static_cast<std::uint8_t>(wide);
    return true;
  }
  bool u16(std::uint16_t& v) noexcept {
    std::uint64_t wide = 0;
    if (!le(wide, 2)) return false;
    v = static_cast<std::uint16_t>(wide);
    return true;
  }
  bool u64(std::uint64_t& v) noexcept { return le(v, 8); }
  bool bytes(std::size_t n, std::span<const std::byte>& v) noexcept {
    if (n > in_.size() - at_) return false;
    v = in_.subspan(at_, n);
    at_ += n;
    return true;
  }
  [[nodiscard]] bool at_end() const noexcept { return at_ == in_.size(); }

 private:
  bool le(std::uint64_t& v, unsigned n) noexcept {
    if (n > in_.size() - at_) return false;
    v = 0;
    for (unsigned i = 0; i < n; ++i) v |= std::to_integer<std::uint64_t>(in_[at_ + i]) << (8 * i);
    at_ += n;
    return true;
  }

  std::span<const std::byte> in_;
  std::size_t at_ = 0;
};

// The token in `binary`; false on anything decode_rdma_token rejects.
bool parse(std::span<const std::byte> binary, rdma_token& token) {
  reader in(binary);
  std::uint8_t version_byte = 0;
  std::uint8_t op = 0;
  std::uint8_t flags = 0;
  std::uint8_t provider_length = 0;
  if (!in.u8(version_byte) || version_byte != version) return false;
  if (!in.u8(op) ||
      (op != static_cast<std::uint8_t>(rdma_op::write) && op != static_cast<std::uint8_t>(rdma_op::read))) {
    return false;
  }
  if (!in.u8(flags) || (flags & ~flag_virtual_addresses) != 0) return false;
  token.op = static_cast<rdma_op>(op);
  token.virtual_addresses = (flags & flag_virtual_addresses) != 0;

  std::span<const std::byte> field;
  if (!in.u8(provider_length) || !in.bytes(provider_length, field)) return false;
  token.provider.assign(reinterpret_cast<const char*>(field.data()), field.size());

  std::uint16_t endpoint_length = 0;
  if (!in.u16(endpoint_length) || !in.bytes(endpoint_length, field)) return false;
  token.endpoint.assign(field.begin(), field.end());

  std::uint8_t count = 0;
  if (!in.u64(token.expires) || !in.u8(count) || count > max_rdma_token_segments) return false;
  token.segments.resize(count);
  for (auto& segment : token.segments) {
    if (!in.u64(segment.address) || !in.u64(segment.length) || !in.u64(segment.key)) return false;
  }
  // Lengths, characters and sums are checked once, by the rule encode_rdma_token also applies.
  return in.at_end() && valid_shape(token);
}

}  // namespace rdma_token_detail
}  // namespace

std::uint64_t rdma_token::total_length() const noexcept {
  std::uint64_t total = 0;
  for (const auto& segment : segments) total += segment.length;
  return total;
}

std::string encode_rdma_token(const rdma_token& token) {
  namespace d = rdma_token_detail;
  if (!d::valid_shape(token)) throw std::invalid_argument("encode_rdma_token: invalid token");
  std::vector<std::byte> binary;
  binary.reserve(4 + token.provider.size() + 2 + token.endpoint.size() + 8 + 1 + token.segments.size() * 24);
  d::put_u8(binary, d::version);
  d::put_u8(binary, static_cast<std::uint8_t>(token.op));
  d::put_u8(binary, token.virtual_addresses ? d::flag_virtual_addresses : 0);
  d::put_u8(binary, static_cast<std::uint8_t>(token.provider.size()));
  for (const char c : token.provider) d::put_u8(binary, static_cast<std::uint8_t>(c));
  d::put_le(binary, token.endpoint.size(), 2);
  binary.insert(binary.end(), token.endpoint.begin(), token.endpoint.end());
  d::put_le(binary, token.expires, 8);
  d::put_u8(binary, static_cast<std::uint8_t>(token.segments.size()));
  for (const auto& segment : token.segments) {
    d::put_le(binary, segment.address, 8);
    d::put_le(binary, segment.length, 8);
    d::put_le(binary, segment.key, 8);
  }
  return d::base64url_encode(binary);
}

rdma_token decode_rdma_token(std::string_view text, error_code& ec) {
  namespace d = rdma_token_detail;
  ec.clear();
  std::vector<std::byte> binary;
  rdma_token token;
  if (text.size() > max_rdma_token_chars || !d::base64url_decode(text, binary) || !d::parse(binary, token)) {
    ec = make_error_code(errc::invalid_rdma_token);
    return {};
  }
  return token;
}

void check_rdma_token(const rdma_token& token, rdma_op expected, std::uint64_t length, std::uint64_t now_unix_seconds,
                      error_code& ec) {
  ec.clear();
  if (!rdma_token_detail::valid_shape(token) || token.op != expected || now_unix_seconds >= token.expires ||
      token.total_length() < length) {
    ec = make_error_code(errc::invalid_rdma_token);
  }
}

}  // namespace sluice::s3
