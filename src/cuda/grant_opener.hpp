// SPDX-License-Identifier: Apache-2.0
// The CUDA grant opener's parts (include/sluice/cuda/grant.hpp) that its translation units share:
// grant.cpp (the client's exporter; the opener: opening grants, its transfers, stats; the
// configuration and the factories), grant_registration.cpp (page-cache registrations: the
// registration context, the cache of registered sources, the registration pool and its
// queues), grant_copiers.cpp (the copy pool that helps cold transfers through pinned slots).
// No thread waits for a transfer: a transfer is an operation that goes on when a chunk it needs
// settles (a waiter of the chunk's source) and ends from CUDA stream callbacks.
// Private: not installed, included as "grant_opener.hpp".
#pragma once

#include <sluice/cuda/error.hpp>
#include <sluice/cuda/grant.hpp>

#include "driver.hpp"

#include <cuda_runtime_api.h>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/thread_pool.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <limits>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace sluice::cuda::grant_impl {

inline error_code from(cudaError_t e) noexcept { return make_cuda_error(static_cast<int>(e)); }

// The description a client sends: magic, version, the IPC handle of the allocation's base, the
// device's UUID and the size the client says the allocation has.
inline constexpr std::array<std::byte, 4> magic{std::byte{'S'}, std::byte{'L'}, std::byte{'C'}, std::byte{'I'}};
inline constexpr std::uint8_t description_version = 1;
inline constexpr std::size_t handle_bytes = sizeof(cudaIpcMemHandle_t);
inline constexpr std::size_t uuid_bytes = 16;
inline constexpr std::size_t description_bytes = 4 + 4 + handle_bytes + uuid_bytes + 8;

/// Page-cache registration in a context of its own. Measured on the H100 host
/// (bench/gpu/register_probe.cpp): while cudaHostRegister runs in the primary context, that
/// context's queued copies do not run, so registering chunk i+1 and copying chunk i do not overlap
/// (4 GiB: register 0.09-0.13 s, copy 0.08 s, both 0.16-0.19 s); registering the same chunks
/// (portable, read-only) in a second context of the device while the primary context copies
/// overlaps them: 0.099 s, 40.6 GiB/s. Falls back to cudaHostRegister in the current context when
/// the driver gives no such context.
class registration_context {
 public:
  /// Creates the device's second context (a few hundred MiB of device memory, ~0.1-0.3 s).
  explicit registration_context(int device);
  registration_context(const registration_context&) = delete;
  registration_context& operator=(const registration_context&) = delete;
  ~registration_context() {
    if (context_ != nullptr) (void)destroy_(context_);
  }
  [[nodiscard]] bool separate() const noexcept { return context_ != nullptr; }

  /// Registers [p, p + n) read-only for every context.
  bool register_range(void* p, std::size_t n) const;
  void unregister_range(void* p) const;

 private:
  CUresult (*get_)(CUdevice*, int) = nullptr;
  CUresult (*push_)(CUcontext) = nullptr;
  CUresult (*pop_)(CUcontext*) = nullptr;
  CUresult (*register_)(void*, size_t, unsigned int) = nullptr;
  CUresult (*unregister_)(void*) = nullptr;
  CUresult (*destroy_)(CUcontext) = nullptr;
  CUcontext context_ = nullptr;
};

