// SPDX-License-Identifier: Apache-2.0
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
  if (!precondition) {
    co_return co_await send_error(req, s3::errc::not_implemented,
                                  std::string(operation_name(req.where.op)) + std::string(unsupported_condition));
  }
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
  // but not the parts: a composite ("...-N") and the parts' checksums do not describe the copy.
  attributes.part_checksums.clear();
  std::erase_if(attributes.checksums, [](const auto& c) { return c.second.find('-') != std::string::npos; });
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
    answer_error failure{};
    auto read = co_await read_tag_set(req, failure);
    if (!read) co_return co_await send_error(req, failure.code, failure.message);
    tags = std::move(*read);
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

template <class Stream>
asio::awaitable<std::optional<std::map<std::string, std::string>>> connection<Stream>::read_tag_set(
    request& req, answer_error& failure) {
  auto body = co_await read_small_body(req, 64 * kib);
  if (!body) {
    failure = {s3::errc::malformed_xml, {}};
    co_return std::nullopt;
  }
  error_code ec;
  auto pairs = xml::parse_tagging(*body, ec);
  if (ec) {
    failure = {to_s3(ec), {}};
    co_return std::nullopt;
  }
  std::string why;
  auto checked = checked_tags(pairs, why);
  if (!checked) failure = {s3::errc::invalid_tag, std::move(why)};
  co_return checked;
}

template <class Stream>
asio::awaitable<bool> connection<Stream>::object_attributes_of(request& req) {
  // x-amz-object-attributes names what to return: ETag, Checksum, ObjectParts, StorageClass,
  // ObjectSize (comma separated, as the SDKs send a list).
  bool etag = false, checksum = false, parts = false, storage_class = false, size = false;
  std::string_view wanted = req.header("x-amz-object-attributes");
  bool any = false;
  while (!wanted.empty()) {
    const auto comma = wanted.find(',');
    std::string_view one = wanted.substr(0, comma);
    while (!one.empty() && (one.front() == ' ' || one.front() == '\t')) one.remove_prefix(1);
    while (!one.empty() && (one.back() == ' ' || one.back() == '\t')) one.remove_suffix(1);
    bool* flag = one == "ETag"           ? &etag
                 : one == "Checksum"     ? &checksum
                 : one == "ObjectParts"  ? &parts
                 : one == "StorageClass" ? &storage_class
                 : one == "ObjectSize"   ? &size
                                         : nullptr;
    if (flag == nullptr && !one.empty()) {
      co_return co_await send_error(req, s3::errc::invalid_argument, "Invalid attribute name specified.");
    }
    if (flag != nullptr) *flag = any = true;
    if (comma == std::string_view::npos) break;
    wanted.remove_prefix(comma + 1);
  }
  if (!any) {
    co_return co_await send_error(req, s3::errc::invalid_request,
                                  "The x-amz-object-attributes header specifying the attributes to be retrieved "
                                  "is either missing or empty");
  }
  const auto number = [&](std::string_view name, std::uint32_t fallback) -> std::optional<std::uint32_t> {
    const std::string_view text = req.header(name);
    if (text.empty()) return fallback;
    std::uint32_t n = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (error != std::errc{} || end != text.data() + text.size()) return std::nullopt;
    return n;
  };
  const auto max_parts = number("x-amz-max-parts", 1000);
  const auto marker = number("x-amz-part-number-marker", 0);
  if (!max_parts || !marker) {
    co_return co_await send_error(req, s3::errc::invalid_argument,
                                  "x-amz-max-parts and x-amz-part-number-marker must be non-negative integers.");
  }
  error_code ec;
  const object_info info = co_await store_call([&] {
    return state_->store->head({req.where.bucket, req.where.key}, ec);
  });
  if (ec) co_return co_await send_error(req, to_s3(ec));
  const object_attributes& a = info.attributes;
  xml::object_attributes_page page;
  if (etag) page.etag = a.etag;
  // A multipart object's checksum is the composite ("...-N") of its parts' (part_checksums).
  std::string composite;
  if (checksum) {
    for (const auto& [name, value] : a.checksums) {
      if (value.empty()) continue;
      page.checksums.emplace(name, value);
      if (value.find('-') != std::string::npos) composite = name;
    }
    if (!page.checksums.empty()) page.checksum_type = composite.empty() ? "FULL_OBJECT" : "COMPOSITE";
  } else {
    for (const auto& [name, value] : a.checksums) {
      if (value.find('-') != std::string::npos) composite = name;
    }
  }
  if (parts && !a.part_sizes.empty()) {
    page.object_parts = true;
    page.parts_count = static_cast<std::uint32_t>(a.part_sizes.size());
    page.part_number_marker = *marker;
    page.max_parts = std::min<std::uint32_t>(*max_parts, 1000);
    page.next_part_number_marker = *marker;
    const bool with_checksums = !composite.empty() && a.part_checksums.size() == a.part_sizes.size();
    for (std::size_t i = *marker; i < a.part_sizes.size(); ++i) {
      if (page.parts.size() == page.max_parts) {
        page.truncated = true;
        break;
      }
      part_info part;
      part.number = static_cast<std::uint32_t>(i + 1);
      part.size = a.part_sizes[i];
      if (with_checksums) part.checksums.emplace(composite, a.part_checksums[i]);
      page.next_part_number_marker = part.number;
      page.parts.push_back(std::move(part));
    }
  }
  if (storage_class) page.storage_class = "STANDARD";
  if (size) page.object_size = info.size;
  string_response res{http::status::ok, 11};
  res.set(http::field::content_type, "application/xml");
  res.set(http::field::last_modified, xml::http_date(info.last_modified));
  res.body() = xml::get_object_attributes(page);
  co_return co_await send(req, std::move(res));
}

#define SLUICE_CONNECTION_MEMBERS(S)                                                                       \
  template asio::awaitable<bool> connection<S>::put_object(connection<S>::request&);                       \
  template asio::awaitable<void> connection<S>::announce(const object_ref&, std::uint64_t);                \
  template asio::awaitable<bool> connection<S>::copy_object(connection<S>::request&);                      \
  template asio::awaitable<bool> connection<S>::delete_object(connection<S>::request&);                    \
  template asio::awaitable<bool> connection<S>::object_tagging(connection<S>::request&);                   \
  template asio::awaitable<bool> connection<S>::object_attributes_of(connection<S>::request&);             \
  template asio::awaitable<std::optional<std::map<std::string, std::string>>> connection<S>::read_tag_set( \
      connection<S>::request&, answer_error&);
SLUICE_CONNECTION_MEMBERS(plain_stream)
SLUICE_CONNECTION_MEMBERS(tls_stream)
#undef SLUICE_CONNECTION_MEMBERS

}  // namespace sluice::s3::detail
