// SPDX-License-Identifier: Apache-2.0
// A reader-writer lock whose readers on different threads touch different cache lines.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <shared_mutex>

namespace sluice::detail {

/// A SharedMutex (std::shared_lock and std::unique_lock work with it) for data read on every
/// request by many threads and written rarely, such as a store's index. A reader locks the slot
/// of its thread only, so readers on different threads never write the same cache line (one
/// std::shared_mutex bounces its line between all of them: an atomic read-modify-write per lock
/// and unlock); a writer locks every slot, in order. A shared lock is released by the thread
/// that took it (a scoped lock in a synchronous call, as in the stores).
class sharded_shared_mutex {
 public:
  void lock() {
    for (auto& one : slots_) one.mutex.lock();
  }
  void unlock() {
    for (auto& one : slots_) one.mutex.unlock();
  }
  void lock_shared() { slots_[mine()].mutex.lock_shared(); }
  bool try_lock_shared() { return slots_[mine()].mutex.try_lock_shared(); }
  void unlock_shared() { slots_[mine()].mutex.unlock_shared(); }

 private:
  static constexpr std::size_t slot_count = 32;
  static std::size_t mine() noexcept {
    static std::atomic<std::size_t> next{0};
    thread_local const std::size_t index = next.fetch_add(1, std::memory_order_relaxed) % slot_count;
    return index;
  }
  struct alignas(64) padded_mutex {
    std::shared_mutex mutex;
  };
  std::array<padded_mutex, slot_count> slots_;
};

}  // namespace sluice::detail
