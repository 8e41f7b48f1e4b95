// SPDX-License-Identifier: Apache-2.0
#include <sluice/s3/checksum.hpp>

#include <doctest/doctest.h>

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using sluice::s3::checksum_algorithm;
using sluice::s3::digest;
using sluice::s3::digest_kind;

std::span<const std::byte> bytes_of(std::string_view text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

std::string hex_digest(digest_kind kind, std::string_view text) {
  digest d(kind);
  d.update(text);
  return sluice::s3::to_hex(d.finish());
}

std::string base64_digest(digest_kind kind, std::string_view text) {
  digest d(kind);
  d.update(text);
  return sluice::s3::base64_encode(d.finish());
}

std::vector<std::byte> bytes_vector(std::string_view text) {
  const auto b = bytes_of(text);
  return {b.begin(), b.end()};
}

}  // namespace

TEST_CASE("checksum: digests match published vectors") {
  // RFC 1321, FIPS 180 examples, and the CRC catalogue's check values ("123456789").
  CHECK(hex_digest(digest_kind::md5, "") == "d41d8cd98f00b204e9800998ecf8427e");
  CHECK(hex_digest(digest_kind::md5, "abc") == "900150983cd24fb0d6963f7d28e17f72");
  CHECK(hex_digest(digest_kind::sha1, "abc") == "a9993e364706816aba3e25717850c26c9cd0d89d");
  CHECK(hex_digest(digest_kind::sha256, "abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(hex_digest(digest_kind::sha256, "") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(hex_digest(digest_kind::crc32, "123456789") == "cbf43926");
  CHECK(hex_digest(digest_kind::crc32c, "123456789") == "e3069283");
  CHECK(hex_digest(digest_kind::crc32, "") == "00000000");
  CHECK(hex_digest(digest_kind::crc32c, "") == "00000000");
  CHECK(hex_digest(digest_kind::crc32, "hello") == "3610a686");
  // The AWS sigv4-streaming-trailers example: 66560 'a' bytes carry x-amz-checksum-crc32c:sOO8/Q==.
  CHECK(base64_digest(digest_kind::crc32c, std::string(66560, 'a')) == "sOO8/Q==");
  // The one-shot SHA-256 (a context per thread, started over each time) and its hex forms.
  for (const std::string_view text : {"abc", "", "abc"}) {
    const auto bytes = sluice::s3::sha256(std::as_bytes(std::span(text.data(), text.size())));
    std::string appended = "x";
    sluice::s3::append_hex(appended, bytes);
    std::array<char, 64> chars{};
    sluice::s3::hex_into(chars, bytes);
    CHECK(appended.substr(1) == hex_digest(digest_kind::sha256, text));
    CHECK(std::string_view(chars.data(), chars.size()) == appended.substr(1));
  }
}

TEST_CASE("checksum: digest sizes") {
  CHECK(sluice::s3::digest_size(digest_kind::md5) == 16);
  CHECK(sluice::s3::digest_size(digest_kind::sha1) == 20);
  CHECK(sluice::s3::digest_size(digest_kind::sha256) == 32);
  CHECK(sluice::s3::digest_size(digest_kind::crc32) == 4);
  CHECK(sluice::s3::digest_size(digest_kind::crc32c) == 4);
  for (const auto kind :
       {digest_kind::md5, digest_kind::sha1, digest_kind::sha256, digest_kind::crc32, digest_kind::crc32c}) {
    digest d(kind);
    CHECK(d.kind() == kind);
    CHECK(d.finish().size() == sluice::s3::digest_size(kind));
    CHECK((d.native_handle() != nullptr) == (kind != digest_kind::crc32 && kind != digest_kind::crc32c));
  }
}

TEST_CASE("checksum: incremental updates equal one update, at every split") {
  const std::string text = "The quick brown fox jumps over the lazy dog, 0123456789 times.";
  for (const auto kind :
       {digest_kind::md5, digest_kind::sha1, digest_kind::sha256, digest_kind::crc32, digest_kind::crc32c}) {
    CAPTURE(static_cast<int>(kind));
    const std::string whole = hex_digest(kind, text);
    for (std::size_t split = 0; split <= text.size(); ++split) {
      digest d(kind);
      d.update(std::string_view(text).substr(0, split));
      d.update(bytes_of(std::string_view(text).substr(split)));
      CHECK(sluice::s3::to_hex(d.finish()) == whole);
    }
    digest bytewise(kind);
    for (const char c : text) bytewise.update(std::string_view(&c, 1));
    CHECK(sluice::s3::to_hex(bytewise.finish()) == whole);
  }
}

TEST_CASE("checksum: finish starts the digest over") {
  for (const auto kind : {digest_kind::sha256, digest_kind::crc32, digest_kind::crc32c}) {
    digest d(kind);
    d.update("garbage");
    (void)d.finish();
    d.update("123456789");
    CHECK(sluice::s3::to_hex(d.finish()) == hex_digest(kind, "123456789"));
  }
}

TEST_CASE("checksum: digest moves") {
  digest a(digest_kind::sha256);
  a.update("ab");
  digest b(std::move(a));
  CHECK(a.native_handle() == nullptr);  // NOLINT(bugprone-use-after-move): the documented moved-from state
  b.update("c");
  digest c(digest_kind::crc32);
  c = std::move(b);
  CHECK(c.kind() == digest_kind::sha256);
  CHECK(sluice::s3::to_hex(c.finish()) == hex_digest(digest_kind::sha256, "abc"));
  digest crc(digest_kind::crc32c);
  crc.update("1234");
  digest moved = std::move(crc);
  moved.update("56789");
  CHECK(sluice::s3::to_hex(moved.finish()) == "e3069283");
}

TEST_CASE("checksum: algorithm names") {
  CHECK(sluice::s3::header_name(checksum_algorithm::crc32) == "x-amz-checksum-crc32");
  CHECK(sluice::s3::header_name(checksum_algorithm::crc32c) == "x-amz-checksum-crc32c");
  CHECK(sluice::s3::header_name(checksum_algorithm::sha1) == "x-amz-checksum-sha1");
  CHECK(sluice::s3::header_name(checksum_algorithm::sha256) == "x-amz-checksum-sha256");
  CHECK(sluice::s3::algorithm_name(checksum_algorithm::crc32) == "CRC32");
  CHECK(sluice::s3::algorithm_name(checksum_algorithm::crc32c) == "CRC32C");
  CHECK(sluice::s3::algorithm_name(checksum_algorithm::sha1) == "SHA1");
  CHECK(sluice::s3::algorithm_name(checksum_algorithm::sha256) == "SHA256");
  for (const auto a :
       {checksum_algorithm::crc32, checksum_algorithm::crc32c, checksum_algorithm::sha1, checksum_algorithm::sha256}) {
    CHECK(sluice::s3::parse_checksum_algorithm(sluice::s3::algorithm_name(a)) == a);
    CHECK(sluice::s3::checksum_algorithm_of_header(sluice::s3::header_name(a)) == a);
  }
  CHECK(sluice::s3::parse_checksum_algorithm("crc32c") == checksum_algorithm::crc32c);
  CHECK(sluice::s3::parse_checksum_algorithm("Sha256") == checksum_algorithm::sha256);
  CHECK_FALSE(sluice::s3::parse_checksum_algorithm("CRC64NVME").has_value());
  CHECK_FALSE(sluice::s3::parse_checksum_algorithm("CRC3").has_value());
  CHECK_FALSE(sluice::s3::parse_checksum_algorithm("").has_value());
  CHECK(sluice::s3::checksum_algorithm_of_header("X-Amz-Checksum-CRC32") == checksum_algorithm::crc32);
  CHECK_FALSE(sluice::s3::checksum_algorithm_of_header("x-amz-checksum-algorithm").has_value());
  CHECK(sluice::s3::digest_kind_of(checksum_algorithm::crc32) == digest_kind::crc32);
  CHECK(sluice::s3::digest_kind_of(checksum_algorithm::crc32c) == digest_kind::crc32c);
  CHECK(sluice::s3::digest_kind_of(checksum_algorithm::sha1) == digest_kind::sha1);
  CHECK(sluice::s3::digest_kind_of(checksum_algorithm::sha256) == digest_kind::sha256);
}

TEST_CASE("checksum: hex is lower case") {
  const std::vector<std::byte> b{std::byte{0x00}, std::byte{0x9f}, std::byte{0xAB}, std::byte{0xff}};
  CHECK(sluice::s3::to_hex(b) == "009fabff");
  CHECK(sluice::s3::to_hex({}).empty());
}

TEST_CASE("checksum: base64 round-trips the RFC 4648 vectors") {
  const std::pair<std::string_view, std::string_view> vectors[] = {
      {"", ""},
      {"f", "Zg=="},
      {"fo", "Zm8="},
      {"foo", "Zm9v"},
      {"foob", "Zm9vYg=="},
      {"fooba", "Zm9vYmE="},
      {"foobar", "Zm9vYmFy"},
  };
  for (const auto& [plain, encoded] : vectors) {
    CAPTURE(plain);
    CHECK(sluice::s3::base64_encode(bytes_of(plain)) == encoded);
    const auto decoded = sluice::s3::base64_decode(encoded);
    REQUIRE(decoded.has_value());
    CHECK(*decoded == bytes_vector(plain));
  }
  std::vector<std::byte> all(256);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::byte>(i);
  const auto encoded = sluice::s3::base64_encode(all);
  CHECK(encoded.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") ==
        std::string::npos);
  CHECK(sluice::s3::base64_decode(encoded) == all);
}

TEST_CASE("checksum: base64_decode is strict") {
  for (const std::string_view bad : {"Zg", "Zg=", "Z===", "====", "Zg==Zg==", "=Zg=", "Zm9v YmFy", "Zm9vYmF!",
                                     "Zm9vYmF-", "Zm9vYmF_", "Zh==", "Zm9=", "Zm9vYg=\n", "\nZm9v", "Zm=v"}) {
    CAPTURE(bad);
    CHECK_FALSE(sluice::s3::base64_decode(bad).has_value());
  }
}

TEST_CASE("checksum: HMAC-SHA256 matches RFC 4231") {
  const std::vector<std::byte> key1(20, std::byte{0x0b});
  CHECK(sluice::s3::to_hex(sluice::s3::hmac_sha256(key1, "Hi There")) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(sluice::s3::to_hex(sluice::s3::hmac_sha256(bytes_of("Jefe"), "what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 6: a key longer than the block size.
  const std::vector<std::byte> key6(131, std::byte{0xaa});
  CHECK(sluice::s3::to_hex(sluice::s3::hmac_sha256(key6, "Test Using Larger Than Block-Size Key - Hash Key First")) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  CHECK(sluice::s3::hmac_sha256({}, "").size() == 32);
}

TEST_CASE("checksum: sha256_hex of text and of bytes agree") {
  CHECK(sluice::s3::sha256_hex(std::string_view("abc")) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sluice::s3::sha256_hex(bytes_of("abc")) == sluice::s3::sha256_hex(std::string_view("abc")));
  CHECK(sluice::s3::sha256_hex(std::string_view()) ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  // The body of the AWS PUT example.
  CHECK(sluice::s3::sha256_hex(std::string_view("Welcome to Amazon S3.")) ==
        "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
}

TEST_CASE("checksum: constant_time_equal") {
  CHECK(sluice::s3::constant_time_equal("", ""));
  CHECK(sluice::s3::constant_time_equal("abc", "abc"));
  CHECK_FALSE(sluice::s3::constant_time_equal("abc", "abd"));
  CHECK_FALSE(sluice::s3::constant_time_equal("abc", "ab"));
  CHECK_FALSE(sluice::s3::constant_time_equal("", "a"));
  const std::string a(64, 'f');
  std::string b = a;
  b[0] = 'e';
  CHECK_FALSE(sluice::s3::constant_time_equal(a, b));
  b = a;
  b[63] = 'e';
  CHECK_FALSE(sluice::s3::constant_time_equal(a, b));
  CHECK(sluice::s3::constant_time_equal(a, std::string(64, 'f')));
}
