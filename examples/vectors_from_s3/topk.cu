// SPDX-License-Identifier: Apache-2.0
// Brute-force k-nearest-neighbour search over float32 vectors in device memory, in three kernels
// per tile of queries:
//   1. distances: one warp per dataset vector (coalesced row load into shared memory), every
//      query of the tile held in shared memory; squared L2 into a tile × vectors array.
//   2. select_partial: `blocks_per_query` blocks per query; each thread keeps a sorted top-k of
//      the distances it scans, then the block merges its threads' lists into one top-k.
//   3. select_final: one block per query merges the blocks' candidates the same way.
// Everything is deterministic (no atomics, fixed reduction order), so two copies of the same
// bytes give bit-identical results; ties are broken by the lower id.
#include "topk.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <limits>

namespace vectors_from_s3 {
namespace {

constexpr int threads_per_block = 256;
constexpr int warps_per_block = threads_per_block / 32;
constexpr unsigned full_mask = 0xFFFFFFFFU;
constexpr std::uint32_t no_id = std::numeric_limits<std::uint32_t>::max();
// Dynamic shared memory a kernel may use without opting in (cudaFuncAttributeMaxDynamicSharedMemorySize).
constexpr std::size_t shared_budget_bytes = 48 * 1024;

// The order of candidates: by distance, then by id, so that the result is unique.
__device__ __forceinline__ bool before(float d1, std::uint32_t i1, float d2, std::uint32_t i2) {
  return d1 < d2 || (d1 == d2 && i1 < i2);
}

// squared L2 distances[j * vectors + v] of query j of the tile to dataset vector v.
__global__ void distances_kernel(const float* __restrict__ dataset, std::size_t vectors, std::size_t dim,
                                 const float* __restrict__ tile_queries, int tile, float* __restrict__ distances) {
  extern __shared__ float shared[];
  float* queries = shared;            // tile × dim
  float* rows = shared + tile * dim;  // warps_per_block × dim: the vector each warp works on
  for (std::size_t i = threadIdx.x; i < tile * dim; i += blockDim.x) queries[i] = tile_queries[i];
  __syncthreads();

  const unsigned warp = threadIdx.x / 32;
  const unsigned lane = threadIdx.x % 32;
  float* row = rows + warp * dim;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * warps_per_block;
  // The loop bound is the same for every lane of a warp, so the shuffles below see all 32 lanes.
  for (std::size_t v = static_cast<std::size_t>(blockIdx.x) * warps_per_block + warp; v < vectors; v += stride) {
    const float* x = dataset + v * dim;
    for (std::size_t d = lane; d < dim; d += 32) row[d] = x[d];
    __syncwarp();
    float mine = 0;  // lane l keeps the distance of query (group + l) until the group is written
    for (int j = 0; j < tile; ++j) {
      const float* q = queries + static_cast<std::size_t>(j) * dim;
      float sum = 0;
      for (std::size_t d = lane; d < dim; d += 32) {
        const float diff = row[d] - q[d];
        sum = fmaf(diff, diff, sum);
      }
      for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(full_mask, sum, offset);
      if (static_cast<int>(lane) == j % 32) mine = sum;
      if (j % 32 == 31 || j == tile - 1) {
        const int group = j - j % 32;
        if (static_cast<int>(lane) <= j - group) distances[static_cast<std::size_t>(group + lane) * vectors + v] = mine;
      }
    }
    __syncwarp();  // the row is rewritten for the next vector
  }
}

// Inserts (d, id) into the sorted list (best[0] nearest) of k entries when it belongs there.
__device__ __forceinline__ void insert(float* best_d, std::uint32_t* best_i, int k, float d, std::uint32_t id) {
  if (!before(d, id, best_d[k - 1], best_i[k - 1])) return;
  int p = k - 1;
  for (; p > 0 && before(d, id, best_d[p - 1], best_i[p - 1]); --p) {
    best_d[p] = best_d[p - 1];
    best_i[p] = best_i[p - 1];
  }
  best_d[p] = d;
  best_i[p] = id;
}

// Merges the sorted lists of the block's threads into the block's top-k, written by thread 0 to
// out_d/out_i: k rounds of a block-wide minimum, whose owner then moves to its next entry. Ids
// are unique among the lists (but for the no_id padding), so exactly one thread owns a winner.
__device__ void merge_block(const float* best_d, const std::uint32_t* best_i, int k, float* out_d,
                            std::uint32_t* out_i) {
  __shared__ float warp_d[warps_per_block];
  __shared__ std::uint32_t warp_i[warps_per_block];
  __shared__ float winner_d;
  __shared__ std::uint32_t winner_i;
  const unsigned warp = threadIdx.x / 32;
  const unsigned lane = threadIdx.x % 32;
  int head = 0;
  for (int round = 0; round < k; ++round) {
    float d = head < k ? best_d[head] : INFINITY;
    std::uint32_t id = head < k ? best_i[head] : no_id;
    for (int offset = 16; offset > 0; offset /= 2) {
      const float other_d = __shfl_xor_sync(full_mask, d, offset);
      const std::uint32_t other_i = __shfl_xor_sync(full_mask, id, offset);
      if (before(other_d, other_i, d, id)) {
        d = other_d;
        id = other_i;
      }
    }
    if (lane == 0) {
      warp_d[warp] = d;
      warp_i[warp] = id;
    }
    __syncthreads();
    if (warp == 0) {
      d = lane < warps_per_block ? warp_d[lane] : INFINITY;
      id = lane < warps_per_block ? warp_i[lane] : no_id;
      for (int offset = 16; offset > 0; offset /= 2) {
        const float other_d = __shfl_xor_sync(full_mask, d, offset);
        const std::uint32_t other_i = __shfl_xor_sync(full_mask, id, offset);
        if (before(other_d, other_i, d, id)) {
          d = other_d;
          id = other_i;
        }
      }
      if (lane == 0) {
        winner_d = d;
        winner_i = id;
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      out_d[round] = winner_d;
      out_i[round] = winner_i;
    }
    if (head < k && winner_i != no_id && best_i[head] == winner_i) ++head;
    __syncthreads();  // warp_d/winner_d are rewritten by the next round
  }
}

// Block (b, j): the top-k of the distances v = b*256 + t, stepping by gridDim.x*256, of query j.
__global__ void select_partial_kernel(const float* __restrict__ distances, std::size_t vectors, int k,
                                      float* __restrict__ candidates_d, std::uint32_t* __restrict__ candidates_i) {
  float best_d[max_k];
  std::uint32_t best_i[max_k];
  for (int i = 0; i < k; ++i) {
    best_d[i] = INFINITY;
    best_i[i] = no_id;
  }
  const float* row = distances + static_cast<std::size_t>(blockIdx.y) * vectors;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t v = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < vectors; v += stride) {
    insert(best_d, best_i, k, row[v], static_cast<std::uint32_t>(v));
  }
  const std::size_t out = (static_cast<std::size_t>(blockIdx.y) * gridDim.x + blockIdx.x) * static_cast<std::size_t>(k);
  merge_block(best_d, best_i, k, candidates_d + out, candidates_i + out);
}

// Block j: the top-k of the `per_query` candidates of query j.
__global__ void select_final_kernel(const float* __restrict__ candidates_d,
                                    const std::uint32_t* __restrict__ candidates_i, std::size_t per_query, int k,
                                    float* __restrict__ out_d, std::uint32_t* __restrict__ out_i) {
  float best_d[max_k];
  std::uint32_t best_i[max_k];
  for (int i = 0; i < k; ++i) {
    best_d[i] = INFINITY;
    best_i[i] = no_id;
  }
  const std::size_t base = static_cast<std::size_t>(blockIdx.x) * per_query;
  for (std::size_t c = threadIdx.x; c < per_query; c += blockDim.x) {
    insert(best_d, best_i, k, candidates_d[base + c], candidates_i[base + c]);
  }
  const std::size_t out = static_cast<std::size_t>(blockIdx.x) * static_cast<std::size_t>(k);
  merge_block(best_d, best_i, k, out_d + out, out_i + out);
}

// splitmix64's finalizer: every input bit changes about half of the output bits.
__host__ __device__ __forceinline__ std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30U)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27U)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31U);
}

