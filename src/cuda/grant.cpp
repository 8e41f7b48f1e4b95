// Same-host device-memory grants (include/sluice/cuda/grant.hpp): CUDA IPC export and open,
// and the server's copies from registered page cache into opened client allocations.
#include <sluice/cuda/error.hpp>
#include <sluice/cuda/grant.hpp>

#include <sluice/s3/error.hpp>

#include "driver.hpp"

#include <cuda_runtime_api.h>

#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

namespace sluice::cuda {

namespace {

using driver::allocation_of;
using driver::driver_entry;

error_code from(cudaError_t e) noexcept { return make_cuda_error(static_cast<int>(e)); }

// The description a client sends: magic, version, the IPC handle of the allocation's base, the
// device's UUID and the size the client says the allocation has.
constexpr std::array<std::byte, 4> magic{std::byte{'S'}, std::byte{'L'}, std::byte{'C'}, std::byte{'I'}};
constexpr std::uint8_t description_version = 1;
constexpr std::size_t handle_bytes = sizeof(cudaIpcMemHandle_t);
constexpr std::size_t uuid_bytes = 16;
constexpr std::size_t description_bytes = 4 + 4 + handle_bytes + uuid_bytes + 8;

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
  explicit registration_context(int device) {
    get_ = driver_entry<decltype(get_)>("cuDeviceGet");
    // cuCtxCreate has three signatures (cudaTypedefs.h: PFN_cuCtxCreate_v3020, _v11040 with
    // execution affinity, _v12050 with a parameters pointer); each is asked for at its version.
    const auto create_v12050 =
        driver_entry<CUresult (*)(CUcontext*, void*, unsigned int, CUdevice)>("cuCtxCreate", 12050);
    const auto create_v3020 =
        create_v12050 != nullptr ? nullptr
                                 : driver_entry<CUresult (*)(CUcontext*, unsigned int, CUdevice)>("cuCtxCreate", 11000);
    push_ = driver_entry<decltype(push_)>("cuCtxPushCurrent");
    pop_ = driver_entry<decltype(pop_)>("cuCtxPopCurrent");
    register_ = driver_entry<decltype(register_)>("cuMemHostRegister");
    unregister_ = driver_entry<decltype(unregister_)>("cuMemHostUnregister");
    destroy_ = driver_entry<decltype(destroy_)>("cuCtxDestroy");
    CUdevice d = 0;
    if (get_ == nullptr || (create_v12050 == nullptr && create_v3020 == nullptr) || push_ == nullptr ||
        pop_ == nullptr || register_ == nullptr || unregister_ == nullptr || destroy_ == nullptr ||
        get_(&d, device) != CUDA_SUCCESS) {
      return;
    }
    CUcontext made = nullptr;
    if ((create_v12050 != nullptr ? create_v12050(&made, nullptr, 0, d) : create_v3020(&made, 0, d)) != CUDA_SUCCESS)
      return;
    CUcontext popped = nullptr;
    (void)pop_(&popped);  // cuCtxCreate made it current in this thread
    context_ = made;
  }
  registration_context(const registration_context&) = delete;
  registration_context& operator=(const registration_context&) = delete;
  ~registration_context() {
    if (context_ != nullptr) (void)destroy_(context_);
  }
  [[nodiscard]] bool separate() const noexcept { return context_ != nullptr; }

