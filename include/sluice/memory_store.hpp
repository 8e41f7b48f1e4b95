// SPDX-License-Identifier: Apache-2.0
// memory_store: an object_store in process memory. The peer of in-process paths and the
// store of tests; bounded by memory_store_config, thread-safe, atomic publish, multipart
// uploads (parts staged in memory, counted by the same reservation accounting).
#pragma once

#include <sluice/concepts.hpp>
#include <sluice/config.hpp>
#include <sluice/names.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace sluice {

/// Objects and buckets held in memory. Published objects are immutable: a put replaces the
/// whole object at commit, and readers holding a mapping keep the version they mapped.
/// Multipart uploads stage their parts in memory; parts count against `max_bytes` from the
/// moment they are written until the upload is completed (then the object takes over the
/// reservation of the parts it uses) or aborted. All members are safe to call from several
/// threads at once.
class memory_store {
  struct stored_object {
    object_info info;
    std::vector<std::byte> bytes;
  };
  using object_ptr = std::shared_ptr<stored_object>;
  struct stored_part {
    part_info info;
    std::vector<std::byte> bytes;
  };
  using part_ptr = std::shared_ptr<const stored_part>;
  struct upload {
    upload_info info;
    std::map<std::uint32_t, part_ptr> parts;
  };
  struct bucket {
    bucket_info info;
    bucket_settings settings;
    std::map<std::string, object_ptr, std::less<>> objects;
    std::map<std::string, upload, std::less<>> uploads;  // by upload id
  };

 public:
  /// Stages one object, or one part of a multipart upload, in memory; commit publishes it,
  /// destruction without commit drops it.
  class writer {
   public:
    writer() = default;
    writer(writer&& other) noexcept
        : store_(std::exchange(other.store_, nullptr)),
          object_(std::move(other.object_)),
          bytes_(std::move(other.bytes_)),
          upload_id_(std::move(other.upload_id_)),
          part_number_(std::exchange(other.part_number_, 0)),
          precondition_(std::exchange(other.precondition_, {})) {}
    writer& operator=(writer&& other) noexcept {
      if (this != &other) {
        release();
        store_ = std::exchange(other.store_, nullptr);
        object_ = std::move(other.object_);
        bytes_ = std::move(other.bytes_);
        upload_id_ = std::move(other.upload_id_);
        part_number_ = std::exchange(other.part_number_, 0);
        precondition_ = std::exchange(other.precondition_, {});
      }
      return *this;
    }
    writer(const writer&) = delete;
    writer& operator=(const writer&) = delete;
    ~writer() { release(); }

    /// Appends `data`. errc::capacity_exceeded when the object or the store would outgrow
    /// its bound (the writer stays usable; nothing of `data` is kept).
    void write(std::span<const std::byte> data, error_code& ec) {
      if (store_ == nullptr) {
        ec = errc::invalid_argument;
        return;
      }
      if (data.size() > store_->config_.max_object_bytes - std::min(bytes_.size(), store_->config_.max_object_bytes)) {
        ec = errc::capacity_exceeded;
        return;
      }
      if (!store_->reserve(data.size())) {
        ec = errc::capacity_exceeded;
        return;
      }
      bytes_.insert(bytes_.end(), data.begin(), data.end());
      ec = {};
    }

    /// Publishes the bytes written so far under the key, replacing any previous object.
    /// errc::no_such_bucket when the bucket went away meanwhile (nothing is published).
    /// A part writer publishes the part instead (replacing a previous upload of the same
    /// number; `attributes.etag` and `attributes.checksums` become the part's), and reports
    /// errc::no_such_upload when the upload was completed or aborted meanwhile.
    /// Makes commit conditional: it publishes only when the object it would replace meets
    /// `precondition` at that moment, else fails with errc::precondition_failed. Object writers only.
    void require(write_precondition precondition) { precondition_ = std::move(precondition); }

    object_info commit(const object_attributes& attributes, error_code& ec) {
      if (store_ == nullptr) {
        ec = errc::invalid_argument;
        return {};
      }
      if (part_number_ != 0) return commit_part(attributes, ec);
      auto published = std::make_shared<stored_object>();
      published->info.key = object_.key;
      published->info.size = bytes_.size();
      published->info.last_modified = std::chrono::system_clock::now();
      published->info.attributes = attributes;
      published->bytes = std::move(bytes_);
      object_info info = published->info;
      if (!store_->publish(object_, std::move(published), ec, precondition_)) {
        store_->unreserve(info.size);  // nothing was published: give the reservation back
        store_ = nullptr;
        return {};
      }
      store_ = nullptr;  // the reservation now belongs to the published object
      return info;
    }

