// SPDX-License-Identifier: Apache-2.0
// CUDA driver entry points reached through the runtime (no link to libcuda), shared by the
// translation units of sluice::cuda. Private: not installed, included as "driver.hpp".
#pragma once

#include <cuda.h>  // the driver's types only
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace sluice::cuda::driver {

/// A driver entry point through the runtime, at the version of CUDA `version` (the signature
/// `Fn` must be that version's); null when the driver does not give it.
template <class Fn>
Fn driver_entry(const char* name, unsigned version = 12000) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status{};
  if (cudaGetDriverEntryPointByVersion(name, &p, version, cudaEnableDefault, &status) != cudaSuccess ||
      status != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<Fn>(p);  // the driver's documented signature at that version
}

/// The device allocation holding `p`: its base and size (cuMemGetAddressRange); false when the
/// driver does not know `p` or gives no such entry point.
inline bool allocation_of(const void* p, std::byte*& base, std::uint64_t& size) {
  using get_range_fn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
  static const get_range_fn fn = driver_entry<get_range_fn>("cuMemGetAddressRange");
  if (fn == nullptr) return false;
  CUdeviceptr b = 0;
  size_t n = 0;
  if (fn(&b, &n, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS) return false;
  base =
      reinterpret_cast<std::byte*>(b);  // NOLINT(performance-no-int-to-ptr): the driver's device addresses are integers
  size = n;
  return true;
}

}  // namespace sluice::cuda::driver
