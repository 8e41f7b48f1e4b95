// SPDX-License-Identifier: Apache-2.0
// Fuzz target for the same-host grant socket's packets (sluice::s3::detail::decode_grant_message,
// src/s3/grant_codec.hpp): every packet a local process sends the server, and every answer a
// client reads, goes through this decoder first. It must never crash or read out of bounds, and
// must keep its contract:
//   - nothing longer than max_grant_packet, no empty packet, no unknown type is accepted;
//   - an accepted packet is canonical: encode_grant_message gives back the very same bytes, and
//     those decode to an equal message (so no field carries bytes past its end, and no two
//     packets mean the same message);
//   - the accepted fields are within their limits (access key id, device description).
// Each input is also tried with every type byte in front of its tail, so that mutations reach
// the field parsers of every message instead of dying on the type.
#include "s3/grant_codec.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

namespace {

namespace detail = sluice::s3::detail;

void check(bool condition) {
  if (!condition) std::abort();
}

void check_packet(std::span<const std::byte> packet) {
  const auto message = detail::decode_grant_message(packet);
  if (!message) return;
  check(!packet.empty() && packet.size() <= detail::max_grant_packet);
  check(message->access_key_id.size() <= detail::max_grant_key_id);
  check(message->description.size() <= detail::max_grant_description);
  const std::vector<std::byte> again = detail::encode_grant_message(*message);
  check(again.size() == packet.size() && std::equal(again.begin(), again.end(), packet.begin()));
  const auto twice = detail::decode_grant_message(again);
  check(twice.has_value() && *twice == *message);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // An owned copy of exactly `size` bytes, so that ASan catches a read past the end.
  std::vector<std::byte> bytes(size);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>(data[i]);
  check_packet(bytes);
  if (!bytes.empty()) {
    for (const int type : {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x7f}) {
      bytes[0] = static_cast<std::byte>(type);
      check_packet(bytes);
    }
  }
  return 0;
}
