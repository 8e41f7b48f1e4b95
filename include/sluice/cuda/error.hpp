// SPDX-License-Identifier: Apache-2.0
// CUDA runtime errors as error_code values (value: cudaError_t, message: cudaGetErrorString).
#pragma once

#include <sluice/error.hpp>

namespace sluice::cuda {

/// The category of cudaError_t values; its name() is "cuda".
[[nodiscard]] const boost::system::error_category& cuda_category() noexcept;

/// The error_code for a cudaError_t (passed as int so this header needs no CUDA headers).
[[nodiscard]] inline error_code make_cuda_error(int cuda_error) noexcept {
  if (cuda_error == 0) return {};
  return {cuda_error, cuda_category()};
}

}  // namespace sluice::cuda
