// Compiled part of sluice::cuda: every call into the CUDA runtime lives here, so the headers
// need no CUDA headers and a host without a GPU gets error codes, never a crash.
#include <sluice/cuda/device.hpp>
#include <sluice/cuda/error.hpp>
#include <sluice/cuda/pinned.hpp>

#include <cuda_runtime_api.h>

#include <string>

namespace sluice::cuda {

namespace {

class cuda_category_impl final : public boost::system::error_category {
 public:
  [[nodiscard]] const char* name() const noexcept override { return "cuda"; }
  [[nodiscard]] std::string message(int value) const override {
    return cudaGetErrorString(static_cast<cudaError_t>(value));
  }
};

error_code from(cudaError_t e) noexcept { return make_cuda_error(static_cast<int>(e)); }

}  // namespace

const boost::system::error_category& cuda_category() noexcept {
  static const cuda_category_impl category;
  return category;
}

int device_count(error_code& ec) noexcept {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    (void)cudaGetLastError();  // clear the sticky-free error so later calls start clean
    ec = errc::no_device;
    return 0;
  }
  ec = {};
  return count;
}

std::string no_device_reason() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  (void)cudaGetLastError();
  if (e != cudaSuccess) return cudaGetErrorString(e);
  return count == 0 ? "the CUDA runtime reports 0 devices" : "";
}

device_properties properties(int ordinal, error_code& ec) {
  cudaDeviceProp prop{};
  if (const cudaError_t e = cudaGetDeviceProperties(&prop, ordinal); e != cudaSuccess) {
    ec = from(e);
    return {};
  }
  ec = {};
  return {ordinal, prop.name, prop.totalGlobalMem, prop.major, prop.minor};
}

pinned_buffer pinned_buffer::allocate(std::size_t size, error_code& ec) {
  if (device_count(ec) == 0) return {};
  void* data = nullptr;
  if (size != 0) {
    if (const cudaError_t e = cudaMallocHost(&data, size); e != cudaSuccess) {
      ec = from(e);
      return {};
    }
  }
  ec = {};
  return {data, size};
}

pinned_buffer pinned_buffer::allocate(std::size_t size) {
  error_code ec;
  pinned_buffer buffer = allocate(size, ec);
  detail::throw_on_error(ec, "cudaMallocHost");
  return buffer;
}

void pinned_buffer::reset() noexcept {
  if (data_ != nullptr) (void)cudaFreeHost(data_);
  data_ = nullptr;
  size_ = 0;
}

void pinned_registration::reset() noexcept {
  if (owns_pin_ && region_.data != nullptr) (void)cudaHostUnregister(region_.data);
  region_ = {};
  owns_pin_ = false;
}

pinned_registration pinning_registrar::register_region(const region& mem, error_code& ec) const {
  if (!mem.host_accessible()) {
    ec = errc::unsupported_memory;
    return {};
  }
  if (mem.data == nullptr && mem.size != 0) {
    ec = errc::invalid_argument;
    return {};
  }
  if (mem.kind == memory_kind::host_pinned || mem.size == 0) {
    ec = {};
    return {mem, false};
  }
  if (device_count(ec) == 0) return {};
  if (const cudaError_t e = cudaHostRegister(mem.data, mem.size, cudaHostRegisterDefault); e != cudaSuccess) {
    ec = from(e);
    return {};
  }
  ec = {};
  return {{mem.data, mem.size, memory_kind::host_pinned, -1}, true};
}

}  // namespace sluice::cuda
