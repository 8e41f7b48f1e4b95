// SPDX-License-Identifier: Apache-2.0
// Files into device memory, the transport of cuda::file_path: io_uring reads into a stager's
// pinned slots (each slot copied to the device while the next ones are read), cuFile straight
// into device memory, or DMA from the registered page cache (mapped); and read_file_to_device,
// which runs one such path.
#include <sluice/cuda/file.hpp>

#include <sluice/cuda/device.hpp>
#include <sluice/file/residency.hpp>
#include <sluice/file/uring_reader.hpp>

#ifdef SLUICE_CUDA_GRANTS
#include <sluice/cuda/grant.hpp>
#include <sluice/s3/rdma.hpp>
#endif

#include <cuda_runtime_api.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace sluice::cuda {

const char* to_string(file_method m) noexcept {
  switch (m) {
    case file_method::uring: return "uring";
    case file_method::buffered: return "buffered";
    case file_method::cufile: return "cufile";
    case file_method::automatic: return "automatic";
    case file_method::mapped: return "mapped";
  }
  return "?";
}

namespace {

std::uint64_t read_staged(const std::filesystem::path& path, std::uint64_t file_offset, const region& destination,
                          const file_to_device_options& options, file_to_device_report& report, error_code& ec) {
  std::unique_ptr<stager> owned;
  stager* ring = options.ring;
  if (ring == nullptr) {
    stager_config config = options.staging;
    config.device = destination.device;
    owned = stager::create(config, ec);
    if (ec) return 0;
    ring = owned.get();
  } else if (ring->config().device != destination.device) {
    ec = errc::invalid_argument;
    return 0;
  }
  report.pinned_bytes = ring->pinned_bytes();

  // At most one chunk per slot: a chunk waits for a slot only while fewer than `slots` are held,
  // so one is always free or copying (and comes back when its copy ends).
  const file::uring_config reading{
      .queue_depth = static_cast<std::uint32_t>(
          std::min<std::size_t>(std::max<std::uint32_t>(options.queue_depth, 1), ring->config().slots)),
      .chunk_bytes = ring->config().slot_bytes,
      .direct = options.method == file_method::uring,
  };
  file::uring_reader reader = file::uring_reader::open(path, reading, ec);
  if (ec) return 0;

  // The slot of each chunk in flight, by the chunk's file offset (queue_depth entries at most).
  std::vector<std::pair<std::uint64_t, stager::slot>> held;
  held.reserve(reading.queue_depth);
  const auto take = [&](std::uint64_t chunk_offset) {
    const auto it = std::find_if(held.begin(), held.end(), [&](const auto& h) { return h.first == chunk_offset; });
    stager::slot s = it->second;
    held.erase(it);
    return s;
  };
  ec = reader.read_chunks(
      file_offset, destination.size,
      [&](std::uint64_t chunk_offset, std::size_t, error_code& e) -> std::span<std::byte> {
        const std::optional<stager::slot> s = ring->acquire(e);
        if (!s) return {};
        held.emplace_back(chunk_offset, *s);
        return {s->host.bytes(), s->host.size};
      },
      [&](std::uint64_t chunk_offset, std::span<std::byte> filled) {
        error_code e;
        const region target = destination.subregion(chunk_offset - file_offset, filled.size(), e);
        const stager::slot s = take(chunk_offset);
        if (e) {
          ring->release(s);
          return e;
        }
        return ring->to_device(s, target);  // the slot goes back to the ring, busy until its copy ends
      });
  for (const auto& h : held) ring->release(h.second);  // chunks an error left unread
  // The copies still running write the destination: wait for them, error or not.
  const error_code drained = ring->drain();
  if (!ec) ec = drained;
  report.direct_io = reader.direct();  // a file system may have refused O_DIRECT on the first read
  return ec ? 0 : destination.size;
}

#ifndef SLUICE_CUDA_GRANTS
// Without the S3 tier there is no grant opener: mapped registers the range per call.

/// One chunk of the mapped method: a read-only shared mapping of part of the file, registered
/// with CUDA while its copy runs.
struct mapped_chunk {
  std::byte* base = nullptr;  // page-aligned
  std::size_t length = 0;     // mapped bytes
  bool registered = false;

