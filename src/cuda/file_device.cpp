// Files into device memory: io_uring reads into a stager's pinned slots (each slot copied to the
// device while the next ones are read), or cuFile straight into device memory.
#include <sluice/cuda/file.hpp>

#include <sluice/cuda/device.hpp>
#include <sluice/file/uring_reader.hpp>

#include <cuda_runtime_api.h>

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
  const std::uint64_t n = options.method == file_method::cufile
                              ? read_cufile(path, file_offset, destination, options, out, ec)
                              : read_staged(path, file_offset, destination, options, out, ec);
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
