// SPDX-License-Identifier: Apache-2.0
// Same-host device-memory grants (include/sluice/cuda/grant.hpp): CUDA IPC export and open,
// and the server's copies from registered page cache into opened client allocations.
// The opener's parts shared with grant_registration.cpp and grant_copiers.cpp are in
// grant_opener.hpp; this file holds the client's exporter, opening grants, the transfers, the
// configuration and the factories.
#include "grant_opener.hpp"

#include <sluice/s3/error.hpp>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/system_executor.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>

namespace sluice::cuda {

namespace grant_impl {

namespace {

using driver::allocation_of;

std::array<std::byte, uuid_bytes> uuid_of(int device, error_code& ec) {
  std::array<std::byte, uuid_bytes> out{};
  cudaDeviceProp prop{};
  if (const cudaError_t e = cudaGetDeviceProperties(&prop, device); e != cudaSuccess) {
    ec = from(e);
    return out;
  }
  std::memcpy(out.data(), &prop.uuid, uuid_bytes);
  ec = {};
  return out;
}

// -- client ----------------------------------------------------------------------------------

class ipc_exporter final : public s3::device_grant_exporter {
 public:
  s3::exported_device_memory export_allocation(const region& memory, error_code& ec) override {
    s3::exported_device_memory out;
    if (memory.kind != memory_kind::cuda_device || memory.data == nullptr) {
      ec = errc::unsupported_memory;
      return out;
    }
    cudaPointerAttributes attributes{};
    if (const cudaError_t e = cudaPointerGetAttributes(&attributes, memory.data);
        e != cudaSuccess || attributes.type != cudaMemoryTypeDevice) {
      (void)cudaGetLastError();
      ec = errc::unsupported_memory;
      return out;
    }
    // The driver calls need the device's context current in this thread (the S3 client calls
    // from its own threads, which may never have touched CUDA).
    const device_scope scope(attributes.device);
    std::byte* base = nullptr;
    std::uint64_t size = 0;
    if (!allocation_of(memory.data, base, size)) {
      ec = errc::unsupported_memory;
      return out;
    }
    cudaIpcMemHandle_t handle{};
    const cudaError_t e = cudaIpcGetMemHandle(&handle, base);  // VMM or pool memory is not exportable
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      ec = errc::unsupported_memory;
      return out;
    }
    const auto uuid = uuid_of(attributes.device, ec);
    if (ec) return out;
    out.description.reserve(description_bytes);
    out.description.insert(out.description.end(), magic.begin(), magic.end());
    out.description.push_back(std::byte{description_version});
    out.description.resize(8);
    const auto* h = reinterpret_cast<const std::byte*>(&handle);
    out.description.insert(out.description.end(), h, h + handle_bytes);
    out.description.insert(out.description.end(), uuid.begin(), uuid.end());
    for (unsigned i = 0; i < 8; ++i) out.description.push_back(static_cast<std::byte>((size >> (8 * i)) & 0xFFu));
    out.base = base;
    out.size = size;
    ec = {};
    return out;
  }
};

/// `streams` non-blocking streams of one transfer.
class stream_set {
 public:
  explicit stream_set(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      cudaStream_t s = nullptr;
      cudaEvent_t e = nullptr;
      if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) break;
      if (cudaEventCreateWithFlags(&e, cudaEventBlockingSync | cudaEventDisableTiming) != cudaSuccess) {
        (void)cudaStreamDestroy(s);
        break;
      }
      streams_.push_back(s);
      done_.push_back(e);
    }
    if (streams_.size() != n) (void)cudaGetLastError();
  }
  stream_set(const stream_set&) = delete;
  stream_set& operator=(const stream_set&) = delete;
  ~stream_set() {
    for (cudaStream_t s : streams_) (void)cudaStreamDestroy(s);
    for (cudaEvent_t e : done_) (void)cudaEventDestroy(e);
  }
  [[nodiscard]] bool empty() const noexcept { return streams_.empty(); }
  [[nodiscard]] std::size_t size() const noexcept { return streams_.size(); }
  [[nodiscard]] cudaStream_t at(std::size_t i) const { return streams_[i]; }
  cudaStream_t next() { return streams_[next_++ % streams_.size()]; }
  /// Waits for every stream's work, sleeping: cudaStreamSynchronize spins a core for the whole
  /// copy (measured: 8 parts in flight cost the server 0.157 CPU-s/GiB that way).
  error_code synchronize() {
    error_code first;
    for (std::size_t i = 0; i < streams_.size(); ++i) {
      cudaError_t e = cudaEventRecord(done_[i], streams_[i]);
      if (e == cudaSuccess) e = cudaEventSynchronize(done_[i]);
      if (e != cudaSuccess) {
        (void)cudaGetLastError();
        e = cudaStreamSynchronize(streams_[i]);  // what is queued must be done before the caller goes on
        if (e != cudaSuccess && !first) first = from(e);
      }
    }
    return first;
  }

