// SPDX-License-Identifier: Apache-2.0
// The same-host grant session's packets (include/sluice/s3/local_plane.hpp): what each end of the
// Unix-domain SOCK_SEQPACKET socket sends, one message per packet. Sans-I/O: functions over bytes,
// which the socket code (src/s3/grant_socket.cpp) only feeds; fuzz/grant_packet.cpp drives them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace sluice::s3 {

namespace detail {

/// The grant session's messages (one per SOCK_SEQPACKET packet, integers little-endian):
///   C→S hello      01 | version 01 | u16 n | access key id (n ≤ 256 bytes) | client nonce (32)
///   S→C challenge  02 | server nonce (32) | server proof (32)
///   C→S auth       03 | client proof (32)
///   S→C welcome    04
///   C→S memfd      05 | u64 size                        + one descriptor (SCM_RIGHTS)
///   C→S device     06 | u16 n | description (n ≤ 512 bytes)
///   S→C granted    07 | grant id (16) | u64 size
///   C→S release    08 | grant id (16)                   (no answer)
///   S→C error      7f | u32 code (an errno) | message
enum class grant_message_type : std::uint8_t {
  hello = 0x01,
  challenge = 0x02,
  auth = 0x03,
  welcome = 0x04,
  memfd = 0x05,
  device = 0x06,
  granted = 0x07,
  release = 0x08,
  error = 0x7f,
};

/// One decoded message; the fields its type does not carry stay empty.
struct grant_message {
  grant_message_type type = grant_message_type::welcome;
  std::uint8_t version = 0;            ///< hello
  std::string access_key_id;           ///< hello
  std::array<std::byte, 32> nonce{};   ///< hello (the client's), challenge (the server's)
  std::array<std::byte, 32> proof{};   ///< challenge, auth
  std::uint64_t size = 0;              ///< memfd, granted
  std::vector<std::byte> description;  ///< device
  std::array<std::byte, 16> grant{};   ///< granted, release
  std::uint32_t code = 0;              ///< error
  std::string text;                    ///< error
  bool operator==(const grant_message&) const = default;
};

/// The longest packet either end sends or accepts.
inline constexpr std::size_t max_grant_packet = 1024;
inline constexpr std::size_t max_grant_key_id = 256;
inline constexpr std::size_t max_grant_description = 512;

/// Decodes one packet (hostile bytes: any length, any content). nullopt: empty, longer than
/// max_grant_packet, an unknown type, a field past the end or over its limit, or bytes left over.
/// Sans-I/O: the socket code only feeds it what recvmsg returned.
[[nodiscard]] std::optional<grant_message> decode_grant_message(std::span<const std::byte> packet);
/// The packet of `message` (the fields of its type only). decode_grant_message of it gives
/// `message` back when its fields are within the limits above.
[[nodiscard]] std::vector<std::byte> encode_grant_message(const grant_message& message);

}  // namespace detail

}  // namespace sluice::s3
