// SPDX-License-Identifier: Apache-2.0
// sluice::shared_buffer: host memory that another process on this host can be granted, and
// nothing else of ours: an anonymous memory file (memfd) mapped here. Its descriptor is what a
// same-host grant passes to the server (s3::local_client_plane), so the server maps exactly these
// pages. The file is sealed against shrinking, so a peer that maps it can never fault on a
// truncated page.
#pragma once

#include <sluice/error.hpp>
#include <sluice/region.hpp>

#include <cstddef>
#include <functional>

namespace sluice {

/// Move-only owner of a memfd-backed mapping (MAP_SHARED, populated at creation).
class shared_buffer {
 public:
  shared_buffer() = default;
  /// `size` bytes (1 .. 2^48), zero-filled; errors: invalid_argument, the errno of memfd_create,
  /// ftruncate, fcntl(F_ADD_SEALS) or mmap.
  static shared_buffer create(std::size_t size, error_code& ec);
  /// Throwing overload.
  static shared_buffer create(std::size_t size);
  shared_buffer(shared_buffer&& other) noexcept;
  shared_buffer& operator=(shared_buffer&& other) noexcept;
  shared_buffer(const shared_buffer&) = delete;
  shared_buffer& operator=(const shared_buffer&) = delete;
  /// Runs the release hook (a plane forgets its grant), unmaps and closes.
  ~shared_buffer();

  /// The mapping as a pageable host region; empty for a moved-from buffer.
  [[nodiscard]] sluice::region region() const noexcept { return {data_, size_, memory_kind::host_pageable, -1}; }
  [[nodiscard]] std::byte* data() const noexcept { return static_cast<std::byte*>(data_); }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// The memfd; -1 for a moved-from buffer.
  [[nodiscard]] int native_handle() const noexcept { return fd_; }
  /// Called once when the buffer is destroyed (before it is unmapped): a plane that granted it
  /// drops the grant there. Replaces an earlier hook.
  void on_release(std::function<void()> hook) { release_ = std::move(hook); }

 private:
  void reset() noexcept;
  int fd_ = -1;
  void* data_ = nullptr;
  std::size_t size_ = 0;
  std::function<void()> release_;
};

}  // namespace sluice
