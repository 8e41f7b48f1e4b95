// SPDX-License-Identifier: Apache-2.0
// What the gateway store's translation units share (src/s3/gateway_*.cpp): the checks of an
// upstream's values, whole-buffer file I/O and the mapping of a cache file's data. Internal.
#pragma once

#include <sluice/error.hpp>
#include <sluice/region.hpp>

#include <boost/beast/http/error.hpp>
#include <boost/system/system_error.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string_view>

namespace sluice::s3 {

namespace detail {

// Maps `size` bytes from `data_offset` of `fd` (page-aligned below it): the data's first byte, and
// the whole mapping in `base`, `length`; null with `ec` on error.
inline std::byte* map_file_data(int fd, std::uint64_t data_offset, std::uint64_t size, int protection, void*& base,
                                std::size_t& length, error_code& ec) {
  static const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t aligned = data_offset - data_offset % page;
  length = static_cast<std::size_t>(data_offset - aligned + size);
  base = ::mmap(nullptr, length, protection, MAP_SHARED, fd, static_cast<off_t>(aligned));
  if (base == MAP_FAILED) {
    ec = error_code(errno, boost::system::generic_category());
    base = nullptr;
    length = 0;
    return nullptr;
  }
  return static_cast<std::byte*>(base) + (data_offset - aligned);
}

}  // namespace detail

// -- helpers ------------------------------------------------------------------------------------

namespace gateway_impl {

// An ETag the server may echo in a header: printable ASCII without quotes, at most 1 KiB.
inline bool is_sane_etag(std::string_view etag) noexcept {
  if (etag.empty() || etag.size() > 1024) return false;
  return std::all_of(etag.begin(), etag.end(), [](char c) { return c > 0x20 && c < 0x7f && c != '"'; });
}

inline error_code errno_code(int value) { return {value, boost::system::generic_category()}; }

// An upstream answer that is not HTTP (a bad status line, header or Content-Length): garbage, not
// a failure to reach the upstream. An answer cut short is a failure (the connection broke).
inline bool is_malformed_answer(const error_code& ec) noexcept {
  namespace http = boost::beast::http;
  if (ec.category() != make_error_code(http::error::bad_version).category()) return false;
  return ec != http::error::end_of_stream && ec != http::error::partial_message && ec != http::error::short_read &&
         ec != http::error::need_more && ec != http::error::need_buffer;
}

// An upstream's Last-Modified, unless it sent none (the epoch) or one past 2200 (system_clock
// counts nanoseconds: it ends in 2262).
inline std::optional<std::chrono::system_clock::time_point> known_time(std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  if (t <= system_clock::time_point{} || t > system_clock::time_point{sys_days{year{2200} / 1 / 1}}) {
    return std::nullopt;
  }
  return t;
}

// pwrite all of `data` at `offset`.
inline bool write_all(int fd, const std::byte* data, std::size_t size, std::uint64_t offset, error_code& ec) {
  while (size > 0) {
    const ssize_t n = ::pwrite(fd, data, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ec = errno_code(n < 0 ? errno : EIO);
      return false;
    }
    data += n;
    size -= static_cast<std::size_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
  return true;
}

inline bool read_all(int fd, std::byte* data, std::size_t size, std::uint64_t offset, error_code& ec) {
  while (size > 0) {
    const ssize_t n = ::pread(fd, data, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ec = n < 0 ? errno_code(errno) : error_code(sluice::errc::protocol_violation);
      return false;
    }
    data += n;
    size -= static_cast<std::size_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
  return true;
}

// Whether `dir` is on a tmpfs with 2 MiB pages (mounted huge=within_size, always or advise, or
// any tmpfs with shmem_enabled "force") and the kernel can back a mapping's pages ahead of a
// write (MADV_POPULATE_WRITE): then a fetch receives in place (src/s3/gateway_fetch.cpp,
// write_window).
bool huge_page_cache(const std::filesystem::path& dir);

inline bool is_no_space(const error_code& ec) noexcept {
  return (ec.category() == boost::system::generic_category() || ec.category() == boost::system::system_category()) &&
         (ec.value() == ENOSPC || ec.value() == EDQUOT);
}

}  // namespace gateway_impl

}  // namespace sluice::s3
