// SPDX-License-Identifier: Apache-2.0
// The helpers sluice::file's translation units share (src/file/uring_reader.cpp, cufile.cpp,
// file.cpp): opening a file for reading (O_DIRECT when the file system takes it), its size,
// O_DIRECT alignment. Not installed.
#pragma once

#include <sluice/config.hpp>
#include <sluice/error.hpp>
#include <sluice/file/uring_reader.hpp>

#include <fcntl.h>
#include <linux/fs.h>  // BLKGETSIZE64
#include <sys/ioctl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <new>
#include <optional>

#include "common/unique_fd.hpp"

namespace sluice::file::file_impl {

inline constexpr std::uint64_t block = direct_alignment;

inline error_code errno_error(int e) noexcept { return {e, boost::system::system_category()}; }

constexpr std::uint64_t align_down(std::uint64_t v) noexcept { return v & ~(block - 1); }
constexpr bool is_aligned(std::uint64_t v) noexcept { return v % block == 0; }
inline bool is_aligned(const void* p) noexcept { return reinterpret_cast<std::uintptr_t>(p) % block == 0; }

inline std::optional<config_error> check_chunk_bytes(std::size_t chunk_bytes) {
  if (chunk_bytes < block || chunk_bytes > gib || chunk_bytes % block != 0) {
    return config_error{"chunk_bytes", "must be a multiple of 4096 between 4 KiB and 1 GiB"};
  }
  return std::nullopt;
}

using ::sluice::detail::unique_fd;

inline unique_fd open_read_only(const std::filesystem::path& path, bool direct) noexcept {
  const int flags = O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0);
  int fd = -1;
  do {
    fd = ::open(path.c_str(), flags);
  } while (fd < 0 && errno == EINTR);
  return unique_fd(fd);
}

/// The size of a regular file or a block device; errc::invalid_argument for anything else.
inline std::uint64_t readable_size(int fd, error_code& ec) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ec = errno_error(errno);
    return 0;
  }
  ec = {};
  if (S_ISREG(st.st_mode)) return static_cast<std::uint64_t>(st.st_size);
  if (S_ISBLK(st.st_mode)) {
    std::uint64_t bytes = 0;
    if (::ioctl(fd, BLKGETSIZE64, &bytes) != 0) {
      ec = errno_error(errno);
      return 0;
    }
    return bytes;
  }
  ec = errc::invalid_argument;  // a directory, FIFO, socket, character device: no size to range-check
  return 0;
}

/// A file opened for reading: O_DIRECT when asked and the file system takes it.
struct opened_file {
  unique_fd fd;
  bool direct = false;
  std::uint64_t size = 0;
};

inline opened_file open_for_reading(const std::filesystem::path& path, bool direct, error_code& ec) {
  opened_file out;
  out.fd = open_read_only(path, direct);
  out.direct = direct;
  if (!out.fd && direct && errno == EINVAL) {
    // The file system has no O_DIRECT (older tmpfs, procfs, some FUSE): read through the cache.
    out.fd = open_read_only(path, false);
    out.direct = false;
  }
  if (!out.fd) {
    ec = errno_error(errno);
    return {};
  }
  out.size = readable_size(out.fd.get(), ec);
  if (ec) return {};
  return out;
}

/// Memory aligned for O_DIRECT, freed on destruction.
struct aligned_delete {
  void operator()(std::byte* p) const noexcept { ::operator delete[](p, std::align_val_t{block}); }
};
using aligned_bytes = std::unique_ptr<std::byte[], aligned_delete>;

inline aligned_bytes allocate_aligned(std::size_t size) {
  return aligned_bytes(static_cast<std::byte*>(::operator new[](size, std::align_val_t{block})));
}

inline bool range_inside(std::uint64_t offset, std::uint64_t length, std::uint64_t size) noexcept {
  return offset <= size && length <= size - offset;
}

}  // namespace sluice::file::file_impl
