// SPDX-License-Identifier: Apache-2.0
// Implementation of include/sluice/s3/gateway_upstream.hpp; included by src/s3/s3.cpp (sans-I/O,
// so that the fuzz build, which has no network part, has it too).
#include <sluice/names.hpp>
#include <sluice/s3/gateway_upstream.hpp>

#include <algorithm>
#include <charconv>
#include <optional>
#include <string>
#include <utility>

#include "common/text.hpp"

namespace sluice::s3::detail {

namespace upstream_answer {
namespace {

// Digits only, no sign, no spaces; nullopt for anything else or an overflow.
std::optional<std::uint64_t> parse_decimal(std::string_view text) noexcept {
  std::uint64_t value = 0;
  if (text.empty() || text.size() > 20) return std::nullopt;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

using ::sluice::detail::unquote;

}  // namespace
}  // namespace upstream_answer

bool is_md5_etag(std::string_view etag) noexcept {
  return etag.size() == 32 && std::all_of(etag.begin(), etag.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
         });
}

upstream_get_answer check_upstream_get(const upstream_get_fields& fields, const upstream_get_request& asked,
                                       error_code& ec) {
  ec = {};
  upstream_get_answer out;
  const auto fail = [&] {
    ec = s3::errc::bad_gateway;
    return out;
  };
  // An upstream that ignores If-Match answers with another version: its ETag says which.
  if (asked.etag.empty() || upstream_answer::unquote(fields.etag) != asked.etag) return fail();
  std::uint64_t total = 0;
  if (fields.status == 206) {
    // "bytes FIRST-LAST/TOTAL", inside what was asked.
    std::string_view range = fields.content_range;
    if (!range.starts_with("bytes ")) return fail();
    range.remove_prefix(6);
    const auto dash = range.find('-');
    const auto slash = range.find('/');
    if (dash == std::string_view::npos || slash == std::string_view::npos || dash > slash) return fail();
    const auto first = upstream_answer::parse_decimal(range.substr(0, dash));
    const auto last = upstream_answer::parse_decimal(range.substr(dash + 1, slash - dash - 1));
    const auto whole = upstream_answer::parse_decimal(range.substr(slash + 1));
    if (!first || !last || !whole || *first > *last || *last >= *whole || *first < asked.offset ||
        *last - asked.offset >= asked.length) {
      return fail();
    }
    const auto length = upstream_answer::parse_decimal(fields.content_length);
    if (length && *length != *last - *first + 1) return fail();
    total = *whole;
  } else if (fields.status == 200) {
    // The whole object (an upstream that ignores Range): only a read from the first byte can use it.
    const auto length = upstream_answer::parse_decimal(fields.content_length);
    if (!length || asked.offset != 0) return fail();
    total = *length;
  } else {
    return fail();
  }
  out.total = total;
  out.encrypted = fields.sse == "aws:kms" || fields.sse == "aws:kms:dsse" || !fields.sse_customer.empty();
  if (total != asked.size) {
    // The GET's size wins over the HEAD's: the caller fetches again with it.
    if (total > asked.max_object_bytes) return fail();
    out.other_size = true;
    return fail();
  }
  return out;
}

list_result check_upstream_listing(xml::list_bucket_result& page, const list_request& request, std::uint32_t asked,
                                   std::string_view continuation_token, listing_next& next, error_code& ec) {
  ec = {};
  next = listing_next::done;
  list_result out;
  const auto fail = [&] {
    ec = s3::errc::bad_gateway;
    next = listing_next::done;
    return list_result{};
  };
  // Keys out of order or not after start_after would loop the server's pager; keys outside the
  // prefix or that no S3 object can have are not the upstream's listing of this request.
  const std::string* previous = &request.start_after;
  for (const object_info& o : page.objects) {
    if (!is_valid_object_key(o.key) || o.key <= *previous || !o.key.starts_with(request.prefix)) return fail();
    previous = &o.key;
  }
  const bool more_than_asked = page.objects.size() > asked;
  if (page.truncated && page.objects.empty()) {
    // Nothing, but more to come (S3 may answer so): the token is the only way on.
    if (page.next_continuation_token.empty() || page.next_continuation_token == continuation_token) return fail();
    next = listing_next::follow_token;
    return out;
  }
  out.truncated = page.truncated || more_than_asked;
  // A full page marked as the last one may be an upstream that stops early: the gateway asks
  // for one key after it before it says the listing ends.
  if (!out.truncated && page.objects.size() == asked) next = listing_next::probe;
  if (more_than_asked) page.objects.resize(asked);
  out.objects = std::move(page.objects);
  return out;
}

}  // namespace sluice::s3::detail
