// Object operations: PutObject, CopyObject, DeleteObject, object tagging (GetObject and
// HeadObject are in get_object.cpp).
// Part of the S3 server (src/s3/server/; docs/architecture.md lists the files).
#include "receive.hpp"

namespace sluice::s3::detail {

template <class Stream>
asio::awaitable<bool> connection<Stream>::put_object(request& req) {
  std::string why;
  if (!header_tags(req, why)) co_return co_await send_error(req, s3::errc::invalid_tag, why);
  const auto precondition = write_precondition_of(req.header("If-Match"), req.header("If-None-Match"));
  if (!precondition) co_return co_await send_error(req, s3::errc::not_implemented, std::string(unsupported_condition));
  if (const auto failure = co_await early_precondition_failure(req, *precondition)) {
    co_return co_await send_error(req, *failure);
  }
  error_code ec;
  auto writer = state_->store->begin_put({req.where.bucket, req.where.key}, ec);
  if (ec) co_return co_await send_error(req, to_s3(ec));
  writer.require(*precondition);
  auto attributes = co_await receive_payload(req, writer, state_->config.max_object_bytes);
  if (!attributes) co_return false;  // answered (or the connection is gone); nothing published
  const object_info info = co_await offload([&] { return writer.commit(*attributes, ec); });
  if (ec) co_return co_await send_error(req, to_s3(ec));
  const object_ref written{req.where.bucket, req.where.key};  // named: GCC 12 destroys a co_await's temporaries twice
  co_await announce(written, info.size);
  string_response res{http::status::ok, 11};
  res.set(http::field::etag, "\"" + info.attributes.etag + "\"");
  for (const auto& [algorithm, value] : info.attributes.checksums) {
    if (!req.header("x-amz-checksum-" + algorithm).empty() ||
        req.header("x-amz-trailer") == "x-amz-checksum-" + algorithm) {
      res.set("x-amz-checksum-" + algorithm, value);
    }
  }
  co_return co_await send(req, std::move(res));
}

template <class Stream>
asio::awaitable<bool> connection<Stream>::copy_object(request& req) {
  const auto from = parse_copy_source(req.header("x-amz-copy-source"));
  if (!from) co_return co_await send_error(req, s3::errc::invalid_argument, "invalid x-amz-copy-source");
  if (!owns(req, from->bucket)) co_return co_await send_error(req, s3::errc::access_denied);
  const bool replace = iequals(req.header("x-amz-metadata-directive"), "REPLACE");
  const bool replace_tags = iequals(req.header("x-amz-tagging-directive"), "REPLACE");
  if (from->bucket == req.where.bucket && from->key == req.where.key && !replace && !replace_tags) {
    co_return co_await send_error(req, s3::errc::invalid_request,
                                  "This copy request is illegal because it is trying to copy an object to itself "
                                  "without changing the object's metadata, storage class, website redirect location "
                                  "or encryption attributes.");
  }
  std::string why;
  const auto tags = header_tags(req, why);
  if (!tags) co_return co_await send_error(req, s3::errc::invalid_tag, why);
  error_code ec;
  auto mapping = co_await store_call([&] { return state_->store->map(*from, ec); });
  if (ec) co_return co_await send_error(req, to_s3(ec));
  if (!copy_source_allows(req, mapping.info())) co_return co_await send_error(req, s3::errc::precondition_failed);
  auto writer = state_->store->begin_put({req.where.bucket, req.where.key}, ec);
  if (ec) co_return co_await send_error(req, to_s3(ec));
  object_attributes attributes = replace ? attributes_from(req) : mapping.info().attributes;
  attributes.tags = replace_tags ? *tags : mapping.info().attributes.tags;
  attributes.part_sizes.clear();  // the copy is one piece, with the MD5 of its bytes as ETag
  attributes.upload_id.clear();
  attributes.checksums = mapping.info().attributes.checksums;  // the bytes are the same
  const object_info info = co_await offload([&] {
    const const_region bytes = mapping.region();
    digest md5(digest_kind::md5);
    write_from(writer, bytes.bytes(), bytes.size, &md5, ec);
    attributes.etag = to_hex(md5.finish());
    return ec ? object_info{} : writer.commit(attributes, ec);
  });
  if (ec) co_return co_await send_error(req, to_s3(ec));
  const object_ref written{req.where.bucket, req.where.key};  // named: GCC 12 destroys a co_await's temporaries twice
  co_await announce(written, info.size);
  co_return co_await send_xml(req, xml::copy_object_result(info.attributes.etag, info.last_modified));
}

template <class Stream>
asio::awaitable<void> connection<Stream>::announce(const object_ref& object, std::uint64_t size) {
  const auto& plane = state_->config.rdma;
  // A remote store's map() would fetch the object: its versions are not announced.
  if (!plane || size == 0 || size < plane->published_min_bytes() || state_->store->remote()) co_return;
  error_code ec;
  auto mapping = state_->store->map(object, ec);  // a local store: in place, as GET's
  if (ec) co_return;                              // replaced or deleted meanwhile
  auto owner = std::make_shared<const any_mapping>(std::move(mapping));
  const const_region whole = owner->region();
  rdma_source source{whole, 0, whole.size, owner, version_of(*owner)};
  if (owner->native_handle() >= 0) {
    source.file = owner->native_handle();
    source.file_offset = owner->data_offset();
  }
  plane->published(source);
}

template <class Stream>
asio::awaitable<bool> connection<Stream>::delete_object(request& req) {
  error_code ec;
  (void)co_await store_call([&] {
    state_->store->remove({req.where.bucket, req.where.key}, ec);
    return 0;
  });
  if (ec && ec != sluice::errc::no_such_object) co_return co_await send_error(req, to_s3(ec));
  co_return co_await send_empty(req, http::status::no_content);
}

template <class Stream>
asio::awaitable<bool> connection<Stream>::object_tagging(request& req) {
  const object_ref object{req.where.bucket, req.where.key};
  error_code ec;
  if (req.where.op == operation::get_object_tagging) {
    const object_info info = co_await store_call([&] { return state_->store->head(object, ec); });
    if (ec) co_return co_await send_error(req, to_s3(ec));
    co_return co_await send_xml(req, xml::tagging(info.attributes.tags));
  }
  std::map<std::string, std::string> tags;
  if (req.where.op == operation::put_object_tagging) {
    auto body = co_await read_small_body(req, 64 * kib);
    if (!body) co_return co_await send_error(req, s3::errc::malformed_xml);
    auto pairs = xml::parse_tagging(*body, ec);
    if (ec) co_return co_await send_error(req, to_s3(ec));
    std::string why;
    auto checked = checked_tags(pairs, why);
    if (!checked) co_return co_await send_error(req, s3::errc::invalid_tag, why);
    tags = std::move(*checked);
  }
  // Tags live in the object's metadata: the object is written again with the new set (same
  // bytes, ETag and other attributes), published only if it is still the version that was read,
  // so that a PUT meanwhile is never undone. A few tries, then 503 SlowDown.
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto mapping = co_await store_call([&] { return state_->store->map(object, ec); });
    if (ec) co_return co_await send_error(req, to_s3(ec));
    if (mapping.info().attributes.tags == tags) break;  // nothing to change
    auto writer = state_->store->begin_put(object, ec);
    if (ec) co_return co_await send_error(req, to_s3(ec));
    object_attributes attributes = mapping.info().attributes;
    attributes.tags = tags;
    writer.require(write_precondition{false, attributes.etag});
    (void)co_await offload([&] {
      const const_region bytes = mapping.region();
      write_from(writer, bytes.bytes(), bytes.size, nullptr, ec);
      return ec ? object_info{} : writer.commit(attributes, ec);
    });
    if (ec == sluice::errc::precondition_failed) continue;  // replaced meanwhile: tag the new version
    if (ec) co_return co_await send_error(req, to_s3(ec));
    break;
  }
  if (ec) co_return co_await send_error(req, s3::errc::slow_down, "The object kept changing while it was tagged.");
  co_return co_await send_empty(
      req, req.where.op == operation::put_object_tagging ? http::status::ok : http::status::no_content);
}

#define SLUICE_CONNECTION_MEMBERS(S)                                                        \
  template asio::awaitable<bool> connection<S>::put_object(connection<S>::request&);        \
  template asio::awaitable<void> connection<S>::announce(const object_ref&, std::uint64_t); \
  template asio::awaitable<bool> connection<S>::copy_object(connection<S>::request&);       \
  template asio::awaitable<bool> connection<S>::delete_object(connection<S>::request&);     \
  template asio::awaitable<bool> connection<S>::object_tagging(connection<S>::request&);
SLUICE_CONNECTION_MEMBERS(plain_stream)
SLUICE_CONNECTION_MEMBERS(tls_stream)
#undef SLUICE_CONNECTION_MEMBERS

}  // namespace sluice::s3::detail
