// SPDX-License-Identifier: Apache-2.0
// Fuzz target for the checks a gateway makes of its upstream's answers
// (include/sluice/s3/gateway_upstream.hpp): a ListObjectsV2 body through the client's parser and
// check_upstream_listing, and a GET answer's header fields through check_upstream_get. The
// upstream is hostile; none may crash, and each verdict must keep its contract:
//   - a listing the check accepts holds at most the keys asked for, valid, after start-after,
//     with the prefix, strictly ascending; "probe" only for a full page said to be the last,
//     "follow the token" only for an empty page with a new token; a refused one is bad_gateway
//     with an empty result;
//   - a GET answer accepted has the ETag asked for and the size the gateway counts on; one that
//     says another size (other_size) says it, and is refused all the same.
//
// Input: a first byte chooses the check (even: listing, odd: GET); then for a listing one byte of
// max-keys (1..8, so that pages overflow it), a byte-counted prefix and start-after, and the body;
// for a GET, lines: status, ETag, Content-Length, Content-Range, x-amz-server-side-encryption,
// its customer algorithm, then the ETag, offset, length and size asked.
#include <sluice/names.hpp>
#include <sluice/s3/gateway_upstream.hpp>
#include <sluice/s3/xml_client.hpp>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace s3 = sluice::s3;

void check(bool condition) {
  if (!condition) std::abort();
}

// A byte-counted string from the front of `in`.
std::string_view counted(std::string_view& in) {
  if (in.empty()) return {};
  const std::size_t n = std::min<std::size_t>(static_cast<unsigned char>(in.front()), in.size() - 1);
  const std::string_view out = in.substr(1, n);
  in.remove_prefix(1 + n);
  return out;
}

void fuzz_listing(std::string_view in) {
  if (in.empty()) return;
  const std::uint32_t asked = 1 + static_cast<unsigned char>(in.front()) % 8;
  in.remove_prefix(1);
  sluice::list_request request;
  request.bucket = "b";
  request.prefix = std::string(counted(in));
  request.start_after = std::string(counted(in));
  request.max_keys = asked;
  const std::string token = std::string(counted(in));
  sluice::error_code ec;
  s3::xml::list_bucket_result page = s3::xml::parse_list_objects_v2(in, ec);
  if (ec) {
    check(ec == s3::errc::malformed_xml);
    return;
  }
  const bool was_truncated = page.truncated;
  const std::size_t keys = page.objects.size();
  const std::string next_token = page.next_continuation_token;
  s3::detail::listing_next next = s3::detail::listing_next::probe;
  const sluice::list_result out = s3::detail::check_upstream_listing(page, request, asked, token, next, ec);
  if (ec) {
    check(ec == s3::errc::bad_gateway);
    check(out.objects.empty() && !out.truncated && next == s3::detail::listing_next::done);
    return;
  }
  check(out.objects.size() <= asked);
  const std::string* previous = &request.start_after;
  for (const auto& o : out.objects) {
    check(sluice::is_valid_object_key(o.key) && o.key > *previous && o.key.starts_with(request.prefix));
    previous = &o.key;
  }
  if (keys > asked) check(out.truncated && out.objects.size() == asked);
  if (was_truncated && keys > 0) check(out.truncated);
  switch (next) {
    case s3::detail::listing_next::follow_token:
      check(was_truncated && keys == 0 && out.objects.empty() && !next_token.empty() && next_token != token);
      break;
    case s3::detail::listing_next::probe: check(!out.truncated && out.objects.size() == asked); break;
    case s3::detail::listing_next::done: check(out.truncated || out.objects.size() < asked); break;
  }
}

std::uint64_t number(std::string_view text) {
  std::uint64_t value = 0;
  (void)std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

void fuzz_get(std::string_view in) {
  std::vector<std::string_view> lines;
  while (lines.size() < 10) {
    const auto end = in.find('\n');
    lines.push_back(in.substr(0, end));
    if (end == std::string_view::npos) {
      in = {};
    } else {
      in.remove_prefix(end + 1);
    }
  }
  s3::detail::upstream_get_fields fields;
  fields.status = static_cast<unsigned>(number(lines[0]) % 1000);
  fields.etag = lines[1];
  fields.content_length = lines[2];
  fields.content_range = lines[3];
  fields.sse = lines[4];
  fields.sse_customer = lines[5];
  s3::detail::upstream_get_request asked;
  asked.etag = lines[6];
  asked.offset = number(lines[7]);
  asked.length = number(lines[8]);
  asked.size = number(lines[9]);
  asked.max_object_bytes = std::uint64_t{5} << 40;
  sluice::error_code ec;
  const s3::detail::upstream_get_answer answer = s3::detail::check_upstream_get(fields, asked, ec);
  if (ec) {
    check(ec == s3::errc::bad_gateway);
    if (answer.other_size) check(answer.total != asked.size && answer.total <= asked.max_object_bytes);
    return;
  }
  check(!answer.other_size && answer.total == asked.size);
  check(fields.status == 200 || fields.status == 206);
  check(!asked.etag.empty());
  std::string_view etag = fields.etag;
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
  check(etag == asked.etag);
  if (fields.status == 200) check(asked.offset == 0);
  (void)s3::detail::is_md5_etag(fields.etag);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((data[0] & 1) == 0) {
    fuzz_listing(in);
  } else {
    fuzz_get(in);
  }
  return 0;
}
