// SPDX-License-Identifier: Apache-2.0
// The GPU side of the vectors_from_s3 example: brute-force k-nearest-neighbour search (squared L2)
// and a byte checksum, over float32 vectors already in device memory. Plain C++ declarations: no
// CUDA header and no sluice header, so main.cpp (g++) and topk.cu (nvcc) both include it. Errors
// are cudaError_t values as int (0: success); main.cpp turns them into error_code values with
// sluice::cuda::make_cuda_error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace vectors_from_s3 {

/// The largest k search() accepts: each GPU thread keeps its own top-k in local memory.
inline constexpr std::size_t max_k = 64;

/// The k nearest dataset vectors of each query, nearest first; ties go to the lower id.
struct neighbours {
  std::size_t queries = 0;
  std::size_t k = 0;
  std::vector<std::uint32_t> ids;  ///< queries × k, row-major
  std::vector<float> distances;    ///< queries × k, squared L2, row-major
  float kernel_ms = 0;             ///< distances + selection on the GPU (CUDA events)
};

/// Makes `device` the current CUDA device of the calling thread (cudaSetDevice); the functions
/// below work on the current device.
[[nodiscard]] int set_device(int device);

/// Searches `vectors` × `dim` float32 vectors at `dataset` (device memory)
/// for the `k` nearest of each of the `queries` query vectors at `host_queries` (host memory,
/// queries × dim). Needs 1 <= k <= min(max_k, vectors), vectors < 2^32; cudaErrorInvalidValue
/// otherwise. Allocates its scratch memory (queries × vectors floats) and frees it before it
/// returns. Needs dim <= 1365 (the distance kernel keeps 9 × dim floats in 48 KiB of shared memory).
[[nodiscard]] int search(const float* dataset, std::size_t vectors, std::size_t dim, const float* host_queries,
                         std::size_t queries, std::size_t k, neighbours& out);

/// An order-independent 64-bit checksum of `size` bytes of device memory: the wrapping sum over
/// each 8-byte word w at index i of mix(w + i × golden), the last word zero-padded. The same value
/// as checksum_host over the same bytes.
[[nodiscard]] int checksum_device(const void* bytes, std::size_t size, std::uint64_t& out);

/// checksum_device's value computed by the CPU over host memory.
[[nodiscard]] std::uint64_t checksum_host(const void* bytes, std::size_t size) noexcept;

}  // namespace vectors_from_s3
