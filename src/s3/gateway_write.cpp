// SPDX-License-Identifier: Apache-2.0
// The gateway store's writes and the calls it passes to its upstream
// (include/sluice/s3/gateway_store.hpp): write-through PUTs, deletes, buckets and multipart
// uploads. A translation unit of its own.
#include "gateway_internal.hpp"

#include <sluice/names.hpp>
#include <sluice/s3/error.hpp>
#include <sluice/s3/gateway_store.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

namespace sluice::s3 {

// -- writer -------------------------------------------------------------------------------------

gateway_store::writer::writer(writer&& other) noexcept
    : store_(std::exchange(other.store_, nullptr)),
      fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      object_(std::move(other.object_)),
      written_(std::exchange(other.written_, 0)),
      precondition_(std::exchange(other.precondition_, {})) {
  other.path_.clear();
}

gateway_store::writer& gateway_store::writer::operator=(writer&& other) noexcept {
  if (this != &other) {
    reset();
    store_ = std::exchange(other.store_, nullptr);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    other.path_.clear();
    object_ = std::move(other.object_);
    written_ = std::exchange(other.written_, 0);
    precondition_ = std::exchange(other.precondition_, {});
  }
  return *this;
}

gateway_store::writer::~writer() { reset(); }

void gateway_store::writer::reset() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!path_.empty()) {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  path_.clear();
  store_ = nullptr;
  written_ = 0;
  precondition_ = {};
}

void gateway_store::writer::write(std::span<const std::byte> data, error_code& ec) {
  ec = {};
  if (store_ == nullptr) {
    ec = sluice::errc::invalid_argument;
    return;
  }
  if (data.size() > store_->config_.max_object_bytes - written_) {
    ec = sluice::errc::capacity_exceeded;
    return;
  }
  if (!gateway_impl::write_all(fd_, data.data(), data.size(), written_, ec)) return;
  written_ += data.size();
}

object_info gateway_store::writer::commit(const object_attributes& attributes, error_code& ec) {
  ec = {};
  if (store_ == nullptr) {
    ec = sluice::errc::invalid_argument;
    return {};
  }
  object_info info = store_->commit_put(*this, attributes, ec);
  reset();
  return info;
}

