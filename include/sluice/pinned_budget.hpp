// SPDX-License-Identifier: Apache-2.0
// One budget of pinned host memory shared by every cache that pins (the CUDA grant opener's
// registered page cache, the fabric plane's kept registrations, the file path's registered
// chunks): a registration that does not fit evicts what its cache may evict, or is refused, and
// never pins more than the budget.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace sluice {

/// Bytes of host memory that may be pinned at once, taken before pinning and given back after
/// unpinning. Thread-safe; shared (std::shared_ptr) by the caches it bounds.
class pinned_budget {
 public:
  struct statistics {
    std::uint64_t limit = 0;    ///< bytes that may be pinned at once
    std::uint64_t used = 0;     ///< bytes taken now
    std::uint64_t refused = 0;  ///< takes that did not fit
  };

  explicit pinned_budget(std::uint64_t limit) noexcept : limit_(limit) {}
  pinned_budget(const pinned_budget&) = delete;
  pinned_budget& operator=(const pinned_budget&) = delete;

  /// A quarter of the host's physical memory (sysconf), or 1 GiB when it cannot be told.
  [[nodiscard]] static std::uint64_t default_limit() noexcept {
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const long page = ::sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return std::uint64_t{1} << 30;
    return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) / 4;
  }

  /// Takes `n` bytes when they fit under the limit; false (and counted as refused) otherwise.
  [[nodiscard]] bool try_take(std::uint64_t n) noexcept {
    std::uint64_t used = used_.load(std::memory_order_relaxed);
    do {
      if (n > limit_ || used > limit_ - n) {
        refused_.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
    } while (!used_.compare_exchange_weak(used, used + n, std::memory_order_acq_rel, std::memory_order_relaxed));
    return true;
  }

  /// Counts a take that was not tried because it could not fit.
  void count_refusal() noexcept { refused_.fetch_add(1, std::memory_order_relaxed); }

  /// Gives back `n` bytes taken before.
  void give_back(std::uint64_t n) noexcept { used_.fetch_sub(n, std::memory_order_acq_rel); }

  [[nodiscard]] std::uint64_t limit() const noexcept { return limit_; }
  [[nodiscard]] std::uint64_t used() const noexcept { return used_.load(std::memory_order_acquire); }
  [[nodiscard]] statistics stats() const noexcept { return {limit_, used(), refused_.load(std::memory_order_relaxed)}; }

 private:
  const std::uint64_t limit_;
  std::atomic<std::uint64_t> used_{0};
  std::atomic<std::uint64_t> refused_{0};
};

}  // namespace sluice
