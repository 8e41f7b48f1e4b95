// SPDX-License-Identifier: Apache-2.0
// The host-memory grant's copy (src/s3/grant_copy.hpp).
#include "grant_copy.hpp"

#include <boost/asio/post.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

namespace sluice::s3::grant_copy {

namespace {

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

/// Fills the page tables of [to, to + n) of a granted mapping before a copy writes all of it:
/// one call instead of a write fault per 4 KiB page. Only the pages the transfer writes anyway
/// (registration maps a grant without populating any). Best effort: older kernels say EINVAL.
void prepare_for_write(std::byte* to, std::size_t n) {
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  // The page that holds `to` (a mapping starts on a page) up to the last whole page of the range.
  std::byte* const begin = to - (reinterpret_cast<std::uintptr_t>(to) & (page - 1));
  std::byte* const end = (to + n) - (reinterpret_cast<std::uintptr_t>(to + n) & (page - 1));
  if (end > begin) ::madvise(begin, static_cast<std::size_t>(end - begin), MADV_POPULATE_WRITE);
}

/// memcpy from a mapping the server has just made (the store maps the object per request): its
/// page tables are filled in one call first, which costs far less than a fault per 4 KiB page.
void copy_from_mapping(std::byte* to, const std::byte* from, std::size_t n) {
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t lead = reinterpret_cast<std::uintptr_t>(from) & (page - 1);
  // Best effort: older kernels say EINVAL and the copy faults the pages in as before.
  ::madvise(const_cast<std::byte*>(from - lead), n + lead, MADV_POPULATE_READ);  // madvise takes void*
  std::memcpy(to, from, n);
}

/// Reads `n` bytes of `file` at `offset` into `to` (the kernel copies from its page cache: no page
/// table of ours is filled for the source). False on a read error or a short file.
bool read_file(int file, std::uint64_t offset, std::byte* to, std::size_t n) {
  while (n > 0) {
    const ssize_t got = ::pread(file, to, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    to += got;
    n -= static_cast<std::size_t>(got);
    offset += static_cast<std::uint64_t>(got);
  }
  return true;
}

/// A transfer's pieces and the workers copying them.
struct transfer {
  const rdma_source* source = nullptr;
  std::vector<piece> pieces;
  std::atomic<std::size_t> next{0};     // the first piece no worker took
  std::atomic<std::size_t> working{0};  // workers not finished
  std::atomic<bool> ok{true};
  std::shared_ptr<const void> keep;
  std::function<void(bool)> done;

  void work() {
    for (std::size_t i = next++; i < pieces.size(); i = next++) {
      if (!copy(*source, pieces[i])) ok = false;
    }
    if (--working == 0) {
      auto finish = std::move(done);
      keep.reset();
      finish(ok.load());
    }
  }
};

}  // namespace

void split(std::vector<piece>& out, std::byte* to, std::uint64_t at, std::size_t n, std::size_t workers) {
  const std::size_t count = std::clamp<std::size_t>(n / min_piece, 1, std::max<std::size_t>(workers, 1));
  if (count == 1) {
    out.push_back({to, at, n});
    return;
  }
  const std::size_t step = (n / count + 4095) & ~std::size_t{4095};
  for (std::size_t from = 0; from < n; from += step) out.push_back({to + from, at + from, std::min(step, n - from)});
}

bool copy(const rdma_source& source, const piece& p) {
  prepare_for_write(p.to, p.length);
  if (source.file >= 0) return read_file(source.file, source.file_offset + p.at, p.to, p.length);
  copy_from_mapping(p.to, source.mapping.bytes() + p.at, p.length);
  return true;
}

void async_copy(const rdma_source& source, std::vector<piece> pieces, std::size_t workers,
                const boost::asio::any_io_executor& executor, std::shared_ptr<const void> keep,
                std::function<void(bool)> done) {
  if (pieces.empty()) {
    boost::asio::post(executor, [done = std::move(done)] { done(true); });
    return;
  }
  const std::size_t count = std::clamp<std::size_t>(workers, 1, pieces.size());
  auto t = std::make_shared<transfer>();
  t->source = &source;
  t->pieces = std::move(pieces);
  t->working = count;
  t->keep = std::move(keep);
  t->done = std::move(done);
  for (std::size_t i = 0; i < count; ++i) boost::asio::post(executor, [t] { t->work(); });
}

}  // namespace sluice::s3::grant_copy
