// Token embedding scaled by √D plus sinusoidal positions, forward and
// backward, and the one-position form for generation. The positions are the
// host's table (ops/positions.h) uploaded once, so they are the CPU's floats.
//
// The backward is deterministic without float atomics: the rows' (token, row)
// keys are sorted (a bitonic network over a padded power of two), so each
// token's rows sit together in row order; one block per token then adds its
// rows into dw in that order, as the CPU does.
#include "ops/cuda/common.cuh"

namespace ctrl::cuda {

namespace {

__global__ void embedding_forward_kernel(float* x, const int32_t* tokens, const float* w, const float* pos, int64_t N,
                                         int64_t T, int64_t D, float scale) {
  const int64_t total = N * D;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / D, c = e % D;
    x[e] = w[int64_t(tokens[r]) * D + c] * scale + pos[(r % T) * D + c];
  }
}

__global__ void make_keys(uint64_t* keys, const int32_t* tokens, int64_t N, int64_t padded) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < padded; i += int64_t(gridDim.x) * blockDim.x)
    keys[i] = i < N ? (uint64_t(uint32_t(tokens[i])) << 32) | uint64_t(i) : ~uint64_t(0);
}

// One compare-exchange step (k, j) of the bitonic network, ascending overall.
__global__ void bitonic_step(uint64_t* keys, int64_t padded, int64_t k, int64_t j) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < padded; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t l = i ^ j;
    if (l <= i) continue;
    const uint64_t a = keys[i], b = keys[l];
    const bool ascending = (i & k) == 0;
    if (ascending ? a > b : a < b) keys[i] = b, keys[l] = a;
  }
}

// Block s owns the token of sorted position s if s is its first row; it adds
// that token's rows (in row order) into dw.
__global__ void embedding_accumulate(float* dw, const float* dx, const uint64_t* keys, int64_t N, int64_t D,
                                     float scale) {
  const int64_t s = blockIdx.x;
  const uint64_t token = keys[s] >> 32;
  if (s > 0 && (keys[s - 1] >> 32) == token) return;
  for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
    float acc = dw[int64_t(token) * D + c];
    for (int64_t t = s; t < N && (keys[t] >> 32) == token; ++t)
      acc += dx[int64_t(keys[t] & 0xffffffffu) * D + c] * scale;
    dw[int64_t(token) * D + c] = acc;
  }
}

__global__ void embedding_at_kernel(float* x, const float* e, const float* pos, int64_t D, float scale) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < D; c += int64_t(gridDim.x) * blockDim.x)
    x[c] = e[c] * scale + pos[c];
}

}  // namespace

void CudaOps::embedding_forward(TensorRef x, const int32_t* tokens, const float* w, int64_t B, int64_t T, int64_t D,
                                float scale) {
  const float* pos = positions(T, D);
  const int64_t N = B * T;
  if (N == 0) return;
  embedding_forward_kernel<<<blocks_for(size_t(N * D)), 256, 0, stream_>>>(x.f32(), tokens, w, pos, N, T, D, scale);
  CTRL_CUDA_LAUNCHED("embedding_forward");
}

void CudaOps::embedding_backward(float* dw, TensorRef dx, const int32_t* tokens, int64_t B, int64_t T, int64_t D,
                                 float scale) {
  const int64_t N = B * T;
  if (N == 0) return;
  int64_t padded = 1;
  while (padded < N) padded *= 2;
  uint64_t* keys = static_cast<uint64_t*>(scratch(kSort, size_t(padded) * sizeof(uint64_t)));
  const unsigned blocks = blocks_for(size_t(padded));
  make_keys<<<blocks, 256, 0, stream_>>>(keys, tokens, N, padded);
  CTRL_CUDA_LAUNCHED("make_keys");
  for (int64_t k = 2; k <= padded; k *= 2)
    for (int64_t j = k / 2; j > 0; j /= 2) bitonic_step<<<blocks, 256, 0, stream_>>>(keys, padded, k, j);
  CTRL_CUDA_LAUNCHED("bitonic_step");
  embedding_accumulate<<<unsigned(N), 128, 0, stream_>>>(dw, dx.f32(), keys, N, D, scale);
  CTRL_CUDA_LAUNCHED("embedding_accumulate");
}

void CudaOps::embedding_at(float* x, int32_t token, int64_t position, const float* w, int64_t D, float scale) {
  const float* pos = positions(position + 1, D);
  embedding_at_kernel<<<blocks_for(size_t(D)), 256, 0, stream_>>>(x, w + int64_t(token) * D, pos + position * D, D,
                                                                   scale);
  CTRL_CUDA_LAUNCHED("embedding_at");
}

}  // namespace ctrl::cuda
