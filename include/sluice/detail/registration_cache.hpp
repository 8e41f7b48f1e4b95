// SPDX-License-Identifier: Apache-2.0
// The one registration cache: registrations kept past the transfer that made them, least
// recently used first out, never one a transfer still holds.
#pragma once

#include <sluice/pinned_budget.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace sluice::detail {

/// Registrations (`Held`, shared with the transfers that use them) kept under a `Key`, bounded by
/// bytes and by entries. Lookups are by a predicate over (key, held), so a cache can answer a
/// range inside a kept one; a hit makes the entry the most recently used. Past a bound, the least
/// recently used entries that nobody else holds (use_count() == 1) are evicted, and destroyed
/// outside the lock (closing an MR or unregistering memory may take a while); entries held by
/// transfers are never evicted, so the bounds are exceeded only while those transfers run. Used
/// by fabric::registrar (MRs of caller memory) and the server's cache of store mappings'
/// registrations (src/fabric/server_path.hpp). With a pinned budget, an entry's bytes are taken
/// from it when kept (evicting unused entries until they fit; an entry that does not fit is not
/// kept) and given back when it leaves the cache. Thread-safe.
template <class Key, class Held>
class registration_cache {
 public:
  struct statistics {
    std::uint64_t hits = 0;
    std::uint64_t insertions = 0;  ///< registrations kept
    std::uint64_t evictions = 0;
    std::size_t entries = 0;
    std::uint64_t bytes = 0;
  };

  registration_cache(std::uint64_t max_bytes, std::size_t max_entries,
                     std::shared_ptr<pinned_budget> pinned = nullptr) noexcept
      : max_bytes_(max_bytes), max_entries_(max_entries), pinned_(std::move(pinned)) {}
  registration_cache(const registration_cache&) = delete;
  registration_cache& operator=(const registration_cache&) = delete;
  ~registration_cache() { clear(); }  // gives the budget back

  /// Whether a registration of `bytes` may be kept at all.
  [[nodiscard]] bool takes(std::uint64_t bytes) const noexcept { return max_entries_ > 0 && bytes <= max_bytes_; }

  /// The most recently used entry for which `matches(key, held)` is true, made the most recently
  /// used; null when none.
  template <class Match>
  std::shared_ptr<Held> find(Match&& matches) {
    const std::lock_guard lock(mutex_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (matches(std::as_const(it->key), std::as_const(*it->held))) {
        entries_.splice(entries_.begin(), entries_, it);
        ++hits_;
        return entries_.front().held;
      }
    }
    return nullptr;
  }

  /// Keeps `held` (`bytes` of registered memory) under `key`, unless an entry for which
  /// `same(key, held)` is true is kept already (two transfers that missed at once: the first one
  /// kept stays); then evicts what the bounds ask. Whether `held` was kept.
  template <class Same>
  bool insert(Key key, std::shared_ptr<Held> held, std::uint64_t bytes, Same&& same) {
    std::vector<entry> evicted;  // destroyed after the lock is released
    const std::lock_guard lock(mutex_);
    if (!takes(bytes)) return false;
    if (std::any_of(entries_.begin(), entries_.end(), [&](const entry& e) { return same(e.key, *e.held); })) {
      return false;
    }
    // The least recently used entry nobody else holds, out; false when there is none.
    const auto evict_one = [&] {
      auto victim =
          std::find_if(entries_.rbegin(), entries_.rend(), [](const entry& e) { return e.held.use_count() == 1; });
      if (victim == entries_.rend()) return false;  // all in use
      auto at = std::next(victim).base();
      bytes_ -= at->bytes;
      if (pinned_) pinned_->give_back(at->bytes);
      ++evictions_;
      evicted.push_back(std::move(*at));
      entries_.erase(at);
      return true;
    };
    if (pinned_) {
      // Nothing is evicted for an entry that would not fit even then.
      std::uint64_t freeable = 0;
      for (const entry& e : entries_) freeable += e.held.use_count() == 1 ? e.bytes : 0;
      const std::uint64_t others = pinned_->used() - std::min(pinned_->used(), freeable);
      if (bytes > pinned_->limit() || others > pinned_->limit() - bytes) {
        pinned_->count_refusal();
        return false;
      }
      while (!pinned_->try_take(bytes)) {
        if (!evict_one()) return false;  // the rest of the budget is another cache's, or in use
      }
    }
    entries_.push_front({std::move(key), std::move(held), bytes});
    bytes_ += bytes;
    ++insertions_;
    while (bytes_ > max_bytes_ || entries_.size() > max_entries_) {
      if (!evict_one()) break;
    }
    return true;
  }

  /// Drops the entries for which `drop(key, held)` is true (transfers holding one keep it).
  template <class Drop>
  void erase_if(Drop&& drop) {
    std::list<entry> dropped;
    const std::lock_guard lock(mutex_);
    for (auto it = entries_.begin(); it != entries_.end();) {
      auto next = std::next(it);
      if (drop(std::as_const(it->key), std::as_const(*it->held))) {
        bytes_ -= it->bytes;
        if (pinned_) pinned_->give_back(it->bytes);
        dropped.splice(dropped.end(), entries_, it);
      }
      it = next;
    }
  }

  /// Drops every entry (transfers holding one keep it).
  void clear() {
    erase_if([](const Key&, const Held&) { return true; });
  }

  [[nodiscard]] statistics stats() const {
    const std::lock_guard lock(mutex_);
    return {hits_, insertions_, evictions_, entries_.size(), bytes_};
  }

 private:
  struct entry {
    Key key;
    std::shared_ptr<Held> held;
    std::uint64_t bytes = 0;
  };
  const std::uint64_t max_bytes_;
  const std::size_t max_entries_;
  const std::shared_ptr<pinned_budget> pinned_;
  mutable std::mutex mutex_;
  std::list<entry> entries_;  // most recently used first
  std::uint64_t bytes_ = 0;
  std::uint64_t hits_ = 0;
  std::uint64_t insertions_ = 0;
  std::uint64_t evictions_ = 0;
};

}  // namespace sluice::detail
