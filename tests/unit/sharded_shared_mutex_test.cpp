// SPDX-License-Identifier: Apache-2.0
#include <sluice/detail/sharded_shared_mutex.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

TEST_CASE("sharded_shared_mutex: a writer excludes readers on every thread, readers share") {
  sluice::detail::sharded_shared_mutex mutex;
  // Two values a writer changes together: a reader that ever sees them differ was not excluded.
  std::uint64_t a = 0;
  std::uint64_t b = 0;
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> torn{0};
  std::atomic<std::uint64_t> reads{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < 8; ++i) {
    readers.emplace_back([&] {
      while (!done.load()) {
        std::shared_lock lock(mutex);
        const std::uint64_t first = a;
        std::this_thread::yield();  // give a writer the chance to change b if it could
        if (b != first) torn.fetch_add(1);
        reads.fetch_add(1);
      }
    });
  }
  for (int i = 0; i < 2000; ++i) {
    std::unique_lock lock(mutex);
    ++a;
    std::this_thread::yield();
    ++b;
  }
  done = true;
  for (auto& t : readers) t.join();
  CHECK(torn.load() == 0);
  CHECK(reads.load() > 0);
  CHECK(a == 2000);
  // Two readers hold the lock at once (on different threads, different slots or not).
  std::shared_lock first(mutex);
  bool second_took_it = false;
  std::thread([&] {
    std::shared_lock second(mutex, std::try_to_lock);
    second_took_it = second.owns_lock();
  }).join();
  CHECK(second_took_it);
}