/// Sets a device for the calling thread and restores the previous one.
class device_scope {
 public:
  explicit device_scope(int device) {
    (void)cudaGetDevice(&previous_);
    (void)cudaSetDevice(device);
  }
  device_scope(const device_scope&) = delete;
  device_scope& operator=(const device_scope&) = delete;
  ~device_scope() { (void)cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

/// The registered chunks of one object version's mapping, kept with the mapping.
struct cached_source {
  std::shared_ptr<const void> owner;                // the mapping the chunks belong to
  const registration_context* registrar = nullptr;  // of the device that registered the chunks
  const std::byte* data = nullptr;                  // object byte 0 in that mapping
  std::uint64_t size = 0;
  std::size_t lead = 0;  // data's offset in its page: chunks are page-aligned ranges of the mapping
  int file = -1;         // the same bytes as a file (byte i at file_offset + i), or -1; lives with owner
  std::uint64_t file_offset = 0;
  bool cached = false;  // in the opener's cache: chunks are worth registering after the transfer
  std::mutex mutex;     // chunks, waiters
  // Transfers waiting for a chunk to settle: each is called once, outside the mutex, at the next
  // change of a chunk (wake), and looks again.
  std::vector<std::function<void()>> waiters;
  // copying: a copier moves the chunk through pinned slots for one transfer; afterwards it
  // is queued for registration again (cached entries) or absent.
  enum class chunk_state : std::uint8_t { absent, queued, registering, registered, failed, copying };
  std::vector<chunk_state> chunks;
  bool evicted = false;          // out of the cache: chunks registered ahead after this are dropped at once
  std::uint64_t hand_backs = 0;  // chunks copiers handed back (transfers waiting move them up)
  std::atomic<std::uint64_t> registered_bytes{0};
  int users = 0;  // transfers using it now (the cache's mutex)
};

/// A cold transfer the copy pool helps: its copiers take chunks of [first, last) from the back (the
/// registration pool works from the front) and copy them through pinned slots.
struct assisted_transfer {
  std::shared_ptr<cached_source> entry;
  int device = 0;
  std::byte* to = nullptr;            // where object byte `offset` goes
  std::uint64_t offset = 0, end = 0;  // the object range
  std::uint64_t first = 0, last = 0;  // its chunks
  std::vector<char> taken;            // [index - first]: a copier's (entry->mutex)
  int active = 0;                     // copiers on it now (the opener's copy mutex)
  std::uint64_t copied = 0;           // chunks copied (the opener's copy mutex)
  error_code failure;                 // the copiers' first (the opener's copy mutex)
  std::function<void()> on_idle;      // the transfer's end, once active drops to 0 (the copy mutex)
};

/// Calls (outside its mutex) the transfers waiting for one of the entry's chunks.
inline void wake(cached_source& entry) {
  std::vector<std::function<void()>> woken;
  {
    const std::lock_guard lock(entry.mutex);
    woken.swap(entry.waiters);
  }
  for (auto& w : woken) w();
}

/// A copier's two pinned slots and, per device, its stream and the slots' events (one copy pool
/// thread uses it at a time).
struct copier_state {
  std::array<std::byte*, 2> slots{};
  struct per_device {
    cudaStream_t stream = nullptr;
    std::array<cudaEvent_t, 2> ready{};
  };
  std::map<int, per_device> devices;
  copier_state() = default;
  copier_state(const copier_state&) = delete;
  copier_state& operator=(const copier_state&) = delete;
  ~copier_state();
  /// Allocates the pinned slots (once); false when they could not be.
  bool allocate(std::size_t slot_bytes);
};

/// Object bytes [at, end) of chunk `index` within the object range [offset, end_at).
inline std::pair<std::uint64_t, std::uint64_t> chunk_span(const cached_source& entry, std::uint64_t chunk,
                                                          std::uint64_t index, std::uint64_t offset,
                                                          std::uint64_t end_at) {
  const std::uint64_t at = std::max(offset, index * chunk - std::min<std::uint64_t>(index * chunk, entry.lead));
  const std::uint64_t end = std::min({(index + 1) * chunk - entry.lead, end_at, entry.size});
  return {at, end};
}

class ipc_opener;

/// One opened client allocation.
class ipc_grant final : public s3::device_grant, public std::enable_shared_from_this<ipc_grant> {
 public:
  ipc_grant(std::shared_ptr<ipc_opener> opener, int device, std::byte* base, std::uint64_t size,
            std::shared_ptr<void> handle)
      : opener_(std::move(opener)), device_(device), base_(base), size_(size), handle_(std::move(handle)) {}
  [[nodiscard]] std::uint64_t size() const noexcept override { return size_; }
  error_code write(std::uint64_t offset, const s3::rdma_source& source) override;
  void async_write(std::uint64_t offset, const s3::rdma_source& source, const boost::asio::any_io_executor& executor,
                   std::function<void(error_code)> done) override;
  error_code read(std::uint64_t offset, std::uint64_t length, const s3::rdma_sink& sink) override;

 private:
  std::shared_ptr<ipc_opener> opener_;
  int device_;
  std::byte* base_;
  std::uint64_t size_;
  std::shared_ptr<void> handle_;  // closes the IPC mapping when the last grant on it goes
};

class ipc_opener final : public s3::device_grant_opener, public std::enable_shared_from_this<ipc_opener> {
 public:
  /// Registrations are portable (every context and device may copy from them): one registration
  /// context, on device 0, serves all devices.
  explicit ipc_opener(grant_opener_config config);
  ~ipc_opener() override;

  std::shared_ptr<s3::device_grant> open(std::span<const std::byte> description, error_code& ec) override;
  [[nodiscard]] std::uint64_t published_min_bytes() const noexcept override;
  /// Queues every chunk of a new version for registration behind the chunks GETs wait for.
  void published(const s3::rdma_source& source) override;

  /// Copies source.bytes() to `to` (device memory of `device`) by DMA from registered chunks;
  /// `done` runs once, on `executor` (which also runs the transfer's CUDA calls), with the
  /// outcome. No thread waits meanwhile: the transfer goes on when a chunk it needs settles and
  /// ends from its streams' callbacks. `source` is copied (its owner kept until `done`).
  void async_write(int device, std::byte* to, const s3::rdma_source& source,
                   const boost::asio::any_io_executor& executor, std::function<void(error_code)> done);

  error_code read(int device, const std::byte* from, std::uint64_t length, const s3::rdma_sink& sink);

  grant_opener_stats stats();

 private:
  static error_code from_error(cudaError_t e) {
    (void)cudaGetLastError();
    return from(e);
  }

  int device_with(const std::array<std::byte, uuid_bytes>& uuid);

  struct write_op;  // one async_write (grant.cpp)

  /// The cache entry of the source's version (made when missing), marked in use. A source
  /// without a version gets an entry of its own that is never cached.
  std::shared_ptr<cached_source> acquire(const s3::rdma_source& source);
  void release(const std::shared_ptr<cached_source>& entry);

  /// Hands the chunks [first, last) of `entry` that are not registered yet to the registering
  /// thread, first in line (chunks queued ahead before are moved up), and the next `ahead` chunks
  /// after them to be registered when nothing else waits; returns how many of [first, last) were
  /// registered already.
  std::uint64_t queue_registrations(const std::shared_ptr<cached_source>& entry, std::uint64_t first,
                                    std::uint64_t last, std::uint64_t ahead);

  enum class chunk_outcome : std::uint8_t { registered, failed, copy_thread };

  /// What a transfer knows of the chunk it waits for: which one, and the entry's hand_backs when
  /// it began to.
  struct chunk_wait {
    std::uint64_t index = std::numeric_limits<std::uint64_t>::max();
    std::uint64_t hand_backs = 0;
  };

  /// Whether chunk `index` is registered or failed (queued by this or another transfer), or a
  /// copier took it for `assisted` (this transfer); when none yet, `resume` becomes a waiter of
  /// the entry (called at its next change) and the answer is empty. A chunk another transfer's
  /// copier copied goes back to the registration pool's background queue (hand_back); when this
  /// transfer waits for it, it moves it up to the queue of chunks transfers wait for.
  std::optional<chunk_outcome> poll_chunk(const std::shared_ptr<cached_source>& entry, std::uint64_t index,
                                          const assisted_transfer* assisted, chunk_wait& seen,
                                          std::function<void()>& resume);

  /// The chunk a copier should copy now: the last chunk in the registration pool's own
  /// queue that belongs to a cold transfer being helped, when a copier would end it sooner
  /// than registration reaches it (the chunks queued before it, at the rates measured so far);
  /// marked taken and copying. Judging by the real queue, not by a transfer's place in the
  /// object, keeps concurrent parts fair (H100 run 12: with three parts of one object at once, the
  /// copy threads took all 16 chunks of one part and 2 of another, which then waited 0.11 s).
  /// Called with copy_mutex_ held.
  std::optional<std::pair<std::shared_ptr<assisted_transfer>, std::uint64_t>> take_chunk();

  /// Adds a cold transfer for the copy pool to help, and wakes the idle copiers.
  void assist(std::shared_ptr<assisted_transfer> t);

  /// A copy pool handler with an idle copier's slots: takes chunks of cold transfers (take_chunk)
  /// and copies each through the two pinned slots (pread from the store's file, or a copy from
  /// the mapping; DMA from the slot while the other one fills), then hands the chunk back to be
  /// registered; returns the copier to the idle ones when nothing is worth taking.
  void copy_chunks();

  /// Copies chunk `index` of `t` through the copier's slots into the transfer's destination.
  error_code copy_chunk(copier_state& own, const assisted_transfer& t, std::uint64_t index);

  /// After a copier's copy: a cached entry's chunk is queued for registration behind the
  /// chunks transfers wait for (the next GET finds it registered; a transfer that waits for it
  /// moves it up), another one's goes back to absent.
  void hand_back(const std::shared_ptr<cached_source>& entry, std::uint64_t index);

  /// Has the registration pool register what is queued (after a push to jobs_ or ahead_jobs_).
  void post_registration();
  /// The registration pool's handler: registers the chunks transfers wait for in the order they
  /// were queued, then those queued ahead, until both queues are empty.
  void register_queued();

  /// The host range of chunk `index`: chunk_bytes of the mapping from the page that holds the
  /// object's first byte (page-aligned, so neighbouring chunks never share a page), the last one
  /// up to the end of the page holding the object's last byte (mmap maps whole pages).
  std::pair<void*, std::size_t> chunk_range(const cached_source& entry, std::uint64_t index) const;

  /// Takes out of the cache the least recently used versions no transfer uses (never `keep`)
  /// until `n` more bytes fit in registration_budget and in the pinned budget (counting what
  /// the versions taken out give back); the caller unregisters them (evict).
  std::vector<std::shared_ptr<cached_source>> make_room(std::uint64_t n, const cached_source* keep);
  /// Counts the evicted entries' registered chunks and unregisters them.
  void evict(const std::vector<std::shared_ptr<cached_source>>& evicted);

  /// Marks the entry evicted and unregisters its registered chunks.
  void unregister_all(cached_source& entry);

  struct cache_slot {
    std::shared_ptr<cached_source> entry;
    std::list<s3::object_version_id>::iterator lru;
  };
  struct job {
    std::shared_ptr<cached_source> entry;
    std::uint64_t index = 0;
    bool ahead = false;  // taken from ahead_jobs_ (no transfer waits for it)
  };

  grant_opener_config config_;
  std::shared_ptr<pinned_budget> pinned_;            // config_.pinned, or one of registration_budget bytes
  std::unique_ptr<registration_context> registrar_;  // outlives the cache: declared before it
  std::mutex mutex_;                                 // cache_, lru_, handles_, registered_bytes_
  std::map<s3::object_version_id, cache_slot> cache_;
  std::list<s3::object_version_id> lru_;
  std::map<std::string, std::weak_ptr<void>> handles_;
  std::uint64_t registered_bytes_ = 0;
  std::atomic<std::uint64_t> registrations_{0}, hits_{0}, pageable_copies_{0}, evictions_{0}, open_handles_{0},
      register_ns_{0}, copied_chunks_{0}, registered_on_write_{0};
  // Copiers' time (config_.trace): reading into pinned slots, inside cudaMemcpyAsync and
  // cudaEventRecord, waiting for a slot's DMA.
  std::atomic<std::uint64_t> copy_read_ns_{0}, copy_call_ns_{0}, copy_sync_ns_{0};
  // Rates that decide which chunks the copiers take, measured as they go; the first values
  // are the H100 host's: registering 4 GiB in ~0.13 s, pread into pinned slots ~6 GiB/s a thread.
  std::atomic<double> register_ns_per_mib_{30'000}, copy_ns_per_mib_{160'000};
  std::mutex jobs_mutex_;              // jobs_, ahead_jobs_
  std::deque<job> jobs_;               // chunks transfers wait for
  std::deque<job> ahead_jobs_;         // chunks after a transfer's range (register_ahead_bytes)
  std::atomic<bool> stopping_{false};  // queued chunks fail without registering; copiers take none
  std::mutex copy_mutex_;              // assisted_, idle_copiers_, every assisted_transfer's counters
  std::list<std::shared_ptr<assisted_transfer>> assisted_;   // cold transfers the copy pool helps
  std::vector<std::unique_ptr<copier_state>> idle_copiers_;  // a copier per copy pool thread
  // One thread: the probe measured concurrent registrations slower than one after the other.
  // Both pools are joined in ~ipc_opener before the members their handlers use go.
  boost::asio::thread_pool registering_{1};
  std::optional<boost::asio::thread_pool> copying_;  // config_.copy_threads threads, when any
};

}  // namespace sluice::cuda::grant_impl
