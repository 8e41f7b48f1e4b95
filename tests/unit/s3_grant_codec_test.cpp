// SPDX-License-Identifier: Apache-2.0
// The grant session's packet codec (src/s3/grant_codec.hpp): every message kept, every malformed
// packet refused (hostile lengths and counts included).
#include "s3/grant_codec.hpp"

#include <doctest/doctest.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace {

using namespace sluice::s3::detail;

std::vector<std::byte> bytes(std::initializer_list<int> values) {
  std::vector<std::byte> out;
  for (const int v : values) out.push_back(static_cast<std::byte>(v));
  return out;
}

}  // namespace

TEST_CASE("grant codec: keeps every message and refuses malformed packets") {
  grant_message hello;
  hello.type = grant_message_type::hello;
  hello.version = 1;
  hello.access_key_id = "alice";
  hello.nonce[3] = std::byte{7};
  grant_message granted;
  granted.type = grant_message_type::granted;
  granted.grant[0] = std::byte{1};
  granted.size = 16 << 20;
  grant_message error;
  error.type = grant_message_type::error;
  error.code = EUSERS;
  error.text = "too many";
  grant_message device;
  device.type = grant_message_type::device;
  device.description.assign(max_grant_description, std::byte{0xaa});
  for (const auto& m : {hello, granted, error, device}) {
    const auto packet = encode_grant_message(m);
    const auto back = decode_grant_message(packet);
    REQUIRE(back);
    CHECK(*back == m);
    // Any byte more, or any byte less, is refused (an error's text is the rest of its packet).
    if (m.type == grant_message_type::error) continue;
    auto longer = packet;
    longer.push_back(std::byte{0});
    CHECK(!decode_grant_message(longer));
    CHECK(!decode_grant_message(std::span(packet).first(packet.size() - 1)));
  }
  device.description.push_back(std::byte{0});  // one byte over the limit
  CHECK(!decode_grant_message(encode_grant_message(device)));
  hello.access_key_id.assign(max_grant_key_id + 1, 'k');
  CHECK(!decode_grant_message(encode_grant_message(hello)));
  CHECK(!decode_grant_message({}));
  const std::vector<std::byte> unknown{std::byte{0x09}};
  CHECK(!decode_grant_message(unknown));
  const std::vector<std::byte> huge(max_grant_packet + 1, std::byte{0x7f});
  CHECK(!decode_grant_message(huge));
}

TEST_CASE("grant codec: a length past the packet, or past its limit, is refused") {
  // hello: version 1, n = 0xFFFF (past the packet and the limit), then nothing.
  CHECK(!decode_grant_message(bytes({0x01, 0x01, 0xff, 0xff})));
  // device: n = 2 but one byte of description.
  CHECK(!decode_grant_message(bytes({0x06, 0x02, 0x00, 0xaa})));
  // device: n = 513 (over max_grant_description), with the bytes there.
  std::vector<std::byte> over = bytes({0x06, 0x01, 0x02});
  over.resize(over.size() + 513, std::byte{0});
  CHECK(!decode_grant_message(over));
  // memfd: a u64 cut short; granted: the id without its size.
  CHECK(!decode_grant_message(bytes({0x05, 1, 2, 3, 4, 5, 6, 7})));
  std::vector<std::byte> granted(17, std::byte{0});
  granted[0] = std::byte{0x07};
  CHECK(!decode_grant_message(granted));
  // error: a code cut short.
  CHECK(!decode_grant_message(bytes({0x7f, 1, 2})));
  // welcome carries nothing: one byte more is refused.
  CHECK(decode_grant_message(bytes({0x04})));
  CHECK(!decode_grant_message(bytes({0x04, 0x00})));
}

TEST_CASE("grant codec: the largest sizes survive the round trip") {
  grant_message memfd;
  memfd.type = grant_message_type::memfd;
  memfd.size = UINT64_MAX;
  const auto back = decode_grant_message(encode_grant_message(memfd));
  REQUIRE(back);
  CHECK(back->size == UINT64_MAX);
  grant_message error;
  error.type = grant_message_type::error;
  error.code = UINT32_MAX;
  error.text.assign(max_grant_packet - 5, 'x');  // exactly max_grant_packet bytes
  const auto packet = encode_grant_message(error);
  CHECK(packet.size() == max_grant_packet);
  const auto error_back = decode_grant_message(packet);
  REQUIRE(error_back);
  CHECK(*error_back == error);
}
