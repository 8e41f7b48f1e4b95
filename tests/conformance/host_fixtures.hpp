// SPDX-License-Identifier: Apache-2.0
// Host-memory pieces for conformance fixtures: a local buffer and a remote region in this process.
#pragma once

#include <sluice/region.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

namespace sluice::testing {

/// Local memory for a fixture: a host vector seen as a pageable region.
class host_buffer {
 public:
  explicit host_buffer(std::size_t size) : bytes_(size) {}
  [[nodiscard]] sluice::region region() { return host_region(bytes_); }
  [[nodiscard]] std::vector<std::byte> contents() const { return bytes_; }
  void fill(std::span<const std::byte> data) { bytes_.assign(data.begin(), data.end()); }
  void fill_at(std::size_t offset, std::span<const std::byte> data) {
    std::copy(data.begin(), data.end(), bytes_.begin() + static_cast<std::ptrdiff_t>(offset));
  }

 private:
  std::vector<std::byte> bytes_;
};

/// Keeps `bytes` alive until a few more have come to rest, instead of freeing them now: for memory
/// a peer reads by RMA over a provider that answers reads with sendmsg (tcp;ofi_rxm). ASan's
/// sendmsg interceptor checks the iovec *after* the real call returned, so the reader may complete,
/// and the test free the source, before the interceptor looks at it: a false use-after-free (the
/// kernel had already copied the bytes).
inline void rest(std::shared_ptr<std::vector<std::byte>> bytes) {
  static std::mutex mutex;
  static std::deque<std::shared_ptr<std::vector<std::byte>>> resting;
  const std::lock_guard lock(mutex);
  resting.push_back(std::move(bytes));
  if (resting.size() > 8) resting.pop_front();
}

/// A host_buffer that a peer reads by RMA: its bytes are freed a few buffers later (see rest()).
class rma_source_buffer {
 public:
  explicit rma_source_buffer(std::size_t size) : bytes_(std::make_shared<std::vector<std::byte>>(size)) {}
  rma_source_buffer(const rma_source_buffer&) = delete;
  rma_source_buffer& operator=(const rma_source_buffer&) = delete;
  ~rma_source_buffer() { rest(std::move(bytes_)); }
  [[nodiscard]] sluice::region region() { return host_region(*bytes_); }
  [[nodiscard]] std::vector<std::byte> contents() const { return *bytes_; }
  void fill(std::span<const std::byte> data) { bytes_->assign(data.begin(), data.end()); }
  void fill_at(std::size_t offset, std::span<const std::byte> data) {
    std::copy(data.begin(), data.end(), bytes_->begin() + static_cast<std::ptrdiff_t>(offset));
  }

 private:
  std::shared_ptr<std::vector<std::byte>> bytes_;
};

/// Pageable host memory that starts on a page and fills whole pages (registrars that pin, pin
/// pages: slices of it a page apart never share one).
class page_buffer {
 public:
  static constexpr std::size_t page = 4096;
  explicit page_buffer(std::size_t size)
      : size_(size), bytes_(static_cast<std::byte*>(std::aligned_alloc(page, (size + page - 1) / page * page))) {}
  [[nodiscard]] sluice::region region() const { return {bytes_.get(), size_, memory_kind::host_pageable, -1}; }

 private:
  struct release {
    void operator()(std::byte* p) const noexcept { std::free(p); }  // NOLINT(cppcoreguidelines-no-malloc)
  };
  std::size_t size_;
  std::unique_ptr<std::byte, release> bytes_;
};

/// A remote that is another host region of this process (loopback's remote_type).
class host_remote {
 public:
  explicit host_remote(std::span<const std::byte> initial) : bytes_(initial.begin(), initial.end()) {}
  [[nodiscard]] sluice::region descriptor() { return host_region(bytes_); }
  [[nodiscard]] std::vector<std::byte> contents() const { return bytes_; }

 private:
  std::vector<std::byte> bytes_;
};

}  // namespace sluice::testing
