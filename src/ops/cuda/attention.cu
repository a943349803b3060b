// Causal multi-head attention, forward and backward, plus the one-row decode
// step of generation. q, k, v (and the output gradient) are first copied into
// a heads-major layout [B·H, T, D/H], so that every product runs as one
// cuBLASLt call batched over all heads of a chunk of sequences: per layer a
// handful of launches instead of a few per sequence, which left the GPU
// waiting on the host. The causal softmax and its backward are fused row
// kernels, one warp per row. probs[B,H,T,T] keeps the softmax, as on the
// CPU. The products take q, k, v's own type: fp32, or under mixed precision
// bf16 or fp16 on tensor cores with fp32 scores and softmax, the softmax and
// its gradient rounded once to that type for the products. (The CPU has no
// fp16 products and widens fp16 to fp32: ops/cpu/attention.cpp.) fp16's
// gradients (dout, dqkv) are fp32 buffers; they enter the products as fp16,
// where the loss scale keeps them in range, and leave them as fp32.
// With CTRL_CUDA_ATTENTION=fused, bf16 attention of the widths that
// attention_fused.cu handles runs there instead and keeps no softmax.
#include <cmath>

#include "ops/cuda/common.cuh"
#include "ops/gpu_scratch.h"

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

// Copies between the token-major layout [B, T, parts·D] (a token's row holds
// `parts` blocks of D = H·hd columns, e.g. q, k, v) and the heads-major
// layout [parts, B, H, T, hd], converting between kinds on the way (16-bit
// to 16-bit of one kind is exact). Block (t, h, p·B + b) copies one head's
// hd contiguous elements of one token.
__global__ void permute_heads(void* dst, int kd, const void* src, int ks, int64_t B, int64_t T, int64_t H, int64_t hd,
                              int64_t parts, bool to_heads) {
  const int64_t t = blockIdx.x, h = blockIdx.y, pb = blockIdx.z, p = pb / B, b = pb % B;
  const size_t heads = size_t(((pb * H + h) * T + t) * hd),
               tokens = size_t(((b * T + t) * parts + p) * H * hd + h * hd);
  for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) {
    if (to_heads)
      store(dst, kd, heads + i, load(src, ks, tokens + i));
    else
      store(dst, kd, tokens + i, load(src, ks, heads + i));
  }
}

unsigned row_blocks(int64_t rows) { return unsigned((rows + kWarps - 1) / kWarps); }

}  // namespace

void CudaOps::to_heads(void* dst, DType dst_type, const void* src, DType src_type, int64_t B, int64_t T, int64_t H,
                       int64_t hd, int64_t parts, bool to_heads_layout) {
  CTRL_ASSERT(parts * B <= kMaxGridYZ && H <= kMaxGridYZ);
  const unsigned threads = unsigned(std::min<int64_t>(256, (hd + 31) / 32 * 32));
  permute_heads<<<dim3(unsigned(T), unsigned(H), unsigned(parts * B)), threads, 0, stream_>>>(
      dst, kind_of(dst_type), src, kind_of(src_type), B, T, H, hd, parts, to_heads_layout);
  CTRL_CUDA_LAUNCHED("permute_heads");
}

void CudaOps::attention_forward(TensorRef out, TensorRef saved, TensorRef qkv, int64_t B, int64_t T, int64_t D,
                                int64_t H) {
  if (fused_attention(qkv.dtype, D, H)) return fused_attention_forward(out, saved, qkv, B, T, D, H);
  const DType inner = qkv.dtype;  // the products' inputs and the saved softmax: fp32, bf16 or fp16
  CTRL_ASSERT(saved.dtype == inner);  // the CPU's rule: the softmax is kept in q, k and v's type
  const bool low = inner != DType::F32;
  const int64_t hd = D / H, TT = T * T, chunk = gpu_attention_sequences(B, H, T);
  const size_t esize = dtype_size(inner), out_size = dtype_size(out.dtype);
  const float scale = 1.0f / std::sqrt(float(hd));
  char* heads = static_cast<char*>(scratch(kHeadsIn, size_t(chunk * T * 3 * D) * esize));
  char* o = static_cast<char*>(scratch(kHeadsOut, size_t(chunk * T * D) * esize));
  float* scores = low ? static_cast<float*>(scratch(kScores, size_t(chunk * H * TT) * sizeof(float))) : nullptr;
  for (int64_t b0 = 0; b0 < B; b0 += chunk) {
    const int64_t n = std::min(chunk, B - b0), batch = n * H, part = n * T * D;
    to_heads(heads, inner, static_cast<const char*>(qkv.data) + size_t(b0 * T * 3 * D) * esize, inner, n, T, H, hd, 3,
             true);
    const TensorRef q(heads, inner), k(heads + size_t(part) * esize, inner), v(heads + size_t(2 * part) * esize, inner);
    const TensorRef P(static_cast<char*>(saved.data) + size_t(b0 * H * TT) * esize, inner);
    // 16-bit: fp32 scores, then the softmax rounded once into P; fp32: in place in P.
    const TensorRef S = low ? TensorRef(scores) : P;
    gemm(false, true, T, T, hd, scale, q, hd, k, hd, 0.0f, S, T, nullptr, batch, T * hd, T * hd, TT);
    causal_softmax_kernel<<<row_blocks(batch * T), 32 * kWarps, 0, stream_>>>(P.data, kind_of(inner), S.f32(),
                                                                              batch * T, T);
    CTRL_CUDA_LAUNCHED("causal_softmax");
    gemm(false, false, T, hd, T, 1.0f, P, T, v, hd, 0.0f, TensorRef(o, inner), hd, nullptr, batch, TT, T * hd, T * hd);
    to_heads(static_cast<char*>(out.data) + size_t(b0 * T * D) * out_size, out.dtype, o, inner, n, T, H, hd, 1, false);
  }
}

