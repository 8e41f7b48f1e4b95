// Bucket operations: ListBuckets, CreateBucket, HEAD/DELETE/location of a bucket, ListObjects
// (V1 and V2), DeleteObjects.
// Part of the S3 server (src/s3/server/; docs/architecture.md lists the files).
#include "connection.hpp"

namespace sluice::s3::detail {

// ---------------------------------------------------------------------------------------------
// Operations

template <class Stream>
asio::awaitable<bool> connection<Stream>::list_buckets(request& req) {
  error_code ec;
  std::vector<bucket_info> all = co_await store_call([&] { return state_->store->list_buckets(ec); });
  if (ec) co_return co_await send_error(req, to_s3(ec));
  std::vector<bucket_info> mine;
  for (auto& b : all) {
    if (owns(req, b.name)) mine.push_back(std::move(b));
  }
  co_return co_await send_xml(req, xml::list_buckets(req.user, req.user, mine));
}

template <class Stream>
asio::awaitable<bool> connection<Stream>::create_bucket(request& req) {
  auto body = co_await read_small_body(req, 64 * kib);
  if (!body) co_return co_await send_error(req, s3::errc::malformed_xml);
  error_code ec;
  (void)xml::parse_create_bucket_configuration(*body, ec);  // any region is accepted
  if (ec) co_return co_await send_error(req, s3::errc::malformed_xml);
  // A store that can keep the owner with the bucket (fs_store) does, so it survives a restart.
  (void)co_await store_call([&] {
    state_->store->create_bucket(req.where.bucket, req.user, ec);
    return 0;
  });
  // Creating a bucket you own again: 200 in us-east-1 (S3's legacy behaviour there, which
  // clients rely on), 409 BucketAlreadyOwnedByYou in other regions.
  const bool legacy_region = state_->config.region.value_or("us-east-1") == "us-east-1";
  if (ec == sluice::errc::bucket_exists && owns(req, req.where.bucket) && legacy_region) ec = {};
  if (ec == sluice::errc::bucket_exists) {
    co_return co_await send_error(
        req, owns(req, req.where.bucket) ? s3::errc::bucket_already_owned_by_you : s3::errc::bucket_already_exists);
  }
  if (ec) co_return co_await send_error(req, to_s3(ec, true));
  state_->owners.update([&](auto& owners) { owners[req.where.bucket] = req.user; });
  string_response res{http::status::ok, 11};
  res.set(http::field::location, "/" + req.where.bucket);
  co_return co_await send(req, std::move(res));
}

template <class Stream>
asio::awaitable<bool> connection<Stream>::bucket_only(request& req) {
  error_code ec;
  if (req.where.op == operation::delete_bucket) {
    // S3 aborts a bucket's incomplete multipart uploads with it (`aws s3 rb --force` deletes the
    // objects and leaves those); a bucket that still holds an object stays, 409 BucketNotEmpty,
    // with its uploads. An upload started while this runs keeps the bucket too (the store
    // refuses), and an object PUT meanwhile keeps it with its earlier uploads aborted.
    co_await offload([&] {
      const list_result objects = state_->store->list(list_request{req.where.bucket, {}, {}, 1}, ec);
      if (!ec && !objects.objects.empty()) ec = sluice::errc::bucket_not_empty;
      std::vector<upload_info> uploads;
      if (!ec) uploads = state_->store->list_uploads(req.where.bucket, {}, ec);
      for (const upload_info& upload : uploads) {
        error_code abort_error;
        state_->store->abort_upload({req.where.bucket, upload.key}, upload.upload_id, abort_error);
        if (abort_error && abort_error != sluice::errc::no_such_upload) {  // completed or aborted meanwhile: gone
          ec = abort_error;
          break;
        }
      }
      if (!ec) state_->store->remove_bucket(req.where.bucket, ec);
      return 0;
    });
    if (ec) co_return co_await send_error(req, to_s3(ec, true));
    state_->owners.update([&](auto& owners) { owners.erase(req.where.bucket); });
    co_return co_await send_empty(req, http::status::no_content);
  }
  (void)co_await store_call([&] { return state_->store->list(list_request{req.where.bucket, {}, {}, 1}, ec); });
  if (ec) co_return co_await send_error(req, to_s3(ec, true));
  const std::string region = state_->config.region.value_or("us-east-1");
  if (req.where.op == operation::get_bucket_location) {
    co_return co_await send_xml(req, xml::location_constraint(region));
  }
  if (req.where.op == operation::get_bucket_versioning) {
    // Never enabled: S3 answers an empty configuration (no Status) for such a bucket.
    co_return co_await send_xml(req,
                                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                                "<VersioningConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"/>");
  }
  string_response res{http::status::ok, 11};
  res.set("x-amz-bucket-region", region);
  co_return co_await send(req, std::move(res));
}

template <class Stream>
asio::awaitable<bool> connection<Stream>::list_objects(request& req) {
  const route& r = req.where;
  const bool v2 = r.op == operation::list_objects_v2;
  const bool versions = r.op == operation::list_object_versions;
  xml::list_page page;
  page.bucket = r.bucket;
  page.prefix = std::string(r.param("prefix").value_or(""));
  page.delimiter = std::string(r.param("delimiter").value_or(""));
  page.url_encode = r.param("encoding-type") == std::optional<std::string_view>("url");
  page.owner_id = req.user;
  page.owner_name = req.user;
  page.fetch_owner = r.param("fetch-owner") == std::optional<std::string_view>("true");
  if (auto mk = r.param("max-keys")) {
    std::uint32_t n = 0;
    if (std::from_chars(mk->data(), mk->data() + mk->size(), n).ec != std::errc{}) {
      co_return co_await send_error(req, s3::errc::invalid_argument, "max-keys must be a non-negative integer");
    }
    page.max_keys = std::min<std::uint32_t>(n, 1000);
  }
  std::string cursor;  // list keys strictly after this one
  if (v2) {
    page.start_after = std::string(r.param("start-after").value_or(""));
    cursor = page.start_after;
    if (auto token = r.param("continuation-token")) {
      page.has_continuation_token = true;
      page.continuation_token = std::string(*token);
      auto decoded = base64_decode(*token);
      if (!decoded) co_return co_await send_error(req, s3::errc::invalid_argument, "invalid continuation token");
      cursor.assign(reinterpret_cast<const char*>(decoded->data()), decoded->size());
    }
  } else {
    page.marker = std::string(r.param(versions ? "key-marker" : "marker").value_or(""));
    cursor = page.marker;
  }

  // Walk the store's key-ordered pages, folding keys that share prefix + ... + delimiter into one
  // common prefix; keys and common prefixes together count against max-keys.
  error_code ec;
  // The last key or common prefix returned; starts at the cursor so a page that resumes after a
  // common prefix does not return that prefix again.
  std::string last = cursor;
  bool done = false;
  while (!done && page.max_keys > 0) {
    list_result batch = co_await store_call([&] {
      return state_->store->list(list_request{r.bucket, page.prefix, cursor, 1000}, ec);
    });
    if (ec) co_return co_await send_error(req, to_s3(ec, true));
    for (auto& info : batch.objects) {
      cursor = info.key;
      std::string common;
      if (!page.delimiter.empty()) {
        const auto pos = info.key.find(page.delimiter, page.prefix.size());
        if (pos != std::string::npos) common = info.key.substr(0, pos + page.delimiter.size());
      }
      if (!common.empty() && !page.common_prefixes.empty() && page.common_prefixes.back() == common) continue;
      if (!common.empty() && common <= last) continue;  // resumed inside a common prefix already returned
      if (page.contents.size() + page.common_prefixes.size() == page.max_keys) {
        page.truncated = true;
        done = true;
        break;
      }
      if (common.empty()) {
        last = info.key;
        page.contents.push_back(std::move(info));
      } else {
        last = common;
        page.common_prefixes.push_back(std::move(common));
      }
    }
    if (!batch.truncated) done = true;
  }
  if (page.truncated) {
    if (v2) {
      page.next_continuation_token = base64_encode(std::as_bytes(std::span(last)));
    } else if (versions || !page.delimiter.empty()) {
      page.next_marker = last;
    }
  }
  if (v2) co_return co_await send_xml(req, xml::list_objects_v2(page));
  if (versions) co_return co_await send_xml(req, xml::list_object_versions(page));
  co_return co_await send_xml(req, xml::list_objects_v1(page));
}

template <class Stream>
asio::awaitable<bool> connection<Stream>::delete_objects(request& req) {
  auto body = co_await read_small_body(req, 2 * mib);
  if (!body) co_return co_await send_error(req, s3::errc::bad_digest, "the body does not match its digest");
  error_code ec;
  const xml::delete_objects what = xml::parse_delete_objects(*body, ec);
  if (ec) co_return co_await send_error(req, s3::errc::malformed_xml);
  std::vector<std::string> deleted;
  std::vector<xml::delete_outcome> errors;
  (void)co_await store_call([&] {
    for (const auto& object : what.objects) {
      state_->store->remove({req.where.bucket, object.first}, ec);
      if (!ec || ec == sluice::errc::no_such_object) {
        deleted.push_back(object.first);  // S3: deleting a missing key succeeds
      } else {
        const auto code = to_s3(ec);
        errors.push_back({object.first, std::string(code_string(code)), ec.message()});
      }
    }
    return 0;
  });
  co_return co_await send_xml(req, xml::delete_result(deleted, errors, what.quiet));
}

#define SLUICE_CONNECTION_MEMBERS(S)                                                    \
  template asio::awaitable<bool> connection<S>::list_buckets(connection<S>::request&);  \
  template asio::awaitable<bool> connection<S>::create_bucket(connection<S>::request&); \
  template asio::awaitable<bool> connection<S>::bucket_only(connection<S>::request&);   \
  template asio::awaitable<bool> connection<S>::list_objects(connection<S>::request&);  \
  template asio::awaitable<bool> connection<S>::delete_objects(connection<S>::request&);
SLUICE_CONNECTION_MEMBERS(plain_stream)
SLUICE_CONNECTION_MEMBERS(tls_stream)
#undef SLUICE_CONNECTION_MEMBERS

}  // namespace sluice::s3::detail