__host__ __device__ __forceinline__ std::uint64_t word_term(std::uint64_t word, std::uint64_t index) {
  return mix(word + index * 0x9E3779B97F4A7C15ULL);
}

// Whole 8-byte words only (`words` of them); the caller adds the padded tail.
__global__ void checksum_kernel(const unsigned long long* __restrict__ words, std::size_t count,
                                unsigned long long* __restrict__ sum) {
  std::uint64_t local = 0;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    local += word_term(words[i], i);
  }
  for (int offset = 16; offset > 0; offset /= 2) local += __shfl_xor_sync(full_mask, local, offset);
  if (threadIdx.x % 32 == 0) atomicAdd(sum, static_cast<unsigned long long>(local));  // wrapping sum: order-free
}

// Device memory freed when the scope ends.
template <class T>
struct scratch {
  T* p = nullptr;
  scratch() = default;
  scratch(const scratch&) = delete;
  scratch& operator=(const scratch&) = delete;
  ~scratch() { cudaFree(p); }
  cudaError_t allocate(std::size_t count) { return cudaMalloc(reinterpret_cast<void**>(&p), count * sizeof(T)); }
};

struct event {
  cudaEvent_t e = nullptr;
  event() = default;
  event(const event&) = delete;
  event& operator=(const event&) = delete;
  ~event() {
    if (e != nullptr) cudaEventDestroy(e);
  }
};

