// LayerNorm over the last dimension, forward and backward, one warp per row.
// Statistics are fp32 as on the CPU (ops/cpu/layernorm.cpp): mean, then the
// variance about it; dgamma and dbeta are column sums over rows in two fixed
// stages (per 64-row chunk, then the chunks in order), never atomics.
#include "ops/cuda/common.cuh"

namespace ctrl::cuda {

namespace {

constexpr int kRowsPerBlock = 8;  // warps per block, one row each

__global__ void layernorm_forward_kernel(void* out, int ko, float* mean, float* rstd, const void* in, int ki,
                                         const float* gamma, const float* beta, int64_t N, int64_t D, float eps) {
  const int64_t r = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (r >= N) return;
  const size_t base = size_t(r * D);
  float sum = 0;
  for (int64_t i = lane; i < D; i += 32) sum += load(in, ki, base + i);
  const float m = warp_sum(sum) / float(D);
  float var = 0;
  for (int64_t i = lane; i < D; i += 32) {
    const float d = load(in, ki, base + i) - m;
    var += d * d;
  }
  const float s = 1.0f / sqrtf(warp_sum(var) / float(D) + eps);
  for (int64_t i = lane; i < D; i += 32) store(out, ko, base + i, (load(in, ki, base + i) - m) * s * gamma[i] + beta[i]);
  if (lane == 0) mean[r] = m, rstd[r] = s;
}

// din += s · (dy·γ − mean(dy·γ) − x̂ · mean(dy·γ·x̂)) per row.
__global__ void layernorm_backward_rows(float* din, const float* dout, const void* in, int ki, const float* mean,
                                        const float* rstd, const float* gamma, int64_t N, int64_t D) {
  const int64_t r = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (r >= N) return;
  const size_t base = size_t(r * D);
  const float m = mean[r], s = rstd[r];
  float a = 0, b = 0;
  for (int64_t i = lane; i < D; i += 32) {
    const float xhat = (load(in, ki, base + i) - m) * s, dxhat = dout[base + i] * gamma[i];
    a += dxhat;
    b += dxhat * xhat;
  }
  const float mean_dxhat = warp_sum(a) / float(D), mean_dxhat_xhat = warp_sum(b) / float(D);
  for (int64_t i = lane; i < D; i += 32) {
    const float xhat = (load(in, ki, base + i) - m) * s;
    din[base + i] += s * (dout[base + i] * gamma[i] - mean_dxhat - xhat * mean_dxhat_xhat);
  }
}

// partial[chunk][c] = Σ_rows dy·x̂ and partial[chunks + chunk][c] = Σ_rows dy over the chunk's rows, in order.
__global__ void layernorm_param_partials(float* partial, const float* dout, const void* in, int ki, const float* mean,
                                         const float* rstd, int64_t N, int64_t D, int64_t chunks,
                                         int64_t rows_per_chunk) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, y = blockIdx.y;
  if (c >= D) return;
  const int64_t r1 = min(N, (y + 1) * rows_per_chunk);
  float g = 0, b = 0;
  for (int64_t r = y * rows_per_chunk; r < r1; ++r) {
    const float dy = dout[r * D + c];
    g += dy * ((load(in, ki, size_t(r * D + c)) - mean[r]) * rstd[r]);
    b += dy;
  }
  partial[y * D + c] = g;
  partial[(chunks + y) * D + c] = b;
}

__global__ void layernorm_param_finish(float* dgamma, float* dbeta, const float* partial, int64_t D, int64_t chunks) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= D) return;
  float g = 0, b = 0;
  for (int64_t y = 0; y < chunks; ++y) g += partial[y * D + c], b += partial[(chunks + y) * D + c];
  dgamma[c] += g;
  dbeta[c] += b;
}

}  // namespace

void CudaOps::layernorm_forward(TensorRef out, float* mean, float* rstd, TensorRef in, const float* gamma,
                                const float* beta, int64_t N, int64_t D, float eps) {
  if (N == 0) return;
  const unsigned blocks = unsigned((N + kRowsPerBlock - 1) / kRowsPerBlock);
  layernorm_forward_kernel<<<blocks, 32 * kRowsPerBlock, 0, stream_>>>(
      out.data, kind_of(out.dtype), mean, rstd, in.data, kind_of(in.dtype), gamma, beta, N, D, eps);
  CTRL_CUDA_LAUNCHED("layernorm_forward");
}

void CudaOps::layernorm_backward(TensorRef din, float* dgamma, float* dbeta, TensorRef dout, TensorRef in,
                                 const float* mean, const float* rstd, const float* gamma, int64_t N, int64_t D) {
  if (N == 0) return;
  const unsigned blocks = unsigned((N + kRowsPerBlock - 1) / kRowsPerBlock);
  layernorm_backward_rows<<<blocks, 32 * kRowsPerBlock, 0, stream_>>>(din.f32(), dout.f32(), in.data,
                                                                     kind_of(in.dtype), mean, rstd, gamma, N, D);
  CTRL_CUDA_LAUNCHED("layernorm_backward_rows");
  const int64_t per_chunk = chunk_rows(N), chunks = (N + per_chunk - 1) / per_chunk;
  float* partial = static_cast<float*>(scratch(kPartials, size_t(2 * chunks * D) * sizeof(float)));
  layernorm_param_partials<<<dim3(unsigned((D + 127) / 128), unsigned(chunks)), 128, 0, stream_>>>(
      partial, dout.f32(), in.data, kind_of(in.dtype), mean, rstd, N, D, chunks, per_chunk);
  CTRL_CUDA_LAUNCHED("layernorm_param_partials");
  layernorm_param_finish<<<unsigned((D + 127) / 128), 128, 0, stream_>>>(dgamma, dbeta, partial, D, chunks);
  CTRL_CUDA_LAUNCHED("layernorm_param_finish");
}

}  // namespace ctrl::cuda
