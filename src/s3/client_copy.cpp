// SPDX-License-Identifier: Apache-2.0
// CopyObject, and for a source larger than one CopyObject may copy (S3: 5 GiB) a multipart upload
// of UploadPartCopy parts. The bytes stay in the server.
// Part of the client's implementation (include/sluice/s3/client.hpp); the declarations its
// translation units share are in client_internal.hpp.
#include "client_internal.hpp"

namespace sluice::s3::detail::client_impl {

namespace {

/// x-amz-copy-source: "/bucket/key", the key percent-encoded but for its slashes (any byte of a
/// key, "..", "//" and unicode included, survives).
std::string copy_source(const object_ref& from) {
  return "/" + uri_encode(from.bucket, true) + "/" + uri_encode(from.key, false);
}

/// The ETag of a CopyObject or UploadPartCopy answer, or `ec`: its status, or the <Error> body of
/// a 200 (a copy that failed after the answer started).
std::string copied_etag(const response& res, error_code& ec) {
  if (res.status >= 300) {
    ec = error_of(res, false);
    return {};
  }
  return xml::parse_copy_result(res.body, ec).etag;
}

/// An MD5 as a part's ETag writes it (32 hex digits), or nullopt.
std::optional<std::array<std::byte, 16>> md5_of_etag(std::string_view etag) {
  std::array<std::byte, 16> out{};
  if (etag.size() != 32) return std::nullopt;
  for (std::size_t i = 0; i < out.size(); ++i) {
    unsigned value = 0;
    const auto [end, problem] = std::from_chars(etag.data() + 2 * i, etag.data() + 2 * i + 2, value, 16);
    if (problem != std::errc{} || end != etag.data() + 2 * i + 2) return std::nullopt;
    out[i] = static_cast<std::byte>(value);
  }
  return out;
}

/// Shared by the workers of one multipart copy (all on the operation's strand).
struct part_copy_job {
  object_ref from;
  object_ref to;
  std::string upload_id;
  std::string source_etag;
  std::uint64_t size = 0;
  std::uint64_t part_size = 0;
  std::uint64_t parts = 0;
  std::uint64_t next = 0;
  std::vector<xml::completed_part> done;
  error_code failure;
  transfer_progress* progress = nullptr;
};

asio::awaitable<void> copy_parts(const op_context& op, part_copy_job& job) {
  while (!job.failure && job.next < job.parts) {
    const std::uint64_t index = job.next++;
    const std::uint64_t first = index * job.part_size;
    const std::uint64_t last = std::min(job.size, first + job.part_size) - 1;
    request_spec spec;
    spec.method = http::verb::put;
    spec.bucket = job.to.bucket;
    spec.key = job.to.key;
    spec.query = {{"partNumber", std::to_string(index + 1)}, {"uploadId", job.upload_id}};
    spec.headers.emplace_back("x-amz-copy-source", copy_source(job.from));
    spec.headers.emplace_back("x-amz-copy-source-range", "bytes=" + std::to_string(first) + "-" + std::to_string(last));
    spec.headers.emplace_back("x-amz-copy-source-if-match", "\"" + job.source_etag + "\"");
    spec.has_body = true;
    error_code ec;
    const response res = co_await execute(op, spec, ec);
    std::string etag = ec ? std::string() : copied_etag(res, ec);
    if (ec) {
      if (!job.failure) job.failure = ec;
      co_return;
    }
    job.done[index] = xml::completed_part{static_cast<std::uint32_t>(index + 1), std::move(etag), {}};
    job.progress->add(last + 1 - first);
  }
}

asio::awaitable<outcome<std::string>> multipart_copy(const op_context& op, const object_ref& from, const object_ref& to,
                                                     const object_info& source, const copy_options& options,
                                                     transfer_progress& progress) {
  outcome<std::string> out;
  const client_config& config = op.config();
  constexpr std::uint64_t max_parts = 10000;
  constexpr std::uint64_t max_part = std::uint64_t{5} << 30;
  part_copy_job job;
  job.from = from;
  job.to = to;
  job.source_etag = source.attributes.etag;
  job.size = source.size;
  job.part_size = std::min(max_part, std::max(config.part_size, (source.size + max_parts - 1) / max_parts));
  job.parts = (source.size + job.part_size - 1) / job.part_size;
  job.done.resize(static_cast<std::size_t>(job.parts));
  job.progress = &progress;
  if (job.parts > max_parts) {
    out.ec = s3::errc::entity_too_large;
    co_return out;
  }
  // The source's attributes as CopyObject's COPY directive would keep them (tags are not
  // carried by a multipart upload).
  object_attributes attributes = options.attributes.value_or(source.attributes);
  attributes.etag.clear();
  attributes.checksums.clear();
  job.upload_id = co_await create_upload(op, to.bucket, to.key, attributes, out.ec);
  if (out.ec) co_return out;
  const std::size_t workers = static_cast<std::size_t>(std::min<std::uint64_t>(config.parts_in_flight, job.parts));
  const std::function<asio::awaitable<void>()> worker = [&] { return copy_parts(op, job); };
  co_await run_workers(workers, worker);
  if (job.failure) {
    out.ec = job.failure;
    co_await abort_upload(op, to.bucket, to.key, job.upload_id);
    co_return out;
  }
  // The ETag the completed object has when each part's ETag is its MD5 (S3's, sluice's).
  std::vector<std::array<std::byte, 16>> md5s;
  for (const auto& part : job.done) {
    if (auto md5 = md5_of_etag(part.etag)) md5s.push_back(*md5);
  }
  const std::string expected = md5s.size() == job.done.size() ? multipart_etag(md5s) : std::string();
  out.value = co_await complete_upload(op, to.bucket, to.key, job.upload_id, job.done, {}, expected, out.ec);
  co_return out;
}

}  // namespace

asio::awaitable<outcome<std::string>> copy_object_op(op_context op, object_ref from, object_ref to,
                                                     copy_options options) {
  outcome<std::string> out;
  transfer_progress progress{options.progress, options.source_size.value_or(0), 0};
  if (!options.source_size || *options.source_size > options.multipart_threshold) {
    // A HEAD says how large the source is, and which version a multipart copy pins.
    const object_info info = co_await head_request(op, from.bucket, from.key, out.ec);
    if (out.ec) co_return out;
    if (!options.if_match.empty() && info.attributes.etag != options.if_match) {
      out.ec = s3::errc::precondition_failed;
      co_return out;
    }
    progress.total = info.size;
    if (info.size > options.multipart_threshold) {
      co_return co_await multipart_copy(op, from, to, info, options, progress);
    }
  }
  request_spec spec;
  spec.method = http::verb::put;
  spec.bucket = std::move(to.bucket);
  spec.key = std::move(to.key);
  spec.headers.emplace_back("x-amz-copy-source", copy_source(from));
  if (!options.if_match.empty())
    spec.headers.emplace_back("x-amz-copy-source-if-match", "\"" + options.if_match + "\"");
  if (options.attributes) {
    spec.headers.emplace_back("x-amz-metadata-directive", "REPLACE");
    add_attribute_headers(spec.headers, *options.attributes, out.ec);
    if (out.ec) co_return out;
  }
  spec.has_body = true;
  const response res = co_await execute(op, spec, out.ec);
  if (out.ec) co_return out;
  out.value = copied_etag(res, out.ec);
  if (!out.ec) progress.add(progress.total);
  co_return out;
}

}  // namespace sluice::s3::detail::client_impl