  /// Registers [p, p + n) read-only for every context.
  bool register_range(void* p, std::size_t n) const {
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
  void unregister_range(void* p) const {
    if (context_ == nullptr) {
      if (cudaHostUnregister(p) != cudaSuccess) (void)cudaGetLastError();
      return;
    }
    if (push_(context_) != CUDA_SUCCESS) return;
    (void)unregister_(p);
    CUcontext popped = nullptr;
    (void)pop_(&popped);
  }

 private:
  CUresult (*get_)(CUdevice*, int) = nullptr;
  CUresult (*push_)(CUcontext) = nullptr;
  CUresult (*pop_)(CUcontext*) = nullptr;
  CUresult (*register_)(void*, size_t, unsigned int) = nullptr;
  CUresult (*unregister_)(void*) = nullptr;
  CUresult (*destroy_)(CUcontext) = nullptr;
  CUcontext context_ = nullptr;
};

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

// -- server ----------------------------------------------------------------------------------

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
  std::mutex mutex;     // chunks
  std::condition_variable settled;
  // copying: a copy thread moves the chunk through pinned slots for one transfer; afterwards it
  // is queued for registration again (cached entries) or absent.
  enum class chunk_state : std::uint8_t { absent, queued, registering, registered, failed, copying };
  std::vector<chunk_state> chunks;
  bool evicted = false;          // out of the cache: chunks registered ahead after this are dropped at once
  std::uint64_t hand_backs = 0;  // chunks copy threads handed back (transfers waiting move them up)
  std::atomic<std::uint64_t> registered_bytes{0};
  int users = 0;  // transfers using it now (the cache's mutex)
};

/// A cold transfer the copy threads help: they take chunks of [first, last) from the back (the
/// registering thread works from the front) and copy them through pinned slots.
struct assisted_transfer {
  std::shared_ptr<cached_source> entry;
  int device = 0;
  std::byte* to = nullptr;            // where object byte `offset` goes
  std::uint64_t offset = 0, end = 0;  // the object range
  std::uint64_t first = 0, last = 0;  // its chunks
  std::vector<char> taken;            // [index - first]: a copy thread's (entry->mutex)
  int active = 0;                     // copy threads on it now (the opener's copy mutex)
  std::uint64_t copied = 0;           // chunks copied (the opener's copy mutex)
  error_code failure;                 // the copy threads' first (the opener's copy mutex)
  std::condition_variable_any idle;   // active dropped to 0
};

/// Object bytes [at, end) of chunk `index` within the object range [offset, end_at).
std::pair<std::uint64_t, std::uint64_t> chunk_span(const cached_source& entry, std::uint64_t chunk, std::uint64_t index,
                                                   std::uint64_t offset, std::uint64_t end_at) {
  const std::uint64_t at = std::max(offset, index * chunk - std::min<std::uint64_t>(index * chunk, entry.lead));
  const std::uint64_t end = std::min({(index + 1) * chunk - entry.lead, end_at, entry.size});
  return {at, end};
}

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

class ipc_opener;

/// One opened client allocation.
class ipc_grant final : public s3::device_grant {
 public:
  ipc_grant(std::shared_ptr<ipc_opener> opener, int device, std::byte* base, std::uint64_t size,
            std::shared_ptr<void> handle)
      : opener_(std::move(opener)), device_(device), base_(base), size_(size), handle_(std::move(handle)) {}
  [[nodiscard]] std::uint64_t size() const noexcept override { return size_; }
  error_code write(std::uint64_t offset, const s3::rdma_source& source) override;
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
  explicit ipc_opener(grant_opener_config config)
      : config_(config),
        registrar_(std::make_unique<registration_context>(0)),
        registering_([this](const std::stop_token& stop) { register_queued(stop); }) {
    for (std::size_t i = 0; i < config_.copy_threads; ++i) {
      copiers_.emplace_back([this](const std::stop_token& stop) { copy_chunks(stop); });
    }
  }
  ~ipc_opener() override {
    for (auto& c : copiers_) c.request_stop();  // wakes their waits; no transfer runs any more
    copiers_.clear();
    registering_.request_stop();  // wakes the thread's wait
    registering_.join();
    for (auto& [version, cached] : cache_) unregister_all(*cached.entry);
  }

  std::shared_ptr<s3::device_grant> open(std::span<const std::byte> description, error_code& ec) override {
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
    return std::make_shared<ipc_grant>(shared_from_this(), device, base, std::min(claimed, real_size),
                                       std::move(opened));
  }

