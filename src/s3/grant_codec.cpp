// SPDX-License-Identifier: Apache-2.0
// The grant session's packet codec (src/s3/grant_codec.hpp). Every byte is hostile: each length
// and count is checked against what is left of the packet before it is used, so that no sum can
// wrap and no field is read past the end.
#include "grant_codec.hpp"

#include <algorithm>
#include <string_view>
#include <utility>

namespace sluice::s3::detail {

namespace {

/// Appends and reads the little-endian fields of a message.
struct writer {
  std::vector<std::byte> out;
  void u8(std::uint8_t v) { out.push_back(static_cast<std::byte>(v)); }
  void le(std::uint64_t v, unsigned n) {
    for (unsigned i = 0; i < n; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xFFu));
  }
  void bytes(std::span<const std::byte> b) { out.insert(out.end(), b.begin(), b.end()); }
  void text(std::string_view s) { bytes(std::as_bytes(std::span(s.data(), s.size()))); }
};

struct reader {
  std::span<const std::byte> in;
  std::size_t at = 0;
  bool u8(std::uint8_t& v) {
    if (at + 1 > in.size()) return false;
    v = std::to_integer<std::uint8_t>(in[at++]);
    return true;
  }
  bool le(std::uint64_t& v, unsigned n) {
    if (n > in.size() - at) return false;
    v = 0;
    for (unsigned i = 0; i < n; ++i) v |= std::to_integer<std::uint64_t>(in[at + i]) << (8 * i);
    at += n;
    return true;
  }
  bool bytes(std::size_t n, std::span<const std::byte>& v) {
    if (n > in.size() - at) return false;
    v = in.subspan(at, n);
    at += n;
    return true;
  }
  template <std::size_t N>
  bool array(std::array<std::byte, N>& v) {
    std::span<const std::byte> b;
    if (!bytes(N, b)) return false;
    std::copy(b.begin(), b.end(), v.begin());
    return true;
  }
  [[nodiscard]] bool done() const { return at == in.size(); }
};

}  // namespace

std::optional<grant_message> decode_grant_message(std::span<const std::byte> packet) {
  if (packet.empty() || packet.size() > max_grant_packet) return std::nullopt;
  reader r{packet};
  std::uint8_t type = 0;
  r.u8(type);
  grant_message m;
  m.type = static_cast<grant_message_type>(type);
  bool ok = false;
  switch (m.type) {
    case grant_message_type::hello: {
      std::uint64_t n = 0;
      std::span<const std::byte> key;
      ok = r.u8(m.version) && r.le(n, 2) && n <= max_grant_key_id && r.bytes(static_cast<std::size_t>(n), key) &&
           r.array(m.nonce);
      if (ok) m.access_key_id.assign(reinterpret_cast<const char*>(key.data()), key.size());
      break;
    }
    case grant_message_type::challenge: ok = r.array(m.nonce) && r.array(m.proof); break;
    case grant_message_type::auth: ok = r.array(m.proof); break;
    case grant_message_type::welcome: ok = true; break;
    case grant_message_type::memfd: ok = r.le(m.size, 8); break;
    case grant_message_type::device: {
      std::uint64_t n = 0;
      std::span<const std::byte> description;
      ok = r.le(n, 2) && n <= max_grant_description && r.bytes(static_cast<std::size_t>(n), description);
      if (ok) m.description.assign(description.begin(), description.end());
      break;
    }
    case grant_message_type::granted: ok = r.array(m.grant) && r.le(m.size, 8); break;
    case grant_message_type::release: ok = r.array(m.grant); break;
    case grant_message_type::error: {
      std::uint64_t code = 0;
      std::span<const std::byte> text;
      ok = r.le(code, 4) && r.bytes(packet.size() - r.at, text);
      m.code = static_cast<std::uint32_t>(code);
      if (ok) m.text.assign(reinterpret_cast<const char*>(text.data()), text.size());
      break;
    }
    default: return std::nullopt;
  }
  if (!ok || !r.done()) return std::nullopt;
  return m;
}

std::vector<std::byte> encode_grant_message(const grant_message& m) {
  writer w;
  w.out.reserve(max_grant_packet);  // one allocation (and no false -Wstringop-overflow of GCC 12 at -O2)
  w.u8(static_cast<std::uint8_t>(m.type));
  switch (m.type) {
    case grant_message_type::hello:
      w.u8(m.version);
      w.le(m.access_key_id.size(), 2);
      w.text(m.access_key_id);
      w.bytes(m.nonce);
      break;
    case grant_message_type::challenge:
      w.bytes(m.nonce);
      w.bytes(m.proof);
      break;
    case grant_message_type::auth: w.bytes(m.proof); break;
    case grant_message_type::welcome: break;
    case grant_message_type::memfd: w.le(m.size, 8); break;
    case grant_message_type::device:
      w.le(m.description.size(), 2);
      w.bytes(m.description);
      break;
    case grant_message_type::granted:
      w.bytes(m.grant);
      w.le(m.size, 8);
      break;
    case grant_message_type::release: w.bytes(m.grant); break;
    case grant_message_type::error:
      w.le(m.code, 4);
      w.text(m.text);
      break;
  }
  return std::move(w.out);
}

}  // namespace sluice::s3::detail
