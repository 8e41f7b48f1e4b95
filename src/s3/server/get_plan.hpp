// SPDX-License-Identifier: Apache-2.0
// GET and HEAD planning without I/O: from what a request asks and what the store lent, which
// answer to make (an error, 304, 416, or 200/206 with its extent and extra fields), and how its
// body leaves. connection::get_object gathers the facts, asks plan_get and route_body, and runs
// what they say; tests/unit/s3_get_plan_test.cpp tables them and fuzz/get_plan.cpp fuzzes them.
// Part of the S3 server (src/s3/server/; docs/architecture.md lists the files).
#pragma once

#include "support.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <variant>

namespace sluice::s3::detail {

/// The response-* query parameters a signed GET may use to set the answer's fields, in the
/// order get_request::overrides holds their values.
inline constexpr std::array<std::pair<std::string_view, http::field>, 6> response_overrides = {{
    {"response-content-type", http::field::content_type},
    {"response-content-language", http::field::content_language},
    {"response-expires", http::field::expires},
    {"response-cache-control", http::field::cache_control},
    {"response-content-disposition", http::field::content_disposition},
    {"response-content-encoding", http::field::content_encoding},
}};

/// What a GET or HEAD asks, as the request's text (empty: the header is absent).
struct get_request {
  bool head = false;
  bool signed_request = false;  // SigV4 or SigV2: response-* overrides need it
  std::string_view if_match;
  std::string_view if_none_match;
  std::string_view if_modified_since;
  std::string_view if_unmodified_since;
  std::string_view range;
  std::string_view checksum_mode;
  std::optional<std::string_view> part_number;
  std::array<std::optional<std::string_view>, response_overrides.size()> overrides{};
};

/// What the store lent: the version's info, and where the mapping's region lies in the object
/// (a part mapped by map_range starts at `base`).
struct get_source {
  const object_info* info = nullptr;
  std::uint64_t base = 0;
  std::uint64_t region_size = 0;
};

/// 304 Not Modified (with the version's ETag and Last-Modified).
struct not_modified {};
/// 416 with `Content-Range: bytes */size`.
struct range_unsatisfiable {
  std::uint64_t size = 0;
};

/// A successful answer: its status, the extent of the object it carries, and the fields it sets
/// beside the object's own (object_fields).
struct get_answer {
  http::status status = http::status::ok;
  std::uint64_t offset = 0;  // in the object
  std::uint64_t length = 0;
  std::uint64_t size = 0;  // the object's (Content-Range's total)
  bool ranged = false;     // 206 with Content-Range
  bool checksums = false;  // x-amz-checksum-mode: ENABLED on a whole-object answer
  std::optional<std::size_t> parts_count;
  std::array<std::pair<http::field, std::string_view>, response_overrides.size()> overridden{};
  std::size_t overridden_count = 0;

  /// Sets the answer's own fields on `head` (answer_head or fields_head): the overrides first
  /// (the object's own value of a field they set stands aside), then the object's fields,
  /// Content-Range and x-amz-mp-parts-count.
  template <class Head>
  void set_fields(Head& head, const object_info& info) const {
    for (std::size_t i = 0; i < overridden_count; ++i) head.set(overridden[i].first, overridden[i].second);
    object_fields(head, info, checksums);
    if (ranged) {
      char text[80] = "bytes ";  // and three numbers of at most 20 digits
      char* end = std::to_chars(text + 6, text + sizeof text, offset).ptr;
      *end++ = '-';
      end = std::to_chars(end, text + sizeof text, offset + length - 1).ptr;
      *end++ = '/';
      end = std::to_chars(end, text + sizeof text, size).ptr;
      head.set(http::field::content_range, std::string_view(text, static_cast<std::size_t>(end - text)));
    }
    if (parts_count) head.set("x-amz-mp-parts-count", std::uint64_t{*parts_count});
  }
};

/// What to answer. Anything but a get_answer, when the store lent a copy not yet confirmed by
/// its upstream, is answered from a confirmed version instead (the caller asks again).
using get_plan = std::variant<answer_error, not_modified, range_unsatisfiable, get_answer>;

/// The answer to `request` from `source`: preconditions in RFC 7232 section 6's order, the
/// response-* overrides, then the Range header or ?partNumber=N (that part of a multipart
/// object, or the whole of any other as its part 1), and a check that the mapping holds the
/// extent (internal_error when a store lent less).
get_plan plan_get(const get_request& request, const get_source& source);

/// How a successful answer's body leaves.
enum class body_route : std::uint8_t {
  none,       // HEAD, or an empty body: the head alone
  with_head,  // one slice from memory in the head's write (plain: two buffers; TLS ≤ 16 KiB: one record)
  sendfile,   // from the store's file by sendfile(2), slice by slice (plain HTTP only)
  sealed,     // TLS: full records sealed in batches, the head in the first
  slices,     // from memory, slice by slice after the head
};

/// What decides the route beside the answer.
struct route_facts {
  bool head = false;
  bool tls = false;
  bool file = false;      // the mapping has a file and the server's sendfile policy allows it here
  bool growing = false;   // the mapping is still being filled (a gateway's miss)
  bool awaiting = false;  // the last slice waits for an upstream's confirmation
};

/// The size of a slice: what a growing mapping is awaited by and what one write carries.
inline constexpr std::uint64_t body_slice = 4 * mib;

body_route route_body(const get_answer& answer, const route_facts& facts);

}  // namespace sluice::s3::detail
