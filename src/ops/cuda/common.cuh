// Device helpers shared by the CUDA backend's kernels: element loads and
// stores for the three activation types, rounding to nearest even, warp and
// block reductions with a fixed shape (deterministic), and launch sizes.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "ops/cuda/cuda_ops.h"

namespace ctrl::cuda {

// The element type of a TensorRef, as kernels take it.
enum Kind : int { kF32 = 0, kBF16 = 1, kF16 = 2 };
inline Kind kind_of(DType t) {
  if (t == DType::BF16) return kBF16;
  if (t == DType::F16) return kF16;
  CTRL_ASSERT(t == DType::F32);
  return kF32;
}

__device__ __forceinline__ float bf16_bits_to_float(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }
__device__ __forceinline__ uint16_t float_to_bf16_bits(float x) {  // round to nearest even, NaN stays NaN
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}
__device__ __forceinline__ float f16_bits_to_float(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ uint16_t float_to_f16_bits(float x) { return __half_as_ushort(__float2half_rn(x)); }

// Element i of a buffer of kind k, as fp32.
__device__ __forceinline__ float load(const void* p, int k, size_t i) {
  if (k == kF32) return static_cast<const float*>(p)[i];
  const uint16_t h = static_cast<const uint16_t*>(p)[i];
  return k == kBF16 ? bf16_bits_to_float(h) : f16_bits_to_float(h);
}
// Stores x as element i of a buffer of kind k (rounded to nearest even).
__device__ __forceinline__ void store(void* p, int k, size_t i, float x) {
  if (k == kF32) static_cast<float*>(p)[i] = x;
  else static_cast<uint16_t*>(p)[i] = k == kBF16 ? float_to_bf16_bits(x) : float_to_f16_bits(x);
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over a block of blockDim.x threads (a multiple of 32, at most 1024);
// every thread gets the total. `shared` holds 32 values of T. Fixed tree.
template <typename T>
__device__ T block_sum(T v, T* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T total = lane < warps ? shared[lane] : T(0);
  return warp_sum(total);
}
__device__ inline float block_max(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float m = lane < warps ? shared[lane] : -INFINITY;
  return warp_max(m);
}

// The most blocks a grid may have along y or along z.
inline constexpr int64_t kMaxGridYZ = 65535;

// Blocks for a grid-stride loop over n elements with 256 threads each.
inline unsigned blocks_for(size_t n, unsigned threads = 256) {
  size_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > 65535u * 8) b = 65535u * 8;
  return unsigned(b);
}

// Rows per chunk of a two-stage column reduction (column sums, LayerNorm's
// parameter gradients): 64, or more when that would need over 65535 chunks,
// the grid's y limit. A function of the row count alone, so a shape always
// sums in the same order.
inline int64_t chunk_rows(int64_t rows) {
  constexpr int64_t kRows = 64;
  return std::max(kRows, (rows + kMaxGridYZ - 1) / kMaxGridYZ);
}

}  // namespace ctrl::cuda
