// SPDX-License-Identifier: Apache-2.0
// A value that many threads read and few replace, with no lock and no shared write on the read
// side: the server's users and bucket owners, read by every request.
// Part of the S3 server (src/s3/server/; docs/architecture.md lists the files).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>

namespace sluice::s3::detail {

/// Holds an immutable T; a writer publishes a new one (under a mutex, readers untouched). Each
/// thread keeps the versions it read last: a reader loads the version number (a cache line that
/// only writers write) and, when its thread holds that version, reads it without a lock or a
/// reference count. Version numbers are unique across every `published` of the process, so a
/// thread's copy can never be taken for another object's.
template <class T>
class published {
 public:
  explicit published(T initial) { publish(std::move(initial)); }
  published(const published&) = delete;
  published& operator=(const published&) = delete;

  /// The value as last published. Valid until this thread's next read() of any `published`.
  const T& read() const {
    const std::uint64_t version = version_.load(std::memory_order_acquire);
    auto& held = thread_copies();
    for (const auto& k : held.slots) {
      if (k.version == version) return *static_cast<const T*>(k.value.get());
    }
    std::shared_ptr<const T> current;
    std::uint64_t current_version = 0;
    {
      const std::lock_guard lock(mutex_);
      current = current_;
      current_version = version_.load(std::memory_order_relaxed);
    }
    auto& slot = held.slots[held.next++ % held.slots.size()];
    slot = {current_version, std::move(current)};
    return *static_cast<const T*>(slot.value.get());
  }

  void publish(T value) {
    auto fresh = std::make_shared<const T>(std::move(value));
    const std::lock_guard lock(mutex_);
    current_ = std::move(fresh);
    version_.store(next_version().fetch_add(1, std::memory_order_relaxed), std::memory_order_release);
  }

  /// Publishes change(copy of the current value), the copy and the change under the writers'
  /// mutex: two updates never lose one another.
  template <class Change>
  void update(Change change) {
    const std::lock_guard lock(mutex_);
    T changed = *current_;
    change(changed);
    current_ = std::make_shared<const T>(std::move(changed));
    version_.store(next_version().fetch_add(1, std::memory_order_relaxed), std::memory_order_release);
  }

 private:
  struct kept {
    std::uint64_t version = 0;  // 0: empty (versions start at 1)
    std::shared_ptr<const void> value;
  };
  struct copies {
    std::array<kept, 8> slots;
    std::size_t next = 0;
  };
  static copies& thread_copies() {
    thread_local copies held;
    return held;
  }
  static std::atomic<std::uint64_t>& next_version() {
    static std::atomic<std::uint64_t> next{1};
    return next;
  }

  mutable std::mutex mutex_;  // writers, and a reader whose thread lacks the version
  std::shared_ptr<const T> current_;
  alignas(64) std::atomic<std::uint64_t> version_{0};
};

}  // namespace sluice::s3::detail
