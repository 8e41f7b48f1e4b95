// SPDX-License-Identifier: Apache-2.0
// Memory for one request's header fields, reused by the connection's every request.
// Part of the S3 server (src/s3/server/; docs/architecture.md lists the files).
#pragma once

#include <cstddef>
#include <memory>
#include <new>

namespace sluice::s3::detail {

/// Bump allocation from a block the connection keeps (allocated at its first request): Beast's
/// parser makes a node per header field and one for the target, and a request's fields die with
/// the request, so reset() before each request gives the block back whole. What does not fit
/// comes from the heap and goes back to it when freed, so a large header section costs what it
/// did and an idle connection holds the block only.
class request_arena {
 public:
  static constexpr std::size_t block_bytes = 4096;

  request_arena() = default;
  request_arena(const request_arena&) = delete;
  request_arena& operator=(const request_arena&) = delete;

  void* allocate(std::size_t bytes, std::size_t align) {
    if (!block_) block_ = std::make_unique_for_overwrite<std::byte[]>(block_bytes);
    const std::size_t start = (used_ + align - 1) & ~(align - 1);
    if (align <= alignof(std::max_align_t) && start <= block_bytes && bytes <= block_bytes - start) {
      used_ = start + bytes;
      return block_.get() + start;
    }
    return ::operator new(bytes, std::align_val_t(align));
  }
  void deallocate(void* p, std::size_t /*bytes*/, std::size_t align) noexcept {
    const auto* at = static_cast<const std::byte*>(p);
    if (block_ && at >= block_.get() && at < block_.get() + block_bytes) return;  // freed by reset()
    ::operator delete(p, std::align_val_t(align));
  }
  /// Only when nothing allocated since the last reset() is still in use.
  void reset() noexcept { used_ = 0; }

 private:
  std::unique_ptr<std::byte[]> block_;
  std::size_t used_ = 0;
};

/// A standard allocator over a request_arena; default-constructed (no arena), the heap's.
template <class T>
class arena_allocator {
 public:
  using value_type = T;
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;

  arena_allocator() noexcept = default;
  explicit arena_allocator(request_arena* arena) noexcept : arena_(arena) {}
  template <class U>
  arena_allocator(const arena_allocator<U>& other) noexcept
      : arena_(other.arena()) {}  // NOLINT(google-explicit-constructor)

  T* allocate(std::size_t n) {
    if (n > std::size_t(-1) / sizeof(T)) throw std::bad_array_new_length();
    if (arena_ == nullptr) return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(alignof(T))));
    return static_cast<T*>(arena_->allocate(n * sizeof(T), alignof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (arena_ == nullptr) {
      ::operator delete(p, std::align_val_t(alignof(T)));
      return;
    }
    arena_->deallocate(p, n * sizeof(T), alignof(T));
  }
  [[nodiscard]] request_arena* arena() const noexcept { return arena_; }
  template <class U>
  bool operator==(const arena_allocator<U>& other) const noexcept {
    return arena_ == other.arena();
  }

 private:
  request_arena* arena_ = nullptr;
};

}  // namespace sluice::s3::detail