int multiprocessors() {
  int device = 0;
  int count = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || count <= 0) {
    return 1;
  }
  return count;
}

std::size_t ceil_div(std::size_t a, std::size_t b) { return (a + b - 1) / b; }

}  // namespace

int set_device(int device) { return static_cast<int>(cudaSetDevice(device)); }

int search(const float* dataset, std::size_t vectors, std::size_t dim, const float* host_queries, std::size_t queries,
           std::size_t k, neighbours& out) {
  // Shared memory of the distance kernel: tile × dim query floats + one row per warp.
  const std::size_t shared_floats = shared_budget_bytes / sizeof(float);
  if (dataset == nullptr || host_queries == nullptr || vectors == 0 || dim == 0 || queries == 0 || k == 0 ||
      k > max_k || k > vectors || vectors >= no_id || shared_floats / dim <= warps_per_block) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const std::size_t tile = std::min<std::size_t>(queries, shared_floats / dim - warps_per_block);
  const int sms = multiprocessors();
  const std::size_t distance_blocks = std::min<std::size_t>(ceil_div(vectors, warps_per_block), sms * 16ULL);
  // Enough blocks per query to fill the GPU, each thread still scanning a few dozen distances.
  const std::size_t blocks_per_query =
      std::max<std::size_t>(1, std::min(ceil_div(sms * 8ULL, tile), ceil_div(vectors, threads_per_block * 32ULL)));

  scratch<float> d_queries;
  scratch<float> d_distances;
  scratch<float> d_candidates_d;
  scratch<std::uint32_t> d_candidates_i;
  scratch<float> d_out_d;
  scratch<std::uint32_t> d_out_i;
  event start;
  event stop;
  cudaError_t e = cudaSuccess;
  if ((e = d_queries.allocate(queries * dim)) != cudaSuccess ||
      (e = d_distances.allocate(tile * vectors)) != cudaSuccess ||
      (e = d_candidates_d.allocate(tile * blocks_per_query * k)) != cudaSuccess ||
      (e = d_candidates_i.allocate(tile * blocks_per_query * k)) != cudaSuccess ||
      (e = d_out_d.allocate(queries * k)) != cudaSuccess || (e = d_out_i.allocate(queries * k)) != cudaSuccess ||
      (e = cudaEventCreate(&start.e)) != cudaSuccess || (e = cudaEventCreate(&stop.e)) != cudaSuccess) {
    return static_cast<int>(e);
  }
  e = cudaMemcpy(d_queries.p, host_queries, queries * dim * sizeof(float), cudaMemcpyHostToDevice);
  if (e != cudaSuccess) return static_cast<int>(e);

  if ((e = cudaEventRecord(start.e)) != cudaSuccess) return static_cast<int>(e);
  for (std::size_t first = 0; first < queries; first += tile) {
    const std::size_t n = std::min(tile, queries - first);
    const std::size_t shared_bytes = (n + warps_per_block) * dim * sizeof(float);
    distances_kernel<<<static_cast<unsigned>(distance_blocks), threads_per_block, shared_bytes>>>(
        dataset, vectors, dim, d_queries.p + first * dim, static_cast<int>(n), d_distances.p);
    select_partial_kernel<<<dim3(static_cast<unsigned>(blocks_per_query), static_cast<unsigned>(n)),
                            threads_per_block>>>(d_distances.p, vectors, static_cast<int>(k), d_candidates_d.p,
                                                 d_candidates_i.p);
    select_final_kernel<<<static_cast<unsigned>(n), threads_per_block>>>(d_candidates_d.p, d_candidates_i.p,
                                                                         blocks_per_query * k, static_cast<int>(k),
                                                                         d_out_d.p + first * k, d_out_i.p + first * k);
    if ((e = cudaGetLastError()) != cudaSuccess) return static_cast<int>(e);
  }
  if ((e = cudaEventRecord(stop.e)) != cudaSuccess || (e = cudaEventSynchronize(stop.e)) != cudaSuccess ||
      (e = cudaEventElapsedTime(&out.kernel_ms, start.e, stop.e)) != cudaSuccess) {
    return static_cast<int>(e);
  }

  out.queries = queries;
  out.k = k;
  out.ids.resize(queries * k);
  out.distances.resize(queries * k);
  if ((e = cudaMemcpy(out.ids.data(), d_out_i.p, queries * k * sizeof(std::uint32_t), cudaMemcpyDeviceToHost)) !=
          cudaSuccess ||
      (e = cudaMemcpy(out.distances.data(), d_out_d.p, queries * k * sizeof(float), cudaMemcpyDeviceToHost)) !=
          cudaSuccess) {
    return static_cast<int>(e);
  }
  return 0;
}

