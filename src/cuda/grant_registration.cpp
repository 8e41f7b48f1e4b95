// SPDX-License-Identifier: Apache-2.0
// The CUDA grant opener's page-cache registrations (include/sluice/cuda/grant.hpp): the
// registration context, the cache of registered sources per object version, and the registering
// thread with its queues. The parts shared with grant.cpp and grant_copiers.cpp are in
// grant_opener.hpp.
#include "grant_opener.hpp"

#include <boost/asio/post.hpp>

#include <unistd.h>

#include <chrono>

namespace sluice::cuda::grant_impl {

using driver::driver_entry;

registration_context::registration_context(int device) {
  get_ = driver_entry<decltype(get_)>("cuDeviceGet");
  // cuCtxCreate has three signatures (cudaTypedefs.h: PFN_cuCtxCreate_v3020, _v11040 with
  // execution affinity, _v12050 with a parameters pointer); each is asked for at its version.
  const auto create_v12050 =
      driver_entry<CUresult (*)(CUcontext*, void*, unsigned int, CUdevice)>("cuCtxCreate", 12050);
  const auto create_v3020 = create_v12050 != nullptr
                                ? nullptr
                                : driver_entry<CUresult (*)(CUcontext*, unsigned int, CUdevice)>("cuCtxCreate", 11000);
  push_ = driver_entry<decltype(push_)>("cuCtxPushCurrent");
  pop_ = driver_entry<decltype(pop_)>("cuCtxPopCurrent");
  register_ = driver_entry<decltype(register_)>("cuMemHostRegister");
  unregister_ = driver_entry<decltype(unregister_)>("cuMemHostUnregister");
  destroy_ = driver_entry<decltype(destroy_)>("cuCtxDestroy");
  CUdevice d = 0;
  if (get_ == nullptr || (create_v12050 == nullptr && create_v3020 == nullptr) || push_ == nullptr || pop_ == nullptr ||
      register_ == nullptr || unregister_ == nullptr || destroy_ == nullptr || get_(&d, device) != CUDA_SUCCESS) {
    return;
  }
  CUcontext made = nullptr;
  if ((create_v12050 != nullptr ? create_v12050(&made, nullptr, 0, d) : create_v3020(&made, 0, d)) != CUDA_SUCCESS)
    return;
  CUcontext popped = nullptr;
  (void)pop_(&popped);  // cuCtxCreate made it current in this thread
  context_ = made;
}

bool registration_context::register_range(void* p, std::size_t n) const {
  if (context_ == nullptr) {
    if (cudaHostRegister(p, n, cudaHostRegisterReadOnly | cudaHostRegisterPortable) == cudaSuccess) return true;
    (void)cudaGetLastError();
    return false;
  }
  if (push_(context_) != CUDA_SUCCESS) return false;
  const bool ok = register_(p, n, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_READ_ONLY) == CUDA_SUCCESS;
  CUcontext popped = nullptr;
  (void)pop_(&popped);
  return ok;
}

void registration_context::unregister_range(void* p) const {
  if (context_ == nullptr) {
    if (cudaHostUnregister(p) != cudaSuccess) (void)cudaGetLastError();
    return;
  }
  if (push_(context_) != CUDA_SUCCESS) return;
  (void)unregister_(p);
  CUcontext popped = nullptr;
  (void)pop_(&popped);
}

std::shared_ptr<cached_source> ipc_opener::acquire(const s3::rdma_source& source) {
  const std::lock_guard lock(mutex_);
  if (source.version.cacheable()) {
    if (auto it = cache_.find(source.version); it != cache_.end()) {
      lru_.splice(lru_.end(), lru_, it->second.lru);
      ++it->second.entry->users;
      return it->second.entry;
    }
  }
  auto entry = std::make_shared<cached_source>();
  entry->registrar = registrar_.get();
  entry->owner = source.owner;
  entry->data = source.mapping.bytes();
  entry->size = source.mapping.size;
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  entry->lead = reinterpret_cast<std::uintptr_t>(entry->data) & (page - 1);
  entry->file = source.file;
  entry->file_offset = source.file_offset;
  entry->chunks.assign(
      static_cast<std::size_t>((entry->size + entry->lead + config_.chunk_bytes - 1) / config_.chunk_bytes),
      cached_source::chunk_state::absent);
  entry->users = 1;
  if (source.version.cacheable() && entry->size <= config_.registration_budget) {
    entry->cached = true;
    lru_.push_back(source.version);
    cache_.emplace(source.version, cache_slot{entry, std::prev(lru_.end())});
  }
  return entry;
}

void ipc_opener::release(const std::shared_ptr<cached_source>& entry) {
  std::vector<std::shared_ptr<cached_source>> evicted;
  {
    const std::lock_guard lock(mutex_);
    --entry->users;
    const bool cached =
        std::any_of(cache_.begin(), cache_.end(), [&](const auto& c) { return c.second.entry == entry; });
    // A transfer's own registration (a source without a version) goes with it. The budget is
    // kept by the registering thread (make_room), so that no transfer, and no PUT that published
    // a version, waits for cudaHostUnregister.
    if (!cached && entry->users == 0) evicted.push_back(entry);
  }
  evict(evicted);
}

std::vector<std::shared_ptr<cached_source>> ipc_opener::make_room(std::uint64_t n, const cached_source* keep) {
  std::vector<std::shared_ptr<cached_source>> evicted;
  const std::lock_guard lock(mutex_);
  // Bytes, and entries: each holds its version's mapping and file open.
  std::uint64_t freed = 0;  // of the pinned budget, once the versions taken out are unregistered
  const auto over = [&] {
    const std::uint64_t pinned = pinned_->used() - std::min(pinned_->used(), freed);
    return registered_bytes_ + n > config_.registration_budget || cache_.size() > config_.max_cached_versions ||
           pinned + n > pinned_->limit();
  };
  for (auto it = lru_.begin(); it != lru_.end() && over();) {
    auto found = cache_.find(*it);
    if (found->second.entry->users == 0 && found->second.entry.get() != keep) {
      evicted.push_back(found->second.entry);
      freed += found->second.entry->registered_bytes.load();
      registered_bytes_ -= std::min<std::uint64_t>(registered_bytes_, found->second.entry->registered_bytes.load());
      cache_.erase(found);
      it = lru_.erase(it);
    } else {
      ++it;
    }
  }
  return evicted;
}

void ipc_opener::evict(const std::vector<std::shared_ptr<cached_source>>& evicted) {
  for (const auto& e : evicted) {
    {
      const std::lock_guard lock(e->mutex);
      evictions_ += static_cast<std::uint64_t>(
          std::count(e->chunks.begin(), e->chunks.end(), cached_source::chunk_state::registered));
    }
    unregister_all(*e);
  }
}

std::uint64_t ipc_opener::queue_registrations(const std::shared_ptr<cached_source>& entry, std::uint64_t first,
                                              std::uint64_t last, std::uint64_t ahead) {
  std::uint64_t hits = 0;
  std::vector<std::uint64_t> wanted;
  std::vector<std::uint64_t> later;
  {
    const std::lock_guard lock(entry->mutex);
    const auto count = static_cast<std::uint64_t>(entry->chunks.size());
    for (std::uint64_t i = first; i < std::min(count, last + ahead); ++i) {
      auto& state = entry->chunks[static_cast<std::size_t>(i)];
      if (i < last && state == cached_source::chunk_state::registered) ++hits;
      if (i < last && state == cached_source::chunk_state::queued) wanted.push_back(i);  // maybe queued ahead
      if (state != cached_source::chunk_state::absent) continue;
      state = cached_source::chunk_state::queued;
      (i < last ? wanted : later).push_back(i);
    }
  }
  hits_ += hits;
  if (!wanted.empty() || !later.empty()) {
    const std::lock_guard lock(jobs_mutex_);
    for (const std::uint64_t i : wanted) jobs_.push_back({entry, i});
    for (const std::uint64_t i : later) ahead_jobs_.push_back({entry, i});
  }
  if (!wanted.empty() || !later.empty()) post_registration();
  return hits;
}

std::optional<ipc_opener::chunk_outcome> ipc_opener::poll_chunk(const std::shared_ptr<cached_source>& entry,
                                                                std::uint64_t index, const assisted_transfer* assisted,
                                                                chunk_wait& seen, std::function<void()>& resume) {
  using state_t = cached_source::chunk_state;
  std::unique_lock lock(entry->mutex);
  const auto& state = entry->chunks[static_cast<std::size_t>(index)];
  if (seen.index != index) seen = {index, entry->hand_backs};  // a change from here on: some chunk came back
  for (;;) {
    if (assisted != nullptr && assisted->taken[static_cast<std::size_t>(index - assisted->first)] != 0) {
      return chunk_outcome::copy_thread;
    }
    if (state != state_t::queued && state != state_t::registering && state != state_t::copying) {
      return state == state_t::registered ? chunk_outcome::registered : chunk_outcome::failed;
    }
    if (state != state_t::queued || entry->hand_backs == seen.hand_backs) break;
    // Handed back behind the chunks transfers wait for: this transfer waits for it, so it moves up.
    seen.hand_backs = entry->hand_backs;
    lock.unlock();
    {
      const std::lock_guard jobs_lock(jobs_mutex_);
      jobs_.push_front({entry, index});
    }
    post_registration();
    lock.lock();
  }
  // Under the mutex every change of a chunk is made under: the next one calls it (wake).
  entry->waiters.push_back(std::move(resume));
  return std::nullopt;
}

void ipc_opener::hand_back(const std::shared_ptr<cached_source>& entry, std::uint64_t index) {
  bool requeue = false;
  {
    const std::lock_guard lock(entry->mutex);
    requeue = entry->cached && !entry->evicted;
    ++entry->hand_backs;
    entry->chunks[static_cast<std::size_t>(index)] =
        requeue ? cached_source::chunk_state::queued : cached_source::chunk_state::absent;
  }
  wake(*entry);  // other transfers waiting for it go on waiting for its registration
  if (requeue) {
    {
      const std::lock_guard lock(jobs_mutex_);
      ahead_jobs_.push_back({entry, index});
    }
    post_registration();
  }
}

void ipc_opener::post_registration() {
  boost::asio::post(registering_, [this] { register_queued(); });
}

void ipc_opener::register_queued() {
  for (;;) {
    job next;
    {
      const std::lock_guard lock(jobs_mutex_);
      if (jobs_.empty() && ahead_jobs_.empty()) return;  // a later push posts again
      auto& from = jobs_.empty() ? ahead_jobs_ : jobs_;
      next = std::move(from.front());
      next.ahead = jobs_.empty();
      from.pop_front();
    }
    cached_source& entry = *next.entry;
    auto& state = entry.chunks[static_cast<std::size_t>(next.index)];
    bool fail = false;
    {
      const std::lock_guard lock(entry.mutex);
      if (state != cached_source::chunk_state::queued) continue;  // moved up and done already
      // Once stopping, queued chunks fail without registering: their transfers copy them pageable.
      fail = entry.evicted || stopping_;
      state = fail ? cached_source::chunk_state::failed : cached_source::chunk_state::registering;
    }
    if (fail) {
      wake(entry);
      continue;
    }
    const auto [p, n] = chunk_range(entry, next.index);
    // Within the budget: the least recently used versions no transfer uses go first; when that
    // is not enough (transfers hold the rest), the chunk is not registered (its transfer, if one
    // waits, copies it unregistered; one queued ahead goes back to absent).
    evict(make_room(n, &entry));
    bool room = false;
    {
      const std::lock_guard lock(mutex_);
      room = registered_bytes_ + n <= config_.registration_budget;
    }
    // The host's budget is shared: another cache may hold what this one could not free.
    room = room && pinned_->try_take(n);
    if (!room) {
      {
        const std::lock_guard lock(entry.mutex);
        state = next.ahead ? cached_source::chunk_state::absent : cached_source::chunk_state::failed;
      }
      wake(entry);
      continue;
    }
    const auto began = std::chrono::steady_clock::now();
    const bool ok = entry.registrar->register_range(p, n);
    const auto ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - began).count();
    register_ns_ += static_cast<std::uint64_t>(ns);
    if (ok && n >= (1u << 20)) {
      const double sample = ns / (static_cast<double>(n) / (1 << 20));
      register_ns_per_mib_.store(0.75 * register_ns_per_mib_.load() + 0.25 * sample);
    }
    bool drop = false;
    {
      const std::lock_guard lock(entry.mutex);
      drop = ok && entry.evicted;  // evicted while it registered (only chunks queued ahead)
      state = ok && !drop ? cached_source::chunk_state::registered : cached_source::chunk_state::failed;
      if (ok && !drop) {
        entry.registered_bytes += n;
        ++registrations_;
        const std::lock_guard cache_lock(mutex_);
        registered_bytes_ += n;
      }
    }
    if (drop) entry.registrar->unregister_range(p);
    if (!ok || drop) pinned_->give_back(n);
    wake(entry);
  }
}

std::pair<void*, std::size_t> ipc_opener::chunk_range(const cached_source& entry, std::uint64_t index) const {
  static const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::byte* aligned = entry.data - entry.lead;
  const std::uint64_t span = (entry.lead + entry.size + page - 1) / page * page;
  const std::uint64_t first = index * config_.chunk_bytes;
  const std::uint64_t last = std::min(span, first + config_.chunk_bytes);
  // cudaHostRegister takes a non-const pointer; ReadOnly registration never writes.
  return {const_cast<std::byte*>(aligned + first), static_cast<std::size_t>(last - first)};
}

void ipc_opener::unregister_all(cached_source& entry) {
  std::vector<std::size_t> registered;
  {
    const std::lock_guard lock(entry.mutex);
    entry.evicted = true;
    for (std::size_t i = 0; i < entry.chunks.size(); ++i) {
      if (entry.chunks[i] == cached_source::chunk_state::registered) {
        entry.chunks[i] = cached_source::chunk_state::absent;
        registered.push_back(i);
      }
    }
  }
  for (const std::size_t i : registered) {
    const auto [p, n] = chunk_range(entry, i);
    entry.registrar->unregister_range(p);
    pinned_->give_back(n);
  }
}

}  // namespace sluice::cuda::grant_impl