gateway_store::writer gateway_store::begin_put(const object_ref& object, error_code& ec) {
  ec = {};
  if (!is_valid_bucket_name(object.bucket)) {
    ec = sluice::errc::no_such_bucket;
    return {};
  }
  if (!is_valid_object_key(object.key)) {
    ec = sluice::errc::invalid_name;
    return {};
  }
  // The bucket must exist. One in the cache was the upstream's (ensure_cache_bucket follows an
  // upstream answer), so only the first PUT into a bucket asks; a bucket removed upstream since
  // then fails the commit instead.
  error_code cached;
  (void)cache_->list({object.bucket, {}, {}, 1}, cached);
  if (cached == sluice::errc::no_such_bucket) {
    probe_bucket(object.bucket, ec);
    if (!ec) ensure_cache_bucket(object.bucket, ec);
    if (ec) return {};
  }
  std::uint64_t number = 0;
  {
    std::lock_guard lock(mutex_);
    number = ++spool_counter_;
  }
  writer w;
  w.path_ = spool_ / ("put-" + std::to_string(number));
  w.fd_ = ::open(w.path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (w.fd_ < 0) {
    ec = gateway_impl::errno_code(errno);
    w.path_.clear();
    return {};
  }
  w.store_ = this;
  w.object_ = object;
  return w;
}

object_info gateway_store::commit_put(writer& w, const object_attributes& attributes, error_code& ec) {
  // Whatever happens next, the cache must not keep a copy the upstream may have replaced.
  drop(w.object_);
  put_options options{attributes};
  options.precondition = w.precondition_;  // checked by the upstream as it publishes
  error_code upstream_error;
  const std::string etag = upstream_->put_object(w.object_.bucket, w.object_.key, w.path_, options, upstream_error);
  if (upstream_error) {
    ec = from_upstream(upstream_error);
    log_upstream_failure("PUT", w.object_, upstream_error, ec);
    return {};
  }
  if (!gateway_impl::is_sane_etag(etag)) {
    ec = s3::errc::bad_gateway;
    return {};
  }
  object_attributes cached = attributes;
  cached.etag = etag;
  object_info info{w.object_.key, w.written_, std::chrono::system_clock::now(), cached};
  cache_file(w.object_, w.fd_, w.written_, cached);
  return info;
}

void gateway_store::remove(const object_ref& object, error_code& ec) {
  ec = {};
  error_code upstream_error;
  upstream_->delete_object(object.bucket, object.key, upstream_error);
  if (upstream_error) {
    ec = from_upstream(upstream_error);
    return;
  }
  drop(object);
}

void gateway_store::probe_bucket(std::string_view bucket, error_code& ec) const {
  ec = {};
  if (!is_valid_bucket_name(bucket)) {
    ec = sluice::errc::no_such_bucket;
    return;
  }
  list_options probe;  // a one-key listing: the upstream's answer for a missing bucket is NoSuchBucket
  probe.max_keys = 1;
  error_code upstream_error;
  (void)upstream_->list_objects(std::string(bucket), probe, upstream_error);
  if (upstream_error) ec = from_upstream(upstream_error);
}

void gateway_store::create_bucket(std::string_view name, error_code& ec) {
  ec = {};
  if (!is_valid_bucket_name(name)) {
    ec = sluice::errc::invalid_name;
    return;
  }
  error_code upstream_error;
  upstream_->create_bucket(std::string(name), upstream_error);
  if (upstream_error) {
    ec = from_upstream(upstream_error);
    return;
  }
  error_code ignored;
  ensure_cache_bucket(name, ignored);
}

void gateway_store::remove_bucket(std::string_view name, error_code& ec) {
  ec = {};
  error_code upstream_error;
  upstream_->delete_bucket(std::string(name), upstream_error);
  if (upstream_error) {
    ec = from_upstream(upstream_error);
    return;
  }
  // The cached copies of a bucket the upstream no longer has.
  error_code cache_error;
  for (;;) {
    const list_result batch = cache_->list({std::string(name), {}, {}, 1000}, cache_error);
    if (cache_error || batch.objects.empty()) break;
    for (const object_info& o : batch.objects) drop({std::string(name), o.key});
  }
  for (const upload_info& u : cache_->list_uploads(name, {}, cache_error)) {
    error_code ignored;
    cache_->abort_upload({std::string(name), u.key}, u.upload_id, ignored);
  }
  cache_->remove_bucket(name, cache_error);
}

std::vector<bucket_info> gateway_store::list_buckets(error_code& ec) const {
  ec = {};
  error_code upstream_error;
  std::vector<bucket_info> out = upstream_->list_buckets(upstream_error);
  if (upstream_error) {
    ec = from_upstream(upstream_error);
    return {};
  }
  std::erase_if(out, [](const bucket_info& b) { return !is_valid_bucket_name(b.name); });
  return out;
}

std::string gateway_store::create_upload(const object_ref& object, const object_attributes& attributes,
                                         error_code& ec) {
  ec = {};
  if (!is_valid_bucket_name(object.bucket)) {
    ec = sluice::errc::no_such_bucket;
    return {};
  }
  probe_bucket(object.bucket, ec);
  if (ec) return {};
  ensure_cache_bucket(object.bucket, ec);
  if (ec) return {};
  return cache_->create_upload(object, attributes, ec);
}

gateway_store::part_writer_type gateway_store::begin_part(const object_ref& object, std::string_view upload_id,
                                                          std::uint32_t part_number, error_code& ec) {
  return cache_->begin_part(object, upload_id, part_number, ec);
}

std::vector<part_info> gateway_store::list_parts(const object_ref& object, std::string_view upload_id,
                                                 error_code& ec) const {
  return cache_->list_parts(object, upload_id, ec);
}

std::vector<upload_info> gateway_store::list_uploads(std::string_view bucket, std::string_view prefix,
                                                     error_code& ec) const {
  std::vector<upload_info> out = cache_->list_uploads(bucket, prefix, ec);
  if (ec == sluice::errc::no_such_bucket) {
    // Not in the cache: no upload went through here yet, if the upstream has the bucket at all.
    out.clear();
    probe_bucket(bucket, ec);
  }
  return out;
}

object_info gateway_store::complete_upload(const object_ref& object, std::string_view upload_id,
                                           std::span<const part_info> chosen, const object_attributes& attributes,
                                           error_code& ec, const write_precondition& precondition) {
  ec = {};
  const std::string name = detail::cache_index::name_of(object);
  // Concatenated in the cache, where readers do not trust it: the index drops the old entry,
  // so a read revalidates against the upstream, which does not have these bytes yet.
  drop(object);
  object_info local = cache_->complete_upload(object, upload_id, chosen, attributes, ec);
  if (ec) return {};
  fs_store::mapping bytes = cache_->map(object, ec);
  if (ec) {
    drop(object);
    return {};
  }
  put_options options{attributes};
  options.precondition = precondition;  // checked by the upstream as it publishes
  error_code upstream_error;
  const std::string etag = upstream_->put_object(object.bucket, object.key, bytes.region(), options, upstream_error);
  if (upstream_error || !gateway_impl::is_sane_etag(etag)) {
    drop(object);
    ec = upstream_error ? from_upstream(upstream_error) : error_code(s3::errc::bad_gateway);
    log_upstream_failure("CompleteMultipartUpload", object, upstream_error, ec);
    return {};
  }
  bool kept = false;
  if (etag == local.attributes.etag) {
    std::lock_guard lock(mutex_);
    kept = make_room(local.size, name);
    if (kept) index_.insert(name, {local.size, etag, detail::cache_index::clock::now()});
  }
  if (!kept) {
    error_code ignored;
    cache_->remove(object, ignored);  // the upstream's ETag differs: the next GET fetches its version
  }
  local.attributes.etag = etag;
  return local;
}

void gateway_store::abort_upload(const object_ref& object, std::string_view upload_id, error_code& ec) {
  cache_->abort_upload(object, upload_id, ec);
}

}  // namespace sluice::s3
