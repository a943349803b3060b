// Causal multi-head attention, forward and backward, plus the one-row decode
// step of generation. The products are cuBLASLt batched over the heads of one
// sequence (q, k, v are D/H-wide column blocks of qkv, so a head is a fixed
// stride away from the next); the causal softmax and its backward are fused
// row kernels, one warp per row. probs[B,H,T,T] keeps the softmax, as the
// interface states. The type paths are the CPU's (ops/cpu/attention.cpp):
// fp32 (fp16 q, k, v widened to fp32), and bf16 with fp32 scores and softmax.
#include <cmath>

#include "ops/cuda/common.cuh"

namespace ctrl::cuda {

namespace {

constexpr int kWarps = 8;

// Row r of `rows` causal rows of width T (row i of a head sees 0..i):
// dst = softmax(src) over the visible part, 0 beyond. exp in fp32, the sum in
// double, one reciprocal, as the CPU's causal_softmax. src and dst may alias.
__global__ void causal_softmax_kernel(void* dst, int kd, const float* src, int64_t rows, int64_t T) {
  const int64_t r = blockIdx.x * int64_t(kWarps) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (r >= rows) return;
  const int64_t i = r % T;
  const float* x = src + r * T;
  float mx = -INFINITY;
  for (int64_t j = lane; j <= i; j += 32) mx = fmaxf(mx, x[j]);
  mx = warp_max(mx);
  double sum = 0;
  for (int64_t j = lane; j <= i; j += 32) sum += double(expf(x[j] - mx));
  const float inv = float(1.0 / warp_sum(sum));
  for (int64_t j = lane; j < T; j += 32) {
    const float p = j <= i ? expf(x[j] - mx) * inv : 0.0f;
    store(dst, kd, size_t(r * T + j), p);
  }
}

// Softmax backward of each row: out = factor · p ⊙ (d − Σ p·d) on the visible
// part, 0 beyond; d fp32, p and out of their kinds (out may alias d).
__global__ void softmax_backward_kernel(void* out, int ko, const float* d, const void* p, int kp, int64_t rows,
                                        int64_t T, float factor) {
  const int64_t r = blockIdx.x * int64_t(kWarps) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (r >= rows) return;
  const int64_t i = r % T;
  const size_t base = size_t(r * T);
  float dot = 0;
  for (int64_t j = lane; j <= i; j += 32) dot += load(p, kp, base + j) * d[base + j];
  dot = warp_sum(dot);
  for (int64_t j = lane; j < T; j += 32) {
    const float v = j <= i ? factor * load(p, kp, base + j) * (d[base + j] - dot) : 0.0f;
    store(out, ko, base + j, v);
  }
}

// One block per head: softmax of q·k over the n cached positions, then Σ p·v.
__global__ void attention_decode_kernel(float* out, const float* q, const float* k, const float* v, int64_t n,
                                        int64_t D, int64_t hd, float scale) {
  extern __shared__ float p[];  // n scores
  __shared__ float red[32];
  const int64_t h = blockIdx.x;
  const float* qh = q + h * hd;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float* kj = k + j * D + h * hd;
    float s = 0;
    for (int64_t i = 0; i < hd; ++i) s += qh[i] * kj[i];
    p[j] = s * scale;
    mx = fmaxf(mx, p[j]);
  }
  mx = block_max(mx, red);
  float sum = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) sum += (p[j] = expf(p[j] - mx));
  sum = block_sum(sum, red);  // its barriers also make every p[j] visible
  for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) {
    float o = 0;
    for (int64_t j = 0; j < n; ++j) o += p[j] / sum * v[j * D + h * hd + i];
    out[h * hd + i] = o;
  }
}

unsigned row_blocks(int64_t rows) { return unsigned((rows + kWarps - 1) / kWarps); }

}  // namespace

void CudaOps::attention_forward(TensorRef out, TensorRef probs, TensorRef qkv, int64_t B, int64_t T, int64_t D,
                                int64_t H) {
  const bool bf16 = qkv.dtype == DType::BF16;
  CTRL_ASSERT(probs.dtype == (bf16 ? DType::BF16 : DType::F32));
  const int64_t hd = D / H, TT = T * T, rows = H * T;
  const float scale = 1.0f / std::sqrt(float(hd));
  if (bf16) {
    float* scores = static_cast<float*>(scratch(kScores, size_t(H * TT) * sizeof(float)));
    for (int64_t b = 0; b < B; ++b) {
      const TensorRef q(static_cast<uint16_t*>(qkv.data) + b * T * 3 * D, DType::BF16);
      const TensorRef k(static_cast<uint16_t*>(q.data) + D, DType::BF16), v(static_cast<uint16_t*>(q.data) + 2 * D,
                                                                            DType::BF16);
      const TensorRef P(static_cast<uint16_t*>(probs.data) + b * H * TT, DType::BF16);
      gemm(false, true, T, T, hd, scale, q, 3 * D, k, 3 * D, 0.0f, scores, T, nullptr, H, hd, hd, TT);
      causal_softmax_kernel<<<row_blocks(rows), 32 * kWarps, 0, stream_>>>(P.data, kBF16, scores, rows, T);
      CTRL_CUDA_LAUNCHED("causal_softmax");
      gemm(false, false, T, hd, T, 1.0f, P, T, v, 3 * D, 0.0f,
           TensorRef(static_cast<uint16_t*>(out.data) + b * T * D, out.dtype), D, nullptr, H, TT, hd, hd);
    }
    return;
  }
  // fp32 products; fp16 q, k, v are widened first, and an fp16 out is rounded once at the end.
  const float* x = qkv.dtype == DType::F32 ? qkv.f32() : static_cast<float*>(scratch(kWidenA, size_t(B * T * 3 * D) * 4));
  if (qkv.dtype != DType::F32) convert(const_cast<float*>(x), qkv, size_t(B * T * 3 * D));
  float* o = out.dtype == DType::F32 ? out.f32() : static_cast<float*>(scratch(kF32Out, size_t(B * T * D) * 4));
  for (int64_t b = 0; b < B; ++b) {
    const float* q = x + b * T * 3 * D;
    float* P = probs.f32() + b * H * TT;
    gemm(false, true, T, T, hd, scale, q, 3 * D, q + D, 3 * D, 0.0f, P, T, nullptr, H, hd, hd, TT);
    causal_softmax_kernel<<<row_blocks(rows), 32 * kWarps, 0, stream_>>>(P, kF32, P, rows, T);
    CTRL_CUDA_LAUNCHED("causal_softmax");
    gemm(false, false, T, hd, T, 1.0f, P, T, q + 2 * D, 3 * D, 0.0f, o + b * T * D, D, nullptr, H, TT, hd, hd);
  }
  if (out.dtype != DType::F32) convert(out, o, size_t(B * T * D));
}

