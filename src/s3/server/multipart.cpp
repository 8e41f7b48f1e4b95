// SPDX-License-Identifier: Apache-2.0
// Multipart uploads: create, UploadPart, UploadPartCopy, complete, abort, list parts and uploads.
// Part of the S3 server (src/s3/server/; docs/architecture.md lists the files).
#include "receive.hpp"

namespace sluice::s3::detail {

template <class Stream>
asio::awaitable<bool> connection<Stream>::multipart(request& req) {
  const route& r = req.where;
  const object_ref object{r.bucket, r.key};
  const std::string upload_id(r.param("uploadId").value_or(""));
  error_code ec;
  switch (r.op) {
    case operation::create_multipart_upload: co_return co_await create_multipart_upload(req);
    case operation::upload_part: {
      const auto number = parse_part_number(r.param("partNumber").value_or(""));
      if (!number) {
        co_return co_await send_error(req, s3::errc::invalid_argument,
                                      "Part number must be an integer between 1 and 10000");
      }
      const part_in_flight receiving(*state_, upload_id);  // not expired while its part arrives
      auto writer = state_->store->begin_part(object, upload_id, *number, ec);
      if (ec) co_return co_await send_error(req, to_s3(ec));
      auto attributes = co_await receive_payload(req, writer, state_->config.max_object_bytes);
      if (!attributes) co_return false;
      const object_info info = co_await offload([&] { return writer.commit(*attributes, ec); });
      if (ec) co_return co_await send_error(req, to_s3(ec));
      string_response res{http::status::ok, 11};
      res.set(http::field::etag, "\"" + info.attributes.etag + "\"");
      for (const auto& [algorithm, value] : info.attributes.checksums) res.set("x-amz-checksum-" + algorithm, value);
      co_return co_await send(req, std::move(res));
    }
    case operation::complete_multipart_upload: {
      const auto precondition = write_precondition_of(req.header("If-Match"), req.header("If-None-Match"));
      if (!precondition) {
        co_return co_await send_error(req, s3::errc::not_implemented,
                                      std::string(operation_name(req.where.op)) + std::string(unsupported_condition));
      }
      auto body = co_await read_small_body(req, 4 * mib);
      if (!body) co_return co_await send_error(req, s3::errc::malformed_xml);
      const auto chosen = xml::parse_complete_multipart_upload(*body, ec);
      if (ec) co_return co_await send_error(req, to_s3(ec));
      // A client's retry of a completion that succeeded (its answer was lost): the object that
      // upload made is still there, so the answer is the same.
      const auto completed_before = [&]() -> std::optional<object_info> {
        error_code head_error;
        object_info current = state_->store->head(object, head_error);
        if (head_error || current.attributes.upload_id != upload_id) return std::nullopt;
        return current;
      };
      const auto completed = [&](const object_info& info) {
        return send_xml(req, xml::complete_multipart_upload("/" + r.bucket + "/" + r.key, r.bucket, r.key,
                                                            info.attributes.etag, info.attributes.checksums));
      };
      const std::vector<part_info> uploaded = state_->store->list_parts(object, upload_id, ec);
      if (ec == sluice::errc::no_such_upload) {
        if (const auto before = co_await store_call(completed_before)) co_return co_await completed(*before);
      }
      if (ec) co_return co_await send_error(req, to_s3(ec));
      if (const auto failure = co_await early_precondition_failure(req, *precondition)) {
        co_return co_await send_error(req, *failure);
      }
      object_attributes attributes;
      for (const auto& u : state_->store->list_uploads(r.bucket, r.key, ec)) {
        if (u.upload_id == upload_id) attributes = u.attributes;
      }
      composite_checksum composite(attributes);
      std::vector<part_info> parts;
      digest etags(digest_kind::md5);
      for (std::size_t i = 0; i < chosen.size(); ++i) {
        auto it = std::find_if(uploaded.begin(), uploaded.end(),
                               [&](const part_info& p) { return p.number == chosen[i].number; });
        if (it == uploaded.end() || it->etag != chosen[i].etag)
          co_return co_await send_error(req, s3::errc::invalid_part);
        if (i + 1 < chosen.size() && it->size < state_->config.min_part_bytes) {
          co_return co_await send_error(req, s3::errc::entity_too_small);
        }
        auto binary = std::vector<std::byte>();
        for (std::size_t h = 0; h + 1 < it->etag.size(); h += 2) {
          unsigned v = 0;
          std::from_chars(it->etag.data() + h, it->etag.data() + h + 2, v, 16);
          binary.push_back(static_cast<std::byte>(v));
        }
        etags.update(binary);
        if (auto failure = composite.add(*it, chosen[i].checksums)) {
          co_return co_await send_error(req, failure->code, failure->message);
        }
        parts.push_back(*it);
      }
      composite.finish(attributes);
      attributes.etag = to_hex(etags.finish()) + "-" + std::to_string(parts.size());
      attributes.upload_id = upload_id;
      attributes.part_sizes.clear();
      for (const part_info& part : parts) attributes.part_sizes.push_back(part.size);
      const object_info info = co_await offload(
          [&] { return state_->store->complete_upload(object, upload_id, parts, attributes, ec, *precondition); });
      if (ec == sluice::errc::no_such_upload) {  // completed by a retry that raced this one
        if (const auto before = co_await store_call(completed_before)) co_return co_await completed(*before);
      }
      if (ec) co_return co_await send_error(req, to_s3(ec));
      co_await announce(object, info.size);
      co_return co_await completed(info);
    }
    case operation::abort_multipart_upload: {
      state_->store->abort_upload(object, upload_id, ec);
      if (ec) co_return co_await send_error(req, to_s3(ec));
      co_return co_await send_empty(req, http::status::no_content);
    }
    case operation::list_parts: {
      const auto parts = state_->store->list_parts(object, upload_id, ec);
      if (ec) co_return co_await send_error(req, to_s3(ec));
      co_return co_await send_xml(req, xml::list_parts(r.bucket, r.key, upload_id, parts, 1000, false, 0));
    }
    case operation::list_multipart_uploads: {
      const std::string prefix(r.param("prefix").value_or(""));
      const auto uploads = state_->store->list_uploads(r.bucket, prefix, ec);
      if (ec) co_return co_await send_error(req, to_s3(ec, true));
      co_return co_await send_xml(req, xml::list_multipart_uploads(r.bucket, prefix, uploads));
    }
    default: break;
  }
  co_return co_await send_error(req, s3::errc::not_implemented,
                                std::string(operation_name(r.op)) + " is not implemented.");
}

template <class Stream>
asio::awaitable<bool> connection<Stream>::create_multipart_upload(request& req) {
  const route& r = req.where;
  const object_ref object{r.bucket, r.key};
  error_code ec;
  std::string why;
  if (!header_tags(req, why)) co_return co_await send_error(req, s3::errc::invalid_tag, why);
  object_attributes attributes = attributes_from(req);
  // x-amz-checksum-algorithm: every part must carry that checksum, and the object gets their
  // composite. Kept with the upload as a checksum of that name without a value yet.
  std::optional<checksum_algorithm> algorithm;
  if (const auto named = req.header("x-amz-checksum-algorithm"); !named.empty()) {
    algorithm = parse_checksum_algorithm(named);
    if (!algorithm) {
      co_return co_await send_error(req, s3::errc::invalid_request,
                                    "Checksum algorithm provided is unsupported. "
                                    "Please try again with any of the valid types: "
                                    "[CRC32, CRC32C, SHA1, SHA256]");
    }
    attributes.checksums[lower_name(*algorithm)] = "";
  }
  if (const auto type = req.header("x-amz-checksum-type"); !type.empty() && !iequals(type, "COMPOSITE")) {
    if (iequals(type, "FULL_OBJECT")) {
      co_return co_await send_error(req, s3::errc::not_implemented,
                                    "CreateMultipartUpload with x-amz-checksum-type FULL_OBJECT is not "
                                    "implemented; COMPOSITE is.");
    }
    co_return co_await send_error(req, s3::errc::invalid_request, "Value for x-amz-checksum-type is invalid.");
  }
  const std::string id = co_await store_call([&] { return state_->store->create_upload(object, attributes, ec); });
  if (ec) co_return co_await send_error(req, to_s3(ec));
  string_response res{http::status::ok, 11};
  res.set(http::field::content_type, "application/xml");
  if (algorithm) {
    res.set("x-amz-checksum-algorithm", algorithm_name(*algorithm));
    res.set("x-amz-checksum-type", "COMPOSITE");
  }
  res.body() = xml::initiate_multipart_upload(r.bucket, r.key, id);
  co_return co_await send(req, std::move(res));
}

template <class Stream>
asio::awaitable<bool> connection<Stream>::upload_part_copy(request& req) {
  const route& r = req.where;
  const auto number = parse_part_number(r.param("partNumber").value_or(""));
  if (!number) {
    co_return co_await send_error(req, s3::errc::invalid_argument,
                                  "Part number must be an integer between 1 and 10000");
  }
  const auto from = parse_copy_source(req.header("x-amz-copy-source"));
  if (!from) co_return co_await send_error(req, s3::errc::invalid_argument, "invalid x-amz-copy-source");
  if (!owns(req, from->bucket)) co_return co_await send_error(req, s3::errc::access_denied);
  error_code ec;
  // The mapping holds this version of the source for the whole copy: a PUT over it meanwhile
  // cannot tear the part.
  auto mapping = co_await store_call([&] { return state_->store->map(*from, ec); });
  if (ec) co_return co_await send_error(req, to_s3(ec));
  if (!copy_source_allows(req, mapping.info())) co_return co_await send_error(req, s3::errc::precondition_failed);
  std::optional<std::string_view> range_header;
  if (auto it = req.msg().find("x-amz-copy-source-range"); it != req.msg().end()) {
    range_header = std::string_view(it->value().data(), it->value().size());
  }
  const copy_extent extent = parse_copy_source_range(range_header, mapping.info().size);
  if (extent.problem) co_return co_await send_error(req, extent.problem->code, extent.problem->message);
  if (extent.length > state_->config.max_object_bytes) {
    co_return co_await send_error(req, s3::errc::entity_too_large, "A part is larger than the maximum part size.");
  }
  auto writer =
      state_->store->begin_part({r.bucket, r.key}, std::string(r.param("uploadId").value_or("")), *number, ec);
  if (ec) co_return co_await send_error(req, to_s3(ec));
  // As UploadPart would have: the part's ETag is the MD5 of its bytes, so the completed object's
  // "-N" ETag is S3's. The bytes go from the mapping to the writer in slices, never gathered.
  const object_info info = co_await offload([&] {
    object_attributes attributes;
    digest md5(digest_kind::md5);
    write_from(writer, mapping.region().bytes() + extent.offset, extent.length, &md5, ec);
    attributes.etag = to_hex(md5.finish());
    return ec ? object_info{} : writer.commit(attributes, ec);
  });
  if (ec) co_return co_await send_error(req, to_s3(ec));
  co_return co_await send_xml(req, xml::copy_part_result(info.attributes.etag, info.last_modified));
}

#define SLUICE_CONNECTION_MEMBERS(S)                                                              \
  template asio::awaitable<bool> connection<S>::multipart(connection<S>::request&);               \
  template asio::awaitable<bool> connection<S>::create_multipart_upload(connection<S>::request&); \
  template asio::awaitable<bool> connection<S>::upload_part_copy(connection<S>::request&);
SLUICE_CONNECTION_MEMBERS(plain_stream)
SLUICE_CONNECTION_MEMBERS(tls_stream)
#undef SLUICE_CONNECTION_MEMBERS

}  // namespace sluice::s3::detail
