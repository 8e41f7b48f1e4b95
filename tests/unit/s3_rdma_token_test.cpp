// SPDX-License-Identifier: Apache-2.0
#include <sluice/s3/rdma_token.hpp>

#include <doctest/doctest.h>

#include <sluice/s3/error.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

using sluice::error_code;
using sluice::s3::check_rdma_token;
using sluice::s3::decode_rdma_token;
using sluice::s3::encode_rdma_token;
using sluice::s3::errc;
using sluice::s3::rdma_op;
using sluice::s3::rdma_segment;
using sluice::s3::rdma_token;

constexpr std::uint64_t u64_max = std::numeric_limits<std::uint64_t>::max();
constexpr std::string_view alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

// A reference base64url (no padding), one bit at a time: independent of the library's codec, so
// that tests can build the header value of any binary, valid or not.
std::string base64url(const std::vector<std::uint8_t>& bytes) {
  std::string out;
  unsigned value = 0;
  unsigned bits = 0;
  for (const std::uint8_t byte : bytes) {
    for (int i = 7; i >= 0; --i) {
      value = value << 1 | ((byte >> i) & 1u);
      if (++bits == 6) {
        out.push_back(alphabet[value]);
        value = 0;
        bits = 0;
      }
    }
  }
  if (bits > 0) out.push_back(alphabet[value << (6 - bits)]);
  return out;
}

// The reference decoding of canonical text (the tests only feed it what base64url() wrote).
std::vector<std::uint8_t> from_base64url(std::string_view text) {
  std::vector<std::uint8_t> out;
  unsigned value = 0;
  unsigned bits = 0;
  for (const char c : text) {
    const auto v = static_cast<unsigned>(alphabet.find(c));
    for (int i = 5; i >= 0; --i) {
      value = value << 1 | ((v >> i) & 1u);
      if (++bits == 8) {
        out.push_back(static_cast<std::uint8_t>(value));
        value = 0;
        bits = 0;
      }
    }
  }
  return out;
}

std::string to_hex(const std::vector<std::uint8_t>& bytes) {
  constexpr std::string_view digits = "0123456789abcdef";
  std::string out;
  for (const std::uint8_t b : bytes) {
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 15u]);
  }
  return out;
}

// The binary form field by field, lengths taken from the fields, so that a test can break one.
struct raw_token {
  std::uint8_t version = 1;
  std::uint8_t op = 1;
  std::uint8_t flags = 1;
  std::string provider = "tcp;ofi_rxm";
  std::vector<std::uint8_t> endpoint = {0x02, 0x00, 0x1f, 0x90, 0x7f, 0x00, 0x00, 0x01};
  std::uint64_t expires = 1'700'000'000;
  std::vector<rdma_segment> segments = {{0x7f00'0000'1000, 4096, 42}};
  std::vector<std::uint8_t> trailing;

