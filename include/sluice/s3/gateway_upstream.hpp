// SPDX-License-Identifier: Apache-2.0
// What a gateway's upstream answers, checked before anything of it is cached or passed on:
// sans-I/O functions over an answer's header fields and a parsed listing page, which
// gateway_store (gateway_store.hpp) feeds from its S3 client and fuzz/gateway_upstream.cpp feeds
// with arbitrary bytes. The upstream is not trusted: an answer these functions refuse is the
// upstream's fault, s3::errc::bad_gateway (502), never the client's.
#pragma once

#include <sluice/error.hpp>
#include <sluice/request.hpp>
#include <sluice/s3/error.hpp>
#include <sluice/s3/xml_client.hpp>

#include <cstdint>
#include <string_view>

namespace sluice::s3::detail {

/// Whether `etag` (unquoted) is a single-part MD5 ETag: 32 hex digits, no "-N" part count. Such
/// an ETag is the MD5 of the object's bytes, unless the object is encrypted with SSE-KMS or SSE-C
/// (the answer says so; upstream_get_answer::encrypted).
[[nodiscard]] bool is_md5_etag(std::string_view etag) noexcept;

/// The header fields of an upstream's success answer to a GET that the gateway checks, as sent
/// (empty when absent).
struct upstream_get_fields {
  unsigned status = 0;
  std::string_view etag;            ///< ETag
  std::string_view content_length;  ///< Content-Length
  std::string_view content_range;   ///< Content-Range
  std::string_view sse;             ///< x-amz-server-side-encryption
  std::string_view sse_customer;    ///< x-amz-server-side-encryption-customer-algorithm
};

/// What the gateway asked with a GET: bytes [offset, offset + length) of the version `etag`
/// (If-Match), whose size it believes is `size`.
struct upstream_get_request {
  std::string_view etag;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint64_t size = 0;
  std::uint64_t max_object_bytes = std::uint64_t{1} << 62;
};

/// What a GET answer said.
struct upstream_get_answer {
  /// The object's size by this answer: Content-Range's total (206), Content-Length (200); 0 when
  /// unknown (the answer failed the check before that).
  std::uint64_t total = 0;
  /// The answer is valid but for its size, which differs from the request's (a HEAD that
  /// understated or overstated it): the size to fetch is `total`.
  bool other_size = false;
  /// SSE-KMS or SSE-C: the ETag is not the MD5 of the bytes.
  bool encrypted = false;
};

/// Checks an upstream's 200 or 206 answer to `asked`: the ETag (quoted or not) must be the one
/// asked (an upstream that ignores If-Match sends another version), a 206 must carry a
/// Content-Range "bytes FIRST-LAST/TOTAL" inside the range asked, a 200 a Content-Length (the
/// whole object, from offset 0 only), and the object's size must be `asked.size` (else
/// other_size, when it is at most max_object_bytes). Errors: s3::errc::bad_gateway.
[[nodiscard]] upstream_get_answer check_upstream_get(const upstream_get_fields& fields,
                                                     const upstream_get_request& asked, error_code& ec);

/// What the gateway does after one upstream listing page.
enum class listing_next {
  done,          ///< the page is the answer
  probe,         ///< a full page said to be the last: ask for one key after it before believing it
  follow_token,  ///< an empty page marked truncated: ask again with its NextContinuationToken
};

/// One upstream ListObjectsV2 page of `request` (asked with max-keys `asked`, 1..1000), checked:
/// every key valid, after request.start_after, with request.prefix, in strictly ascending order,
/// and a truncated page either holds keys or names a new continuation token. At most `asked`
/// keys are kept: a page with more (the upstream ignored max-keys) is answered truncated, however
/// it is marked, so the server's pager asks for the rest. `next` says whether the page can be
/// believed as it is. Errors: s3::errc::bad_gateway (with an empty result).
[[nodiscard]] list_result check_upstream_listing(xml::list_bucket_result& page, const list_request& request,
                                                 std::uint32_t asked, std::string_view continuation_token,
                                                 listing_next& next, error_code& ec);

}  // namespace sluice::s3::detail
