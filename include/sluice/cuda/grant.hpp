// SPDX-License-Identifier: Apache-2.0
// Same-host device-memory grants over CUDA IPC: the sluice::cuda side of s3::local_client_plane
// and s3::local_server_plane (include/sluice/s3/local_plane.hpp).
//
// Client: make_grant_exporter() describes the allocation holding a GET destination or a PUT
// source (cudaIpcGetMemHandle of its base, the device's UUID, the allocation's size).
// Server: make_grant_opener() opens such a description (cudaIpcOpenMemHandle on the device with
// that UUID; the size the driver reports for the opened allocation bounds the grant, never the
// client's claim) and moves bytes by DMA:
// - GET: the object's page-cache mapping is registered read-only, in chunks, by one registering
//   thread in a CUDA context of its own (registering in the copying context stalls its copies),
//   while the transfer queues each chunk's DMA as soon as the chunk is registered; chunks after
//   the range are registered ahead when the thread is idle. Registrations are kept per object
//   version (the mapping with them) up to a byte budget, least recently used first out, so a
//   second GET of a hot object copies at the pinned ceiling straight away. Registering runs one
//   page at a time in the driver (4 GiB: 0.12-0.22 s on the H100 host, by memory state), slower
//   than the DMA; so while it works from the front of a cold range, copy_threads CPU threads take
//   chunks from the back that registration would reach later than a CPU copy ends, pread them
//   into pinned slots and DMA from there, and hand them back to be registered for the next GET.
//   Where registration fails, the range is copied as pageable memory. SLUICE_GRANT_TRACE=1 in
//   the server's environment prints one line per copy (waits, times) to stderr.
// - PUT: device → a pinned double buffer → the server's sink, in order.
// Compiled into sluice::cuda when the S3 tier is built.
#pragma once

#include <sluice/config.hpp>
#include <sluice/pinned_budget.hpp>
#include <sluice/s3/local_plane.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

namespace sluice::cuda {

/// All but two of the cores this process may run on, at most 16 (at least 1).
[[nodiscard]] std::size_t default_copy_threads() noexcept;

/// How a server opens and copies into client device memory.
struct grant_opener_config {
  /// Page cache kept registered (cudaHostRegister) across GETs, over all objects.
  std::uint64_t registration_budget = std::uint64_t{32} << 30;
  /// The host's pinned-memory budget, shared with the other caches that pin (`sluice serve`
  /// shares one with the fabric plane): each chunk is taken from it before it is registered
  /// and given back when unregistered; a chunk that does not fit, once the least recently used
  /// versions no transfer uses are out, is not registered (its GET copies it pageable). Null:
  /// registration_budget alone bounds the opener.
  std::shared_ptr<pinned_budget> pinned;
  /// Object versions kept registered at once (each keeps its mapping and file open); the least
  /// recently used that no transfer uses go first.
  std::size_t max_cached_versions = 256;
  std::size_t streams = 4;             ///< copy streams of one transfer (1..64)
  std::size_t chunk_bytes = 64 << 20;  ///< registration and copy unit (1 MiB..1 GiB)
  /// After a GET's range, this much more of the object version is registered while the
  /// registering thread has nothing else to do (the next parts of a ranged GET find it done).
  std::uint64_t register_ahead_bytes = std::uint64_t{1} << 30;
  std::size_t staging_bytes = 16 << 20;  ///< PUT: each of the two pinned buffers
  /// CPU threads that copy a cold range's chunks through pinned slots while the registering
  /// thread registers the others (0: registration only; first GETs then run at the rate of
  /// registering). They take a chunk only when a CPU copy of it ends before registration would
  /// reach it, so a registered GET costs no CPU copy. Default: all but two cores, at most 16.
  /// Measured on H100 hosts, 16 cores, 4 GiB first GET in one request: 0.35x pinned H2D with none,
  /// 0.52-0.65x with 8, 0.78x with 14 (each thread preads the page cache at ~2.2 GB/s there, and
  /// registration alone reaches ~28 GiB/s). The CPU is spent only on a version's first GET.
  std::size_t copy_threads = default_copy_threads();
  std::size_t copy_slot_bytes = 8 << 20;  ///< each of a copy thread's two pinned slots
  /// Register on write: a version a PUT, CompleteMultipartUpload or CopyObject publishes, of at
  /// least register_on_write_min_bytes, is registered in the background (as the chunks registered
  /// ahead of a GET: behind every chunk a GET waits for, within registration_budget, least
  /// recently used out first), so that its first GET finds it registered.
  bool register_on_write = true;
  std::uint64_t register_on_write_min_bytes = 8 << 20;
  /// One line on stderr per grant copy (registration waits, copy threads' times); `sluice serve`
  /// sets it from the environment variable SLUICE_GRANT_TRACE.
  bool trace = false;

  /// The first problem, or nullopt.
  [[nodiscard]] std::optional<config_error> validate() const;
};

/// What a grant opener did since it was made (for reports and tests).
struct grant_opener_stats {
  std::uint64_t registered_bytes = 0;     ///< page cache registered now
  std::uint64_t registrations = 0;        ///< chunks registered since start
  std::uint64_t cache_hits = 0;           ///< chunks a GET found registered already
  std::uint64_t pageable_copies = 0;      ///< ranges copied unregistered (registration failed)
  std::uint64_t copied_chunks = 0;        ///< chunks the copy threads moved through pinned slots
  std::uint64_t evictions = 0;            ///< chunks unregistered to stay within the budget
  std::uint64_t open_handles = 0;         ///< client allocations opened now
  std::uint64_t registered_on_write = 0;  ///< versions queued for registration when published
  std::uint64_t cached_versions = 0;      ///< object versions in the registration cache now
  /// Page cache is registered in a CUDA context of its own, so that registering does not stall
  /// the copies (false: the driver gave no such context; registrations and copies alternate).
  bool registration_context = false;
};

/// A server's opener. Errors: errc::no_device (no usable GPU: run without device grants),
/// errc::invalid_config.
[[nodiscard]] std::shared_ptr<s3::device_grant_opener> make_grant_opener(const grant_opener_config& config,
                                                                         error_code& ec);

/// The counters of an opener made by make_grant_opener (zeros for any other).
[[nodiscard]] grant_opener_stats stats_of(const s3::device_grant_opener& opener);

/// A client's exporter (needs no GPU to be made; export_allocation reports what is missing).
[[nodiscard]] std::shared_ptr<s3::device_grant_exporter> make_grant_exporter();

/// Copies `source.bytes()` into device memory `to` of `device` as a grant's GET does: through the
/// opener's registration cache (a version it holds registered is one DMA at the pinned ceiling),
/// its registering thread and its copy threads (a cold version's chunks in pinned slots), and
/// returns once the bytes are in device memory. The CUDA calls of the transfer run on the
/// calling thread. cuda::read_file_to_device's mapped method runs files through it. Errors:
/// errc::invalid_argument (an opener not made by make_grant_opener), a CUDA error.
[[nodiscard]] error_code copy_to_device(s3::device_grant_opener& opener, int device, std::byte* to,
                                        const s3::rdma_source& source);

}  // namespace sluice::cuda
