// SPDX-License-Identifier: Apache-2.0
// The grant session's socket, shared by both ends of the same-host plane (src/s3/local_plane.cpp,
// the server; src/s3/local_client_plane.cpp, the client): one packet per sendmsg/recvmsg on a
// Unix-domain SOCK_SEQPACKET socket, a descriptor passed with SCM_RIGHTS, and the proofs of the
// handshake:
// proof = HMAC-SHA256(secret access key, label | u16 n | access key id | client nonce | server
// nonce), label "sluice-grant/1 server" or "sluice-grant/1 client": each end shows it holds the
// secret without sending it, and the nonces make every session's proofs fresh.
#pragma once

#include "common/unique_fd.hpp"
#include "grant_codec.hpp"

#include <sluice/error.hpp>
#include <sluice/s3/sigv4.hpp>

#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::s3::grant_wire {

using grant_id = std::array<std::byte, 16>;
using nonce = std::array<std::byte, 32>;

inline constexpr std::uint8_t protocol_version = 1;
inline constexpr std::size_t max_message = detail::max_grant_packet;
inline constexpr std::string_view server_label = "sluice-grant/1 server";
inline constexpr std::string_view client_label = "sluice-grant/1 client";

inline error_code last_errno() { return {errno, boost::system::generic_category()}; }

using ::sluice::detail::unique_fd;

/// Fills `out` from the system's CSPRNG; throws std::runtime_error when it has no entropy (there is
/// nothing safe to hand out then).
void fill_random(std::span<std::byte> out);

template <std::size_t N>
std::array<std::byte, N> random_bytes() {
  std::array<std::byte, N> out{};
  fill_random(out);
  return out;
}

/// The handshake proof of `user` under `label` (server_label or client_label).
nonce proof(std::string_view label, const credentials& user, const nonce& client, const nonce& server);

/// Sends one packet, with `fd` attached when it is not -1.
error_code send_packet(int socket, std::span<const std::byte> data, int fd = -1);

/// Receives one packet into `buffer` (resized to its length) and at most one descriptor, which
/// it owns in `fd`. Any other control data, or more descriptors, is a protocol violation (the
/// descriptors that came are closed). 0 bytes: the peer closed.
error_code receive_packet(int socket, std::vector<std::byte>& buffer, unique_fd& fd);

/// The packet of an error answer (`text` cut to 200 bytes).
std::vector<std::byte> error_message(std::uint32_t code, std::string_view text);

}  // namespace sluice::s3::grant_wire