   private:
    friend class memory_store;
    writer(memory_store* store, object_ref object) : store_(store), object_(std::move(object)) {}
    writer(memory_store* store, object_ref object, std::string_view upload_id, std::uint32_t part_number)
        : store_(store), object_(std::move(object)), upload_id_(upload_id), part_number_(part_number) {}

    object_info commit_part(const object_attributes& attributes, error_code& ec) {
      auto part = std::make_shared<stored_part>();
      part->info.number = part_number_;
      part->info.size = bytes_.size();
      part->info.etag = attributes.etag;
      part->info.last_modified = std::chrono::system_clock::now();
      part->info.checksums = attributes.checksums;
      part->bytes = std::move(bytes_);
      object_info info{object_.key, part->info.size, part->info.last_modified, {}};
      info.attributes.etag = part->info.etag;
      info.attributes.checksums = part->info.checksums;
      if (!store_->publish_part(object_, upload_id_, std::move(part), ec)) {
        store_->unreserve(info.size);
        store_ = nullptr;
        return {};
      }
      store_ = nullptr;  // the reservation now belongs to the staged part
      return info;
    }

    void release() noexcept {
      if (store_ != nullptr) store_->unreserve(bytes_.size());
      store_ = nullptr;
      bytes_.clear();
    }

    memory_store* store_ = nullptr;
    object_ref object_;
    std::vector<std::byte> bytes_;
    std::string upload_id_;            // part writers only
    std::uint32_t part_number_ = 0;    // 0: an object writer
    write_precondition precondition_;  // checked when the object is published
  };

  /// Keeps one published version of an object alive and lends its bytes in place.
  class mapping {
   public:
    mapping() = default;

    /// The object's bytes, read only (host pageable memory).
    [[nodiscard]] sluice::const_region region() const noexcept {
      if (!object_) return {};
      return {object_->bytes.data(), object_->bytes.size(), memory_kind::host_pageable, -1};
    }
    [[nodiscard]] const object_info& info() const noexcept { return object_->info; }

   private:
    friend class memory_store;
    explicit mapping(object_ptr object) : object_(std::move(object)) {}
    object_ptr object_;
  };

  using writer_type = writer;
  using mapping_type = mapping;
  /// Part writers are writers too; their commit stages a part instead of publishing an object.
  using part_writer_type = writer;

  /// Highest part number of a multipart upload (S3: 10000).
  static constexpr std::uint32_t max_part_number = 10000;

  /// An empty store with the default bounds.
  memory_store() = default;
  /// An empty store with the given bounds; throws std::invalid_argument when they are invalid.
  explicit memory_store(memory_store_config config) : config_(config) {
    if (auto error = config_.validate()) throw std::invalid_argument(error->message());
  }
  memory_store(const memory_store&) = delete;
  memory_store& operator=(const memory_store&) = delete;
  ~memory_store() = default;

  void create_bucket(std::string_view name, error_code& ec) {
    if (!is_valid_bucket_name(name)) {
      ec = errc::invalid_name;
      return;
    }
    std::unique_lock lock(mutex_);
    auto [it, inserted] = buckets_.try_emplace(std::string(name));
    if (!inserted) {
      ec = errc::bucket_exists;
      return;
    }
    it->second.info = {std::string(name), std::chrono::system_clock::now()};
    ec = {};
  }

  /// The bucket's settings (settings_keeping_store). Errors: no_such_bucket.
  bucket_settings bucket_settings_of(std::string_view name, error_code& ec) const {
    std::shared_lock lock(mutex_);
    auto it = buckets_.find(name);
    if (it == buckets_.end()) {
      ec = errc::no_such_bucket;
      return {};
    }
    ec = {};
    return it->second.settings;
  }
  /// Replaces the bucket's settings. Errors: no_such_bucket.
  void set_bucket_settings(std::string_view name, const bucket_settings& settings, error_code& ec) {
    std::unique_lock lock(mutex_);
    auto it = buckets_.find(name);
    if (it == buckets_.end()) {
      ec = errc::no_such_bucket;
      return;
    }
    it->second.settings = settings;
    ec = {};
  }

  void remove_bucket(std::string_view name, error_code& ec) {
    std::unique_lock lock(mutex_);
    auto it = buckets_.find(name);
    if (it == buckets_.end()) {
      ec = errc::no_such_bucket;
    } else if (!it->second.objects.empty() || !it->second.uploads.empty()) {
      ec = errc::bucket_not_empty;  // uploads in progress count as content
    } else {
      buckets_.erase(it);
      ec = {};
    }
  }

