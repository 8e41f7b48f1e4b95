// SPDX-License-Identifier: Apache-2.0
// GPU memory, streams and copies: RAII owners of cudaMalloc'd memory and cudaStream_t, and the
// copies every GPU path ends with. No CUDA header is needed to use them.
#pragma once

#include <sluice/cuda/error.hpp>
#include <sluice/region.hpp>

#include <cstddef>
#include <utility>

namespace sluice::cuda {

/// Memory on one CUDA device (cudaMalloc), freed in the destructor. Move-only.
class device_buffer {
 public:
  device_buffer() = default;
  /// Allocates `size` bytes on device `device`; errc::no_device without a GPU, a cuda error
  /// (cudaErrorMemoryAllocation, cudaErrorInvalidDevice) otherwise.
  [[nodiscard]] static device_buffer allocate(std::size_t size, int device, error_code& ec);
  /// Throwing overload.
  [[nodiscard]] static device_buffer allocate(std::size_t size, int device = 0);

  device_buffer(device_buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)), device_(other.device_) {}
  device_buffer& operator=(device_buffer&& other) noexcept {
    if (this != &other) {
      reset();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      device_ = other.device_;
    }
    return *this;
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer() { reset(); }

  /// The memory as a cuda_device region.
  [[nodiscard]] sluice::region region() const noexcept { return {data_, size_, memory_kind::cuda_device, device_}; }
  [[nodiscard]] void* native_handle() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] int device() const noexcept { return device_; }

 private:
  device_buffer(void* data, std::size_t size, int device) noexcept : data_(data), size_(size), device_(device) {}
  void reset() noexcept;

  void* data_ = nullptr;
  std::size_t size_ = 0;
  int device_ = -1;
};

/// A non-blocking CUDA stream of one device (cudaStreamNonBlocking), destroyed in the
/// destructor. Move-only.
class stream {
 public:
  stream() = default;
  [[nodiscard]] static stream create(int device, error_code& ec);
  stream(stream&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)), device_(other.device_) {}
  stream& operator=(stream&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
      device_ = other.device_;
    }
    return *this;
  }
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
  ~stream() { reset(); }

  /// Waits for everything enqueued so far; the first error of the stream's work.
  [[nodiscard]] error_code synchronize() const noexcept;
  /// The cudaStream_t.
  [[nodiscard]] void* native_handle() const noexcept { return handle_; }
  [[nodiscard]] int device() const noexcept { return device_; }

 private:
  void reset() noexcept;
  void* handle_ = nullptr;
  int device_ = -1;
};

/// Copies `src` to `dst` (any kinds: host pageable or pinned, device) and waits. The sizes must
/// be equal (errc::invalid_argument otherwise).
[[nodiscard]] error_code copy(const region& dst, const region& src) noexcept;
/// Sets every byte of `dst` (any kind) to `value` and waits.
[[nodiscard]] error_code fill(const region& dst, std::byte value) noexcept;

}  // namespace sluice::cuda