 private:
  std::vector<cudaStream_t> streams_;
  std::vector<cudaEvent_t> done_;
  std::size_t next_ = 0;
};

}  // namespace

ipc_opener::ipc_opener(grant_opener_config config)
    : config_(std::move(config)),
      pinned_(config_.pinned ? config_.pinned : std::make_shared<pinned_budget>(config_.registration_budget)),
      registrar_(std::make_unique<registration_context>(0)) {
  if (config_.copy_threads > 0) copying_.emplace(config_.copy_threads);
  for (std::size_t i = 0; i < config_.copy_threads; ++i) idle_copiers_.push_back(std::make_unique<copier_state>());
  // Each copier's pinned slots now, on the pool (as its threads did when they started): a
  // version's first GET pays for no cudaHostAlloc. One that a GET takes first allocates there.
  for (std::size_t i = 0; i < config_.copy_threads; ++i) {
    boost::asio::post(*copying_, [this] {
      std::unique_ptr<copier_state> own;
      {
        const std::lock_guard lock(copy_mutex_);
        const auto bare = std::find_if(idle_copiers_.begin(), idle_copiers_.end(),
                                       [](const auto& c) { return c->slots[0] == nullptr; });
        if (bare == idle_copiers_.end()) return;
        own = std::move(*bare);
        idle_copiers_.erase(bare);
      }
      if (!own->allocate(config_.copy_slot_bytes)) return;  // it copies nothing: registration serves
      const std::lock_guard lock(copy_mutex_);
      idle_copiers_.push_back(std::move(own));
      // A transfer that came meanwhile did not count this copier.
      if (!assisted_.empty()) boost::asio::post(*copying_, [this] { copy_chunks(); });
    });
  }
}

ipc_opener::~ipc_opener() {
  // No transfer runs any more (each holds the opener). What is still queued (chunks registered
  // ahead) fails at once; the pools end when their handlers have.
  stopping_ = true;
  if (copying_) copying_->join();
  registering_.join();
  idle_copiers_.clear();  // their streams and pinned slots, while CUDA is up
  for (auto& [version, cached] : cache_) unregister_all(*cached.entry);
}

std::shared_ptr<s3::device_grant> ipc_opener::open(std::span<const std::byte> description, error_code& ec) {
  if (description.size() != description_bytes || !std::equal(magic.begin(), magic.end(), description.begin()) ||
      description[4] != std::byte{description_version}) {
    ec = errc::invalid_argument;
    return nullptr;
  }
  cudaIpcMemHandle_t handle{};
  std::memcpy(&handle, description.data() + 8, handle_bytes);
  std::array<std::byte, uuid_bytes> uuid{};
  std::memcpy(uuid.data(), description.data() + 8 + handle_bytes, uuid_bytes);
  std::uint64_t claimed = 0;
  for (unsigned i = 0; i < 8; ++i) {
    claimed |= std::to_integer<std::uint64_t>(description[8 + handle_bytes + uuid_bytes + i]) << (8 * i);
  }
  const int device = device_with(uuid);
  if (device < 0) {
    ec = s3::errc::rdma_not_supported;  // not a GPU this process sees
    return nullptr;
  }
  const std::lock_guard lock(mutex_);
  const std::string key(reinterpret_cast<const char*>(&handle), handle_bytes);
  std::shared_ptr<void> opened;
  std::byte* base = nullptr;
  if (auto it = handles_.find(key); it != handles_.end()) opened = it->second.lock();
  if (opened) {
    base = static_cast<std::byte*>(opened.get());
  } else {
    const device_scope scope(device);
    void* p = nullptr;
    if (const cudaError_t e = cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess); e != cudaSuccess) {
      (void)cudaGetLastError();
      ec = s3::errc::rdma_not_supported;  // another host's or boot's handle, a freed allocation, ...
      return nullptr;
    }
    // A weak reference: the deleter lives as long as the control block, which handles_' weak
    // pointers keep, so a strong one would keep this opener alive for ever.
    opened = std::shared_ptr<void>(p, [self = weak_from_this(), device](void* q) {
      const device_scope s(device);
      (void)cudaIpcCloseMemHandle(q);
      if (const auto opener = self.lock()) --opener->open_handles_;
    });
    ++open_handles_;
    handles_[key] = opened;
    base = static_cast<std::byte*>(p);
  }
  // The driver's size of what was opened bounds the grant, whatever the client claimed.
  const device_scope scope(device);
  std::byte* real_base = nullptr;
  std::uint64_t real_size = 0;
  if (!allocation_of(base, real_base, real_size) || real_base != base) {
    ec = s3::errc::rdma_not_supported;
    return nullptr;
  }
  ec = {};
  return std::make_shared<ipc_grant>(shared_from_this(), device, base, std::min(claimed, real_size), std::move(opened));
}

