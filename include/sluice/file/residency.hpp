// SPDX-License-Identifier: Apache-2.0
// How much of a file range is in the page cache now: cachestat(2) (Linux 6.5 and later) where
// the kernel has it, else mincore(2) over a temporary read-only mapping of the range. Both only
// look: neither reads a page in nor keeps one there.
//
// A caller uses it to choose between reading a range from the page cache (cheap when resident)
// and O_DIRECT reads from the device (what a cold range wants: nothing faulted in, nothing
// evicted). The answer is a snapshot: pages can be evicted or read in right after it.
#pragma once

#include <sluice/error.hpp>

#include <cstdint>
#include <filesystem>

namespace sluice::file {

/// The system call that measures a range's residency.
enum class residency_probe : std::uint8_t {
  automatic,  ///< cachestat, or mincore where the kernel has no cachestat (ENOSYS, EOPNOTSUPP, EPERM)
  cachestat,  ///< cachestat(2) only: no mapping, one call for any length
  mincore,    ///< mincore(2) over a read-only mapping of the range (mapped and unmapped again)
};

/// "automatic", "cachestat", "mincore".
[[nodiscard]] const char* to_string(residency_probe p) noexcept;

/// The page-cache residency of a byte range, counted in pages (the range's first and last pages
/// count whole).
struct page_residency {
  std::uint64_t pages = 0;                             ///< pages the range touches
  std::uint64_t resident = 0;                          ///< of those, the pages in the page cache when probed
  residency_probe probe = residency_probe::automatic;  ///< the call that counted (cachestat or mincore)

  /// resident / pages; 1 for an empty range (nothing to read in).
  [[nodiscard]] double fraction() const noexcept {
    return pages == 0 ? 1.0 : static_cast<double>(resident) / static_cast<double>(pages);
  }
};

/// The residency of [offset, offset + length) of the open file `fd` (a regular file or a block
/// device, opened for reading; the descriptor's file offset is not moved). Errors:
/// errc::bad_range (the range is not inside the file), errc::invalid_argument (neither a regular
/// file nor a block device), errc::invalid_config (`probe` out of range), the errno of fstat,
/// cachestat (when asked for by name: ENOSYS on kernels before 6.5), mmap or mincore.
[[nodiscard]] page_residency page_cache_residency(int fd, std::uint64_t offset, std::uint64_t length,
                                                  residency_probe probe, error_code& ec);

/// The same for the file at `path` (opened read-only for the call). Errors: as above, plus the
/// errno of open.
[[nodiscard]] page_residency page_cache_residency(const std::filesystem::path& path, std::uint64_t offset,
                                                  std::uint64_t length, residency_probe probe, error_code& ec);

/// Throwing overload.
[[nodiscard]] page_residency page_cache_residency(const std::filesystem::path& path, std::uint64_t offset,
                                                  std::uint64_t length,
                                                  residency_probe probe = residency_probe::automatic);

}  // namespace sluice::file