  std::vector<bucket_info> list_buckets(error_code& ec) const {
    std::shared_lock lock(mutex_);
    std::vector<bucket_info> out;
    out.reserve(buckets_.size());
    for (const auto& entry : buckets_) out.push_back(entry.second.info);
    ec = {};
    return out;
  }

  object_info head(const object_ref& object, error_code& ec) const {
    auto found = find(object, ec);
    return found ? found->info : object_info{};
  }

  /// Copies up to out.size() bytes from `offset`; returns how many (0 at or past the end).
  std::size_t read(const object_ref& object, std::uint64_t offset, std::span<std::byte> out, error_code& ec) const {
    auto found = find(object, ec);
    if (!found) return 0;
    if (offset >= found->bytes.size()) return 0;
    const std::size_t n = std::min<std::size_t>(out.size(), found->bytes.size() - offset);
    if (n != 0) std::memcpy(out.data(), found->bytes.data() + offset, n);
    return n;
  }

  mapping map(const object_ref& object, error_code& ec) const { return mapping{find(object, ec)}; }

  /// Starts a put; errc::no_such_bucket or errc::invalid_name are reported here.
  writer begin_put(const object_ref& object, error_code& ec) {
    if (!is_valid_object_key(object.key)) {
      ec = errc::invalid_name;
      return {};
    }
    std::shared_lock lock(mutex_);
    if (!buckets_.contains(object.bucket)) {
      ec = errc::no_such_bucket;
      return {};
    }
    ec = {};
    return writer{this, object};
  }

  void remove(const object_ref& object, error_code& ec) {
    std::unique_lock lock(mutex_);
    auto b = buckets_.find(object.bucket);
    if (b == buckets_.end()) {
      ec = errc::no_such_bucket;
      return;
    }
    auto it = b->second.objects.find(object.key);
    if (it == b->second.objects.end()) {
      ec = errc::no_such_object;
      return;
    }
    used_bytes_ -= it->second->bytes.size();
    b->second.objects.erase(it);
    ec = {};
  }

  list_result list(const list_request& request, error_code& ec) const {
    std::shared_lock lock(mutex_);
    list_result out;
    auto b = buckets_.find(request.bucket);
    if (b == buckets_.end()) {
      ec = errc::no_such_bucket;
      return out;
    }
    const auto& objects = b->second.objects;
    // First key: after start_after when that lies inside or past the prefix, else the prefix itself.
    auto it = request.start_after < request.prefix ? objects.lower_bound(request.prefix)
                                                   : objects.upper_bound(request.start_after);
    for (; it != objects.end() && it->first.starts_with(request.prefix); ++it) {
      if (out.objects.size() == request.max_keys) {
        out.truncated = true;
        break;
      }
      out.objects.push_back(it->second->info);
    }
    ec = {};
    return out;
  }

  /// Starts a multipart upload of `object` and returns its id (32 random hex characters).
  /// `attributes` are kept for list_uploads; complete_upload publishes the ones it is given.
  /// Errors: errc::invalid_name (key), errc::no_such_bucket.
  std::string create_upload(const object_ref& object, const object_attributes& attributes, error_code& ec) {
    if (!is_valid_object_key(object.key)) {
      ec = errc::invalid_name;
      return {};
    }
    std::string id = new_upload_id();
    std::unique_lock lock(mutex_);
    auto b = buckets_.find(object.bucket);
    if (b == buckets_.end()) {
      ec = errc::no_such_bucket;
      return {};
    }
    auto& staged = b->second.uploads[id];
    staged.info = {object.key, id, std::chrono::system_clock::now(), attributes};
    ec = {};
    return id;
  }

  /// Starts writing part `part_number` (1..max_part_number) of an upload; the part is staged
  /// at the writer's commit, replacing an earlier part of that number. Errors:
  /// errc::invalid_name (key), errc::invalid_argument (part number), errc::no_such_bucket,
  /// errc::no_such_upload (also when the upload belongs to another key).
  writer begin_part(const object_ref& object, std::string_view upload_id, std::uint32_t part_number, error_code& ec) {
    if (!is_valid_object_key(object.key)) {
      ec = errc::invalid_name;
      return {};
    }
    if (part_number == 0 || part_number > max_part_number) {
      ec = errc::invalid_argument;
      return {};
    }
    std::shared_lock lock(mutex_);
    if (find_upload(object, upload_id, ec) == nullptr) return {};
    return writer{this, object, upload_id, part_number};
  }