/// One transfer into device memory: queues the registration of its chunks, then DMAs each chunk
/// once it is registered (or copies it pageable when it could not be, or leaves it to a copier
/// that took it), going on from the chunk's waiter when one is not settled yet; ends from its
/// streams' callbacks once the copy pool's copiers are done with its chunks.
struct ipc_opener::write_op : std::enable_shared_from_this<write_op> {
  std::shared_ptr<ipc_opener> opener;
  int device = 0;
  std::byte* to = nullptr;
  s3::rdma_source source;
  boost::asio::any_io_executor executor;
  std::function<void(error_code)> done;
  std::unique_ptr<stream_set> streams;
  std::shared_ptr<cached_source> entry;
  std::shared_ptr<assisted_transfer> assisted;
  std::uint64_t first = 0, last = 0, index = 0, hits = 0, copied = 0;
  chunk_wait seen;
  error_code failure;
  std::atomic<std::size_t> streams_left{0};
  std::atomic<int> stream_error{cudaSuccess};
  std::shared_ptr<write_op> keep;  // while the streams' callbacks are outstanding
  // config_.trace
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now(), queued;
  std::chrono::steady_clock::time_point wait_start{};
  double waited = 0, calls = 0;

  void resume_later() {
    boost::asio::post(executor, [self = shared_from_this()] { self->advance(); });
  }

  void begin() {
    const device_scope scope(device);
    streams = std::make_unique<stream_set>(opener->config_.streams);
    if (streams->empty()) return finish_with(errc::no_device);
    entry = opener->acquire(source);
    const std::uint64_t chunk = opener->config_.chunk_bytes;
    const std::uint64_t end_at = source.offset + source.length;
    first = (source.offset + entry->lead) / chunk;
    last = source.length == 0 ? first : (end_at - 1 + entry->lead) / chunk + 1;
    index = first;
    // Every chunk of the range still absent goes to the registration pool at once, in order: it
    // registers ahead (in the registration context) while this transfer queues each chunk's DMA
    // as soon as the chunk is ready. Chunks after the range are registered too when nothing else
    // waits: the rest of a large object is usually asked for next (the next parts of the GET).
    const std::uint64_t ahead = source.version.cacheable() ? opener->config_.register_ahead_bytes / chunk : 0;
    hits = opener->queue_registrations(entry, first, last, ahead);
    // The copy pool takes the chunks that registration would reach late (from the back).
    if (opener->copying_ && hits < last - first) {
      assisted = std::make_shared<assisted_transfer>();
      assisted->entry = entry;
      assisted->device = device;
      assisted->to = to;
      assisted->offset = source.offset;
      assisted->end = end_at;
      assisted->first = first;
      assisted->last = last;
      assisted->taken.assign(static_cast<std::size_t>(last - first), 0);
      opener->assist(assisted);
    }
    advance();
  }