  /// Unregisters and unmaps; an unregistration error goes to `ec` unless it holds one already.
  void release(error_code& ec) noexcept {
    if (registered) {
      if (const cudaError_t e = cudaHostUnregister(base); e != cudaSuccess && !ec) {
        ec = make_cuda_error(static_cast<int>(e));
      }
      registered = false;
    }
    if (base != nullptr) static_cast<void>(::munmap(base, length));
    base = nullptr;
  }
};

/// The chunks of one mapped read, released (unregistered, unmapped) on destruction: after the
/// stream's copies are done, whatever ended the read.
class mapped_chunks {
 public:
  explicit mapped_chunks(std::size_t n) { chunks_.reserve(n); }
  mapped_chunks(const mapped_chunks&) = delete;
  mapped_chunks& operator=(const mapped_chunks&) = delete;
  ~mapped_chunks() {
    error_code ignored;
    release(ignored);
  }
  void add(const mapped_chunk& c) { chunks_.push_back(c); }
  void release(error_code& ec) noexcept {
    for (mapped_chunk& c : chunks_) c.release(ec);
    chunks_.clear();
  }

 private:
  std::vector<mapped_chunk> chunks_;
};

/// A stream, synchronized and destroyed on destruction (nothing a copy reads is released first).
class owned_stream {
 public:
  owned_stream() = default;
  owned_stream(const owned_stream&) = delete;
  owned_stream& operator=(const owned_stream&) = delete;
  ~owned_stream() {
    if (stream_ != nullptr) {
      static_cast<void>(cudaStreamSynchronize(stream_));
      static_cast<void>(cudaStreamDestroy(stream_));
    }
  }
  cudaError_t create() noexcept { return cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking); }
  [[nodiscard]] cudaStream_t get() const noexcept { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

/// DMA from the page cache. Chunk by chunk: map it, register it (pinning faults its pages in:
/// measured on an H100 host, filling the page tables first with MADV_POPULATE_READ made it
/// slower), queue its copy; the copies run on one stream, back to back on the copy engine, while
/// the next chunks register. Everything is unregistered once the last copy is done: on the H100
/// host, unregistering each chunk as its copy ended (cudaHostUnregister between registrations,
/// one to four threads) was slower (18.7-26.7 GiB/s for 4 GiB against 24.5 with the
/// unregistration at the end), so the whole range is pinned until the end of the call. A chunk
/// that cannot be registered is copied as pageable memory.
std::uint64_t read_mapped(int fd, std::uint64_t file_offset, const region& destination,
                          const file_to_device_options& options, file_to_device_report& report, error_code& ec) {
  if (destination.size == 0) return 0;
  static const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  // Mapping bytes [0, span) from the page-aligned file offset `first`; the range starts `lead`
  // bytes in. Chunk i is mapping bytes [i * chunk, min((i + 1) * chunk, span)).
  const std::uint64_t lead = file_offset % page;
  const std::uint64_t first = file_offset - lead;
  const std::uint64_t span = lead + destination.size;
  const std::uint64_t chunk = options.mapped_chunk_bytes;
  auto* const to = static_cast<std::byte*>(destination.data);
  if (const cudaError_t e = cudaSetDevice(destination.device); e != cudaSuccess) {
    ec = make_cuda_error(static_cast<int>(e));
    return 0;
  }
  // Declared before the stream: released only after the stream's copies are done.
  mapped_chunks chunks(static_cast<std::size_t>((span + chunk - 1) / chunk));
  owned_stream stream;
  if (const cudaError_t e = stream.create(); e != cudaSuccess) {
    ec = make_cuda_error(static_cast<int>(e));
    return 0;
  }
  for (std::uint64_t at = 0; at < span && !ec; at += chunk) {
    mapped_chunk c;
    c.length = static_cast<std::size_t>(std::min(chunk, span - at));
    void* p = ::mmap(nullptr, c.length, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(first + at));
    if (p == MAP_FAILED) {
      ec = {errno, boost::system::generic_category()};
      break;
    }
    c.base = static_cast<std::byte*>(p);
    c.registered = cudaHostRegister(c.base, c.length, cudaHostRegisterReadOnly) == cudaSuccess;
    if (!c.registered) static_cast<void>(cudaGetLastError());  // not sticky: copy it as pageable memory
    chunks.add(c);
    // The range's share of this chunk: mapping bytes [max(at, lead), at + length).
    const std::uint64_t from = std::max(at, lead);
    const auto bytes = static_cast<std::size_t>(at + c.length - from);
    if (const cudaError_t e =
            cudaMemcpyAsync(to + (from - lead), c.base + (from - at), bytes, cudaMemcpyHostToDevice, stream.get());
        e != cudaSuccess) {
      ec = make_cuda_error(static_cast<int>(e));
    }
    if (!c.registered) {
      report.pageable_bytes += bytes;
      // A pageable copy may still read the mapping when cudaMemcpyAsync returns.
      if (const cudaError_t e = cudaStreamSynchronize(stream.get()); e != cudaSuccess && !ec) {
        ec = make_cuda_error(static_cast<int>(e));
      }
    }
  }
  if (const cudaError_t e = cudaStreamSynchronize(stream.get()); e != cudaSuccess && !ec) {
    ec = make_cuda_error(static_cast<int>(e));
  }
  chunks.release(ec);
  return ec ? 0 : destination.size;
}
#endif

#ifdef SLUICE_CUDA_GRANTS
/// The identity of a file version for the opener's cache: a hash of the device, inode, size,
/// mtime and ctime (a file rewritten in place is a new version), with the top bit set so that it
/// never equals the {device + 1, inode} that a store's object versions use in a shared opener.
s3::object_version_id file_version(const struct stat& st) noexcept {
  const auto mix = [](std::uint64_t h, std::uint64_t v) noexcept {  // splitmix64 of h ^ v
    std::uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  std::uint64_t high = mix(mix(static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)),
                           static_cast<std::uint64_t>(st.st_size));
  std::uint64_t low = mix(mix(high, static_cast<std::uint64_t>(st.st_mtim.tv_sec) * 1'000'000'000ULL +
                                        static_cast<std::uint64_t>(st.st_mtim.tv_nsec)),
                          static_cast<std::uint64_t>(st.st_ctim.tv_sec) * 1'000'000'000ULL +
                              static_cast<std::uint64_t>(st.st_ctim.tv_nsec));
  high |= std::uint64_t{1} << 63;
  return {high, low};
}

/// A whole file mapped read-only, with its own descriptor: the owner of an rdma_source, kept by
/// the opener's cache as long as the registrations it holds.
struct file_mapping {
  void* base = MAP_FAILED;
  std::size_t length = 0;
  int fd = -1;
  file_mapping() = default;
  file_mapping(const file_mapping&) = delete;
  file_mapping& operator=(const file_mapping&) = delete;
  ~file_mapping() {
    if (base != MAP_FAILED) static_cast<void>(::munmap(base, length));
    if (fd >= 0) static_cast<void>(::close(fd));
  }
};

/// DMA from the page cache through the opener's registration pipeline (cuda/grant.hpp): the
/// whole file is mapped (the cache keys its registrations by file version, chunks counted from
/// the file's start) and the range copied from there.
std::uint64_t read_registered(s3::device_grant_opener& opener, int fd, std::uint64_t file_offset,
                              const region& destination, error_code& ec) {
  if (destination.size == 0) return 0;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ec = {errno, boost::system::generic_category()};
    return 0;
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (file_offset > size || destination.size > size - file_offset) {
    ec = errc::bad_range;  // the file shrank since the negotiator looked
    return 0;
  }
  auto mapping = std::make_shared<file_mapping>();
  mapping->fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);  // the cache may keep it after this call's file closes
  if (mapping->fd < 0) {
    ec = {errno, boost::system::generic_category()};
    return 0;
  }
  mapping->length = static_cast<std::size_t>(size);
  mapping->base = ::mmap(nullptr, mapping->length, PROT_READ, MAP_SHARED, mapping->fd, 0);
  if (mapping->base == MAP_FAILED) {
    ec = {errno, boost::system::generic_category()};
    return 0;
  }
  s3::rdma_source source;
  source.mapping =
      const_region{static_cast<const std::byte*>(mapping->base), mapping->length, memory_kind::host_pageable};
  source.offset = file_offset;
  source.length = destination.size;
  source.version = file_version(st);
  source.file = mapping->fd;
  source.file_offset = 0;
  source.owner = mapping;
  ec = copy_to_device(opener, destination.device, static_cast<std::byte*>(destination.data), source);
  return ec ? 0 : destination.size;
}
#endif

std::uint64_t read_cufile(const std::filesystem::path& path, std::uint64_t file_offset, const region& destination,
                          const file_to_device_options& options, file_to_device_report& report, error_code& ec) {
  // cuFile reads into memory of the calling thread's current device.
  if (const cudaError_t e = cudaSetDevice(destination.device); e != cudaSuccess) {
    ec = make_cuda_error(static_cast<int>(e));
    return 0;
  }
  file::cufile_reader reader = file::cufile_reader::open(path, options.cufile, ec);
  if (ec) return 0;
  report.direct_io = reader.direct();
  report.cufile_compat_mode = reader.properties().compat_mode_likely();
  return reader.read(file_offset, destination, ec);
}

}  // namespace

