// SPDX-License-Identifier: Apache-2.0
// The fabric registrar: makes memory reachable by libfabric RMA on one endpoint, with a
// registration cache so that registering the same (or a covered) range again reuses the MR.
#pragma once

#include <sluice/concepts.hpp>
#include <sluice/detail/registration_cache.hpp>
#include <sluice/fabric/endpoint.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>

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
      : endpoint_(std::move(ep)), access_(what), cache_(std::numeric_limits<std::uint64_t>::max(), capacity) {}

  /// Registers `memory` (or finds it in the cache). Errors: those of endpoint::register_memory.
  registration_type register_region(const region& memory, error_code& ec) {
    if (memory.size == 0) {
      ec = {};
      return {memory, std::make_shared<memory_region>()};
    }
    ec = {};
    if (auto mr = cache_.find([&](const region& have, const memory_region&) {
          return have.kind == memory.kind && have.device == memory.device && memory.bytes() >= have.bytes() &&
                 memory.bytes() + memory.size <= have.bytes() + have.size;
        })) {
      return {memory, std::move(mr)};
    }
    auto mr = std::make_shared<const memory_region>(endpoint_->register_memory(memory, access_, ec));
    if (ec) return {};
    // Not kept with capacity 0: it closes with the registration. Two misses of the same range at
    // once keep both (each is found by what it covers; the bound evicts the spare).
    cache_.insert(memory, mr, memory.size, [](const region&, const memory_region&) { return false; });
    return {memory, std::move(mr)};
  }

  /// Drops every cached MR that overlaps `memory` (registrations still held keep theirs).
  void invalidate(const region& memory) {
    cache_.erase_if([&](const region& have, const memory_region&) {
      return have.bytes() < memory.bytes() + memory.size && memory.bytes() < have.bytes() + have.size;
    });
  }

  [[nodiscard]] const std::shared_ptr<endpoint>& get_endpoint() const noexcept { return endpoint_; }
  /// Registrations answered from the cache.
  [[nodiscard]] std::uint64_t cache_hits() const { return cache_.stats().hits; }

 private:
  std::shared_ptr<endpoint> endpoint_;
  access access_;
  sluice::detail::registration_cache<region, const memory_region> cache_;  // keyed by the registered range
};

}  // namespace sluice::fabric