  /// The staged parts of an upload, by part number. Errors: errc::no_such_bucket, errc::no_such_upload.
  std::vector<part_info> list_parts(const object_ref& object, std::string_view upload_id, error_code& ec) const {
    std::shared_lock lock(mutex_);
    std::vector<part_info> out;
    const upload* staged = find_upload(object, upload_id, ec);
    if (staged == nullptr) return out;
    out.reserve(staged->parts.size());
    for (const auto& entry : staged->parts) out.push_back(entry.second->info);
    return out;
  }

  /// The uploads in progress in `bucket` whose keys start with `prefix`, by key, then
  /// initiation time, then id. Error: errc::no_such_bucket.
  std::vector<upload_info> list_uploads(std::string_view bucket_name, std::string_view prefix, error_code& ec) const {
    std::shared_lock lock(mutex_);
    std::vector<upload_info> out;
    auto b = buckets_.find(bucket_name);
    if (b == buckets_.end()) {
      ec = errc::no_such_bucket;
      return out;
    }
    for (const auto& entry : b->second.uploads) {
      if (entry.second.info.key.starts_with(prefix)) out.push_back(entry.second.info);
    }
    std::sort(out.begin(), out.end(), [](const upload_info& x, const upload_info& y) {
      return std::tie(x.key, x.initiated, x.upload_id) < std::tie(y.key, y.initiated, y.upload_id);
    });
    ec = {};
    return out;
  }

  /// Publishes the concatenation of the `chosen` parts (numbers strictly ascending, ETags as
  /// staged) atomically under the key with `attributes` (the caller computes the multipart
  /// ETag), then forgets the upload and every part of it. Errors: errc::invalid_part_order,
  /// errc::no_such_bucket, errc::no_such_upload, errc::invalid_part (a part not staged, an
  /// ETag that differs, or no part at all), errc::capacity_exceeded (over max_object_bytes).
  /// On error nothing is published and the upload is left as it was.
  /// With `precondition`, publishes only when the object it would replace meets it at that
  /// moment (else errc::precondition_failed, and the upload stays).
  object_info complete_upload(const object_ref& object, std::string_view upload_id, std::span<const part_info> chosen,
                              const object_attributes& attributes, error_code& ec,
                              const write_precondition& precondition = {}) {
    if (!ascending(chosen)) {
      ec = errc::invalid_part_order;
      return {};
    }
    for (;;) {
      std::vector<part_ptr> parts;
      std::uint64_t total = 0;
      {
        std::shared_lock lock(mutex_);
        const upload* staged = find_upload(object, upload_id, ec);
        if (staged == nullptr) return {};
        if (chosen.empty()) {
          ec = errc::invalid_part;
          return {};
        }
        parts.reserve(chosen.size());
        for (const part_info& want : chosen) {
          auto it = staged->parts.find(want.number);
          if (it == staged->parts.end() || it->second->info.etag != want.etag) {
            ec = errc::invalid_part;
            return {};
          }
          parts.push_back(it->second);
          total += it->second->bytes.size();  // each part is bounded by max_object_bytes: no overflow
        }
      }
      if (total > config_.max_object_bytes) {
        ec = errc::capacity_exceeded;
        return {};
      }
      // Concatenate outside the lock: the parts are immutable. The copy is transient and
      // is not counted; the object takes over the reservation of its parts.
      auto published = std::make_shared<stored_object>();
      published->bytes.reserve(total);
      for (const auto& part : parts)
        published->bytes.insert(published->bytes.end(), part->bytes.begin(), part->bytes.end());
      published->info = {object.key, total, std::chrono::system_clock::now(), attributes};

      std::unique_lock lock(mutex_);
      upload* staged = find_upload(object, upload_id, ec);
      if (staged == nullptr) return {};
      bool unchanged = true;
      for (std::size_t i = 0; i < chosen.size() && unchanged; ++i) {
        auto it = staged->parts.find(chosen[i].number);
        unchanged = it != staged->parts.end() && it->second == parts[i];
      }
      if (!unchanged) continue;  // a chosen part was replaced meanwhile: check again
      if (!meets(buckets_.find(object.bucket)->second, object.key, precondition)) {
        ec = errc::precondition_failed;
        return {};
      }
      for (const auto& entry : staged->parts) used_bytes_ -= entry.second->bytes.size();
      used_bytes_ += total;  // never more than the parts just released
      auto& b = buckets_.find(object.bucket)->second;
      b.uploads.erase(b.uploads.find(upload_id));
      auto& slot = b.objects[object.key];
      if (slot) used_bytes_ -= slot->bytes.size();
      object_info info = published->info;
      slot = std::move(published);
      ec = {};
      return info;
    }
  }

