// SPDX-License-Identifier: Apache-2.0
// Compiled part of sluice::file: the page-cache residency probe, the file negotiator and the
// io_uring transport into host memory. The io_uring reader is in uring_reader.cpp, the cuFile
// transport in cufile.cpp; the helpers they share in file_support.hpp.
#include <sluice/file/negotiator.hpp>
#include <sluice/file/residency.hpp>
#include <sluice/file/transport.hpp>

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <limits>
#include <vector>

#include "file_support.hpp"

namespace sluice::file {

using namespace file_impl;  // this tier's helpers (file_support.hpp)

// -- page-cache residency ---------------------------------------------------------------------------

namespace {

// cachestat(2), Linux 6.5: one syscall number on every architecture. The C library may lack
// both the number and the structures (glibc 2.36, kernel headers 6.1): declared here.
#ifdef __NR_cachestat
constexpr long cachestat_syscall = __NR_cachestat;
#else
constexpr long cachestat_syscall = 451;
#endif
struct cachestat_range_abi {
  std::uint64_t off;
  std::uint64_t len;
};
struct cachestat_abi {
  std::uint64_t nr_cache;
  std::uint64_t nr_dirty;
  std::uint64_t nr_writeback;
  std::uint64_t nr_evicted;
  std::uint64_t nr_recently_evicted;
};

std::uint64_t page_bytes() noexcept {
  static const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

/// cachestat of whole pages [first_page, first_page + pages): the resident count, or the errno.
std::uint64_t count_cachestat(int fd, std::uint64_t first_page, std::uint64_t pages, int& error) noexcept {
  cachestat_range_abi range{first_page * page_bytes(), pages * page_bytes()};
  cachestat_abi stat{};
  if (::syscall(cachestat_syscall, fd, &range, &stat, 0U) != 0) {
    error = errno;
    return 0;
  }
  error = 0;
  // Pages cut by the end of the file count as cached when their folio is: at most `pages`.
  return std::min(stat.nr_cache, pages);
}

/// mincore over a read-only mapping of the pages, unmapped again.
std::uint64_t count_mincore(int fd, std::uint64_t first_page, std::uint64_t pages, error_code& ec) {
  const std::uint64_t page = page_bytes();
  if (pages > std::numeric_limits<std::size_t>::max() / page) {
    ec = errc::bad_range;
    return 0;
  }
  const std::size_t length = static_cast<std::size_t>(pages * page);
  void* map = ::mmap(nullptr, length, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(first_page * page));
  if (map == MAP_FAILED) {
    ec = errno_error(errno);
    return 0;
  }
  std::vector<unsigned char> in(static_cast<std::size_t>(pages));
  const int r = ::mincore(map, length, in.data());
  const int saved = errno;
  static_cast<void>(::munmap(map, length));
  if (r != 0) {
    ec = errno_error(saved);
    return 0;
  }
  ec = {};
  return static_cast<std::uint64_t>(std::count_if(in.begin(), in.end(), [](unsigned char c) { return (c & 1U) != 0; }));
}

}  // namespace

const char* to_string(residency_probe p) noexcept {
  switch (p) {
    case residency_probe::automatic: return "automatic";
    case residency_probe::cachestat: return "cachestat";
    case residency_probe::mincore: return "mincore";
  }
  return "?";
}

page_residency page_cache_residency(int fd, std::uint64_t offset, std::uint64_t length, residency_probe probe,
                                    error_code& ec) {
  if (probe != residency_probe::automatic && probe != residency_probe::cachestat && probe != residency_probe::mincore) {
    ec = errc::invalid_config;
    return {};
  }
  const std::uint64_t size = readable_size(fd, ec);
  if (ec) return {};
  if (!range_inside(offset, length, size)) {
    ec = errc::bad_range;
    return {};
  }
  page_residency out;
  out.probe = probe == residency_probe::mincore ? residency_probe::mincore : residency_probe::cachestat;
  if (length == 0) return out;
  const std::uint64_t page = page_bytes();
  const std::uint64_t first = offset / page;
  out.pages = (offset + length - 1) / page - first + 1;
  if (out.probe == residency_probe::cachestat) {
    int error = 0;
    out.resident = count_cachestat(fd, first, out.pages, error);
    if (error == 0) return out;
    // No cachestat here (older kernel, a seccomp filter, a file system without it).
    if (probe == residency_probe::cachestat || (error != ENOSYS && error != EOPNOTSUPP && error != EPERM)) {
      ec = errno_error(error);
      return {};
    }
    out.probe = residency_probe::mincore;
  }
  out.resident = count_mincore(fd, first, out.pages, ec);
  if (ec) return {};
  return out;
}

page_residency page_cache_residency(const std::filesystem::path& path, std::uint64_t offset, std::uint64_t length,
                                    residency_probe probe, error_code& ec) {
  const unique_fd fd = open_read_only(path, false);
  if (!fd) {
    ec = errno_error(errno);
    return {};
  }
  return page_cache_residency(fd.get(), offset, length, probe, ec);
}

page_residency page_cache_residency(const std::filesystem::path& path, std::uint64_t offset, std::uint64_t length,
                                    residency_probe probe) {
  error_code ec;
  const page_residency r = page_cache_residency(path, offset, length, probe, ec);
  detail::throw_on_error(ec, "sluice::file::page_cache_residency");
  return r;
}

// -- negotiator ------------------------------------------------------------------------------------

std::shared_ptr<const open_file> open_file::open(const std::filesystem::path& path, error_code& ec) {
  unique_fd fd = open_read_only(path, false);
  if (!fd) {
    ec = errno_error(errno);
    return nullptr;
  }
  const std::uint64_t size = readable_size(fd.get(), ec);
  if (ec) return nullptr;
  auto file = std::shared_ptr<const open_file>(new open_file(fd.get(), path, size));
  static_cast<void>(fd.release());  // the open_file closes it now
  return file;
}

open_file::~open_file() { static_cast<void>(::close(fd_)); }

negotiator::session negotiator::negotiate(const transfer_request& request, error_code& ec) const {
  session s;
  if (request.dir != direction::get || !request.object.bucket.empty() || request.object.key.empty()) {
    ec = errc::invalid_argument;
    return s;
  }
  s.remote_.file = open_file::open(request.object.key, ec);
  if (ec) return s;
  const extent e = resolve(request.range, s.remote_.file->size(), ec);
  if (ec) return s;
  if (options_.probe_residency) {
    s.remote_.residency =
        page_cache_residency(s.remote_.file->fd(), e.offset, e.length, residency_probe::automatic, ec);
    if (ec) return s;
  }
  s.span_ = {0, e.offset, e.length};
  return s;
}

// -- uring_transport ------------------------------------------------------------------------------

error_code check_read(const region& local, const file_remote& remote, transfer_span span, bool device_memory) noexcept {
  if (!local.contains(span.local_offset, span.length)) return errc::region_too_small;
  if (!range_inside(span.remote_offset, span.length, remote.size())) return errc::bad_range;
  if (device_memory == local.host_accessible()) return errc::unsupported_memory;
  return {};
}

std::size_t uring_transport::read(const region& local, const file_remote& remote, transfer_span span,
                                  error_code& ec) const {
  if ((ec = check_read(local, remote, span, false))) return 0;
  if (local.data == nullptr && span.length != 0) {
    ec = errc::invalid_argument;
    return 0;
  }
  if (span.length == 0) return 0;
  uring_reader reader = uring_reader::open(remote.file->path(), config_, ec);
  if (ec) return 0;
  const std::span<std::byte> into(local.bytes() + span.local_offset, static_cast<std::size_t>(span.length));
  return reader.read(span.remote_offset, into, ec);
}

}  // namespace sluice::file
