// SPDX-License-Identifier: Apache-2.0
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
  // Any region is accepted, and kept with the bucket (GetBucketLocation returns it) by a store
  // that keeps bucket settings.
  const std::string location = xml::parse_create_bucket_configuration(*body, ec);
  if (ec) co_return co_await send_error(req, s3::errc::malformed_xml);
  if (!is_location_name(location)) {
    co_return co_await send_error(req, s3::errc::invalid_location_constraint,
                                  "The LocationConstraint must be a region name: 1 to 64 letters, digits and "
                                  "hyphens.");
  }
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
  if (!location.empty()) {
    (void)co_await offload([&] {
      state_->store->set_bucket_settings(req.where.bucket, bucket_settings{location, {}}, ec);
      if (ec == s3::errc::not_implemented) ec = {};  // a store without settings: accepted, not kept
      if (ec) {
        error_code ignored;  // the bucket is new and empty: no half-made bucket stays
        state_->store->remove_bucket(req.where.bucket, ignored);
      }
      return 0;
    });
    if (ec) co_return co_await send_error(req, to_s3(ec, true));
  }
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
  // The bucket's LocationConstraint when it was created with one, else the server's region.
  std::string region =
      co_await store_call([&] { return state_->store->bucket_settings_of(req.where.bucket, ec).location; });
  if (ec) co_return co_await send_error(req, to_s3(ec, true));
  if (region.empty()) region = state_->config.region.value_or("us-east-1");
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

template <class Stream>
asio::awaitable<bool> connection<Stream>::bucket_tagging(request& req) {
  // The tags live in the bucket's settings, with the limits of object tags (read_tag_set).
  const std::string& bucket = req.where.bucket;
  error_code ec;
  bucket_settings settings = co_await store_call([&] { return state_->store->bucket_settings_of(bucket, ec); });
  if (ec) co_return co_await send_error(req, to_s3(ec, true));
  if (req.where.op == operation::get_bucket_tagging) {
    if (settings.tags.empty()) co_return co_await send_error(req, s3::errc::no_such_tag_set);
    co_return co_await send_xml(req, xml::tagging(settings.tags));
  }
  std::map<std::string, std::string> tags;
  if (req.where.op == operation::put_bucket_tagging) {
    answer_error failure{};
    auto read = co_await read_tag_set(req, failure);
    if (!read) co_return co_await send_error(req, failure.code, failure.message);
    tags = std::move(*read);
  }
  if (tags != settings.tags) {
    settings.tags = std::move(tags);
    (void)co_await offload([&] {
      state_->store->set_bucket_settings(bucket, settings, ec);
      return 0;
    });
    if (ec == s3::errc::not_implemented) {
      co_return co_await send_error(req, s3::errc::not_implemented,
                                    std::string(operation_name(req.where.op)) + " is not implemented by this store.");
    }
    if (ec) co_return co_await send_error(req, to_s3(ec, true));
  }
  co_return co_await send_empty(req, http::status::no_content);
}

template <class Stream>
asio::awaitable<bool> connection<Stream>::acl(request& req) {
  // The one ACL there is: the owner's FULL_CONTROL (the canned ACL private). Setting it again is
  // accepted and changes nothing; any other grant is 501.
  const bool object = req.where.op == operation::get_object_acl || req.where.op == operation::put_object_acl;
  const bool put = req.where.op == operation::put_object_acl || req.where.op == operation::put_bucket_acl;
  const std::string name(operation_name(req.where.op));
  if (put) {
    bool grant_header = false;  // x-amz-grant-read, -write, -full-control, ...
    for (const auto& field : req.msg()) {
      const std::string_view field_name(field.name_string().data(), field.name_string().size());
      if (field_name.size() >= 11 && iequals(field_name.substr(0, 11), "x-amz-grant")) grant_header = true;
    }
    const std::string_view canned = req.header("x-amz-acl");
    auto body = co_await read_small_body(req, 64 * kib);
    if (!body) co_return co_await send_error(req, s3::errc::malformed_xml);
    bool private_only = false;
    if (!body->empty() && !canned.empty()) {
      co_return co_await send_error(req, s3::errc::invalid_request,
                                    "Specify either x-amz-acl or an AccessControlPolicy body, not both.");
    }
    if (!body->empty()) {
      error_code ec;
      const xml::access_control_policy policy = xml::parse_access_control_policy(*body, ec);
      if (ec) co_return co_await send_error(req, to_s3(ec));
      private_only = (policy.owner_id.empty() || policy.owner_id == req.user) && policy.grants.size() == 1 &&
                     policy.grants.front().type == "CanonicalUser" && policy.grants.front().id == req.user &&
                     policy.grants.front().permission == "FULL_CONTROL";
    } else if (!canned.empty()) {
      private_only = canned == "private";
    } else if (!grant_header) {
      co_return co_await send_error(req, s3::errc::invalid_request,
                                    name + " needs x-amz-acl or an AccessControlPolicy body.");
    }
    if (grant_header || !private_only) {
      co_return co_await send_error(req, s3::errc::not_implemented,
                                    name +
                                        " is not implemented for grants other than the owner's FULL_CONTROL "
                                        "(the canned ACL private).");
    }
  }
  // The bucket or object must exist, as for any operation on it.
  error_code ec;
  if (object) {
    (void)co_await store_call([&] { return state_->store->head({req.where.bucket, req.where.key}, ec); });
  } else {
    (void)co_await store_call([&] { return state_->store->list(list_request{req.where.bucket, {}, {}, 1}, ec); });
  }
  if (ec) co_return co_await send_error(req, to_s3(ec, !object));
  if (put) co_return co_await send_empty(req, http::status::ok);
  co_return co_await send_xml(req, xml::access_control_policy_body(req.user, req.user));
}

#define SLUICE_CONNECTION_MEMBERS(S)                                                     \
  template asio::awaitable<bool> connection<S>::bucket_tagging(connection<S>::request&); \
  template asio::awaitable<bool> connection<S>::acl(connection<S>::request&);            \
  template asio::awaitable<bool> connection<S>::list_buckets(connection<S>::request&);   \
  template asio::awaitable<bool> connection<S>::create_bucket(connection<S>::request&);  \
  template asio::awaitable<bool> connection<S>::bucket_only(connection<S>::request&);    \
  template asio::awaitable<bool> connection<S>::list_objects(connection<S>::request&);   \
  template asio::awaitable<bool> connection<S>::delete_objects(connection<S>::request&);
SLUICE_CONNECTION_MEMBERS(plain_stream)
SLUICE_CONNECTION_MEMBERS(tls_stream)
#undef SLUICE_CONNECTION_MEMBERS

}  // namespace sluice::s3::detail
