// SPDX-License-Identifier: Apache-2.0
// sluice::shared_buffer: a memfd mapped MAP_SHARED, sealed against shrinking.
#include <sluice/shared_buffer.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <utility>

namespace sluice {

namespace {
error_code last_errno() { return {errno, boost::system::generic_category()}; }
}  // namespace

shared_buffer shared_buffer::create(std::size_t size, error_code& ec) {
  shared_buffer out;
  if (size == 0 || size > (std::size_t{1} << 48)) {
    ec = errc::invalid_argument;
    return out;
  }
  out.fd_ = ::memfd_create("sluice-shared-buffer", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (out.fd_ < 0) {
    ec = last_errno();
    return out;
  }
  // Sealed so that no process holding the descriptor (the server maps it) can shrink the file
  // under another's mapping: a write to a truncated page would be SIGBUS there.
  if (::ftruncate(out.fd_, static_cast<off_t>(size)) != 0 ||
      ::fcntl(out.fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    ec = last_errno();
    out.reset();
    return out;
  }
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, out.fd_, 0);
  if (p == MAP_FAILED) {
    ec = last_errno();
    out.reset();
    return out;
  }
  out.data_ = p;
  out.size_ = size;
  ec = {};
  return out;
}

shared_buffer shared_buffer::create(std::size_t size) {
  error_code ec;
  shared_buffer out = create(size, ec);
  if (ec) throw std::system_error(ec, "sluice::shared_buffer::create");
  return out;
}

shared_buffer::shared_buffer(shared_buffer&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      release_(std::exchange(other.release_, {})) {}

shared_buffer& shared_buffer::operator=(shared_buffer&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = std::exchange(other.fd_, -1);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    release_ = std::exchange(other.release_, {});
  }
  return *this;
}

shared_buffer::~shared_buffer() { reset(); }

void shared_buffer::reset() noexcept {
  if (release_) {
    auto hook = std::exchange(release_, {});
    try {
      hook();
    } catch (...) {  // a plane that cannot reach its server any more: the server drops the grant with the session
    }
  }
  if (data_ != nullptr) ::munmap(data_, size_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  data_ = nullptr;
  size_ = 0;
}

}  // namespace sluice
