// SPDX-License-Identifier: Apache-2.0
// The one owned file descriptor of the library's translation units (src/common/: internal headers
// every tier may include; nothing here is installed).
#pragma once

#include <unistd.h>

#include <utility>

namespace sluice::detail {

/// A file descriptor, closed on destruction. Move-only.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  unique_fd(unique_fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& other) noexcept {
    if (this != &other) reset(std::exchange(other.fd_, -1));
    return *this;
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() { reset(); }

  /// Closes the descriptor held, if any, and holds `fd`.
  void reset(int fd = -1) noexcept {
    // close() is not retried on EINTR: Linux releases the descriptor whatever close returns.
    if (fd_ >= 0) static_cast<void>(::close(fd_));
    fd_ = fd;
  }
  [[nodiscard]] int get() const noexcept { return fd_; }
  [[nodiscard]] bool valid() const noexcept { return fd_ >= 0; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  /// Gives the descriptor up without closing it.
  [[nodiscard]] int release() noexcept { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

}  // namespace sluice::detail
