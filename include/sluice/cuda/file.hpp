// SPDX-License-Identifier: Apache-2.0
// Local files (NVMe, any file system) into GPU memory. Compiled into sluice::cuda when the file
// tier (liburing) is built.
//
// The methods:
// - uring: O_DIRECT io_uring reads into the pinned slots of a stager, each slot copied to the
//   device (cudaMemcpyAsync) while the next chunks are read; no page cache, one PCIe crossing.
// - buffered: the same pipeline with buffered reads (through the page cache): for files that are
//   hot in the cache, or file systems without O_DIRECT.
// - cufile: NVIDIA cuFile (GPUDirect Storage) reads straight into device memory where the host
//   has a direct path (nvidia-fs or P2PDMA), else cuFile's own compatibility mode.
// - mapped: for a file in the page cache, DMA from the page cache itself, through the same
//   pipeline as a same-host grant's GET (cuda/grant.hpp): the file's mapping is registered
//   with cudaHostRegister (read-only) chunk by chunk in a CUDA context of its own while the
//   chunks already registered are copied, copy threads move the chunks registration would reach
//   late through pinned slots, and the registrations are kept per file version (device, inode,
//   size, mtime, ctime) within the opener's budgets: a second read of the same version is one
//   DMA at the pinned ceiling. Builds without the S3 tier (no grant opener) register the range
//   per call instead, unregistered when the call returns.
// - automatic: mapped when the range is resident in the page cache (cachestat, or mincore where
//   the kernel has no cachestat: file::page_cache_residency) at resident_threshold or more, else
//   uring (O_DIRECT reads of a cold range fault nothing into the cache). cuFile in compatibility
//   mode always reads from the disk, resident or not: automatic never picks it.
// Pinned staging memory is bounded by the stager (default 64 MiB) whatever the file size; mapped
// pins no staging memory of its own but the file's page cache, within the opener's registration
// and pinned budgets (its copy threads' slots aside).
//
// As a path:
//   cuda::file_path   file::negotiator × device_registrar × cuda::file_transport
// The negotiator opens the file, resolves the range and measures its page-cache residency; the
// transport reads by the method its options name (automatic: chosen by that residency).
// read_file_to_device runs one such path to completion.
#pragma once

#include <sluice/config.hpp>
#include <sluice/cuda/device_registrar.hpp>
#include <sluice/cuda/stager.hpp>
#include <sluice/file/cufile.hpp>
#include <sluice/file/negotiator.hpp>
#include <sluice/file/reading_transport.hpp>
#include <sluice/file/residency.hpp>
#include <sluice/path.hpp>

#include <boost/asio/any_io_executor.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

namespace sluice::s3 {
class device_grant_opener;  // cuda/grant.hpp: cuda::make_grant_opener
}  // namespace sluice::s3

namespace sluice::cuda {

/// How a file reaches device memory.
enum class file_method : std::uint8_t {
  automatic,  ///< mapped when the range is resident in the page cache (resident_threshold), else uring
  uring,      ///< O_DIRECT io_uring reads into pinned slots, then to the device (buffered where O_DIRECT is refused)
  buffered,   ///< the same with buffered reads
  cufile,     ///< cuFile straight into device memory (errc::unavailable without libcufile)
  /// DMA from the page cache itself, through a grant opener's registration cache and copy
  /// threads (file_to_device_options::registrations): a version read before is one DMA. For
  /// files already in the page cache (registering a cold chunk reads it in one page fault at a
  /// time: use uring).
  mapped,
};

/// "automatic", "uring", "buffered", "cufile", "mapped".
[[nodiscard]] const char* to_string(file_method m) noexcept;

/// What read_file_to_device does and with which resources.
struct file_to_device_options {
  file_method method = file_method::uring;
  /// The ring of the uring and buffered methods (slot_bytes = bytes per read); its device is
  /// replaced by the destination's.
  stager_config staging;
  /// A ring to use instead of making one from `staging` for the call (allocating pinned memory
  /// costs milliseconds: reuse one across files). Its device must be the destination's.
  stager* ring = nullptr;
  /// Chunk reads in flight (uring, buffered); at most the ring's slots are used.
  std::uint32_t queue_depth = 4;
  /// The cufile method's settings. Each call opens and closes a reference to the cuFile driver:
  /// hold a file::cufile_driver across calls so that cuFile sets itself up once.
  file::cufile_config cufile;
  /// automatic: the share of the range's pages that must be in the page cache for mapped to run.
  double resident_threshold = 0.9;
  /// mapped: the grant opener whose registration cache, budgets and copy threads the read runs
  /// through (cuda::make_grant_opener; give a server's to share its cache and pinned budget).
  /// Null: file_registrations(), the process's own.
  std::shared_ptr<s3::device_grant_opener> registrations;
  /// mapped in a build without the S3 tier (no grant opener): bytes registered and copied as one
  /// piece, per call; a multiple of 4096 between 4 KiB and 1 GiB. With the S3 tier the opener's
  /// grant_opener_config::chunk_bytes is the unit.
  std::size_t mapped_chunk_bytes = 64 * mib;