std::optional<config_error> file_to_device_options::validate() const {
  if (!(resident_threshold >= 0 && resident_threshold <= 1)) {
    return config_error{"resident_threshold", "must be between 0 and 1"};
  }
  if (mapped_chunk_bytes < 4096 || mapped_chunk_bytes > gib || mapped_chunk_bytes % 4096 != 0) {
    return config_error{"mapped_chunk_bytes", "must be a multiple of 4096 between 4 KiB and 1 GiB"};
  }
  if (queue_depth < 1) return config_error{"queue_depth", "must be at least 1"};
  return std::nullopt;
}

namespace {

/// Puts the calling thread's current device back on destruction.
class device_restorer {
 public:
  device_restorer() noexcept { ok_ = cudaGetDevice(&device_) == cudaSuccess; }
  device_restorer(const device_restorer&) = delete;
  device_restorer& operator=(const device_restorer&) = delete;
  ~device_restorer() {
    if (ok_) static_cast<void>(cudaSetDevice(device_));
  }

 private:
  int device_ = 0;
  bool ok_ = false;
};

/// What the blocking call checks before it opens the file: errc::invalid_config,
/// errc::unsupported_memory, errc::invalid_argument, errc::no_device.
error_code check(const region& destination, const file_to_device_options& options) {
  if (options.validate()) return errc::invalid_config;
  if (destination.kind != memory_kind::cuda_device) return errc::unsupported_memory;
  if (destination.data == nullptr && destination.size != 0) return errc::invalid_argument;
  error_code ec;
  if (device_count(ec) == 0) return ec;
  return {};
}

}  // namespace

