// SPDX-License-Identifier: Apache-2.0
// Digests and checksums of the S3 tier: incremental MD5/SHA-1/SHA-256 (OpenSSL) and CRC32/CRC32C
// (ISA-L), the x-amz-checksum-* algorithms, and the small encoding and comparison helpers that
// SigV4 and the flexible checksums need. The header names no OpenSSL or ISA-L type.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

// OpenSSL's EVP_MD_CTX, declared (not defined) so that native_handle() can name it.
struct evp_md_ctx_st;

namespace sluice::s3 {

/// The digests `digest` computes.
enum class digest_kind {
  md5,     ///< MD5 (16 bytes): ETags and Content-MD5
  sha1,    ///< SHA-1 (20 bytes): x-amz-checksum-sha1
  sha256,  ///< SHA-256 (32 bytes): SigV4 payload hashes, x-amz-checksum-sha256
  crc32,   ///< CRC-32/ISO-HDLC (zlib's crc32, 4 bytes): x-amz-checksum-crc32
  crc32c,  ///< CRC-32C/Castagnoli (iSCSI, 4 bytes): x-amz-checksum-crc32c
};

/// The size in bytes of the value `digest::finish()` returns for `kind`.
[[nodiscard]] std::size_t digest_size(digest_kind kind) noexcept;

/// An incremental digest: update() any number of times, then finish().
///
/// Move-only; owns an OpenSSL EVP_MD_CTX for MD5 and the SHAs (nothing native for the CRCs).
/// A moved-from digest may only be assigned to or destroyed. Not thread-safe.
class digest {
 public:
  /// Starts an empty digest of `kind`. Throws `system_error` (s3::errc::internal_error) when
  /// OpenSSL cannot provide the algorithm (a FIPS-only provider refuses MD5, for instance) and
  /// `std::bad_alloc` when it cannot allocate its context.
  explicit digest(digest_kind kind);
  /// Takes over `other`'s state; `other` is left moved-from.
  digest(digest&& other) noexcept;
  /// Releases this digest's state and takes over `other`'s.
  digest& operator=(digest&& other) noexcept;
  digest(const digest&) = delete;
  digest& operator=(const digest&) = delete;
  /// Frees the OpenSSL context.
  ~digest();

  /// Adds `data` to the digest.
  void update(std::span<const std::byte> data);
  /// Adds the bytes of `text` to the digest.
  void update(std::string_view text);
  /// The digest of everything added since construction or the last finish(), in network byte
  /// order (the CRCs as 4 big-endian bytes, as S3 sends them base64-encoded); the digest then
  /// starts over, empty.
  [[nodiscard]] std::vector<std::byte> finish();

  /// The algorithm this digest computes.
  [[nodiscard]] digest_kind kind() const noexcept { return kind_; }
  /// The OpenSSL context for MD5 and the SHAs; null for the CRCs and when moved-from.
  [[nodiscard]] evp_md_ctx_st* native_handle() const noexcept { return ctx_; }

 private:
  void reset();

  digest_kind kind_;
  evp_md_ctx_st* ctx_ = nullptr;
  std::uint32_t crc_ = 0;  // running CRC, in the form the ISA-L function of kind_ continues from
};

/// The flexible checksums of S3 (x-amz-checksum-*, x-amz-sdk-checksum-algorithm).
enum class checksum_algorithm { crc32, crc32c, sha1, sha256 };

/// The header that carries a checksum: "x-amz-checksum-crc32", "x-amz-checksum-crc32c",
/// "x-amz-checksum-sha1" or "x-amz-checksum-sha256" (lower case, as in x-amz-trailer).
[[nodiscard]] std::string_view header_name(checksum_algorithm algorithm) noexcept;
/// The algorithm's name as S3 spells it: "CRC32", "CRC32C", "SHA1" or "SHA256".
[[nodiscard]] std::string_view algorithm_name(checksum_algorithm algorithm) noexcept;
/// The algorithm named `name` ("crc32c", "SHA256", ...), compared case-insensitively; nullopt for
/// any other name (CRC64NVME included: sluice does not compute it).
[[nodiscard]] std::optional<checksum_algorithm> parse_checksum_algorithm(std::string_view name) noexcept;
/// The algorithm whose header_name() is `name`, compared case-insensitively; nullopt otherwise.
[[nodiscard]] std::optional<checksum_algorithm> checksum_algorithm_of_header(std::string_view name) noexcept;
/// The digest that computes `algorithm`.
[[nodiscard]] digest_kind digest_kind_of(checksum_algorithm algorithm) noexcept;

/// `bytes` as lower-case hexadecimal, two digits a byte.
[[nodiscard]] std::string to_hex(std::span<const std::byte> bytes);
/// Appends `bytes` to `out` as to_hex() spells them.
void append_hex(std::string& out, std::span<const std::byte> bytes);
/// Writes the 64 hex digits of a 32-byte digest into `out`, as to_hex() spells them.
void hex_into(std::span<char, 64> out, const std::array<std::byte, 32>& bytes) noexcept;
/// `bytes` in standard base64 (RFC 4648 section 4, "+/" alphabet) with "=" padding.
[[nodiscard]] std::string base64_encode(std::span<const std::byte> bytes);
/// The bytes of canonical standard base64 `text`; nullopt when `text` has a character outside
/// the alphabet, a length that is not a multiple of 4, misplaced or missing padding, or non-zero
/// bits after the last byte. Whitespace is not skipped.
[[nodiscard]] std::optional<std::vector<std::byte>> base64_decode(std::string_view text);

/// HMAC-SHA256 of `data` under `key`.
[[nodiscard]] std::array<std::byte, 32> hmac_sha256(std::span<const std::byte> key, std::string_view data);
/// The SHA-256 of `data`. Allocates nothing after a thread's first call.
[[nodiscard]] std::array<std::byte, 32> sha256(std::span<const std::byte> data);
/// The SHA-256 of `data` as 64 lower-case hex digits.
[[nodiscard]] std::string sha256_hex(std::span<const std::byte> data);
/// The SHA-256 of the bytes of `text` as 64 lower-case hex digits.
[[nodiscard]] std::string sha256_hex(std::string_view text);

/// Whether `a` and `b` hold the same bytes, in time that depends only on their lengths (for
/// comparing signatures and MACs). Strings of different lengths compare unequal at once.
[[nodiscard]] bool constant_time_equal(std::string_view a, std::string_view b) noexcept;

}  // namespace sluice::s3
