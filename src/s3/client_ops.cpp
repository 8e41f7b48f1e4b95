// SPDX-License-Identifier: Apache-2.0
// DeleteObject, CreateBucket/DeleteBucket, ListObjectsV2, ListBuckets, ListMultipartUploads and
// AbortMultipartUpload.
// Part of the client's implementation (include/sluice/s3/client.hpp); the declarations its
// translation units share are in client_internal.hpp.
#include "client_internal.hpp"

namespace sluice::s3::detail::client_impl {

// -- Other operations -------------------------------------------------------------------------

asio::awaitable<outcome<nothing>> delete_object_op(op_context op, std::string bucket, std::string key) {
  outcome<nothing> out;
  request_spec spec;
  spec.method = http::verb::delete_;
  spec.bucket = std::move(bucket);
  spec.key = std::move(key);
  const response res = co_await execute(op, spec, out.ec);
  if (!out.ec && res.status >= 300) {
    out.ec = error_of(res, false);
    if (out.ec == errc::no_such_key) out.ec = {};  // already gone: what a delete wants
  }
  co_return out;
}

asio::awaitable<outcome<nothing>> bucket_op(op_context op, std::string bucket, bool create) {
  outcome<nothing> out;
  const std::string body = create ? xml::create_bucket_configuration(op.config().region) : std::string();
  request_spec spec;
  spec.method = create ? http::verb::put : http::verb::delete_;
  spec.bucket = std::move(bucket);
  if (create) {
    spec.body = std::as_bytes(std::span(body));
    spec.has_body = true;
    spec.payload_hash = sha256_hex(body);
  }
  const response res = co_await execute(op, spec, out.ec);
  if (!out.ec && res.status >= 300) {
    out.ec = error_of(res, true);
    // A repeat after a lost answer finds the first attempt's work done.
    if (res.attempts > 1 &&
        ((create && out.ec == errc::bucket_already_owned_by_you) || (!create && out.ec == errc::no_such_bucket))) {
      out.ec = {};
    }
  }
  co_return out;
}

asio::awaitable<outcome<list_objects_result>> list_objects_op(op_context op, std::string bucket, list_options options,
                                                              bool all) {
  outcome<list_objects_result> out;
  std::string token = options.continuation_token;
  for (bool first = true;; first = false) {
    request_spec spec;
    spec.bucket = bucket;
    spec.query.emplace_back("list-type", "2");
    if (!options.prefix.empty()) spec.query.emplace_back("prefix", options.prefix);
    if (!options.delimiter.empty()) spec.query.emplace_back("delimiter", options.delimiter);
    spec.query.emplace_back("max-keys", std::to_string(options.max_keys));
    if (!token.empty()) spec.query.emplace_back("continuation-token", token);
    if (!options.start_after.empty()) spec.query.emplace_back("start-after", options.start_after);
    spec.query.emplace_back("encoding-type", "url");
    const response res = co_await execute(op, spec, out.ec);
    if (!out.ec && res.status >= 300) out.ec = error_of(res, true);
    if (out.ec) co_return out;
    list_objects_result page = xml::parse_list_objects_v2(res.body, out.ec);
    if (out.ec) co_return out;
    if (!all) {
      out.value = std::move(page);
      co_return out;
    }
    if (first) {
      out.value.bucket = page.bucket;
      out.value.prefix = page.prefix;
      out.value.delimiter = page.delimiter;
      out.value.start_after = page.start_after;
      out.value.continuation_token = page.continuation_token;
      out.value.max_keys = page.max_keys;
    }
    for (auto& object : page.objects) out.value.objects.push_back(std::move(object));
    for (auto& prefix : page.common_prefixes) {
      if (out.value.common_prefixes.empty() || out.value.common_prefixes.back() != prefix) {
        out.value.common_prefixes.push_back(std::move(prefix));
      }
    }
    if (!page.truncated) co_return out;
    if (page.next_continuation_token.empty() || page.next_continuation_token == token) {
      out.ec = sluice::errc::protocol_violation;  // truncated, but no way to go on
      co_return out;
    }
    token = std::move(page.next_continuation_token);
  }
}

asio::awaitable<outcome<std::vector<bucket_info>>> list_buckets_op(op_context op) {
  outcome<std::vector<bucket_info>> out;
  request_spec spec;
  const response res = co_await execute(op, spec, out.ec);
  if (!out.ec && res.status >= 300) out.ec = error_of(res, true);
  if (out.ec) co_return out;
  out.value = xml::parse_list_buckets(res.body, out.ec);
  co_return out;
}

asio::awaitable<outcome<std::vector<upload_info>>> list_uploads_op(op_context op, std::string bucket,
                                                                   std::string prefix) {
  outcome<std::vector<upload_info>> out;
  std::string key_marker;
  std::string id_marker;
  for (;;) {
    request_spec spec;
    spec.bucket = bucket;
    spec.query.emplace_back("uploads", "");
    if (!prefix.empty()) spec.query.emplace_back("prefix", prefix);
    if (!key_marker.empty()) spec.query.emplace_back("key-marker", key_marker);
    if (!id_marker.empty()) spec.query.emplace_back("upload-id-marker", id_marker);
    const response res = co_await execute(op, spec, out.ec);
    if (!out.ec && res.status >= 300) out.ec = error_of(res, true);
    if (out.ec) co_return out;
    xml::list_multipart_uploads_result page = xml::parse_list_multipart_uploads(res.body, out.ec);
    if (out.ec) co_return out;
    for (auto& upload : page.uploads) out.value.push_back(std::move(upload));
    if (!page.truncated) co_return out;
    if (page.next_key_marker.empty() ||
        (page.next_key_marker == key_marker && page.next_upload_id_marker == id_marker)) {
      out.ec = sluice::errc::protocol_violation;  // truncated, but no way to go on
      co_return out;
    }
    key_marker = std::move(page.next_key_marker);
    id_marker = std::move(page.next_upload_id_marker);
  }
}

asio::awaitable<outcome<nothing>> abort_upload_op(op_context op, std::string bucket, std::string key,
                                                  std::string upload_id) {
  outcome<nothing> out;
  request_spec spec;
  spec.method = http::verb::delete_;
  spec.bucket = std::move(bucket);
  spec.key = std::move(key);
  spec.query = {{"uploadId", std::move(upload_id)}};
  const response res = co_await execute(op, spec, out.ec);
  if (!out.ec && res.status >= 300) {
    out.ec = error_of(res, false);
    // A repeat after a lost answer finds the first attempt's work done.
    if (res.attempts > 1 && out.ec == errc::no_such_upload) out.ec = {};
  }
  co_return out;
}

}  // namespace sluice::s3::detail::client_impl