void CudaOps::attention_backward(TensorRef dqkv, TensorRef dout, TensorRef qkv, TensorRef probs, int64_t B, int64_t T,
                                 int64_t D, int64_t H) {
  const bool bf16 = qkv.dtype == DType::BF16;
  const DType inner = bf16 ? DType::BF16 : DType::F32;
  CTRL_ASSERT(probs.dtype == inner && dout.dtype == inner && dqkv.dtype == inner);
  const int64_t hd = D / H, TT = T * T, rows = H * T;
  const float scale = 1.0f / std::sqrt(float(hd));
  float* dP = static_cast<float*>(scratch(kScores, size_t(H * TT) * sizeof(float)));
  if (bf16) {
    uint16_t* dS = static_cast<uint16_t*>(scratch(kGradS, size_t(H * TT) * 2));
    for (int64_t b = 0; b < B; ++b) {
      uint16_t* q = qkv.bf16() + b * T * 3 * D;
      uint16_t* dq = dqkv.bf16() + b * T * 3 * D;
      const TensorRef dO(dout.bf16() + b * T * D, DType::BF16), P(probs.bf16() + b * H * TT, DType::BF16);
      auto bf = [](uint16_t* p) { return TensorRef(p, DType::BF16); };
      gemm(false, true, T, T, hd, 1.0f, dO, D, bf(q + 2 * D), 3 * D, 0.0f, dP, T, nullptr, H, hd, hd, TT);  // dO·vᵀ
      gemm(true, false, T, hd, T, 1.0f, P, T, dO, D, 0.0f, bf(dq + 2 * D), 3 * D, nullptr, H, TT, hd, hd);  // dv
      softmax_backward_kernel<<<row_blocks(rows), 32 * kWarps, 0, stream_>>>(dS, kBF16, dP, P.data, kBF16, rows, T,
                                                                             scale);  // dS/√hd, rounded once
      CTRL_CUDA_LAUNCHED("softmax_backward");
      gemm(false, false, T, hd, T, 1.0f, bf(dS), T, bf(q + D), 3 * D, 0.0f, bf(dq), 3 * D, nullptr, H, TT, hd, hd);
      gemm(true, false, T, hd, T, 1.0f, bf(dS), T, bf(q), 3 * D, 0.0f, bf(dq + D), 3 * D, nullptr, H, TT, hd, hd);
    }
    return;
  }
  const float* x = qkv.dtype == DType::F32 ? qkv.f32() : static_cast<float*>(scratch(kWidenA, size_t(B * T * 3 * D) * 4));
  if (qkv.dtype != DType::F32) convert(const_cast<float*>(x), qkv, size_t(B * T * 3 * D));
  for (int64_t b = 0; b < B; ++b) {
    const float* q = x + b * T * 3 * D;
    const float* P = probs.f32() + b * H * TT;
    const float* dO = dout.f32() + b * T * D;
    float* dq = dqkv.f32() + b * T * 3 * D;
    gemm(false, true, T, T, hd, 1.0f, dO, D, q + 2 * D, 3 * D, 0.0f, dP, T, nullptr, H, hd, hd, TT);   // dO·vᵀ
    gemm(true, false, T, hd, T, 1.0f, P, T, dO, D, 0.0f, dq + 2 * D, 3 * D, nullptr, H, TT, hd, hd);  // dv = Pᵀ·dO
    softmax_backward_kernel<<<row_blocks(rows), 32 * kWarps, 0, stream_>>>(dP, kF32, dP, P, kF32, rows, T, 1.0f);
    CTRL_CUDA_LAUNCHED("softmax_backward");
    gemm(false, false, T, hd, T, scale, dP, T, q + D, 3 * D, 0.0f, dq, 3 * D, nullptr, H, TT, hd, hd);  // dq
    gemm(true, false, T, hd, T, scale, dP, T, q, 3 * D, 0.0f, dq + D, 3 * D, nullptr, H, TT, hd, hd);   // dk
  }
}

void CudaOps::attention_decode(float* out, const float* q, const float* k_cache, const float* v_cache, int64_t n,
                               int64_t D, int64_t H) {
  const int64_t hd = D / H;
  const size_t shared = size_t(n) * sizeof(float);
  // 48 KiB per block without opting in, less the kernel's own 32-float array.
  if (shared + 32 * sizeof(float) > 48 * 1024) fail("cuda: attention_decode over " + std::to_string(n) + " positions needs more shared memory");
  attention_decode_kernel<<<unsigned(H), 128, shared, stream_>>>(out, q, k_cache, v_cache, n, D, hd,
                                                                 1.0f / std::sqrt(float(hd)));
  CTRL_CUDA_LAUNCHED("attention_decode");
}

}  // namespace ctrl::cuda