void CudaOps::attention_backward(TensorRef dqkv, TensorRef dout, TensorRef qkv, TensorRef out, TensorRef saved,
                                 int64_t B, int64_t T, int64_t D, int64_t H) {
  if (fused_attention(qkv.dtype, D, H)) return fused_attention_backward(dqkv, dout, qkv, out, saved, B, T, D, H);
  const DType inner = qkv.dtype, grad = dqkv.dtype;  // fp16's gradients are fp32, and enter the products as fp16
  const bool low = inner != DType::F32;
  CTRL_ASSERT(dout.dtype == grad && (grad == inner || (inner == DType::F16 && grad == DType::F32)));
  CTRL_ASSERT(saved.dtype == inner);
  const int64_t hd = D / H, TT = T * T, chunk = gpu_attention_sequences(B, H, T);
  const size_t esize = dtype_size(inner), gsize = dtype_size(grad);
  const float scale = 1.0f / std::sqrt(float(hd));
  char* heads = static_cast<char*>(scratch(kHeadsIn, size_t(chunk * T * 3 * D) * esize));
  char* d_heads = static_cast<char*>(scratch(kHeadsOut, size_t(chunk * T * 3 * D) * gsize));
  char* d_out = static_cast<char*>(scratch(kHeadsGrad, size_t(chunk * T * D) * esize));
  float* dP = static_cast<float*>(scratch(kScores, size_t(chunk * H * TT) * sizeof(float)));
  // 16-bit: dS/√hd rounded once into a buffer of q's type; fp32: in place in dP, with 1/√hd in the products.
  void* dS = low ? scratch(kGradS, size_t(chunk * H * TT) * esize) : dP;
  const float softmax_factor = low ? scale : 1.0f, product_factor = low ? 1.0f : scale;
  for (int64_t b0 = 0; b0 < B; b0 += chunk) {
    const int64_t n = std::min(chunk, B - b0), batch = n * H, part = n * T * D;
    to_heads(heads, inner, static_cast<const char*>(qkv.data) + size_t(b0 * T * 3 * D) * esize, inner, n, T, H, hd, 3,
             true);
    to_heads(d_out, inner, static_cast<const char*>(dout.data) + size_t(b0 * T * D) * gsize, grad, n, T, H, hd, 1,
             true);
    auto in_at = [&](int64_t p) { return TensorRef(heads + size_t(p * part) * esize, inner); };
    auto grad_at = [&](int64_t p) { return TensorRef(d_heads + size_t(p * part) * gsize, grad); };
    const TensorRef dO(d_out, inner), dS_ref(dS, inner);
    const TensorRef P(static_cast<char*>(saved.data) + size_t(b0 * H * TT) * esize, inner);
    gemm(false, true, T, T, hd, 1.0f, dO, hd, in_at(2), hd, 0.0f, dP, T, nullptr, batch, T * hd, T * hd, TT);
    gemm(true, false, T, hd, T, 1.0f, P, T, dO, hd, 0.0f, grad_at(2), hd, nullptr, batch, TT, T * hd,
         T * hd);  // dv = Pᵀ·dO
    softmax_backward_kernel<<<row_blocks(batch * T), 32 * kWarps, 0, stream_>>>(
        dS, kind_of(inner), dP, P.data, kind_of(inner), batch * T, T, softmax_factor);
    CTRL_CUDA_LAUNCHED("softmax_backward");
    gemm(false, false, T, hd, T, product_factor, dS_ref, T, in_at(1), hd, 0.0f, grad_at(0), hd, nullptr, batch, TT,
         T * hd, T * hd);  // dq = dS·k
    gemm(true, false, T, hd, T, product_factor, dS_ref, T, in_at(0), hd, 0.0f, grad_at(1), hd, nullptr, batch, TT,
         T * hd, T * hd);  // dk = dSᵀ·q
    to_heads(static_cast<char*>(dqkv.data) + size_t(b0 * T * 3 * D) * gsize, grad, d_heads, grad, n, T, H, hd, 3,
             false);
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