  /// Copies source.bytes() to `to` (device memory of `device`) by DMA from registered chunks.
  error_code write(int device, std::byte* to, const s3::rdma_source& source) {
    const auto start = std::chrono::steady_clock::now();
    const device_scope scope(device);
    stream_set streams(config_.streams);
    if (streams.empty()) return errc::no_device;
    const std::shared_ptr<cached_source> entry = acquire(source);
    const std::uint64_t chunk = config_.chunk_bytes;
    const std::uint64_t end_at = source.offset + source.length;
    const std::uint64_t first = (source.offset + entry->lead) / chunk;
    const std::uint64_t last = source.length == 0 ? first : (end_at - 1 + entry->lead) / chunk + 1;
    // Every chunk of the range still absent goes to the registering thread at once, in order:
    // one thread registers ahead (in the registration context) while this one queues each
    // chunk's DMA as soon as the chunk is ready. One registering thread for all transfers: the
    // probe measured concurrent registrations slower than one after the other.
    // Chunks after the range are registered too when the thread has nothing else to do: the
    // rest of a large object is usually asked for next (the next parts of the same GET).
    const std::uint64_t ahead = source.version.cacheable() ? config_.register_ahead_bytes / chunk : 0;
    const std::uint64_t hits = queue_registrations(entry, first, last, ahead);
    // The copy threads take the chunks that registration would reach late (from the back).
    std::shared_ptr<assisted_transfer> assisted;
    if (!copiers_.empty() && hits < last - first) {
      assisted = std::make_shared<assisted_transfer>();
      assisted->entry = entry;
      assisted->device = device;
      assisted->to = to;
      assisted->offset = source.offset;
      assisted->end = end_at;
      assisted->first = first;
      assisted->last = last;
      assisted->taken.assign(static_cast<std::size_t>(last - first), 0);
      {
        const std::lock_guard lock(copy_mutex_);
        assisted_.push_back(assisted);
        ++copy_generation_;
      }
      copy_ready_.notify_all();
    }
    error_code failure;
    double waited = 0;
    double calls = 0;  // in cudaMemcpyAsync
    for (std::uint64_t index = first; index < last; ++index) {
      const auto wait_start = std::chrono::steady_clock::now();
      const chunk_outcome outcome = wait_for(entry, index, assisted.get());
      const auto call_start = std::chrono::steady_clock::now();
      waited += std::chrono::duration<double>(call_start - wait_start).count();
      if (failure || outcome == chunk_outcome::copy_thread) continue;  // queued chunks still settle first
      const bool registered = outcome == chunk_outcome::registered;
      const auto [at, end] = chunk_span(*entry, chunk, index, source.offset, end_at);
      const std::byte* src = entry->data + at;
      const auto n = static_cast<std::size_t>(end - at);
      cudaError_t e = cudaSuccess;
      if (registered) {
        e = cudaMemcpyAsync(to + (at - source.offset), src, n, cudaMemcpyHostToDevice, streams.next());
      } else {
        ++pageable_copies_;
        e = cudaMemcpy(to + (at - source.offset), src, n, cudaMemcpyHostToDevice);
      }
      if (e != cudaSuccess) failure = from_error(e);
      calls += std::chrono::duration<double>(std::chrono::steady_clock::now() - call_start).count();
    }
    std::uint64_t copied = 0;
    if (assisted) {  // no new chunks taken from here on; wait for those taken
      std::unique_lock lock(copy_mutex_);
      assisted_.remove(assisted);
      assisted->idle.wait(lock, [&] { return assisted->active == 0; });
      if (assisted->failure && !failure) failure = assisted->failure;
      copied = assisted->copied;
    }
    const auto queued = std::chrono::steady_clock::now();
    if (const error_code synced = streams.synchronize(); synced && !failure) failure = synced;
    release(entry);
    if (trace_) {
      const auto done = std::chrono::steady_clock::now();
      std::fprintf(stderr,
                   "sluice grant: write %.1f MiB from offset %llu: %llu chunks (%llu registered already, %llu "
                   "copied through pinned slots), waited %.4f s for registrations, %.4f s in cudaMemcpyAsync, copies "
                   "queued at %.4f s, done at %.4f s%s; registering thread busy %.4f s since start; copy threads "
                   "since start: %.4f s reading, %.4f s in CUDA calls, %.4f s waiting for DMA; clock %.4f to %.4f\n",
                   static_cast<double>(source.length) / (1 << 20), static_cast<unsigned long long>(source.offset),
                   static_cast<unsigned long long>(last - first), static_cast<unsigned long long>(hits),
                   static_cast<unsigned long long>(copied), waited, calls,
                   std::chrono::duration<double>(queued - start).count(),
                   std::chrono::duration<double>(done - start).count(), failure ? " (failed)" : "",
                   static_cast<double>(register_ns_.load()) / 1e9, static_cast<double>(copy_read_ns_.load()) / 1e9,
                   static_cast<double>(copy_call_ns_.load()) / 1e9, static_cast<double>(copy_sync_ns_.load()) / 1e9,
                   std::chrono::duration<double>(start.time_since_epoch()).count(),
                   std::chrono::duration<double>(done.time_since_epoch()).count());
    }
    return failure;
  }

