// SPDX-License-Identifier: Apache-2.0
#include <sluice/s3/chunked.hpp>

#include <doctest/doctest.h>

#include <sluice/s3/checksum.hpp>
#include <sluice/s3/error.hpp>
#include <sluice/s3/sigv4.hpp>

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace {

using sluice::error_code;
using sluice::s3::aws_chunked_decoder;
using sluice::s3::checksum_algorithm;
using sluice::s3::errc;
using sluice::s3::payload_mode;

// The AWS sigv4-streaming and sigv4-streaming-trailers examples: PUT
// /examplebucket/chunkObject.txt at 20130524T000000Z, 65536 + 1024 'a' bytes.
constexpr std::string_view example_secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
constexpr std::string_view example_date = "20130524T000000Z";
constexpr std::string_view example_scope = "20130524/us-east-1/s3/aws4_request";
constexpr std::string_view example_seed = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9";
constexpr std::string_view trailer_example_seed = "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e";

std::span<const std::byte> bytes_of(std::string_view text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

aws_chunked_decoder::options example_options(payload_mode mode, std::string_view seed, std::uint64_t length) {
  aws_chunked_decoder::options opts;
  opts.mode = mode;
  opts.signing_key = sluice::s3::signing_key(example_secret, "20130524", "us-east-1", "s3");
  opts.amz_date = example_date;
  opts.scope = example_scope;
  opts.seed_signature = seed;
  opts.decoded_length = length;
  return opts;
}

std::string aws_example_body() {
  std::string body;
  body += "10000;chunk-signature=ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648\r\n";
  body += std::string(65536, 'a') + "\r\n";
  body += "400;chunk-signature=0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497\r\n";
  body += std::string(1024, 'a') + "\r\n";
  body += "0;chunk-signature=b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9\r\n\r\n";
  return body;
}

// The trailer example's body up to and including the final chunk's header line.
std::string aws_trailer_example_chunks() {
  std::string body;
  body += "10000;chunk-signature=b474d8862b1487a5145d686f57f013e54db672cee1c953b3010fb58501ef5aa2\r\n";
  body += std::string(65536, 'a') + "\r\n";
  body += "400;chunk-signature=1c1344b170168f8e65b41376b44b20fe354e373826ccbbe2c1d40a8cae51e5c7\r\n";
  body += std::string(1024, 'a') + "\r\n";
  body += "0;chunk-signature=2ca2aba2005185cf7159c6277faf83795951dd77a3a99e6e65d5c9f85863f992\r\n";
  return body;
}
constexpr std::string_view aws_trailer_example_trailer =
    "x-amz-checksum-crc32c:sOO8/Q==\r\n"
    "x-amz-trailer-signature:d81f82fc3505edab99d459891051a732e8730629a2e4a59689829ca17fe2e435\r\n\r\n";

struct outcome {
  error_code ec;
  std::size_t consumed = 0;
  std::string payload;
  bool done = false;
};

// Feeds `body` in pieces that end at each of `cuts` (ascending), then the rest; stops at an error.
outcome decode(const aws_chunked_decoder::options& opts, std::string_view body,
               const std::vector<std::size_t>& cuts = {}, aws_chunked_decoder** keep = nullptr) {
  static thread_local std::optional<aws_chunked_decoder> decoder;
  decoder.emplace(opts);
  outcome out;
  std::size_t at = 0;
  std::vector<std::size_t> ends = cuts;
  ends.push_back(body.size());
  for (const std::size_t end : ends) {
    const auto piece = body.substr(at, end - at);
    const std::size_t n = decoder->feed(
        bytes_of(piece),
        [&](std::span<const std::byte> p) { out.payload.append(reinterpret_cast<const char*>(p.data()), p.size()); },
        out.ec);
    out.consumed += n;
    at = end;
    if (out.ec || decoder->done()) break;
  }
  if (!out.ec) decoder->finish(out.ec);
  out.done = decoder->done();
  CHECK(decoder->decoded_bytes() == out.payload.size());
  if (keep != nullptr) *keep = &*decoder;
  return out;
}

std::string hex_size(std::size_t size) {
  std::string out;
  do {
    out.insert(out.begin(), "0123456789abcdef"[size % 16]);
    size /= 16;
  } while (size != 0);
  return out;
}

// Flips a hex digit to another hex digit.
void flip_hex(char& c) { c = c == '0' ? '1' : '0'; }

// A signed aws-chunked body of `chunks`, chained from `seed` as the documentation describes.
std::string signed_body(const std::vector<std::string>& chunks, std::string_view seed,
                        std::string* final_signature = nullptr, bool end = true) {
  const auto key = sluice::s3::signing_key(example_secret, "20130524", "us-east-1", "s3");
  std::string previous(seed);
  std::string body;
  std::vector<std::string> all = chunks;
  all.emplace_back();
  for (const auto& data : all) {
    const std::string to_sign = "AWS4-HMAC-SHA256-PAYLOAD\n" + std::string(example_date) + "\n" +
                                std::string(example_scope) + "\n" + previous + "\n" +
                                std::string(sluice::s3::empty_payload_sha256) + "\n" + sluice::s3::sha256_hex(data);
    previous = sluice::s3::signature(key, to_sign);
    body += hex_size(data.size()) + ";chunk-signature=" + previous + "\r\n";
    if (!data.empty()) body += data + "\r\n";
  }
  if (final_signature != nullptr) *final_signature = previous;
  if (end) body += "\r\n";
  return body;
}

std::string trailer_signature(std::string_view previous, std::string_view canonical) {
  const auto key = sluice::s3::signing_key(example_secret, "20130524", "us-east-1", "s3");
  return sluice::s3::signature(key, "AWS4-HMAC-SHA256-TRAILER\n" + std::string(example_date) + "\n" +
                                        std::string(example_scope) + "\n" + std::string(previous) + "\n" +
                                        sluice::s3::sha256_hex(canonical));
}

}  // namespace

TEST_CASE("aws_chunked: payload modes") {
  CHECK(sluice::s3::parse_payload_mode("STREAMING-AWS4-HMAC-SHA256-PAYLOAD") == payload_mode::streaming_signed);
  CHECK(sluice::s3::parse_payload_mode("STREAMING-UNSIGNED-PAYLOAD-TRAILER") ==
        payload_mode::streaming_unsigned_trailer);
  CHECK(sluice::s3::parse_payload_mode("STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER") ==
        payload_mode::streaming_signed_trailer);
  CHECK_FALSE(sluice::s3::parse_payload_mode("UNSIGNED-PAYLOAD").has_value());
  CHECK_FALSE(sluice::s3::parse_payload_mode("STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD").has_value());
  CHECK_FALSE(sluice::s3::parse_payload_mode(sluice::s3::empty_payload_sha256).has_value());
}

TEST_CASE("aws_chunked: the AWS sigv4-streaming example decodes and verifies") {
  const auto opts = example_options(payload_mode::streaming_signed, example_seed, 66560);
  const std::string body = aws_example_body();
  SUBCASE("in one piece, and with bytes after the body left alone") {
    auto out = decode(opts, body);
    CHECK(out.ec == error_code());
    CHECK(out.done);
    CHECK(out.consumed == body.size());
    CHECK(out.payload == std::string(66560, 'a'));
    out = decode(opts, body + "GET / HTTP/1.1\r\n");
    CHECK(out.ec == error_code());
    CHECK(out.consumed == body.size());
  }
  SUBCASE("split at chunk boundaries and inside headers, data and CRLFs") {
    const std::vector<std::vector<std::size_t>> splits{
        {1},
        {50},
        {86},
        {87},
        {88},
        {100, 200, 65620},
        {65623},
        {65624},
        {65625},
        {65626, 65700},
        {66700},
        {body.size() - 1},
        {body.size() - 2},
        {10, 20, 30, 40, 50, 60, 70, 80, 90, 65000, 65624, 65720, 66700}};
    for (const auto& cuts : splits) {
      CAPTURE(cuts.front());
      const auto out = decode(opts, body, cuts);
      CHECK(out.ec == error_code());
      CHECK(out.done);
      CHECK(out.payload == std::string(66560, 'a'));
    }
  }
  SUBCASE("one byte at a time") {
    std::vector<std::size_t> cuts(body.size() - 1);
    for (std::size_t i = 0; i < cuts.size(); ++i) cuts[i] = i + 1;
    const auto out = decode(opts, body, cuts);
    CHECK(out.ec == error_code());
    CHECK(out.done);
    CHECK(out.payload.size() == 66560);
  }
  SUBCASE("tampering is detected") {
    std::string tampered = body;
    tampered[90 + 40000] = 'b';  // a data byte of the first chunk
    auto out = decode(opts, tampered);
    CHECK(out.ec == errc::signature_does_not_match);
    CHECK_FALSE(out.done);

    tampered = body;
    flip_hex(tampered[body.size() - 4 - 30]);  // a digit of the final chunk's signature
    out = decode(opts, tampered);
    CHECK(out.ec == errc::signature_does_not_match);
    CHECK(out.payload.size() == 66560);  // all of it was passed on before the end was found bad

    // The wrong seed (another request's signature).
    out = decode(example_options(payload_mode::streaming_signed, trailer_example_seed, 66560), body);
    CHECK(out.ec == errc::signature_does_not_match);

    // Chunks swapped: each signature depends on the previous one.
    const std::string second = body.substr(65626, 86 + 1024 + 2);
    REQUIRE(second.starts_with("400;"));
    tampered = second + body.substr(0, 65626) + body.substr(65626 + second.size());
    out = decode(opts, tampered);
    CHECK(out.ec == errc::signature_does_not_match);
  }
}

TEST_CASE("aws_chunked: the AWS sigv4-streaming-trailers example decodes and verifies") {
  auto opts = example_options(payload_mode::streaming_signed_trailer, trailer_example_seed, 66560);
  opts.trailer_checksum = checksum_algorithm::crc32c;
  const std::string body = aws_trailer_example_chunks() + std::string(aws_trailer_example_trailer);
  aws_chunked_decoder* decoder = nullptr;
  auto out = decode(opts, body, {}, &decoder);
  CHECK(out.ec == error_code());
  CHECK(out.done);
  CHECK(out.consumed == body.size());
  CHECK(out.payload == std::string(66560, 'a'));
  REQUIRE(decoder != nullptr);
  CHECK(decoder->trailers().size() == 1);
  CHECK(decoder->trailers().at("x-amz-checksum-crc32c") == "sOO8/Q==");

  // Without a declared checksum the trailer is still signed and kept, just not compared.
  auto undeclared = opts;
  undeclared.trailer_checksum.reset();
  out = decode(undeclared, body);
  CHECK(out.ec == error_code());

  // minio-go sends an empty line between the final chunk and the trailer.
  out = decode(opts, aws_trailer_example_chunks() + "\r\n" + std::string(aws_trailer_example_trailer));
  CHECK(out.ec == error_code());
  CHECK(out.done);

  // Every split through the trailer section.
  const std::size_t trailer_start = aws_trailer_example_chunks().size() - 90;
  for (std::size_t cut = trailer_start; cut < body.size(); ++cut) {
    CAPTURE(cut);
    out = decode(opts, body, {cut});
    CHECK(out.ec == error_code());
    CHECK(out.done);
  }

  // The trailer signature covers the trailer.
  std::string tampered = body;
  tampered.replace(tampered.find("sOO8/Q=="), 8, "sOO8/Q0=");
  out = decode(opts, tampered);
  CHECK(out.ec == errc::signature_does_not_match);
  tampered = body;
  flip_hex(tampered[tampered.size() - 5]);
  out = decode(opts, tampered);
  CHECK(out.ec == errc::signature_does_not_match);
  // A missing trailer signature.
  out = decode(opts, aws_trailer_example_chunks() + "x-amz-checksum-crc32c:sOO8/Q==\r\n\r\n");
  CHECK(out.ec == errc::signature_does_not_match);
  // A field after the signature.
  out = decode(opts, body.substr(0, body.size() - 2) + "x-amz-meta-a:b\r\n\r\n");
  CHECK(out.ec == errc::invalid_request);
}

TEST_CASE("aws_chunked: signed bodies split at every boundary") {
  const std::vector<std::string> chunks{"hello ", "aws-chunked\r\nworld", "!"};
  const std::string payload = "hello aws-chunked\r\nworld!";
  const std::string body = signed_body(chunks, example_seed);
  const auto opts = example_options(payload_mode::streaming_signed, example_seed, payload.size());
  for (std::size_t a = 0; a <= body.size(); ++a) {
    const auto out = decode(opts, body, {a});
    CHECK(out.ec == error_code());
    CHECK(out.done);
    CHECK(out.payload == payload);
  }
  for (std::size_t a = 1; a < body.size(); a += 7) {
    for (std::size_t b = a; b <= body.size(); b += 3) {
      const auto out = decode(opts, body, {a, b});
      CHECK(out.ec == error_code());
      CHECK(out.payload == payload);
    }
  }
  // An empty body is one signed 0-size chunk.
  const auto empty =
      decode(example_options(payload_mode::streaming_signed, example_seed, 0), signed_body({}, example_seed));
  CHECK(empty.ec == error_code());
  CHECK(empty.done);
  CHECK(empty.payload.empty());
}

TEST_CASE("aws_chunked: any changed byte of a signed body fails") {
  const std::string payload = "0123456789abcdef";
  const std::string body = signed_body({"01234567", "89abcdef"}, example_seed);
  const auto opts = example_options(payload_mode::streaming_signed, example_seed, payload.size());
  for (std::size_t i = 0; i < body.size(); ++i) {
    std::string tampered = body;
    tampered[i] = tampered[i] == '0' ? '1' : '0';
    const auto out = decode(opts, tampered);
    CAPTURE(i);
    CHECK(out.ec != error_code());
    CHECK_FALSE(out.done);
  }
}

TEST_CASE("aws_chunked: framing and length errors") {
  const auto opts = example_options(payload_mode::streaming_signed, example_seed, 5);
  const std::string good = signed_body({"hello"}, example_seed);
  REQUIRE(decode(opts, good).ec == error_code());

  SUBCASE("the body ends early") {
    for (std::size_t n = 0; n < good.size(); ++n) {
      const auto out = decode(opts, good.substr(0, n));
      CHECK(out.ec == errc::incomplete_body);
      CHECK_FALSE(out.done);
    }
  }
  SUBCASE("decoded length disagrees") {
    auto out = decode(example_options(payload_mode::streaming_signed, example_seed, 6), good);
    CHECK(out.ec == errc::invalid_request);  // the final chunk came too soon
    out = decode(example_options(payload_mode::streaming_signed, example_seed, 4), good);
    CHECK(out.ec == errc::invalid_request);  // the first chunk is already too long
    CHECK(out.payload.empty());
  }
  SUBCASE("malformed lines") {
    const std::string sig(64, 'a');
    for (const std::string& bad : {
             std::string("5;chunk-signature=") + sig + "\nhello\r\n",               // bare LF
             std::string("5;chunk-signature=") + sig + "\r\rhello\r\n",             // CR without LF
             std::string("5;chunk-signature=") + sig.substr(1) + "\r\nhello\r\n",   // short signature
             std::string("5;chunk-signature=") + sig + "0\r\nhello\r\n",            // long signature
             std::string("5;chunk-signature=") + sig.substr(1) + "x\r\nhello\r\n",  // not hex
             std::string("5\r\nhello\r\n"),                                         // unsigned chunk in a signed body
             std::string("5;chunk-sig=") + sig + "\r\nhello\r\n",
             std::string("5 ;chunk-signature=") + sig + "\r\nhello\r\n",
             std::string(";chunk-signature=") + sig + "\r\nhello\r\n",
             std::string("x5;chunk-signature=") + sig + "\r\nhello\r\n",
             std::string("00000000000000005;chunk-signature=") + sig + "\r\nhello\r\n",  // 17 digits
             std::string("5;chunk-signature=") + sig + "\x01\r\nhello\r\n",
             std::string("\r\n"),
         }) {
      CAPTURE(bad);
      const auto out = decode(opts, bad);
      CHECK(out.ec == errc::invalid_request);
    }
  }
  SUBCASE("the CRLF after chunk data") {
    std::string bad = good;
    bad.replace(bad.find("hello\r\n"), 7, "hello\n\r");
    CHECK(decode(opts, bad).ec == errc::invalid_request);
    bad = good;
    const auto at = bad.find("hello\r\n") + 5;
    bad[at + 1] = 'X';
    CHECK(decode(opts, bad).ec == errc::invalid_request);
  }
  SUBCASE("no trailer in streaming_signed") {
    std::string final_signature;
    const std::string body = signed_body({"hello"}, example_seed, &final_signature, false) + "x-amz-meta-a:b\r\n\r\n";
    CHECK(decode(opts, body).ec == errc::invalid_request);
  }
  SUBCASE("header lines are bounded") {
    auto small = opts;
    small.max_chunk_header = 80;
    CHECK(decode(small, good).ec == errc::invalid_request);  // its header lines are 82 bytes and a CRLF
    small.max_chunk_header = 200;
    CHECK(decode(small, good).ec == error_code());
    // A line that never ends is refused at the limit, not buffered.
    const auto out = decode(opts, std::string(1'000'000, '0'));
    CHECK(out.ec == errc::invalid_request);
    CHECK(out.consumed <= opts.max_chunk_header + 1);
  }
  SUBCASE("errors are sticky") {
    aws_chunked_decoder decoder(opts);
    error_code ec;
    const auto sink = [](std::span<const std::byte>) {};
    (void)decoder.feed(bytes_of("zz\r\n"), sink, ec);
    CHECK(ec == errc::invalid_request);
    CHECK(decoder.feed(bytes_of(good), sink, ec) == 0);
    CHECK(ec == errc::invalid_request);
    decoder.finish(ec);
    CHECK(ec == errc::invalid_request);
  }
}

TEST_CASE("aws_chunked: data passes through as it arrives") {
  // A 1 MiB chunk fed in 4 KiB pieces reaches on_payload piece by piece, before the chunk ends.
  const std::string data(1 << 20, 'z');
  const std::string body = signed_body({data}, example_seed);
  aws_chunked_decoder decoder(example_options(payload_mode::streaming_signed, example_seed, data.size()));
  error_code ec;
  std::size_t calls = 0;
  std::size_t largest = 0;
  std::size_t fed = 0;
  while (fed < body.size() && !ec) {
    const std::size_t n = std::min<std::size_t>(4096, body.size() - fed);
    fed += decoder.feed(
        bytes_of(std::string_view(body).substr(fed, n)),
        [&](std::span<const std::byte> p) {
          ++calls;
          largest = std::max(largest, p.size());
        },
        ec);
  }
  CHECK_FALSE(ec);
  CHECK(decoder.done());
  CHECK(decoder.decoded_bytes() == data.size());
  CHECK(largest <= 4096);
  CHECK(calls >= data.size() / 4096);
}

TEST_CASE("aws_chunked: unsigned bodies with a checksum trailer") {
  // What the JS SDK v3 and botocore send: STREAMING-UNSIGNED-PAYLOAD-TRAILER, x-amz-trailer:
  // x-amz-checksum-crc32. CRC32("hello") = 0x3610a686, base64 NhCmhg==.
  const std::string body = "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:NhCmhg==\r\n\r\n";
  aws_chunked_decoder::options opts;
  opts.mode = payload_mode::streaming_unsigned_trailer;
  opts.decoded_length = 5;
  opts.trailer_checksum = checksum_algorithm::crc32;

  for (std::size_t cut = 0; cut <= body.size(); ++cut) {
    aws_chunked_decoder* decoder = nullptr;
    const auto out = decode(opts, body, {cut}, &decoder);
    CHECK(out.ec == error_code());
    CHECK(out.done);
    CHECK(out.payload == "hello");
    CHECK(decoder->trailers().at("x-amz-checksum-crc32") == "NhCmhg==");
  }
  // Chunks of many sizes, with extensions (ignored), upper-case hex and leading zeros.
  const std::string big(300, 'q');
  std::string many = "3;ext=1\r\nhel\r\n0002\r\nlo\r\n12C\r\n" + big + "\r\n0\r\n";
  {
    sluice::s3::digest crc(sluice::s3::digest_kind::crc32);
    crc.update("hello" + big);
    many += "X-Amz-Checksum-Crc32 : " + sluice::s3::base64_encode(crc.finish()) + " \r\n\r\n";
  }
  auto many_opts = opts;
  many_opts.decoded_length = 305;
  auto out = decode(many_opts, many);
  CHECK(out.ec == error_code());
  CHECK(out.payload == "hello" + big);

  // The checksum is compared.
  std::string wrong = body;
  wrong.replace(wrong.find("NhCmhg=="), 8, "NhCmhw==");
  CHECK(decode(opts, wrong).ec == errc::bad_digest);
  // The declared checksum must come, and must be base64.
  CHECK(decode(opts, "5\r\nhello\r\n0\r\n\r\n").ec == errc::incomplete_body);  // still waiting for it
  CHECK(decode(opts, "5\r\nhello\r\n0\r\n\r\n\r\n").ec == errc::invalid_request);
  CHECK(decode(opts, "5\r\nhello\r\n0\r\nx-amz-checksum-crc32c:NhCmhg==\r\n\r\n").ec == errc::invalid_request);
  CHECK(decode(opts, "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:NhCmhg=\r\n\r\n").ec == errc::invalid_request);
  // Another algorithm than declared.
  auto sha = opts;
  sha.trailer_checksum = checksum_algorithm::sha256;
  CHECK(decode(sha, body).ec == errc::invalid_request);
  // Malformed trailers.
  for (const std::string_view bad :
       {"5\r\nhello\r\n0\r\nx-amz-checksum-crc32:NhCmhg==\r\nx-amz-checksum-crc32:x\r\n\r\n",
        "5\r\nhello\r\n0\r\nno-colon\r\n\r\n", "5\r\nhello\r\n0\r\n:value\r\n\r\n",
        "5\r\nhello\r\n0\r\nbad name:v\r\n\r\n",
        "5\r\nhello\r\n0\r\nx-amz-trailer-signature:" /* not in unsigned mode */
        "d81f82fc3505edab99d459891051a732e8730629a2e4a59689829ca17fe2e435\r\n\r\n"}) {
    CAPTURE(bad);
    CHECK(decode(opts, bad).ec == errc::invalid_request);
  }
  // A trailer section larger than max_chunk_header.
  auto small = opts;
  small.max_chunk_header = 64;
  std::string long_trailer = "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:NhCmhg==\r\n";
  for (int i = 0; i < 10; ++i) long_trailer += "x-amz-meta-" + std::to_string(i) + ":v\r\n";
  CHECK(decode(small, long_trailer + "\r\n").ec == errc::invalid_request);

  // No trailer declared: "0\r\n\r\n" ends the body; an undeclared trailer is kept, unchecked.
  auto plain = opts;
  plain.trailer_checksum.reset();
  out = decode(plain, "5\r\nhello\r\n0\r\n\r\n");
  CHECK(out.ec == error_code());
  CHECK(out.done);
  aws_chunked_decoder* decoder = nullptr;
  out = decode(plain, "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n", {}, &decoder);
  CHECK(out.ec == error_code());
  CHECK(decoder->trailers().at("x-amz-checksum-crc32") == "AAAAAA==");
}

TEST_CASE("aws_chunked: signed bodies with a trailer, built by the documented rules") {
  std::string final_signature;
  const std::string chunks = signed_body({"hello"}, example_seed, &final_signature, false);
  const std::string canonical = "x-amz-checksum-crc32:NhCmhg==\nx-amz-meta-z:last\n";
  const std::string body = chunks + "x-amz-meta-z:last\r\nX-Amz-Checksum-CRC32:NhCmhg==\r\nx-amz-trailer-signature:" +
                           trailer_signature(final_signature, canonical) + "\r\n\r\n";
  auto opts = example_options(payload_mode::streaming_signed_trailer, example_seed, 5);
  opts.trailer_checksum = checksum_algorithm::crc32;
  for (std::size_t cut = 0; cut <= body.size(); ++cut) {
    const auto out = decode(opts, body, {cut});
    CHECK(out.ec == error_code());
    CHECK(out.done);
  }
  // The signature is over the trailer sorted by name, not in the order sent.
  const std::string unsorted =
      chunks + "x-amz-meta-z:last\r\nx-amz-checksum-crc32:NhCmhg==\r\nx-amz-trailer-signature:" +
      trailer_signature(final_signature, "x-amz-meta-z:last\nx-amz-checksum-crc32:NhCmhg==\n") + "\r\n\r\n";
  CHECK(decode(opts, unsorted).ec == errc::signature_does_not_match);
}