  /// Valid when resident_threshold is in [0, 1], mapped_chunk_bytes is in its range and
  /// queue_depth is at least 1 (staging and cufile are checked when used).
  [[nodiscard]] std::optional<config_error> validate() const;
};

/// What a read did.
struct file_to_device_report {
  file_method method = file_method::uring;  ///< the method that ran
  bool direct_io = false;                   ///< O_DIRECT reads (cufile: the descriptor cuFile was given)
  std::uint64_t bytes = 0;                  ///< bytes now in device memory
  std::uint64_t pinned_bytes = 0;           ///< pinned staging memory used (0 for cufile)
  /// cufile: no nvidia-fs driver and compatibility mode allowed, so cuFile most likely bounced the
  /// bytes through host memory itself (file::cufile_properties::compat_mode_likely()).
  bool cufile_compat_mode = false;
  /// automatic and mapped: the share of the range's pages that were in the page cache before
  /// the read; -1 when not probed.
  double resident_fraction = -1;
  /// automatic and mapped: the call that measured resident_fraction (cachestat or mincore).
  file::residency_probe residency_probe = file::residency_probe::automatic;
  /// mapped: bytes copied as pageable memory because cudaHostRegister refused their chunk.
  std::uint64_t pageable_bytes = 0;
};

/// Reads a negotiated file into device memory by the method of its options (automatic: mapped
/// when the remote's residency, measured by the negotiator or else here, is at
/// resident_threshold or more; uring otherwise). Reads only (`reads_only`): a write is
/// errc::invalid_argument. The reads block: they run on the executor given at construction, or
/// else on the handler's associated executor. The calling thread's current device is left as it
/// was. `report`, when given, receives what each read did: give one to a transport that runs one
/// read at a time.
class file_transport : public file::reading_transport<file_transport> {
 public:
  static constexpr std::string_view name = "file-to-device";

  explicit file_transport(file_to_device_options options = {}, file_to_device_report* report = nullptr,
                          boost::asio::any_io_executor reads = {})
      : reading_transport(std::move(reads)), options_(std::move(options)), report_(report) {}

  /// Reads `span.length` bytes of the file at `span.remote_offset` into device memory `local` at
  /// `span.local_offset`, blocking until the bytes are in device memory; what async_read runs
  /// (file::reading_transport). Errors: file::check_read's, then as read_file_to_device.
  std::size_t read(const region& local, const file::file_remote& remote, transfer_span span, error_code& ec) const;

 private:
  file_to_device_options options_;
  file_to_device_report* report_;
};

/// The grant opener the mapped method uses when the options name none: made at the first call
/// (cuda::make_grant_opener with default settings and a pinned budget of a quarter of the host's
/// memory: ~0.2-0.5 s and a second CUDA context on device 0), then kept for the life of the
/// process (its registrations hold the files they cache open and their pages pinned, up to
/// its budgets; give the options an opener of your own to bound or drop them). Errors:
/// errc::no_device, errc::unavailable (built without the S3 tier).
[[nodiscard]] std::shared_ptr<s3::device_grant_opener> file_registrations(error_code& ec);

/// A file's bytes into device memory.
using file_path = path<file::negotiator, device_registrar, file_transport>;

/// Reads the file range [file_offset, file_offset + destination.size) of `path` into
/// `destination` (device memory) and returns destination.size, or 0 on error; blocks until the
/// bytes are in device memory (mapped: the registrations stay with the opener). Errors: errc::bad_range
/// (the range is not inside the file), errc::unsupported_memory (destination not device memory),
/// errc::no_device, errc::invalid_config, errc::invalid_argument (a ring on another device),
/// errc::unavailable (cufile without libcufile), the errno of open, a read, mmap or the residency
/// probe, a cufile or cuda error. The calling thread's current device is left as it was.
/// It runs one cuda::file_path on the calling thread.
std::uint64_t read_file_to_device(const std::filesystem::path& path, std::uint64_t file_offset,
                                  const region& destination, const file_to_device_options& options,
                                  file_to_device_report* report, error_code& ec);

/// Throwing overload.
std::uint64_t read_file_to_device(const std::filesystem::path& path, std::uint64_t file_offset,
                                  const region& destination, const file_to_device_options& options = {},
                                  file_to_device_report* report = nullptr);

}  // namespace sluice::cuda
