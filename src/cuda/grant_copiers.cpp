// SPDX-License-Identifier: Apache-2.0
// The CUDA grant opener's copy pool (include/sluice/cuda/grant.hpp): its copiers help cold
// transfers by copying chunks the registration pool would reach late through pinned slots. The parts
// shared with grant.cpp and grant_registration.cpp are in grant_opener.hpp.
#include "grant_opener.hpp"

#include <boost/asio/post.hpp>

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>

namespace sluice::cuda::grant_impl {

namespace {

/// Reads exactly `n` bytes at `offset` of `fd`.
error_code pread_all(int fd, std::byte* to, std::size_t n, std::uint64_t offset) {
  while (n > 0) {
    const ssize_t got = ::pread(fd, to, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return {errno, boost::system::generic_category()};
    if (got == 0) return errc::bad_range;  // the file is shorter than the mapping said
    to += got;
    n -= static_cast<std::size_t>(got);
    offset += static_cast<std::uint64_t>(got);
  }
  return {};
}

}  // namespace

std::optional<std::pair<std::shared_ptr<assisted_transfer>, std::uint64_t>> ipc_opener::take_chunk() {
  using state_t = cached_source::chunk_state;
  if (assisted_.empty()) return std::nullopt;
  const std::lock_guard jobs_lock(jobs_mutex_);
  // The chunks still waiting for registration, in line (a job whose chunk was moved up,
  // registered or taken since is stale; a chunk moved up is counted at its first place).
  std::vector<std::pair<const job*, std::uint64_t>> line;  // the job, chunks in line before it
  std::set<std::pair<const cached_source*, std::uint64_t>> seen;
  for (const job& j : jobs_) {
    if (!seen.emplace(j.entry.get(), j.index).second) continue;
    const std::lock_guard lock(j.entry->mutex);
    if (j.entry->chunks[static_cast<std::size_t>(j.index)] == state_t::queued) {
      line.emplace_back(&j, line.size());
    }
  }
  const double mib = static_cast<double>(config_.chunk_bytes) / (1 << 20);
  const double copy_by = 1.25 * mib * copy_ns_per_mib_.load();
  for (auto it = line.rbegin(); it != line.rend(); ++it) {
    const auto [j, before] = *it;
    // +1: the chunk being registered now. Chunks nearer the front are reached sooner still.
    if (copy_by >= static_cast<double>(before + 1) * mib * register_ns_per_mib_.load()) return std::nullopt;
    for (const auto& t : assisted_) {
      if (t->entry != j->entry || j->index < t->first || j->index >= t->last) continue;
      auto& taken = t->taken[static_cast<std::size_t>(j->index - t->first)];
      const std::lock_guard lock(t->entry->mutex);
      auto& state = t->entry->chunks[static_cast<std::size_t>(j->index)];
      if (taken != 0 || state != state_t::queued) continue;
      state = state_t::copying;
      taken = 1;
      return std::pair{t, j->index};
    }
  }
  return std::nullopt;
}

copier_state::~copier_state() {
  for (auto& [device, d] : devices) {
    const device_scope scope(device);
    for (cudaEvent_t e : d.ready) (void)cudaEventDestroy(e);
    (void)cudaStreamDestroy(d.stream);
  }
  for (std::byte* p : slots) (void)cudaFreeHost(p);
}

bool copier_state::allocate(std::size_t slot_bytes) {
  for (auto& slot : slots) {
    if (slot != nullptr) continue;
    void* p = nullptr;
    if (cudaHostAlloc(&p, slot_bytes, cudaHostAllocPortable) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    slot = static_cast<std::byte*>(p);
  }
  return true;
}

void ipc_opener::assist(std::shared_ptr<assisted_transfer> t) {
  std::size_t idle = 0;
  {
    const std::lock_guard lock(copy_mutex_);
    assisted_.push_back(std::move(t));
    // A busy copier looks at the new transfer when its chunk is done (take_chunk under this
    // mutex, before it turns idle); each idle one gets a handler.
    idle = idle_copiers_.size();
  }
  for (std::size_t i = 0; i < idle; ++i) boost::asio::post(*copying_, [this] { copy_chunks(); });
}

void ipc_opener::copy_chunks() {
  std::unique_ptr<copier_state> own;
  {
    const std::lock_guard lock(copy_mutex_);
    if (idle_copiers_.empty()) return;  // another handler took it
    own = std::move(idle_copiers_.back());
    idle_copiers_.pop_back();
  }
  // A copier without pinned slots copies nothing (and is not given back): registration alone serves.
  if (!own->allocate(config_.copy_slot_bytes)) return;
  for (;;) {
    std::shared_ptr<assisted_transfer> t;
    std::uint64_t index = 0;
    {
      const std::lock_guard lock(copy_mutex_);
      auto picked = stopping_ ? decltype(take_chunk()){} : take_chunk();
      if (!picked) {
        // Nothing worth taking: registration only gains on what is left; idle until a new transfer.
        idle_copiers_.push_back(std::move(own));
        return;
      }
      t = std::move(picked->first);
      index = picked->second;
      ++t->active;
    }
    wake(*t->entry);  // its transfer may wait on this chunk: it is ours now
    const auto began = std::chrono::steady_clock::now();
    const error_code e = copy_chunk(*own, *t, index);
    const auto ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - began).count();
    const auto [at, end] = chunk_span(*t->entry, config_.chunk_bytes, index, t->offset, t->end);
    if (!e && end - at >= (1u << 20)) {
      const double sample = ns / (static_cast<double>(end - at) / (1 << 20));
      copy_ns_per_mib_.store(0.75 * copy_ns_per_mib_.load() + 0.25 * sample);
    }
    hand_back(t->entry, index);
    ++copied_chunks_;
    std::function<void()> idle;
    {
      const std::lock_guard lock(copy_mutex_);
      --t->active;
      ++t->copied;
      if (e && !t->failure) t->failure = e;
      if (t->active == 0) idle = std::move(t->on_idle);  // its transfer ended and waits for this chunk
    }
    if (idle) idle();
  }
}

error_code ipc_opener::copy_chunk(copier_state& own, const assisted_transfer& t, std::uint64_t index) {
  const auto [at, end] = chunk_span(*t.entry, config_.chunk_bytes, index, t.offset, t.end);
  const device_scope scope(t.device);
  auto& d = own.devices[t.device];
  if (d.stream == nullptr) {
    cudaError_t e = cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking);
    for (auto& r : d.ready) {
      if (e == cudaSuccess) e = cudaEventCreateWithFlags(&r, cudaEventBlockingSync | cudaEventDisableTiming);
    }
    if (e != cudaSuccess) return from_error(e);  // what was made goes with `own`
  }
  error_code failure;
  std::array<bool, 2> queued{};
  std::size_t k = 0;
  using clock = std::chrono::steady_clock;
  const auto ns_since = [](clock::time_point t0) {
    return static_cast<std::uint64_t>(std::chrono::duration<double, std::nano>(clock::now() - t0).count());
  };
  for (std::uint64_t from = at; from < end && !failure; from += config_.copy_slot_bytes, ++k) {
    const std::size_t slot = k % 2;
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(config_.copy_slot_bytes, end - from));
    if (queued[slot]) {
      queued[slot] = false;
      const auto t0 = clock::now();
      const cudaError_t e = cudaEventSynchronize(d.ready[slot]);
      copy_sync_ns_ += ns_since(t0);
      if (e != cudaSuccess) {
        failure = from_error(e);
        break;
      }
    }
    const auto t1 = clock::now();
    if (t.entry->file >= 0) {
      failure = pread_all(t.entry->file, own.slots[slot], n, t.entry->file_offset + from);
    } else {
      std::memcpy(own.slots[slot], t.entry->data + from, n);
    }
    copy_read_ns_ += ns_since(t1);
    if (failure) break;
    const auto t2 = clock::now();
    cudaError_t e = cudaMemcpyAsync(t.to + (from - t.offset), own.slots[slot], n, cudaMemcpyHostToDevice, d.stream);
    if (e == cudaSuccess) e = cudaEventRecord(d.ready[slot], d.stream);
    copy_call_ns_ += ns_since(t2);
    if (e != cudaSuccess) failure = from_error(e);
    queued[slot] = e == cudaSuccess;
  }
  // The slots are reused by the next chunk: every copy out of them must be done.
  for (std::size_t slot = 0; slot < 2; ++slot) {
    if (!queued[slot]) continue;
    if (const cudaError_t e = cudaEventSynchronize(d.ready[slot]); e != cudaSuccess && !failure) {
      failure = from_error(e);
    }
  }
  return failure;
}

}  // namespace sluice::cuda::grant_impl