std::size_t file_transport::read(const region& local, const file::file_remote& remote, transfer_span span,
                                 error_code& ec) const {
  file_to_device_report local_report;
  file_to_device_report& out = report_ != nullptr ? *report_ : local_report;
  out = {.method = options_.method};
  if ((ec = file::check_read(local, remote, span, true))) return 0;
  if (options_.validate()) {
    ec = errc::invalid_config;
    return 0;
  }
  if (local.data == nullptr && span.length != 0) {
    ec = errc::invalid_argument;
    return 0;
  }
  if (device_count(ec) == 0) return 0;
  const region destination = local.subregion(span.local_offset, span.length, ec);
  if (ec) return 0;
  const device_restorer restore;
  if (options_.method == file_method::automatic || options_.method == file_method::mapped) {
    // cachestat where the kernel has it: no mapping, and cheap for any length.
    const file::page_residency resident =
        remote.residency ? *remote.residency
                         : file::page_cache_residency(remote.file->fd(), span.remote_offset, span.length,
                                                      file::residency_probe::automatic, ec);
    if (ec) return 0;
    out.resident_fraction = resident.fraction();
    out.residency_probe = resident.probe;
    // Resident: DMA from the page cache. Cold: O_DIRECT reads, which fault nothing in.
    out.method = options_.method == file_method::mapped || out.resident_fraction >= options_.resident_threshold
                     ? file_method::mapped
                     : file_method::uring;
  }
  file_to_device_options chosen = options_;
  chosen.method = out.method;
  const std::filesystem::path& path = remote.file->path();
  switch (chosen.method) {
    case file_method::mapped: {
#ifdef SLUICE_CUDA_GRANTS
      std::shared_ptr<s3::device_grant_opener> opener =
          chosen.registrations != nullptr ? chosen.registrations : file_registrations(ec);
      if (opener != nullptr) read_registered(*opener, remote.file->fd(), span.remote_offset, destination, ec);
#else
      read_mapped(remote.file->fd(), span.remote_offset, destination, chosen, out, ec);
#endif
      break;
    }
    case file_method::cufile: read_cufile(path, span.remote_offset, destination, chosen, out, ec); break;
    default: read_staged(path, span.remote_offset, destination, chosen, out, ec); break;
  }
  out.bytes = ec ? 0 : destination.size;
  return static_cast<std::size_t>(out.bytes);
}