int checksum_device(const void* bytes, std::size_t size, std::uint64_t& out) {
  const std::size_t words = size / 8;
  scratch<unsigned long long> sum;
  cudaError_t e = cudaSuccess;
  if ((e = sum.allocate(1)) != cudaSuccess || (e = cudaMemset(sum.p, 0, sizeof(unsigned long long))) != cudaSuccess) {
    return static_cast<int>(e);
  }
  if (words > 0) {
    const std::size_t blocks = std::min<std::size_t>(ceil_div(words, threads_per_block), multiprocessors() * 32ULL);
    checksum_kernel<<<static_cast<unsigned>(blocks), threads_per_block>>>(static_cast<const unsigned long long*>(bytes),
                                                                          words, sum.p);
    if ((e = cudaGetLastError()) != cudaSuccess) return static_cast<int>(e);
  }
  unsigned long long total = 0;
  if ((e = cudaMemcpy(&total, sum.p, sizeof total, cudaMemcpyDeviceToHost)) != cudaSuccess) return static_cast<int>(e);
  if (size % 8 != 0) {
    std::uint64_t tail = 0;
    e = cudaMemcpy(&tail, static_cast<const unsigned char*>(bytes) + words * 8, size % 8, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) return static_cast<int>(e);
    total += word_term(tail, words);
  }
  out = total;
  return 0;
}

std::uint64_t checksum_host(const void* bytes, std::size_t size) noexcept {
  const auto* p = static_cast<const unsigned char*>(bytes);
  const std::size_t words = size / 8;
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < words; ++i) {
    std::uint64_t word = 0;
    std::memcpy(&word, p + i * 8, 8);
    total += word_term(word, i);
  }
  if (size % 8 != 0) {
    std::uint64_t tail = 0;
    std::memcpy(&tail, p + words * 8, size % 8);
    total += word_term(tail, words);
  }
  return total;
}

}  // namespace vectors_from_s3
