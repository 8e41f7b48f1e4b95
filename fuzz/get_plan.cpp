// SPDX-License-Identifier: Apache-2.0
// Fuzz target: GET planning (src/s3/server/get_plan.hpp, sans-I/O) over arbitrary request text
// and object layouts. Must never crash, and every answer it plans must lie inside the object and
// the mapping the store lent, with the status its extent calls for.
//
// Input: one line of numbers "size base region part,part,..." then one line per field:
// If-Match, If-None-Match, If-Modified-Since, If-Unmodified-Since, Range, x-amz-checksum-mode,
// partNumber ("-" for absent), the six response-* values ("-" for absent), the ETag, and a line
// of flags (h: HEAD, s: signed).
#include "s3/server/get_plan.hpp"

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace {

std::string_view next_line(std::string_view& text) {
  const auto end = text.find('\n');
  const std::string_view line = text.substr(0, end);
  text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
  return line;
}

std::uint64_t next_number(std::string_view& text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == ',')) text.remove_prefix(1);
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  text.remove_prefix(static_cast<std::size_t>(end - text.data()));
  if (ec != std::errc{}) text = {};
  return value;
}

void check(bool holds) {
  if (!holds) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace sluice::s3::detail;  // NOLINT(google-build-using-namespace)
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string_view numbers = next_line(text);
  sluice::object_info info;
  info.size = next_number(numbers) % (1ULL << 40);
  get_source source{&info, next_number(numbers), next_number(numbers)};
  while (!numbers.empty() && info.attributes.part_sizes.size() < 64) {
    info.attributes.part_sizes.push_back(next_number(numbers));
  }
  get_request request;
  request.if_match = next_line(text);
  request.if_none_match = next_line(text);
  request.if_modified_since = next_line(text);
  request.if_unmodified_since = next_line(text);
  request.range = next_line(text);
  request.checksum_mode = next_line(text);
  const auto optional = [](std::string_view line) {
    return line == "-" ? std::nullopt : std::optional<std::string_view>(line);
  };
  request.part_number = optional(next_line(text));
  for (auto& value : request.overrides) value = optional(next_line(text));
  info.attributes.etag = std::string(next_line(text));
  const std::string_view flags = next_line(text);
  request.head = flags.find('h') != std::string_view::npos;
  request.signed_request = flags.find('s') != std::string_view::npos;

  const get_plan plan = plan_get(request, source);
  const auto* answer = std::get_if<get_answer>(&plan);
  if (answer == nullptr) return 0;
  // The extent lies inside the object, and inside the mapping for a GET.
  check(answer->size == info.size && answer->length <= info.size && answer->offset <= info.size - answer->length);
  if (!request.head) {
    check(answer->offset >= source.base && answer->offset - source.base <= source.region_size &&
          answer->length <= source.region_size - (answer->offset - source.base));
  }
  check(answer->ranged == (answer->status == boost::beast::http::status::partial_content));
  check(answer->ranged || (answer->offset == 0 && answer->length == info.size));
  check(!answer->checksums || !answer->ranged);
  check(answer->overridden_count == 0 || request.signed_request);
  for (std::size_t i = 0; i < answer->overridden_count; ++i) check(is_safe_header_value(answer->overridden[i].second));
  for (unsigned bits = 0; bits < 32; ++bits) {
    const route_facts facts{(bits & 1U) != 0, (bits & 2U) != 0, (bits & 4U) != 0, (bits & 8U) != 0, (bits & 16U) != 0};
    const body_route route = route_body(*answer, facts);
    check((route == body_route::none) == (facts.head || answer->length == 0));
    check(route != body_route::sendfile || (facts.file && !facts.tls));
    check(route != body_route::sealed || facts.tls);
    check(route != body_route::with_head ||
          (!facts.growing && !facts.awaiting && answer->length <= (facts.tls ? 16 * sluice::kib : body_slice)));
  }
  return 0;
}
