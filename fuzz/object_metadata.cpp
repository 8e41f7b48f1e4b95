// SPDX-License-Identifier: Apache-2.0
// Fuzz target for the object file header parser of fs_store (sluice::s3::parse_object_header).
// The header comes from disk, so it is untrusted: damaged files, files from another version.
// The parser must not crash or read past its input, and its results keep the contract:
//   - a failure is always errc::protocol_violation, with data_offset 0 and an empty info;
//   - a success has a valid key and a data offset that is a non-zero multiple of 4096 within
//     max_object_header_bytes, and re-encoding the info (encode_object_header) and parsing it
//     again gives back the same info and offset: what the store writes, it reads back exactly.
#include <sluice/s3/fs_store.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

namespace {

void check(bool condition) {
  if (!condition) std::abort();
}

bool same(const sluice::object_info& a, const sluice::object_info& b) {
  return a.key == b.key && a.size == b.size && a.last_modified == b.last_modified && a.attributes == b.attributes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // An owned copy of exactly `size` bytes, so that ASan catches a read past the end.
  const std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(data),
                                     reinterpret_cast<const std::byte*>(data) + size);
  sluice::error_code ec;
  std::uint64_t offset = 12345;
  const sluice::object_info info = sluice::s3::parse_object_header(bytes, offset, ec);
  if (ec) {
    check(ec == sluice::errc::protocol_violation);
    check(offset == 0 && info.key.empty() && info.size == 0);
    return 0;
  }
  check(sluice::is_valid_object_key(info.key));
  check(offset != 0 && offset % sluice::s3::object_header_alignment == 0);
  check(offset <= sluice::s3::max_object_header_bytes);

  // Round trip through the writer, with the same data offset.
  const auto encoded = sluice::s3::encode_object_header(info, offset, ec);
  check(!ec);
  check(encoded.size() == offset);
  std::uint64_t again_offset = 0;
  const sluice::object_info again = sluice::s3::parse_object_header(encoded, again_offset, ec);
  check(!ec);
  check(again_offset == offset);
  check(same(info, again));

  // Any truncation of a valid header before the end of its JSON is refused.
  const auto json_end =
      std::size_t{16} + (std::to_integer<std::size_t>(encoded[12]) | std::to_integer<std::size_t>(encoded[13]) << 8 |
                         std::to_integer<std::size_t>(encoded[14]) << 16 |
                         std::to_integer<std::size_t>(encoded[15]) << 24);
  std::uint64_t cut_offset = 0;
  (void)sluice::s3::parse_object_header(std::span(encoded).first(json_end - 1), cut_offset, ec);
  check(ec == sluice::errc::protocol_violation && cut_offset == 0);
  return 0;
}