std::shared_ptr<s3::device_grant_opener> file_registrations(error_code& ec) {
#ifdef SLUICE_CUDA_GRANTS
  // Made once and never destroyed: the opener's pools and registrations would otherwise be torn
  // down after the CUDA runtime's own exit handlers ran.
  static std::mutex making;
  static auto* made = new std::shared_ptr<s3::device_grant_opener>;
  const std::lock_guard lock(making);
  if (*made == nullptr) {
    grant_opener_config config;
    config.pinned = std::make_shared<pinned_budget>(pinned_budget::default_limit());
    *made = make_grant_opener(config, ec);
  }
  if (*made != nullptr) ec = {};
  return *made;
#else
  ec = errc::unavailable;
  return nullptr;
#endif
}

std::uint64_t read_file_to_device(const std::filesystem::path& path, std::uint64_t file_offset,
                                  const region& destination, const file_to_device_options& options,
                                  file_to_device_report* report, error_code& ec) {
  file_to_device_report local;
  file_to_device_report& out = report != nullptr ? *report : local;
  out = {.method = options.method};
  if ((ec = check(destination, options))) return 0;
  const bool probe = options.method == file_method::automatic || options.method == file_method::mapped;
  file_path reading(file::negotiator({.probe_residency = probe}), device_registrar{}, file_transport(options, &out));
  const transfer_result result =
      reading.get({{}, path.string()}, destination, byte_range{file_offset, destination.size}, ec);
  return ec ? 0 : result.bytes;
}

std::uint64_t read_file_to_device(const std::filesystem::path& path, std::uint64_t file_offset,
                                  const region& destination, const file_to_device_options& options,
                                  file_to_device_report* report) {
  error_code ec;
  const std::uint64_t n = read_file_to_device(path, file_offset, destination, options, report, ec);
  detail::throw_on_error(ec, "sluice::cuda::read_file_to_device");
  return n;
}

}  // namespace sluice::cuda
