// SPDX-License-Identifier: Apache-2.0
// Fuzz target for sluice::s3::aws_chunked_decoder. The input is a 5-byte prologue, then the body:
//   [0] payload mode (mod 3)   [1] trailer checksum: none, crc32, crc32c, sha1, sha256 (mod 5)
//   [2..3] decoded length, little-endian   [4] seed of the split pattern
// The signing context is the AWS documentation's streaming example (so that seeds can carry real
// chunk signatures). The decoder must never crash and must keep its contract:
//   - feeding the body at once and in arbitrary pieces gives the same error, payload and
//     consumed count;
//   - it never passes on more than the decoded length, reports exactly what it passed on, and
//     when done has passed on exactly the decoded length;
//   - errors are only the documented s3::errc values, and finish() agrees with done()
//     (incomplete_body when the input ends early).
#include <sluice/s3/chunked.hpp>
#include <sluice/s3/error.hpp>
#include <sluice/s3/sigv4.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>

namespace {

using sluice::s3::aws_chunked_decoder;
using sluice::s3::errc;

void check(bool condition) {
  if (!condition) std::abort();
}

struct run {
  sluice::error_code ec;
  std::size_t consumed = 0;
  std::string payload;
  bool done = false;
  std::size_t trailers = 0;
};

// Feeds `body` in pieces whose sizes come from `seed` (0: all at once).
run decode(const aws_chunked_decoder::options& opts, std::string_view body, std::uint8_t seed) {
  aws_chunked_decoder decoder(opts);
  run out;
  std::uint32_t state = seed;
  std::size_t at = 0;
  while (true) {
    std::size_t n = body.size() - at;
    if (seed != 0) {
      state = state * 1103515245u + 12345u;
      n = std::min<std::size_t>(n, (state >> 16) % 97);
    }
    const auto piece = std::as_bytes(std::span(body.data() + at, n));
    const std::size_t used = decoder.feed(
        piece,
        [&](std::span<const std::byte> p) {
          check(!p.empty());
          out.payload.append(reinterpret_cast<const char*>(p.data()), p.size());
        },
        out.ec);
    check(used <= n);
    out.consumed += used;
    at += used;
    if (out.ec) {
      check(out.ec == errc::invalid_request || out.ec == errc::signature_does_not_match || out.ec == errc::bad_digest);
      break;
    }
    if (decoder.done() || at == body.size()) break;
    check(used == n);  // a decoder that is neither done nor failed takes everything
  }
  out.done = decoder.done();
  out.trailers = decoder.trailers().size();
  check(decoder.decoded_bytes() == out.payload.size());
  check(out.payload.size() <= opts.decoded_length);
  sluice::error_code finish_ec;
  decoder.finish(finish_ec);
  check(out.done == !finish_ec);
  if (out.ec) check(finish_ec == out.ec);
  if (!out.ec && !out.done) check(finish_ec == errc::incomplete_body);
  if (out.done) check(out.payload.size() == opts.decoded_length);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // An owned copy of exactly `size` bytes, so that ASan catches a read past the end.
  const std::string bytes = size == 0 ? std::string() : std::string(data, data + size);
  if (bytes.size() < 5) return 0;
  const auto byte = [&](std::size_t i) { return static_cast<std::uint8_t>(bytes[i]); };

  aws_chunked_decoder::options opts;
  constexpr std::array modes{sluice::s3::payload_mode::streaming_signed,
                             sluice::s3::payload_mode::streaming_unsigned_trailer,
                             sluice::s3::payload_mode::streaming_signed_trailer};
  opts.mode = modes[byte(0) % modes.size()];
  constexpr std::array checksums{sluice::s3::checksum_algorithm::crc32, sluice::s3::checksum_algorithm::crc32c,
                                 sluice::s3::checksum_algorithm::sha1, sluice::s3::checksum_algorithm::sha256};
  if (const unsigned pick = byte(1) % 5; pick != 0) opts.trailer_checksum = checksums[pick - 1];
  opts.decoded_length = static_cast<std::uint64_t>(byte(2)) | static_cast<std::uint64_t>(byte(3)) << 8;
  opts.signing_key = sluice::s3::signing_key("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "20130524", "us-east-1", "s3");
  opts.amz_date = "20130524T000000Z";
  opts.scope = "20130524/us-east-1/s3/aws4_request";
  opts.seed_signature = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9";
  opts.max_chunk_header = 256;

  const std::string_view body = std::string_view(bytes).substr(5);
  const run whole = decode(opts, body, 0);
  const run split = decode(opts, body, static_cast<std::uint8_t>(byte(4) | 1u));
  check(whole.ec == split.ec);
  check(whole.consumed == split.consumed);
  check(whole.payload == split.payload);
  check(whole.done == split.done);
  check(whole.trailers == split.trailers);
  return 0;
}
