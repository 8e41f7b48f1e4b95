// The fabric registrar: makes memory reachable by libfabric RMA on one endpoint, with a
// registration cache so that registering the same (or a covered) range again reuses the MR.
#pragma once

#include <sluice/concepts.hpp>
#include <sluice/fabric/endpoint.hpp>

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>

namespace sluice::fabric {

/// A registration handed out by the registrar: the region asked for and the (possibly larger,
/// possibly shared) memory region that covers it. Move-only; the MR lives while any
/// registration using it or the cache holds it.
class registration {
 public:
  registration() = default;
  registration(const sluice::region& memory, std::shared_ptr<const memory_region> mr) noexcept
      : region_(memory), mr_(std::move(mr)) {}
  registration(registration&& other) noexcept : region_(std::exchange(other.region_, {})), mr_(std::move(other.mr_)) {}
  registration& operator=(registration&& other) noexcept {
    region_ = std::exchange(other.region_, {});
    mr_ = std::move(other.mr_);
    return *this;
  }
  registration(const registration&) = delete;
  registration& operator=(const registration&) = delete;
  ~registration() = default;

  /// The memory this registration was asked for.
  [[nodiscard]] const sluice::region& region() const noexcept { return region_; }
  /// The memory region covering it.
  [[nodiscard]] const memory_region& mr() const noexcept { return *mr_; }
  /// Offset of this registration's first byte inside mr().
  [[nodiscard]] std::uint64_t offset_in_mr() const noexcept {
    return mr_ ? static_cast<std::uint64_t>(region_.bytes() - mr_->region().bytes()) : 0;
  }
  /// The (address, length, key) a peer names bytes [offset, offset + length) of this registration with.
  [[nodiscard]] remote_segment remote(std::uint64_t offset, std::uint64_t length) const noexcept {
    return {mr_ ? mr_->remote_address(offset_in_mr() + offset) : 0, length, mr_ ? mr_->key() : 0};
  }
  explicit operator bool() const noexcept { return mr_ != nullptr; }

 private:
  sluice::region region_{};
  std::shared_ptr<const memory_region> mr_;
};

/// Registers regions on an endpoint with a fixed access; caches the MRs.
///
/// The cache keeps up to `capacity` MRs. A request inside a cached MR's range (same memory kind
/// and device, at least the same access) reuses it; otherwise a new MR is registered and the
/// least recently used MR that no registration holds any more is dropped. With capacity 0 nothing
/// is kept: each MR closes with the last registration that uses it, so a peer's RMA that comes
/// later (one the peer gave up on, say) fails instead of touching the memory. Memory that is freed
/// while cached must be dropped with invalidate() before it is reused for something else:
/// providers that pin pages (verbs) would otherwise keep naming the old pages.
/// Thread-safe.
class registrar {
 public:
  using registration_type = registration;

  registrar(std::shared_ptr<endpoint> ep, access what, std::size_t capacity = 64)
      : endpoint_(std::move(ep)), access_(what), capacity_(capacity) {}

  /// Registers `memory` (or finds it in the cache). Errors: those of endpoint::register_memory.
  registration_type register_region(const region& memory, error_code& ec) {
    if (memory.size == 0) {
      ec = {};
      return {memory, std::make_shared<memory_region>()};
    }
    const std::lock_guard lock(mutex_);
    for (auto it = cache_.begin(); it != cache_.end(); ++it) {
      const region& have = (*it)->region();
      const bool covered = have.kind == memory.kind && have.device == memory.device && memory.bytes() >= have.bytes() &&
                           memory.bytes() + memory.size <= have.bytes() + have.size;
      if (covered) {
        cache_.splice(cache_.begin(), cache_, it);  // most recently used first
        ++hits_;
        ec = {};
        return {memory, cache_.front()};
      }
    }
    auto mr = std::make_shared<const memory_region>(endpoint_->register_memory(memory, access_, ec));
    if (ec) return {};
    if (capacity_ == 0) return {memory, std::move(mr)};  // not kept: it closes with the registration
    cache_.push_front(mr);
    evict();
    return {memory, std::move(mr)};
  }

  /// Drops every cached MR that overlaps `memory` (registrations still held keep theirs).
  void invalidate(const region& memory) {
    const std::lock_guard lock(mutex_);
    cache_.remove_if([&](const auto& mr) {
      const region& have = mr->region();
      return have.bytes() < memory.bytes() + memory.size && memory.bytes() < have.bytes() + have.size;
    });
  }

  [[nodiscard]] const std::shared_ptr<endpoint>& get_endpoint() const noexcept { return endpoint_; }
  /// Registrations answered from the cache.
  [[nodiscard]] std::uint64_t cache_hits() const {
    const std::lock_guard lock(mutex_);
    return hits_;
  }

 private:
  void evict() {
    while (cache_.size() > capacity_) {
      auto victim = std::find_if(cache_.rbegin(), cache_.rend(), [](const auto& mr) { return mr.use_count() == 1; });
      if (victim == cache_.rend()) return;  // all in use: the bound is exceeded only while they are
      cache_.erase(std::next(victim).base());
    }
  }

  std::shared_ptr<endpoint> endpoint_;
  access access_;
  std::size_t capacity_;
  mutable std::mutex mutex_;
  std::list<std::shared_ptr<const memory_region>> cache_;
  std::uint64_t hits_ = 0;
};

}  // namespace sluice::fabric
