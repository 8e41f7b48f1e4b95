// SPDX-License-Identifier: Apache-2.0
// GET and HEAD planning without I/O (get_plan.hpp).
// Part of the S3 server (src/s3/server/; docs/architecture.md lists the files).
#include "get_plan.hpp"

#include <string>

namespace sluice::s3::detail {
namespace {

/// Preconditions, in the order RFC 7232 section 6 gives: If-Match, If-Unmodified-Since (only
/// without If-Match), If-None-Match, If-Modified-Since (only without If-None-Match).
std::optional<get_plan> check_preconditions(const get_request& request, const object_info& info) {
  const auto last_modified = std::chrono::time_point_cast<std::chrono::seconds>(info.last_modified);
  const std::string_view etag = info.attributes.etag;
  if (!request.if_match.empty() && !etag_list_matches(request.if_match, etag)) {
    return answer_error{s3::errc::precondition_failed, {}};
  }
  if (request.if_match.empty()) {
    if (auto t = xml::parse_http_date(request.if_unmodified_since); t && last_modified > *t) {
      return answer_error{s3::errc::precondition_failed, {}};
    }
  }
  if (!request.if_none_match.empty() && etag_list_matches(request.if_none_match, etag)) return not_modified{};
  if (request.if_none_match.empty()) {
    if (auto t = xml::parse_http_date(request.if_modified_since); t && last_modified <= *t) return not_modified{};
  }
  return std::nullopt;
}

/// The response-* overrides into `answer`: signed requests only, as on S3, and only values that
/// are safe to send as a header (they come percent-decoded from the query).
std::optional<answer_error> take_overrides(const get_request& request, get_answer& answer) {
  for (std::size_t i = 0; i < response_overrides.size(); ++i) {
    const auto& value = request.overrides[i];
    if (!value) continue;
    if (!request.signed_request) {
      return answer_error{s3::errc::invalid_request,
                          "Request specific response headers cannot be used for anonymous GET requests."};
    }
    if (!is_safe_header_value(*value)) {
      return answer_error{s3::errc::invalid_argument, "The " + std::string(response_overrides[i].first) +
                                                          " value holds a character a header cannot carry."};
    }
    answer.overridden[answer.overridden_count++] = {response_overrides[i].second, *value};
  }
  return std::nullopt;
}

/// ?partNumber=N into `answer`'s extent: that part of a multipart object (206, with
/// x-amz-mp-parts-count), or the whole of any other object as its part 1.
std::optional<answer_error> take_part(const get_request& request, const object_info& info, get_answer& answer) {
  const auto number = parse_part_number(*request.part_number);
  if (!number) return answer_error{s3::errc::invalid_argument, "Part number must be an integer between 1 and 10000"};
  if (!request.range.empty()) {
    return answer_error{s3::errc::invalid_request, "Cannot specify both Range header and partNumber query parameter"};
  }
  const auto& sizes = info.attributes.part_sizes;
  if (*number > std::max<std::size_t>(sizes.size(), 1)) {
    return answer_error{s3::errc::invalid_part, "The requested partnumber is not satisfiable"};
  }
  if (sizes.empty()) return std::nullopt;
  answer.parts_count = sizes.size();
  std::uint64_t first = 0;
  for (std::uint32_t i = 1; i < *number; ++i) first += sizes[i - 1];
  const std::uint64_t length = sizes[*number - 1];
  if (first > info.size || length > info.size - first) return answer_error{s3::errc::internal_error, {}};
  if (length > 0) {
    answer.ranged = true;
    answer.offset = first;
    answer.length = length;
  }
  return std::nullopt;
}

}  // namespace

get_plan plan_get(const get_request& request, const get_source& source) {
  const object_info& info = *source.info;
  if (auto refused = check_preconditions(request, info)) return std::move(*refused);
  get_answer answer;
  if (auto refused = take_overrides(request, answer)) return std::move(*refused);
  answer.size = info.size;
  answer.length = info.size;
  if (request.part_number) {
    if (auto refused = take_part(request, info, answer)) return std::move(*refused);
  } else {
    const range_result range = parse_range(request.range, info.size);
    if (range.present && !range.satisfiable) return range_unsatisfiable{info.size};
    if (range.present) {
      answer.ranged = true;
      answer.offset = range.offset;
      answer.length = range.length;
    }
  }
  answer.status = answer.ranged ? http::status::partial_content : http::status::ok;
  answer.checksums = !answer.ranged && iequals(request.checksum_mode, "ENABLED");
  // The mapping must hold [offset, offset + length): a store that lent less is a fault here.
  if (!request.head && (answer.offset < source.base || answer.offset - source.base > source.region_size ||
                        answer.length > source.region_size - (answer.offset - source.base))) {
    return answer_error{s3::errc::internal_error, {}};
  }
  return answer;
}

body_route route_body(const get_answer& answer, const route_facts& facts) {
  if (facts.head || answer.length == 0) return body_route::none;
  if (facts.file && !facts.tls) return body_route::sendfile;
  // One slice from memory goes with its head in one write: one system call, and for a small
  // object one segment. Over TLS only a body that fits one record joins the head's buffer.
  if (!facts.growing && !facts.awaiting && answer.length <= body_slice && (!facts.tls || answer.length <= 16 * kib)) {
    return body_route::with_head;
  }
  return facts.tls ? body_route::sealed : body_route::slices;
}

}  // namespace sluice::s3::detail