  [[nodiscard]] std::vector<std::uint8_t> binary() const {
    std::vector<std::uint8_t> out{version, op, flags, static_cast<std::uint8_t>(provider.size())};
    const auto le = [&](std::uint64_t v, int n) {
      for (int i = 0; i < n; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
    };
    out.insert(out.end(), provider.begin(), provider.end());
    le(endpoint.size(), 2);
    out.insert(out.end(), endpoint.begin(), endpoint.end());
    le(expires, 8);
    out.push_back(static_cast<std::uint8_t>(segments.size()));
    for (const auto& s : segments) {
      le(s.address, 8);
      le(s.length, 8);
      le(s.key, 8);
    }
    out.insert(out.end(), trailing.begin(), trailing.end());
    return out;
  }
  [[nodiscard]] std::string text() const { return base64url(binary()); }
};

std::vector<std::byte> bytes_of(std::initializer_list<unsigned> values) {
  std::vector<std::byte> out;
  for (const unsigned v : values) out.push_back(static_cast<std::byte>(v));
  return out;
}

// The token of the layout test: every field has a value whose byte order shows.
rdma_token layout_token() {
  rdma_token t;
  t.op = rdma_op::write;
  t.virtual_addresses = true;
  t.provider = "shm";
  t.endpoint = bytes_of({0xde, 0xad, 0xbe, 0xef});
  t.expires = 1'700'000'000;  // 0x6553f100
  t.segments = {{0x0000'7f00'0000'1000, 0x1000, 0x2a}, {0x1122'3344'5566'7788, 1, 0xfedc'ba98'7654'3210}};
  return t;
}

bool rejected(std::string_view text) {
  error_code ec = errc::access_denied;
  const rdma_token token = decode_rdma_token(text, ec);
  return ec == errc::invalid_rdma_token && token == rdma_token{};
}

bool accepted(std::string_view text) {
  error_code ec = errc::access_denied;  // success must clear it
  (void)decode_rdma_token(text, ec);
  return !ec;
}

// Encodes, checks that the text is the reference encoding's spelling, decodes, compares.
void check_round_trip(const rdma_token& token) {
  const std::string text = encode_rdma_token(token);
  CHECK(text.size() <= sluice::s3::max_rdma_token_chars);
  CHECK(text.find_first_not_of(alphabet) == std::string::npos);
  CHECK(base64url(from_base64url(text)) == text);
  error_code ec = errc::access_denied;
  const rdma_token back = decode_rdma_token(text, ec);
  CHECK_FALSE(ec);
  CHECK(back == token);
  CHECK(encode_rdma_token(back) == text);
}

}  // namespace

TEST_CASE("rdma token: exact byte layout of one token") {
  const std::string text = encode_rdma_token(layout_token());
  // version, op, flags, provider length + "shm", endpoint length (LE) + bytes, expires (LE), count,
  // then each segment as address, length, key (LE).
  CHECK(to_hex(from_base64url(text)) ==
        "01"
        "01"
        "01"
        "03"
        "73686d"
        "0400"
        "deadbeef"
        "00f1536500000000"
        "02"
        "00100000007f0000"
        "0010000000000000"
        "2a00000000000000"
        "8877665544332211"
        "0100000000000000"
        "1032547698badcfe");
  CHECK(text == "AQEBA3NobQQA3q2-7wDxU2UAAAAAAgAQAAAAfwAAABAAAAAAAAAqAAAAAAAAAIh3ZlVEMyIRAQAAAAAAAAAQMlR2mLrc_g");
  error_code ec;
  CHECK(decode_rdma_token(text, ec) == layout_token());
  CHECK_FALSE(ec);
  CHECK(layout_token().total_length() == 0x1001);
}

TEST_CASE("rdma token: round trips") {
  check_round_trip(layout_token());

  rdma_token read = layout_token();
  read.op = rdma_op::read;
  read.virtual_addresses = false;
  read.provider = "tcp;ofi_rxm";
  check_round_trip(read);

  rdma_token empty = layout_token();  // a 0-byte transfer names no segment
  empty.segments.clear();
  check_round_trip(empty);
  CHECK(empty.total_length() == 0);

  rdma_token largest;  // every field at its limit: still well under max_rdma_token_chars
  largest.op = rdma_op::read;
  largest.provider = std::string(sluice::s3::max_rdma_provider_chars, '~');
  largest.endpoint.assign(sluice::s3::max_rdma_endpoint_bytes, std::byte{0xff});
  largest.expires = u64_max;
  for (std::size_t i = 0; i < sluice::s3::max_rdma_token_segments; ++i) {
    largest.segments.push_back({u64_max - (u64_max >> 6) * (i + 1), u64_max >> 6, u64_max - i});
  }
  check_round_trip(largest);
  CHECK(largest.total_length() == (u64_max >> 6) * 64);

  rdma_token edges = layout_token();  // address + length may reach exactly 2^64 - 1
  edges.provider = "!";
  edges.endpoint = bytes_of({0});
  edges.expires = 0;
  edges.segments = {{u64_max - 1, 1, 0}, {0, u64_max - 1, u64_max}};
  check_round_trip(edges);
  CHECK(edges.total_length() == u64_max);

  // Every endpoint length: the base64url text's three possible tails.
  for (std::size_t n = 1; n <= 8; ++n) {
    rdma_token t = layout_token();
    t.endpoint.assign(n, std::byte{0xa5});
    CAPTURE(n);
    check_round_trip(t);
  }
}

TEST_CASE("rdma token: the test's raw builder agrees with the codec") {
  const raw_token raw;
  REQUIRE(accepted(raw.text()));
  error_code ec;
  const rdma_token token = decode_rdma_token(raw.text(), ec);
  CHECK(encode_rdma_token(token) == raw.text());
  CHECK(token.provider == "tcp;ofi_rxm");
  CHECK(token.segments.size() == 1);
}

TEST_CASE("rdma token: truncation at every byte and character is rejected") {
  const std::vector<std::uint8_t> binary = raw_token{}.binary();
  for (std::size_t n = 0; n < binary.size(); ++n) {
    CAPTURE(n);
    CHECK(rejected(base64url({binary.begin(), binary.begin() + static_cast<std::ptrdiff_t>(n)})));
  }
  const std::string text = raw_token{}.text();
  for (std::size_t n = 0; n < text.size(); ++n) {
    CAPTURE(n);
    CHECK(rejected(std::string_view(text).substr(0, n)));
  }
}

TEST_CASE("rdma token: malformed base64url is rejected") {
  const std::string text = encode_rdma_token(layout_token());  // 70 bytes: 94 characters, 2 in the last group
  REQUIRE(text.size() % 4 == 2);
  CHECK(rejected(text + "="));
  CHECK(rejected(text + "=="));
  CHECK(rejected(text + "A"));  // a length of 1 mod 4
  CHECK(rejected(" " + text));
  CHECK(rejected(text + "\n"));
  CHECK(rejected(text.substr(0, 10) + std::string(1, '\0') + text.substr(11)));

  // The standard alphabet's spelling of the same bytes.
  REQUIRE(text.find('-') != std::string::npos);
  REQUIRE(text.find('_') != std::string::npos);
  std::string plus = text;
  plus[plus.find('-')] = '+';
  CHECK(rejected(plus));
  std::string slash = text;
  slash[slash.find('_')] = '/';
  CHECK(rejected(slash));

  // Non-zero unused bits in the last character: a second spelling of the same bytes.
  std::string loose = text;
  const auto last = alphabet.find(loose.back());
  REQUIRE((last & 15u) == 0);
  loose.back() = alphabet[last | 1u];
  CHECK(rejected(loose));

  CHECK(rejected(std::string(sluice::s3::max_rdma_token_chars + 1, 'A')));
  std::string long_text = text;  // a valid token cannot be padded out past the limit either
  long_text.append(sluice::s3::max_rdma_token_chars + 1 - long_text.size(), 'A');
  CHECK(rejected(long_text));
  CHECK(rejected(""));
}

TEST_CASE("rdma token: every malformed binary field is rejected") {
  const auto with = [](auto change) {
    raw_token raw;
    change(raw);
    return raw.text();
  };
  CHECK(rejected(with([](raw_token& r) { r.trailing = {0}; })));
  CHECK(rejected(with([](raw_token& r) { r.version = 0; })));
  CHECK(rejected(with([](raw_token& r) { r.version = 2; })));
  CHECK(rejected(with([](raw_token& r) { r.op = 0; })));
  CHECK(rejected(with([](raw_token& r) { r.op = 3; })));
  CHECK(rejected(with([](raw_token& r) { r.flags = 2; })));
  CHECK(rejected(with([](raw_token& r) { r.flags = 0x81; })));
  CHECK(rejected(with([](raw_token& r) { r.provider = ""; })));
  CHECK(rejected(with([](raw_token& r) { r.provider = "tcp ofi_rxm"; })));
  CHECK(rejected(with([](raw_token& r) { r.provider = "shm\x7f"; })));
  CHECK(rejected(with([](raw_token& r) { r.provider = "shm\x80"; })));
  CHECK(rejected(with([](raw_token& r) { r.provider = std::string(1, '\0'); })));
  CHECK(rejected(with([](raw_token& r) { r.provider = std::string(33, 'a'); })));
  CHECK(accepted(with([](raw_token& r) { r.provider = std::string(32, 'a'); })));
  CHECK(rejected(with([](raw_token& r) { r.endpoint.clear(); })));
  CHECK(rejected(with([](raw_token& r) { r.endpoint.assign(257, 1); })));
  CHECK(accepted(with([](raw_token& r) { r.endpoint.assign(256, 1); })));
  CHECK(rejected(with([](raw_token& r) { r.segments.assign(65, {0x1000, 1, 7}); })));
  CHECK(accepted(with([](raw_token& r) { r.segments.assign(64, {0x1000, 1, 7}); })));
  CHECK(rejected(with([](raw_token& r) { r.segments = {{0x1000, 0, 7}}; })));
  CHECK(rejected(with([](raw_token& r) { r.segments = {{0x1000, 8, 7}, {0x2000, 0, 7}}; })));
  CHECK(rejected(with([](raw_token& r) { r.segments = {{u64_max, 1, 7}}; })));
  CHECK(rejected(with([](raw_token& r) { r.segments = {{2, u64_max - 1, 7}}; })));
  CHECK(accepted(with([](raw_token& r) { r.segments = {{1, u64_max - 1, 7}}; })));
  CHECK(rejected(with([](raw_token& r) { r.segments = {{0, u64_max / 2 + 1, 7}, {0, u64_max / 2 + 1, 7}}; })));
  CHECK(accepted(with([](raw_token& r) { r.segments = {{0, u64_max / 2 + 1, 7}, {0, u64_max / 2, 7}}; })));
  CHECK(accepted(with([](raw_token& r) { r.segments.clear(); })));

  // A count larger than the segments that follow, and one smaller.
  std::vector<std::uint8_t> binary = raw_token{}.binary();
  const std::size_t count_at = binary.size() - 24 - 1;
  REQUIRE(binary[count_at] == 1);
  binary[count_at] = 2;
  CHECK(rejected(base64url(binary)));
  binary[count_at] = 0;
  CHECK(rejected(base64url(binary)));
  // Length fields that run past the end.
  binary = raw_token{}.binary();
  binary[3] = 0xff;  // provider length
  CHECK(rejected(base64url(binary)));
  binary = raw_token{}.binary();
  const std::size_t endpoint_length_at = 4 + raw_token{}.provider.size();
  binary[endpoint_length_at + 1] = 0xff;  // endpoint length 0xff08
  CHECK(rejected(base64url(binary)));
}

TEST_CASE("rdma token: check_rdma_token") {
  rdma_token token = layout_token();  // write, 0x1001 bytes, expires 1'700'000'000
  const std::uint64_t expires = token.expires;
  error_code ec = errc::access_denied;
  check_rdma_token(token, rdma_op::write, 0x1001, expires - 1, ec);
  CHECK_FALSE(ec);  // not yet expired one second before
  check_rdma_token(token, rdma_op::write, 0x1000, expires - 1, ec);
  CHECK_FALSE(ec);  // segments longer than the transfer
  check_rdma_token(token, rdma_op::write, 0, 0, ec);
  CHECK_FALSE(ec);

  check_rdma_token(token, rdma_op::read, 0x1001, expires - 1, ec);
  CHECK(ec == errc::invalid_rdma_token);  // wrong op
  check_rdma_token(token, rdma_op::write, 0x1001, expires, ec);
  CHECK(ec == errc::invalid_rdma_token);  // expired at exactly `expires`
  check_rdma_token(token, rdma_op::write, 0x1001, expires + 1, ec);
  CHECK(ec == errc::invalid_rdma_token);
  check_rdma_token(token, rdma_op::write, 0x1002, expires - 1, ec);
  CHECK(ec == errc::invalid_rdma_token);  // segments shorter than the transfer
  check_rdma_token(token, rdma_op::write, u64_max, expires - 1, ec);
  CHECK(ec == errc::invalid_rdma_token);

  token.segments.clear();  // a 0-byte transfer
  check_rdma_token(token, rdma_op::write, 0, expires - 1, ec);
  CHECK_FALSE(ec);
  check_rdma_token(token, rdma_op::write, 1, expires - 1, ec);
  CHECK(ec == errc::invalid_rdma_token);

  // A hand-built token whose total wraps cannot pass for a large one.
  token.segments = {{0, u64_max, 1}, {0, 2, 1}};
  check_rdma_token(token, rdma_op::write, 1, expires - 1, ec);
  CHECK(ec == errc::invalid_rdma_token);
  token.segments = {{0, 1, 1}};
  token.provider.clear();
  check_rdma_token(token, rdma_op::write, 1, expires - 1, ec);
  CHECK(ec == errc::invalid_rdma_token);
}

TEST_CASE("rdma token: encode_rdma_token refuses an invalid token") {
  const auto throws = [](auto change) {
    rdma_token token = layout_token();
    change(token);
    bool threw = false;
    try {
      (void)encode_rdma_token(token);
    } catch (const std::invalid_argument&) {
      threw = true;
    }
    return threw;
  };
  CHECK_FALSE(throws([](rdma_token&) {}));
  CHECK(throws([](rdma_token& t) { t.op = static_cast<rdma_op>(3); }));
  CHECK(throws([](rdma_token& t) { t.op = static_cast<rdma_op>(0); }));
  CHECK(throws([](rdma_token& t) { t.provider.clear(); }));
  CHECK(throws([](rdma_token& t) { t.provider = "tcp ofi_rxm"; }));
  CHECK(throws([](rdma_token& t) { t.provider.assign(33, 'a'); }));
  CHECK(throws([](rdma_token& t) { t.endpoint.clear(); }));
  CHECK(throws([](rdma_token& t) { t.endpoint.assign(257, std::byte{1}); }));
  CHECK(throws([](rdma_token& t) { t.segments.assign(65, {0, 1, 0}); }));
  CHECK(throws([](rdma_token& t) { t.segments.push_back({0x1000, 0, 0}); }));
  CHECK(throws([](rdma_token& t) { t.segments = {{u64_max, 1, 0}}; }));
  CHECK(throws([](rdma_token& t) { t.segments = {{0, u64_max, 0}, {0, 1, 0}}; }));
}