  /// DMAs the chunks that are settled, in order; returns at the first that is not (its waiter
  /// calls resume_later), or ends the transfer's loop.
  void advance() {
    using clock = std::chrono::steady_clock;
    const device_scope scope(device);
    const std::uint64_t chunk = opener->config_.chunk_bytes;
    const std::uint64_t end_at = source.offset + source.length;
    for (; index < last; ++index) {
      std::function<void()> resume = [self = shared_from_this()] { self->resume_later(); };
      const auto polled = clock::now();
      const auto outcome = opener->poll_chunk(entry, index, assisted.get(), seen, resume);
      if (!outcome) {
        if (wait_start == clock::time_point{}) wait_start = polled;
        return;
      }
      const auto call_start = clock::now();
      if (wait_start != clock::time_point{}) waited += std::chrono::duration<double>(call_start - wait_start).count();
      wait_start = {};
      if (failure || *outcome == chunk_outcome::copy_thread) continue;  // queued chunks still settle first
      const auto [at, end] = chunk_span(*entry, chunk, index, source.offset, end_at);
      const std::byte* src = entry->data + at;
      const auto n = static_cast<std::size_t>(end - at);
      cudaError_t e = cudaSuccess;
      if (*outcome == chunk_outcome::registered) {
        e = cudaMemcpyAsync(to + (at - source.offset), src, n, cudaMemcpyHostToDevice, streams->next());
      } else {
        ++opener->pageable_copies_;
        e = cudaMemcpy(to + (at - source.offset), src, n, cudaMemcpyHostToDevice);
      }
      if (e != cudaSuccess) failure = from_error(e);
      calls += std::chrono::duration<double>(clock::now() - call_start).count();
    }
    if (assisted) {  // no new chunks taken from here on; wait for those taken
      const std::lock_guard lock(opener->copy_mutex_);
      opener->assisted_.remove(assisted);
      if (assisted->active > 0) {
        assisted->on_idle = [self = shared_from_this()] {
          boost::asio::post(self->executor, [self] { self->drain(); });
        };
        return;
      }
    }
    drain();
  }

  /// After the copiers: a callback on each stream once its DMAs are done; the last one ends.
  void drain() {
    if (assisted) {
      const std::lock_guard lock(opener->copy_mutex_);
      if (assisted->failure && !failure) failure = assisted->failure;
      copied = assisted->copied;
    }
    queued = std::chrono::steady_clock::now();
    const device_scope scope(device);
    const std::size_t n = streams->size();
    streams_left = n + 1;  // + 1: this call, so that no callback ends the transfer before all are added
    keep = shared_from_this();
    for (std::size_t i = 0; i < n; ++i) {
      // cudaStreamAddCallback, not cudaLaunchHostFunc: its callback runs even after a device
      // error (with the error), so a transfer always ends.
      if (cudaStreamAddCallback(streams->at(i), &write_op::stream_done, this, 0) != cudaSuccess) {
        (void)cudaGetLastError();
        stream_error = cudaErrorUnknown;  // finish waits for that stream itself
        count_down();
      }
    }
    count_down();
  }

  static void CUDART_CB stream_done(cudaStream_t /*stream*/, cudaError_t status, void* self) {
    auto* op = static_cast<write_op*>(self);
    if (status != cudaSuccess) op->stream_error = status;
    op->count_down();  // no CUDA call here: the rest runs on the executor
  }

  void count_down() {
    if (--streams_left == 0) {
      boost::asio::post(executor, [self = std::move(keep)] { self->finish(); });
    }
  }

  void finish() {
    {
      const device_scope scope(device);
      // Every stream is idle (its callback ran) unless adding one failed: this returns at once
      // then, and otherwise waits for that stream.
      if (const error_code synced = streams->synchronize(); synced && !failure) failure = synced;
      if (stream_error != cudaSuccess && !failure) failure = from(static_cast<cudaError_t>(stream_error.load()));
    }
    opener->release(entry);
    if (opener->config_.trace) trace();
    finish_with(failure);
  }

  void finish_with(error_code ec) {
    auto d = std::move(done);
    d(ec);
  }

  void trace() const {
    const auto end = std::chrono::steady_clock::now();
    std::fprintf(
        stderr,
        "sluice grant: write %.1f MiB from offset %llu: %llu chunks (%llu registered already, %llu "
        "copied through pinned slots), waited %.4f s for registrations, %.4f s in cudaMemcpyAsync, copies "
        "queued at %.4f s, done at %.4f s%s; registration pool busy %.4f s since start; copiers "
        "since start: %.4f s reading, %.4f s in CUDA calls, %.4f s waiting for DMA; clock %.4f to %.4f\n",
        static_cast<double>(source.length) / (1 << 20), static_cast<unsigned long long>(source.offset),
        static_cast<unsigned long long>(last - first), static_cast<unsigned long long>(hits),
        static_cast<unsigned long long>(copied), waited, calls, std::chrono::duration<double>(queued - start).count(),
        std::chrono::duration<double>(end - start).count(), failure ? " (failed)" : "",
        static_cast<double>(opener->register_ns_.load()) / 1e9, static_cast<double>(opener->copy_read_ns_.load()) / 1e9,
        static_cast<double>(opener->copy_call_ns_.load()) / 1e9,
        static_cast<double>(opener->copy_sync_ns_.load()) / 1e9,
        std::chrono::duration<double>(start.time_since_epoch()).count(),
        std::chrono::duration<double>(end.time_since_epoch()).count());
  }
};

