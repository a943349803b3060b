// Element-wise ops: ReLU, dropout, residual add, copy, scale, fill, and the
// two device scalars of a step: Σx² (a fixed-shape tree in double, so the
// same gradients give the same bits on any run) and the clip factor.
#include <cmath>

#include "ops/cuda/common.cuh"
#include "ops/dropout_mask.h"

namespace ctrl::cuda {

namespace {

#define CTRL_GRID_STRIDE(i, n) \
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < (n); i += size_t(gridDim.x) * blockDim.x)

__global__ void relu_f32(float* x, size_t n) {
  CTRL_GRID_STRIDE(i, n) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
__global__ void relu_16(uint16_t* x, size_t n) {  // negative exactly when the sign bit is set
  CTRL_GRID_STRIDE(i, n) x[i] = (x[i] & 0x8000) ? uint16_t(0) : x[i];
}
// dx *= (y > 0), dx fp32 or bf16 (bits), y fp32 or 16-bit (bits).
__global__ void relu_backward_kernel(void* dx, int kdx, const void* y, int ky, size_t n) {
  CTRL_GRID_STRIDE(i, n) {
    bool keep;
    if (ky == kF32) keep = static_cast<const float*>(y)[i] > 0.0f;
    else {
      const uint16_t b = static_cast<const uint16_t*>(y)[i];
      keep = b != 0 && !(b & 0x8000);
    }
    if (keep) continue;
    if (kdx == kF32) static_cast<float*>(dx)[i] = 0.0f;
    else static_cast<uint16_t*>(dx)[i] = 0;
  }
}
__global__ void dropout_kernel(float* x, size_t n, float p, uint64_t seed, uint64_t stream, uint64_t first) {
  CTRL_GRID_STRIDE(i, n) x[i] *= dropout_factor(p, seed, stream, first + i);
}
__global__ void residual_kernel(float* y, const float* x, const float* b, size_t n, float p, uint64_t seed,
                                uint64_t stream, uint64_t first) {
  if (p > 0) {
    CTRL_GRID_STRIDE(i, n) y[i] = x[i] + b[i] * dropout_factor(p, seed, stream, first + i);
  } else {
    CTRL_GRID_STRIDE(i, n) y[i] = x[i] + b[i];
  }
}
__global__ void scale_kernel(float* x, size_t n, float f) {
  CTRL_GRID_STRIDE(i, n) x[i] *= f;
}
__global__ void fill_kernel(float* x, size_t n, float v) {
  CTRL_GRID_STRIDE(i, n) x[i] = v;
}

// Σx² in two fixed stages: kSquareBlocks blocks, each thread striding the
// array in the same pattern on every run, then one block over the partials.
constexpr unsigned kSquareBlocks = 256, kSquareThreads = 256;
__global__ void square_partials(double* partial, const float* x, size_t n) {
  __shared__ double red[32];
  double acc = 0;
  CTRL_GRID_STRIDE(i, n) acc += double(x[i]) * double(x[i]);
  acc = block_sum(acc, red);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}
__global__ void square_total(double* out, const double* partial) {
  __shared__ double red[32];
  const double total = block_sum(partial[threadIdx.x], red);  // blockDim.x == kSquareBlocks
  if (threadIdx.x == 0) *out += total;
}

__global__ void clip_factor_kernel(const double* sum_squares, double loss_scale, double max_norm, float* factor) {
  const double norm = sqrt(*sum_squares) / loss_scale;
  double f = 1.0 / loss_scale;
  if (max_norm > 0 && max_norm / (norm + 1e-6) < 1.0) f *= max_norm / (norm + 1e-6);
  *factor = float(f);
}

}  // namespace

void CudaOps::relu_forward(TensorRef x, size_t n) {
  if (n == 0) return;
  if (x.is_16bit()) relu_16<<<blocks_for(n), 256, 0, stream_>>>(x.u16(), n);
  else relu_f32<<<blocks_for(n), 256, 0, stream_>>>(x.f32(), n);
  CTRL_CUDA_LAUNCHED("relu_forward");
}

void CudaOps::relu_backward(TensorRef dx, TensorRef y, size_t n) {
  if (n == 0) return;
  CTRL_ASSERT(dx.dtype != DType::F16);
  if (dx.dtype == DType::BF16) CTRL_ASSERT(y.is_16bit());
  relu_backward_kernel<<<blocks_for(n), 256, 0, stream_>>>(dx.data, kind_of(dx.dtype), y.data, kind_of(y.dtype), n);
  CTRL_CUDA_LAUNCHED("relu_backward");
}

void CudaOps::dropout(TensorRef x, size_t n, const DropoutSpec& s) {
  if (s.p <= 0 || n == 0) return;
  dropout_kernel<<<blocks_for(n), 256, 0, stream_>>>(x.f32(), n, s.p, s.seed, s.stream, s.first_index);
  CTRL_CUDA_LAUNCHED("dropout");
}

void CudaOps::residual_add(TensorRef y, TensorRef x, TensorRef b, size_t n, const DropoutSpec& s) {
  if (n == 0) return;
  residual_kernel<<<blocks_for(n), 256, 0, stream_>>>(y.f32(), x.f32(), b.f32(), n, s.p, s.seed, s.stream,
                                                      s.first_index);
  CTRL_CUDA_LAUNCHED("residual_add");
}

void CudaOps::copy(TensorRef dst, TensorRef src, size_t n) {
  CTRL_ASSERT(dst.dtype == src.dtype || dst.dtype == DType::F32 || src.dtype == DType::F32);
  convert(dst, src, n);
}

void CudaOps::sum_squares(const float* x, size_t n, double* out) {
  double* partial = static_cast<double*>(scratch(kPartials, kSquareBlocks * sizeof(double)));
  square_partials<<<kSquareBlocks, kSquareThreads, 0, stream_>>>(partial, x, n);
  CTRL_CUDA_LAUNCHED("square_partials");
  square_total<<<1, kSquareBlocks, 0, stream_>>>(out, partial);
  CTRL_CUDA_LAUNCHED("square_total");
}

void CudaOps::clip_factor(const double* sum_squares, double loss_scale, double max_norm, float* factor) {
  clip_factor_kernel<<<1, 1, 0, stream_>>>(sum_squares, loss_scale, max_norm, factor);
  CTRL_CUDA_LAUNCHED("clip_factor");
}

void CudaOps::scale(float* x, size_t n, float factor) {
  if (n == 0) return;
  scale_kernel<<<blocks_for(n), 256, 0, stream_>>>(x, n, factor);
  CTRL_CUDA_LAUNCHED("scale");
}

void CudaOps::fill(float* x, size_t n, float value) {
  if (n == 0) return;
  fill_kernel<<<blocks_for(n), 256, 0, stream_>>>(x, n, value);
  CTRL_CUDA_LAUNCHED("fill");
}

}  // namespace ctrl::cuda
