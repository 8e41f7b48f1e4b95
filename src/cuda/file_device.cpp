// Files into device memory: io_uring reads into a stager's pinned slots (each slot copied to the
// device while the next ones are read), or cuFile straight into device memory.
#include <sluice/cuda/file.hpp>

#include <sluice/cuda/device.hpp>
#include <sluice/file/uring_reader.hpp>

#include <cuda_runtime_api.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
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

/// A read-only shared mapping of [offset, offset + length) of a file, from the page that holds
/// `offset`; unmapped and closed on destruction.
struct file_mapping {
  int fd = -1;
  std::byte* base = nullptr;  // page-aligned
  std::size_t length = 0;     // mapped bytes
  std::size_t lead = 0;       // offset's place in its page
  file_mapping() = default;
  file_mapping(const file_mapping&) = delete;
  file_mapping& operator=(const file_mapping&) = delete;
  ~file_mapping() {
    if (base != nullptr) ::munmap(base, length);
    if (fd >= 0) ::close(fd);
  }
  bool open(const std::filesystem::path& path, std::uint64_t offset, std::uint64_t size, error_code& ec) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0) {
      ec = {errno, boost::system::generic_category()};
      return false;
    }
    if (offset > static_cast<std::uint64_t>(st.st_size) || size > static_cast<std::uint64_t>(st.st_size) - offset) {
      ec = errc::bad_range;
      return false;
    }
    static const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    lead = static_cast<std::size_t>(offset % page);
    length = static_cast<std::size_t>(size) + lead;
    if (size == 0) return true;
    void* p = ::mmap(nullptr, length, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(offset - lead));
    if (p == MAP_FAILED) {
      ec = {errno, boost::system::generic_category()};
      return false;
    }
    base = static_cast<std::byte*>(p);
    return true;
  }
  /// The share of the mapped pages in the page cache now.
  [[nodiscard]] double resident() const {
    if (base == nullptr) return 1.0;
    static const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> pages((length + page - 1) / page);
    if (::mincore(base, length, pages.data()) != 0) return 0.0;
    const auto in = std::count_if(pages.begin(), pages.end(), [](unsigned char c) { return (c & 1U) != 0; });
    return static_cast<double>(in) / static_cast<double>(pages.size());
  }
};

/// DMA from the page cache: the mapping registered chunk by chunk (pinning faults the pages in:
/// measured on an H100 host, filling the page tables first with MADV_POPULATE_READ made it
/// slower), each chunk's copy queued on one of four streams while the next registers;
/// everything unregistered once the copies are done. A chunk that cannot be registered is copied
/// as pageable memory.
std::uint64_t read_mapped(const file_mapping& map, const region& destination, error_code& ec) {
  constexpr std::size_t chunk = 64 << 20;
  if (const cudaError_t e = cudaSetDevice(destination.device); e != cudaSuccess) {
    ec = make_cuda_error(static_cast<int>(e));
    return 0;
  }
  std::vector<cudaStream_t> streams(4);
  for (auto& st : streams) {
    if (const cudaError_t e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking); e != cudaSuccess) {
      ec = make_cuda_error(static_cast<int>(e));
      st = nullptr;
    }
  }
  std::vector<void*> registered;
  auto* to = static_cast<std::byte*>(destination.data);
  for (std::size_t at = 0, i = 0; at < map.length && !ec; at += chunk, ++i) {
    const std::size_t n = std::min(chunk, map.length - at);
    std::byte* p = map.base + at;
    const bool pinned = cudaHostRegister(p, n, cudaHostRegisterReadOnly) == cudaSuccess;
    if (pinned) {
      registered.push_back(p);
    } else {
      (void)cudaGetLastError();
    }
    // The destination's share of this chunk: mapping bytes [max(at, lead), at + n) are file
    // bytes of the range.
    const std::size_t first = std::max(at, map.lead);
    if (first >= at + n) continue;
    const std::size_t bytes = at + n - first;
    const cudaError_t e = pinned ? cudaMemcpyAsync(to + (first - map.lead), map.base + first, bytes,
                                                   cudaMemcpyHostToDevice, streams[i % streams.size()])
                                 : cudaMemcpy(to + (first - map.lead), map.base + first, bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) ec = make_cuda_error(static_cast<int>(e));
  }
  for (cudaStream_t st : streams) {
    if (st == nullptr) continue;
    if (const cudaError_t e = cudaStreamSynchronize(st); e != cudaSuccess && !ec)
      ec = make_cuda_error(static_cast<int>(e));
    (void)cudaStreamDestroy(st);
  }
  for (void* p : registered) (void)cudaHostUnregister(p);
  return ec ? 0 : destination.size;
}

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

std::uint64_t read_file_to_device(const std::filesystem::path& path, std::uint64_t file_offset,
                                  const region& destination, const file_to_device_options& options,
                                  file_to_device_report* report, error_code& ec) {
  file_to_device_report local;
  file_to_device_report& out = report != nullptr ? *report : local;
  out = {.method = options.method};
  if (destination.kind != memory_kind::cuda_device) {
    ec = errc::unsupported_memory;
    return 0;
  }
  if (destination.data == nullptr && destination.size != 0) {
    ec = errc::invalid_argument;
    return 0;
  }
  if (device_count(ec) == 0) return 0;
  if (options.method == file_method::automatic || options.method == file_method::mapped) {
    file_mapping map;
    if (!map.open(path, file_offset, destination.size, ec)) return 0;
    out.resident_fraction = map.resident();
    // Resident: DMA from the page cache. Cold: O_DIRECT reads, which fault nothing in.
    if (options.method == file_method::mapped || out.resident_fraction >= 0.9) {
      out.method = file_method::mapped;
      out.bytes = read_mapped(map, destination, ec);
      return out.bytes;
    }
    out.method = file_method::uring;
  }
  file_to_device_options chosen = options;
  chosen.method = out.method;
  const std::uint64_t n = chosen.method == file_method::cufile
                              ? read_cufile(path, file_offset, destination, chosen, out, ec)
                              : read_staged(path, file_offset, destination, chosen, out, ec);
  out.bytes = n;
  return n;
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