void ipc_opener::async_write(int device, std::byte* to, const s3::rdma_source& source,
                             const boost::asio::any_io_executor& executor, std::function<void(error_code)> done) {
  auto op = std::make_shared<write_op>();
  op->opener = shared_from_this();
  op->device = device;
  op->to = to;
  op->source = source;
  op->executor = executor;
  op->done = std::move(done);
  boost::asio::post(executor, [op] { op->begin(); });
}

error_code ipc_opener::read(int device, const std::byte* from, std::uint64_t length, const s3::rdma_sink& sink) {
  const device_scope scope(device);
  std::array<void*, 2> buffers{};
  std::array<cudaEvent_t, 2> ready{};
  const auto cleanup = [&] {
    for (void* p : buffers) (void)cudaFreeHost(p);
    for (cudaEvent_t e : ready) (void)cudaEventDestroy(e);
  };
  for (std::size_t i = 0; i < 2; ++i) {
    cudaError_t e = cudaMallocHost(&buffers[i], config_.staging_bytes);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&ready[i], cudaEventDisableTiming);
    if (e != cudaSuccess) {
      cleanup();
      return from_error(e);
    }
  }
  stream_set streams(1);
  const std::uint64_t step = config_.staging_bytes;
  const std::uint64_t chunks = (length + step - 1) / step;
  const auto queue = [&](std::uint64_t i) -> error_code {
    const auto slot = static_cast<std::size_t>(i % 2);
    const auto n = static_cast<std::size_t>(std::min(step, length - i * step));
    cudaStream_t s = streams.next();
    cudaError_t e = cudaMemcpyAsync(buffers[slot], from + i * step, n, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaEventRecord(ready[slot], s);
    return e == cudaSuccess ? error_code{} : from_error(e);
  };
  // Double-buffered: chunk i+1 copies out of the device while the sink takes chunk i (the
  // sink is done with a buffer before the chunk after next is queued into it).
  error_code failure = chunks > 0 ? queue(0) : error_code{};
  for (std::uint64_t i = 0; i < chunks && !failure; ++i) {
    if (i + 1 < chunks && (failure = queue(i + 1))) break;
    const auto slot = static_cast<std::size_t>(i % 2);
    if (const cudaError_t e = cudaEventSynchronize(ready[slot]); e != cudaSuccess) {
      failure = from_error(e);
      break;
    }
    const auto n = static_cast<std::size_t>(std::min(step, length - i * step));
    failure = sink(std::span<const std::byte>(static_cast<const std::byte*>(buffers[slot]), n));
  }
  (void)streams.synchronize();  // nothing may still write into the buffers freed below
  cleanup();
  return failure;
}

std::uint64_t ipc_opener::published_min_bytes() const noexcept {
  return config_.register_on_write ? std::max<std::uint64_t>(1, config_.register_on_write_min_bytes)
                                   : std::numeric_limits<std::uint64_t>::max();
}

void ipc_opener::published(const s3::rdma_source& source) {
  if (!config_.register_on_write || !source.version.cacheable() || source.mapping.size < published_min_bytes() ||
      source.mapping.size > config_.registration_budget) {
    return;
  }
  const std::shared_ptr<cached_source> entry = acquire(source);
  if (entry->cached) {
    // All of it "ahead": the registering thread takes these when no GET waits for a chunk, and a
    // GET that comes meanwhile moves the chunks it needs to the front.
    (void)queue_registrations(entry, 0, 0, static_cast<std::uint64_t>(entry->chunks.size()));
    ++registered_on_write_;
  }
  release(entry);
}

grant_opener_stats ipc_opener::stats() {
  const std::lock_guard lock(mutex_);
  grant_opener_stats s;
  s.registered_bytes = registered_bytes_;
  s.registrations = registrations_.load();
  s.cache_hits = hits_.load();
  s.pageable_copies = pageable_copies_.load();
  s.copied_chunks = copied_chunks_.load();
  s.evictions = evictions_.load();
  s.open_handles = open_handles_.load();
  s.registered_on_write = registered_on_write_.load();
  s.cached_versions = cache_.size();
  s.registration_context = registrar_->separate();
  return s;
}

