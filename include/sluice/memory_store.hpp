// memory_store: an object_store in process memory. The peer of in-process paths and the
// store of tests; bounded by memory_store_config, thread-safe, atomic publish.
#pragma once

#include <sluice/concepts.hpp>
#include <sluice/config.hpp>
#include <sluice/names.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace sluice {

/// Objects and buckets held in memory. Published objects are immutable: a put replaces the
/// whole object at commit, and readers holding a mapping keep the version they mapped.
/// All members are safe to call from several threads at once.
class memory_store {
  struct stored_object {
    object_info info;
    std::vector<std::byte> bytes;
  };
  using object_ptr = std::shared_ptr<stored_object>;
  struct bucket {
    bucket_info info;
    std::map<std::string, object_ptr, std::less<>> objects;
  };

 public:
  /// Stages one object in memory; commit publishes it, destruction without commit drops it.
  class writer {
   public:
    writer() = default;
    writer(writer&& other) noexcept
        : store_(std::exchange(other.store_, nullptr)),
          object_(std::move(other.object_)),
          bytes_(std::move(other.bytes_)) {}
    writer& operator=(writer&& other) noexcept {
      if (this != &other) {
        release();
        store_ = std::exchange(other.store_, nullptr);
        object_ = std::move(other.object_);
        bytes_ = std::move(other.bytes_);
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
    object_info commit(const object_attributes& attributes, error_code& ec) {
      if (store_ == nullptr) {
        ec = errc::invalid_argument;
        return {};
      }
      auto published = std::make_shared<stored_object>();
      published->info.key = object_.key;
      published->info.size = bytes_.size();
      published->info.last_modified = std::chrono::system_clock::now();
      published->info.attributes = attributes;
      published->bytes = std::move(bytes_);
      object_info info = published->info;
      if (!store_->publish(object_, std::move(published), ec)) {
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
    void release() noexcept {
      if (store_ != nullptr) store_->unreserve(bytes_.size());
      store_ = nullptr;
      bytes_.clear();
    }

    memory_store* store_ = nullptr;
    object_ref object_;
    std::vector<std::byte> bytes_;
  };

  /// Keeps one published version of an object alive and lends its bytes in place.
  class mapping {
   public:
    mapping() = default;

    /// The object's bytes, read-only by contract (host pageable memory).
    [[nodiscard]] sluice::region region() const noexcept {
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

  void remove_bucket(std::string_view name, error_code& ec) {
    std::unique_lock lock(mutex_);
    auto it = buckets_.find(name);
    if (it == buckets_.end()) {
      ec = errc::no_such_bucket;
    } else if (!it->second.objects.empty()) {
      ec = errc::bucket_not_empty;
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

  bool publish(const object_ref& object, object_ptr published, error_code& ec) {
    std::unique_lock lock(mutex_);
    auto b = buckets_.find(object.bucket);
    if (b == buckets_.end()) {
      ec = errc::no_such_bucket;
      return false;
    }
    auto& slot = b->second.objects[object.key];
    if (slot) used_bytes_ -= slot->bytes.size();
    slot = std::move(published);
    ec = {};
    return true;
  }

  memory_store_config config_{};
  mutable std::shared_mutex mutex_;
  std::map<std::string, bucket, std::less<>> buckets_;
  std::uint64_t used_bytes_ = 0;
};

}  // namespace sluice
