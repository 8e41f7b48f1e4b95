// Same-host device-memory grants (include/sluice/cuda/grant.hpp): CUDA IPC export and open,
// and the server's copies from registered page cache into opened client allocations.
// The opener's parts shared with grant_registration.cpp and grant_copiers.cpp are in
// grant_opener.hpp; this file holds the client's exporter, opening grants, the transfers, the
// configuration and the factories.
#include "grant_opener.hpp"

#include <sluice/s3/error.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>

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
    : config_(config),
      registrar_(std::make_unique<registration_context>(0)),
      registering_([this](const std::stop_token& stop) { register_queued(stop); }) {
  for (std::size_t i = 0; i < config_.copy_threads; ++i) {
    copiers_.emplace_back([this](const std::stop_token& stop) { copy_chunks(stop); });
  }
}

ipc_opener::~ipc_opener() {
  for (auto& c : copiers_) c.request_stop();  // wakes their waits; no transfer runs any more
  copiers_.clear();
  registering_.request_stop();  // wakes the thread's wait
  registering_.join();
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

error_code ipc_opener::write(int device, std::byte* to, const s3::rdma_source& source) {
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
  if (config_.trace) {
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
  return opener_->write(device_, base_ + offset, source);
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

}  // namespace sluice::cuda
