// SPDX-License-Identifier: Apache-2.0
// Decoder for `Content-Encoding: aws-chunked` request bodies (SigV4 streaming uploads), sans I/O:
// the caller feeds the bytes as they arrive and receives the decoded payload.
// https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-streaming.html
// https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-streaming-trailers.html
#pragma once

#include <sluice/error.hpp>
#include <sluice/s3/checksum.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace sluice::s3 {

/// The aws-chunked variants, named by the request's x-amz-content-sha256.
enum class payload_mode {
  /// STREAMING-AWS4-HMAC-SHA256-PAYLOAD: "<hex size>;chunk-signature=<sig>\r\n<data>\r\n" chunks,
  /// each signed over the previous signature, ending with a signed 0-size chunk and "\r\n".
  streaming_signed,
  /// STREAMING-UNSIGNED-PAYLOAD-TRAILER: "<hex size>\r\n<data>\r\n" chunks, "0\r\n", then trailer
  /// lines ("x-amz-checksum-crc32:<base64>\r\n") and "\r\n".
  streaming_unsigned_trailer,
  /// STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER: signed chunks, then trailer lines that end with
  /// "x-amz-trailer-signature:<sig>\r\n", then "\r\n".
  streaming_signed_trailer,
};

/// The mode that an x-amz-content-sha256 value names; nullopt for anything else (a plain hash,
/// UNSIGNED-PAYLOAD, or the SigV4a ECDSA variants sluice does not verify).
[[nodiscard]] std::optional<payload_mode> parse_payload_mode(std::string_view content_sha256) noexcept;

/// Incremental decoder of one aws-chunked body.
///
/// Memory stays bounded whatever the chunk sizes: chunk data is passed through and hashed as it
/// arrives, and only a chunk header or the trailer section (each at most `max_chunk_header`
/// bytes) is buffered. Payload bytes reach `on_payload` before their chunk's signature can be
/// checked: when feed() reports signature_does_not_match the caller discards what it stored.
///
/// Errors (s3::errc), after which every feed() reports the same error:
/// - signature_does_not_match: a chunk signature (checked at the end of its data) or the trailer
///   signature is wrong, or the signed-trailer mode's trailer has no signature;
/// - invalid_request: malformed framing (a bad size or header line, a missing CRLF, a header or
///   trailer longer than `max_chunk_header`, a trailer line in streaming_signed mode, a duplicate
///   trailer), more payload than `decoded_length` or less when the final chunk arrives, the
///   declared checksum trailer missing or not base64;
/// - bad_digest: the trailer checksum does not match the payload;
/// - incomplete_body (from finish() only): the input ended before the body did.
class aws_chunked_decoder {
 public:
  /// What the decoder must know from the request's headers and its verified signature.
  struct options {
    payload_mode mode = payload_mode::streaming_signed;  ///< from x-amz-content-sha256
    std::array<std::byte, 32> signing_key{};             ///< verified::key (signed modes)
    std::string amz_date;                                ///< verified::amz_date, 20130524T000000Z (signed modes)
    std::string scope;                 ///< verified::scope, 20130524/us-east-1/s3/aws4_request (signed modes)
    std::string seed_signature;        ///< verified::seed_signature: the first chunk's previous signature
    std::uint64_t decoded_length = 0;  ///< x-amz-decoded-content-length: the exact payload size
    /// The checksum the trailer carries (x-amz-trailer): computed over the payload and compared
    /// with the trailer's value. When set, the trailer must carry it.
    std::optional<checksum_algorithm> trailer_checksum;
    std::size_t max_chunk_header = 4096;  ///< longest chunk header line, and trailer section, accepted
  };

  /// A decoder at the start of a body.
  explicit aws_chunked_decoder(options opts);

  /// Consumes bytes of the body (split anywhere: even one byte at a time) and passes each decoded
  /// payload byte to `on_payload` once, in order, as soon as it arrives. Returns how many bytes
  /// of `input` it consumed: all of them, unless the body ends inside `input` (what follows is
  /// not part of it; done() is then true) or an error stops it (`ec` set).
  std::size_t feed(std::span<const std::byte> input, const std::function<void(std::span<const std::byte>)>& on_payload,
                   error_code& ec);
  /// Call when the input has ended: sets `ec` to the error feed() reported, else to
  /// incomplete_body unless done(); clears it when done().
  void finish(error_code& ec) const;

  /// Whether the whole body, trailer included, has been decoded and verified.
  [[nodiscard]] bool done() const noexcept { return state_ == state::done; }
  /// The trailer fields (lower-case names, trimmed values), without x-amz-trailer-signature;
  /// complete once done().
  [[nodiscard]] const std::map<std::string, std::string>& trailers() const noexcept { return trailers_; }
  /// How many payload bytes were passed to `on_payload` so far.
  [[nodiscard]] std::uint64_t decoded_bytes() const noexcept { return decoded_; }

 private:
  enum class state { chunk_header, chunk_data, chunk_cr, chunk_lf, trailer, done, failed };

  bool is_signed() const noexcept;
  bool fail(error_code& ec, error_code error);
  bool on_header_line(error_code& ec);
  bool on_trailer_line(error_code& ec);
  bool finish_trailer(error_code& ec);
  bool check_chunk_signature(error_code& ec);

  options opts_;
  state state_ = state::chunk_header;
  std::string line_;                // the header or trailer line being assembled
  std::uint64_t remaining_ = 0;     // data bytes left in the current chunk
  std::string chunk_signature_;     // the current chunk's declared signature
  std::string previous_signature_;  // the chain: seed, then each verified chunk's signature
  std::optional<digest> chunk_hash_;
  std::optional<digest> checksum_;
  std::uint64_t decoded_ = 0;
  std::size_t trailer_bytes_ = 0;
  bool trailer_lines_seen_ = false;
  bool skipped_blank_line_ = false;
  std::string trailer_signature_;
  std::map<std::string, std::string> trailers_;
  error_code error_;
};

}  // namespace sluice::s3
