// SPDX-License-Identifier: Apache-2.0
// Pinned (page-locked) host memory: allocated by CUDA, or pinned in place by a registrar.
#pragma once

#include <sluice/concepts.hpp>
#include <sluice/cuda/error.hpp>

#include <cstddef>
#include <utility>

namespace sluice::cuda {

/// Page-locked host memory from cudaMallocHost, freed in the destructor. Move-only.
class pinned_buffer {
 public:
  pinned_buffer() = default;
  /// Allocates `size` bytes; errc::no_device without a GPU, a cuda error when allocation fails.
  static pinned_buffer allocate(std::size_t size, error_code& ec);
  /// Throwing overload.
  static pinned_buffer allocate(std::size_t size);

  pinned_buffer(pinned_buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  pinned_buffer& operator=(pinned_buffer&& other) noexcept {
    if (this != &other) {
      reset();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;
  ~pinned_buffer() { reset(); }

  /// The memory as a host_pinned region.
  [[nodiscard]] sluice::region region() const noexcept { return {data_, size_, memory_kind::host_pinned, -1}; }
  [[nodiscard]] void* native_handle() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  pinned_buffer(void* data, std::size_t size) noexcept : data_(data), size_(size) {}
  void reset() noexcept;

  void* data_ = nullptr;
  std::size_t size_ = 0;
};

/// A region pinned in place by pinning_registrar; unpinned (cudaHostUnregister) on destruction
/// when this registration did the pinning.
class pinned_registration {
 public:
  pinned_registration() = default;
  pinned_registration(pinned_registration&& other) noexcept
      : region_(std::exchange(other.region_, {})), owns_pin_(std::exchange(other.owns_pin_, false)) {}
  pinned_registration& operator=(pinned_registration&& other) noexcept {
    if (this != &other) {
      reset();
      region_ = std::exchange(other.region_, {});
      owns_pin_ = std::exchange(other.owns_pin_, false);
    }
    return *this;
  }
  pinned_registration(const pinned_registration&) = delete;
  pinned_registration& operator=(const pinned_registration&) = delete;
  ~pinned_registration() { reset(); }

  /// The registered region, of kind host_pinned.
  [[nodiscard]] const sluice::region& region() const noexcept { return region_; }

 private:
  friend class pinning_registrar;
  pinned_registration(const sluice::region& mem, bool owns_pin) noexcept : region_(mem), owns_pin_(owns_pin) {}
  void reset() noexcept;

  sluice::region region_{};
  bool owns_pin_ = false;
};

/// The host registrar for GPU hosts: pins pageable memory with cudaHostRegister so copies to
/// and from the device run at full speed; memory that is already pinned passes through.
/// Device memory: errc::unsupported_memory. No GPU: errc::no_device.
class pinning_registrar {
 public:
  using registration_type = pinned_registration;
  registration_type register_region(const region& mem, error_code& ec) const;
};

}  // namespace sluice::cuda