  error_code read(int device, const std::byte* from, std::uint64_t length, const s3::rdma_sink& sink) {
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

  grant_opener_stats stats() {
    const std::lock_guard lock(mutex_);
    grant_opener_stats s;
    s.registered_bytes = registered_bytes_;
    s.registrations = registrations_.load();
    s.cache_hits = hits_.load();
    s.pageable_copies = pageable_copies_.load();
    s.copied_chunks = copied_chunks_.load();
    s.evictions = evictions_.load();
    s.open_handles = open_handles_.load();
    s.registration_context = registrar_->separate();
    return s;
  }

 private:
  static error_code from_error(cudaError_t e) {
    (void)cudaGetLastError();
    return from(e);
  }

  int device_with(const std::array<std::byte, uuid_bytes>& uuid) {
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

  /// The cache entry of the source's version (made when missing), marked in use. A source
  /// without a version gets an entry of its own that is never cached.
  std::shared_ptr<cached_source> acquire(const s3::rdma_source& source) {
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

  void release(const std::shared_ptr<cached_source>& entry) {
    std::vector<std::shared_ptr<cached_source>> evicted;
    {
      const std::lock_guard lock(mutex_);
      --entry->users;
      const bool cached =
          std::any_of(cache_.begin(), cache_.end(), [&](const auto& c) { return c.second.entry == entry; });
      if (!cached && entry->users == 0) evicted.push_back(entry);
      // Stay within the budget: unregister the least recently used versions nobody uses.
      for (auto it = lru_.begin(); it != lru_.end() && registered_bytes_ > config_.registration_budget;) {
        auto found = cache_.find(*it);
        if (found->second.entry->users == 0) {
          evicted.push_back(found->second.entry);
          registered_bytes_ -= std::min<std::uint64_t>(registered_bytes_, found->second.entry->registered_bytes.load());
          cache_.erase(found);
          it = lru_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (const auto& e : evicted) {
      {
        const std::lock_guard lock(e->mutex);
        evictions_ += static_cast<std::uint64_t>(
            std::count(e->chunks.begin(), e->chunks.end(), cached_source::chunk_state::registered));
      }
      unregister_all(*e);
    }
  }

  /// Hands the chunks [first, last) of `entry` that are not registered yet to the registering
  /// thread, first in line (chunks queued ahead before are moved up), and the next `ahead` chunks
  /// after them to be registered when nothing else waits; returns how many of [first, last) were
  /// registered already.
  std::uint64_t queue_registrations(const std::shared_ptr<cached_source>& entry, std::uint64_t first,
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
      jobs_ready_.notify_one();
    }
    return hits;
  }

  enum class chunk_outcome : std::uint8_t { registered, failed, copy_thread };

  /// Waits until chunk `index` is registered or failed (queued by this or another transfer), or
  /// a copy thread took it for `assisted` (this transfer). A chunk another transfer's copy thread
  /// copied goes back to the registering thread's background queue (hand_back); when this transfer
  /// waits for it, it moves it up to the queue of chunks transfers wait for.
  chunk_outcome wait_for(const std::shared_ptr<cached_source>& entry, std::uint64_t index,
                         const assisted_transfer* assisted) {
    using state_t = cached_source::chunk_state;
    std::unique_lock lock(entry->mutex);
    const auto& state = entry->chunks[static_cast<std::size_t>(index)];
    const auto ours = [&] {
      return assisted != nullptr && assisted->taken[static_cast<std::size_t>(index - assisted->first)] != 0;
    };
    std::uint64_t hand_backs = entry->hand_backs;  // a change: some chunk came back queued behind
    for (;;) {
      entry->settled.wait(lock, [&] {
        return ours() || (entry->hand_backs != hand_backs && state == state_t::queued) ||
               (state != state_t::queued && state != state_t::registering && state != state_t::copying);
      });
      if (ours() || state != state_t::queued) break;
      hand_backs = entry->hand_backs;
      lock.unlock();
      {
        const std::lock_guard jobs_lock(jobs_mutex_);
        jobs_.push_front({entry, index});
        jobs_ready_.notify_one();
      }
      lock.lock();
    }
    if (ours()) return chunk_outcome::copy_thread;
    return state == state_t::registered ? chunk_outcome::registered : chunk_outcome::failed;
  }

  /// The chunk a copy thread should copy now: the last chunk in the registering thread's own
  /// queue that belongs to a cold transfer being helped, when a copy thread would end it sooner
  /// than registration reaches it (the chunks queued before it, at the rates measured so far);
  /// marked taken and copying. Judging by the real queue, not by a transfer's place in the
  /// object, keeps concurrent parts fair (H100 run 12: with three parts of one object at once, the
  /// copy threads took all 16 chunks of one part and 2 of another, which then waited 0.11 s).
  /// Called with copy_mutex_ held.
  std::optional<std::pair<std::shared_ptr<assisted_transfer>, std::uint64_t>> take_chunk() {
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

  /// A copy thread's pinned slots and, per device, its stream and the slots' events.
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
    ~copier_state() {
      for (auto& [device, d] : devices) {
        const device_scope scope(device);
        for (cudaEvent_t e : d.ready) (void)cudaEventDestroy(e);
        (void)cudaStreamDestroy(d.stream);
      }
      for (std::byte* p : slots) (void)cudaFreeHost(p);
    }
  };

  /// A copy thread: takes chunks of cold transfers (take_chunk) and copies each through its two
  /// pinned slots (pread from the store's file, or a copy from the mapping; DMA from the slot
  /// while the other one fills), then hands the chunk back to be registered.
  void copy_chunks(const std::stop_token& stop) {
    copier_state own;
    for (auto& slot : own.slots) {
      void* p = nullptr;
      if (cudaHostAlloc(&p, config_.copy_slot_bytes, cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        return;  // this thread copies nothing; registration alone serves
      }
      slot = static_cast<std::byte*>(p);
    }
    std::uint64_t seen = 0;
    for (;;) {
      std::shared_ptr<assisted_transfer> t;
      std::uint64_t index = 0;
      {
        std::unique_lock lock(copy_mutex_);
        for (;;) {
          if (stop.stop_requested()) return;
          if (auto picked = take_chunk()) {
            t = std::move(picked->first);
            index = picked->second;
            ++t->active;
            break;
          }
          // Nothing worth taking: registration only gains on what is left, so wait for a new transfer.
          seen = copy_generation_;
          copy_ready_.wait(lock, stop, [&] { return copy_generation_ != seen; });
        }
      }
      t->entry->settled.notify_all();  // its transfer may wait on this chunk: it is ours now
      const auto began = std::chrono::steady_clock::now();
      const error_code e = copy_chunk(own, *t, index);
      const auto ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - began).count();
      const auto [at, end] = chunk_span(*t->entry, config_.chunk_bytes, index, t->offset, t->end);
      if (!e && end - at >= (1u << 20)) {
        const double sample = ns / (static_cast<double>(end - at) / (1 << 20));
        copy_ns_per_mib_.store(0.75 * copy_ns_per_mib_.load() + 0.25 * sample);
      }
      hand_back(t->entry, index);
      ++copied_chunks_;
      {
        const std::lock_guard lock(copy_mutex_);
        --t->active;
        ++t->copied;
        if (e && !t->failure) t->failure = e;
      }
      t->idle.notify_all();
    }
  }

  /// Copies chunk `index` of `t` through the thread's slots into the transfer's destination.
  error_code copy_chunk(copier_state& own, const assisted_transfer& t, std::uint64_t index) {
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

  /// After a copy thread's copy: a cached entry's chunk is queued for registration behind the
  /// chunks transfers wait for (the next GET finds it registered; a transfer that waits for it
  /// moves it up), another one's goes back to absent.
  void hand_back(const std::shared_ptr<cached_source>& entry, std::uint64_t index) {
    bool requeue = false;
    {
      const std::lock_guard lock(entry->mutex);
      requeue = entry->cached && !entry->evicted;
      ++entry->hand_backs;
      entry->chunks[static_cast<std::size_t>(index)] =
          requeue ? cached_source::chunk_state::queued : cached_source::chunk_state::absent;
    }
    entry->settled.notify_all();  // other transfers waiting for it go on waiting for its registration
    if (requeue) {
      const std::lock_guard lock(jobs_mutex_);
      ahead_jobs_.push_back({entry, index});
      jobs_ready_.notify_one();
    }
  }

  /// The registering thread: registers the chunks transfers wait for in the order they were
  /// queued, then those queued ahead.
  void register_queued(const std::stop_token& stop) {
    for (;;) {
      job next;
      {
        std::unique_lock lock(jobs_mutex_);
        jobs_ready_.wait(lock, stop, [&] { return !jobs_.empty() || !ahead_jobs_.empty(); });
        if (jobs_.empty() && ahead_jobs_.empty()) return;  // stopping, nothing left
        auto& from = jobs_.empty() ? ahead_jobs_ : jobs_;
        next = std::move(from.front());
        from.pop_front();
      }
      cached_source& entry = *next.entry;
      auto& state = entry.chunks[static_cast<std::size_t>(next.index)];
      {
        const std::lock_guard lock(entry.mutex);
        if (state != cached_source::chunk_state::queued) continue;  // moved up and done already
        if (entry.evicted || stop.stop_requested()) {
          // Once stopping, queued chunks fail without registering: their transfers copy them pageable.
          state = cached_source::chunk_state::failed;
          entry.settled.notify_all();
          continue;
        }
        state = cached_source::chunk_state::registering;
      }
      const auto [p, n] = chunk_range(entry, next.index);
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
      entry.settled.notify_all();
    }
  }

  /// The host range of chunk `index`: chunk_bytes of the mapping from the page that holds the
  /// object's first byte (page-aligned, so neighbouring chunks never share a page), the last one
  /// up to the end of the page holding the object's last byte (mmap maps whole pages).
  std::pair<void*, std::size_t> chunk_range(const cached_source& entry, std::uint64_t index) const {
    static const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    const std::byte* aligned = entry.data - entry.lead;
    const std::uint64_t span = (entry.lead + entry.size + page - 1) / page * page;
    const std::uint64_t first = index * config_.chunk_bytes;
    const std::uint64_t last = std::min(span, first + config_.chunk_bytes);
    // cudaHostRegister takes a non-const pointer; ReadOnly registration never writes.
    return {const_cast<std::byte*>(aligned + first), static_cast<std::size_t>(last - first)};
  }

  /// Marks the entry evicted and unregisters its registered chunks.
  void unregister_all(cached_source& entry) {
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
    for (const std::size_t i : registered) entry.registrar->unregister_range(chunk_range(entry, i).first);
  }

  struct cache_slot {
    std::shared_ptr<cached_source> entry;
    std::list<s3::object_version_id>::iterator lru;
  };
  struct job {
    std::shared_ptr<cached_source> entry;
    std::uint64_t index = 0;
  };

  grant_opener_config config_;
  std::unique_ptr<registration_context> registrar_;  // outlives the cache: declared before it
  std::mutex mutex_;                                 // cache_, lru_, handles_, registered_bytes_
  std::map<s3::object_version_id, cache_slot> cache_;
  std::list<s3::object_version_id> lru_;
  std::map<std::string, std::weak_ptr<void>> handles_;
  std::uint64_t registered_bytes_ = 0;
  std::atomic<std::uint64_t> registrations_{0}, hits_{0}, pageable_copies_{0}, evictions_{0}, open_handles_{0},
      register_ns_{0}, copied_chunks_{0};
  // Copy threads' time (SLUICE_GRANT_TRACE): reading into pinned slots, inside cudaMemcpyAsync and
  // cudaEventRecord, waiting for a slot's DMA.
  std::atomic<std::uint64_t> copy_read_ns_{0}, copy_call_ns_{0}, copy_sync_ns_{0};
  // Rates that decide which chunks the copy threads take, measured as they go; the first values
  // are the H100 host's: registering 4 GiB in ~0.13 s, pread into pinned slots ~6 GiB/s a thread.
  std::atomic<double> register_ns_per_mib_{30'000}, copy_ns_per_mib_{160'000};
  const bool trace_ = std::getenv("SLUICE_GRANT_TRACE") != nullptr;  // NOLINT(concurrency-mt-unsafe): read once
  std::mutex jobs_mutex_;                                            // jobs_
  std::condition_variable_any jobs_ready_;
  std::deque<job> jobs_;        // chunks transfers wait for
  std::deque<job> ahead_jobs_;  // chunks after a transfer's range (register_ahead_bytes)
  std::jthread registering_;    // stops (and drains jobs_) before the members it uses go
  std::mutex copy_mutex_;       // assisted_, copy_generation_, every assisted_transfer's counters
  std::condition_variable_any copy_ready_;
  std::list<std::shared_ptr<assisted_transfer>> assisted_;  // cold transfers the copy threads help
  std::uint64_t copy_generation_ = 0;                       // one more each time a transfer is added
  std::vector<std::jthread> copiers_;                       // last: stopped first
};

error_code ipc_grant::write(std::uint64_t offset, const s3::rdma_source& source) {
  return opener_->write(device_, base_ + offset, source);
}

error_code ipc_grant::read(std::uint64_t offset, std::uint64_t length, const s3::rdma_sink& sink) {
  return opener_->read(device_, base_ + offset, length, sink);
}

}  // namespace

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

}  // namespace sluice::cuda