  /// Forgets an upload and its staged parts, releasing their reservation. Part writers still
  /// open for it fail at commit with errc::no_such_upload. Errors: errc::no_such_bucket,
  /// errc::no_such_upload.
  void abort_upload(const object_ref& object, std::string_view upload_id, error_code& ec) {
    std::unique_lock lock(mutex_);
    upload* staged = find_upload(object, upload_id, ec);
    if (staged == nullptr) return;
    for (const auto& entry : staged->parts) used_bytes_ -= entry.second->bytes.size();
    auto& b = buckets_.find(object.bucket)->second;
    b.uploads.erase(b.uploads.find(upload_id));
  }

  /// Bytes held by published objects and uploads in progress.
  [[nodiscard]] std::uint64_t used_bytes() const {
    std::shared_lock lock(mutex_);
    return used_bytes_;
  }

 private:
  object_ptr find(const object_ref& object, error_code& ec) const {
    std::shared_lock lock(mutex_);
    auto b = buckets_.find(object.bucket);
    if (b == buckets_.end()) {
      ec = errc::no_such_bucket;
      return nullptr;
    }
    auto it = b->second.objects.find(object.key);
    if (it == b->second.objects.end()) {
      ec = errc::no_such_object;
      return nullptr;
    }
    ec = {};
    return it->second;
  }

  // Whether the object under `key` meets `precondition`. The caller holds mutex_.
  static bool meets(const bucket& b, const std::string& key, const write_precondition& precondition) {
    if (precondition.none()) return true;
    const auto it = b.objects.find(key);
    return precondition.met_by(it == b.objects.end() || !it->second ? nullptr : &it->second->info.attributes.etag);
  }

  // The upload `id` of `object`'s bucket, when it exists and belongs to `object.key`.
  // The caller holds mutex_ (shared or unique).
  const upload* find_upload(const object_ref& object, std::string_view id, error_code& ec) const {
    auto b = buckets_.find(object.bucket);
    if (b == buckets_.end()) {
      ec = errc::no_such_bucket;
      return nullptr;
    }
    auto it = b->second.uploads.find(id);
    if (it == b->second.uploads.end() || it->second.info.key != object.key) {
      ec = errc::no_such_upload;
      return nullptr;
    }
    ec = {};
    return &it->second;
  }
  upload* find_upload(const object_ref& object, std::string_view id, error_code& ec) {
    // The upload is a member of this (non-const) store: only the lookup above is const.
    return const_cast<upload*>(std::as_const(*this).find_upload(object, id, ec));
  }

  static bool ascending(std::span<const part_info> parts) noexcept {
    return std::adjacent_find(parts.begin(), parts.end(), [](const part_info& a, const part_info& b) {
             return a.number >= b.number;
           }) == parts.end();
  }

  std::string new_upload_id() {
    static constexpr std::string_view digits = "0123456789abcdef";
    std::array<std::uint32_t, 4> words{};
    {
      std::lock_guard lock(random_mutex_);
      for (auto& w : words) w = random_();
    }
    std::string id;
    id.reserve(32);
    for (std::uint32_t w : words) {
      for (int shift = 28; shift >= 0; shift -= 4) id.push_back(digits[(w >> shift) & 0xfU]);
    }
    return id;
  }

  bool publish_part(const object_ref& object, std::string_view upload_id, part_ptr part, error_code& ec) {
    std::unique_lock lock(mutex_);
    upload* staged = find_upload(object, upload_id, ec);
    if (staged == nullptr) return false;
    auto& slot = staged->parts[part->info.number];
    if (slot) used_bytes_ -= slot->bytes.size();
    slot = std::move(part);
    return true;
  }

  bool reserve(std::size_t n) {
    std::unique_lock lock(mutex_);
    if (n > config_.max_bytes - used_bytes_) return false;
    used_bytes_ += n;
    return true;
  }

  void unreserve(std::size_t n) noexcept {
    std::unique_lock lock(mutex_);
    used_bytes_ -= n;
  }

  bool publish(const object_ref& object, object_ptr published, error_code& ec, const write_precondition& precondition) {
    std::unique_lock lock(mutex_);
    auto b = buckets_.find(object.bucket);
    if (b == buckets_.end()) {
      ec = errc::no_such_bucket;
      return false;
    }
    if (!meets(b->second, object.key, precondition)) {
      ec = errc::precondition_failed;
      return false;
    }
    auto& slot = b->second.objects[object.key];
    if (slot) used_bytes_ -= slot->bytes.size();
    slot = std::move(published);
    ec = {};
    return true;
  }

  memory_store_config config_{};
  std::mutex random_mutex_;
  std::random_device random_;
  mutable std::shared_mutex mutex_;
  std::map<std::string, bucket, std::less<>> buckets_;
  std::uint64_t used_bytes_ = 0;
};

}  // namespace sluice
