// SPDX-License-Identifier: Apache-2.0
// The x-amz-rdma-token header value, sans I/O: a client's grant to the server to RMA-write into
// (GET) or RMA-read from (PUT, UploadPart) exactly the memory segments it lists, over one
// libfabric provider, until it expires. The header protocol follows the public "S3 RDMA Protocol
// Specification v1.0" draft; the token's content is implementation-defined, and sluice's is the
// versioned binary form below, base64url-encoded. docs/protocol.md describes it byte by byte.
#pragma once

#include <sluice/error.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::s3 {

/// Who moves the bytes: the server RMA-writes into the client's segments (GET) or RMA-reads from
/// them (PUT, UploadPart).
enum class rdma_op : std::uint8_t { write = 1, read = 2 };

/// One registered memory range of the client: the server's RMA targets lie inside it.
struct rdma_segment {
  std::uint64_t address = 0;  ///< virtual address, or offset into the MR (rdma_token::virtual_addresses)
  std::uint64_t length = 0;   ///< bytes, at least 1
  std::uint64_t key = 0;      ///< the MR's remote key (fi_mr_key)
  friend bool operator==(const rdma_segment&, const rdma_segment&) = default;
};

/// The decoded token.
struct rdma_token {
  rdma_op op = rdma_op::write;
  bool virtual_addresses = true;       ///< FI_MR_VIRT_ADDR: address is a virtual address; false: an offset into the MR
  std::string provider;                ///< libfabric provider, e.g. "tcp;ofi_rxm", "shm"
  std::vector<std::byte> endpoint;     ///< the client endpoint's fi_getname() bytes
  std::uint64_t expires = 0;           ///< seconds since the Unix epoch; the token is invalid from then on
  std::vector<rdma_segment> segments;  ///< where the bytes go / come from, in order

  /// The sum of the segment lengths; it fits in 64 bits for every token decode_rdma_token accepts
  /// (for others it wraps).
  [[nodiscard]] std::uint64_t total_length() const noexcept;

  friend bool operator==(const rdma_token&, const rdma_token&) = default;
};

inline constexpr std::size_t max_rdma_token_chars = 4096;  ///< longest header value accepted
inline constexpr std::size_t max_rdma_token_segments = 64;
inline constexpr std::size_t max_rdma_provider_chars = 32;
inline constexpr std::size_t max_rdma_endpoint_bytes = 256;

/// The header value: base64url (RFC 4648 section 5, no padding) of the binary form (version 1).
/// Precondition: the token is one decode_rdma_token accepts (op write or read; provider 1 to 32
/// characters 0x21..0x7e; endpoint 1 to 256 bytes; at most 64 segments, each at least 1 byte,
/// address + length and the total length within 64 bits); otherwise throws std::invalid_argument.
[[nodiscard]] std::string encode_rdma_token(const rdma_token& token);

/// Parses a header value. Anything but the canonical encoding of a valid token (malformed,
/// truncated, longer than max_rdma_token_chars, trailing bytes, non-canonical base64url, padding,
/// an unknown version, op or flag, an empty provider or endpoint, a provider character outside
/// 0x21..0x7e, too many segments, a zero-length segment, address + length or the total length
/// past 64 bits) sets `ec` to s3::errc::invalid_rdma_token and returns an empty token; success
/// clears `ec`. Reads only `text`; throws nothing but std::bad_alloc.
[[nodiscard]] rdma_token decode_rdma_token(std::string_view text, error_code& ec);

/// What the server checks before it moves a byte: the token is valid (as decode_rdma_token
/// requires), its op is `expected`, it has not expired at `now_unix_seconds` (now < expires), and
/// its segments hold at least `length` bytes (total_length() >= length; the server moves exactly
/// `length`). Any failure sets `ec` to s3::errc::invalid_rdma_token; success clears it.
void check_rdma_token(const rdma_token& token, rdma_op expected, std::uint64_t length, std::uint64_t now_unix_seconds,
                      error_code& ec);

}  // namespace sluice::s3