int ipc_opener::device_with(const std::array<std::byte, uuid_bytes>& uuid) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  for (int d = 0; d < count; ++d) {
    error_code ec;
    if (uuid_of(d, ec) == uuid && !ec) return d;
  }
  return -1;
}

error_code ipc_grant::write(std::uint64_t offset, const s3::rdma_source& source) {
  std::promise<error_code> result;
  auto outcome = result.get_future();
  async_write(offset, source, boost::asio::system_executor(), [&result](error_code ec) { result.set_value(ec); });
  return outcome.get();
}

void ipc_grant::async_write(std::uint64_t offset, const s3::rdma_source& source,
                            const boost::asio::any_io_executor& executor, std::function<void(error_code)> done) {
  // The grant (its IPC mapping) stays open until the transfer ends.
  opener_->async_write(device_, base_ + offset, source, executor,
                       [self = shared_from_this(), done = std::move(done)](error_code ec) { done(ec); });
}

error_code ipc_grant::read(std::uint64_t offset, std::uint64_t length, const s3::rdma_sink& sink) {
  return opener_->read(device_, base_ + offset, length, sink);
}

}  // namespace grant_impl

using grant_impl::device_scope;
using grant_impl::ipc_exporter;
using grant_impl::ipc_opener;

std::size_t default_copy_threads() noexcept {
  const unsigned cores = std::thread::hardware_concurrency();
  return std::clamp<std::size_t>(cores > 2 ? cores - 2 : 1, 1, 16);
}

std::optional<config_error> grant_opener_config::validate() const {
  if (streams == 0 || streams > 64) return config_error{"grants.streams", "must be 1..64"};
  if (chunk_bytes < (1u << 20) || chunk_bytes > (std::size_t{1} << 30) || chunk_bytes % 4096 != 0) {
    return config_error{"grants.chunk_bytes", "must be a multiple of 4 KiB between 1 MiB and 1 GiB"};
  }
  if (staging_bytes < 4096) return config_error{"grants.staging_bytes", "must be at least 4 KiB"};
  if (copy_threads > 64) return config_error{"grants.copy_threads", "must be 0..64"};
  if (copy_slot_bytes < (1u << 20) || copy_slot_bytes > (std::size_t{1} << 30)) {
    return config_error{"grants.copy_slot_bytes", "must be between 1 MiB and 1 GiB"};
  }
  if (max_cached_versions == 0) return config_error{"grants.max_cached_versions", "must be at least 1"};
  if (register_on_write_min_bytes == 0) return config_error{"grants.register_on_write_min_bytes", "must be at least 1"};
  return std::nullopt;
}

std::shared_ptr<s3::device_grant_opener> make_grant_opener(const grant_opener_config& config, error_code& ec) {
  if (config.validate()) {
    ec = errc::invalid_config;
    return nullptr;
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    ec = errc::no_device;
    return nullptr;
  }
  // Create each device's primary context now, at server start (~0.3 s each on an H100 host),
  // not inside the first client's GET.
  for (int d = 0; d < count; ++d) {
    const device_scope scope(d);
    if (cudaFree(nullptr) != cudaSuccess) (void)cudaGetLastError();
  }
  ec = {};
  return std::make_shared<ipc_opener>(config);
}

grant_opener_stats stats_of(const s3::device_grant_opener& opener) {
  // The const_cast only reaches a mutex and counters: stats() changes nothing observable.
  if (auto* ours = dynamic_cast<const ipc_opener*>(&opener)) return const_cast<ipc_opener*>(ours)->stats();
  return {};
}

std::shared_ptr<s3::device_grant_exporter> make_grant_exporter() { return std::make_shared<ipc_exporter>(); }

error_code copy_to_device(s3::device_grant_opener& opener, int device, std::byte* to, const s3::rdma_source& source) {
  auto* ours = dynamic_cast<ipc_opener*>(&opener);
  if (ours == nullptr) return errc::invalid_argument;
  // The transfer's executor is this thread: it runs the CUDA calls until `done` lets it go.
  boost::asio::io_context here;
  auto work = boost::asio::make_work_guard(here);
  error_code outcome;
  ours->async_write(device, to, source, here.get_executor(), [&](error_code ec) {
    boost::asio::post(here, [&, ec] {
      outcome = ec;
      work.reset();
    });
  });
  here.run();
  return outcome;
}

}  // namespace sluice::cuda
