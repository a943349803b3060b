// Causal multi-head attention, forward and backward, on the CPU. Each
// (batch, head) pair is one task on one thread; its products run
// single-threaded inside the parallel region. Only the softmax P[T,T] per head
// is kept for backward. The products skip the blocks above the diagonal,
// where P and dS are zero: in blocks of kCausalBlock rows (or columns), 62.5%
// of the full products' work at T = 256.
//
// Two paths: fp32, and bf16, where q, k, v, P, dO and dS enter bf16 products
// with fp32 accumulation straight from their buffers (no widening) and the
// softmax and its backward run in fp32. fp16 takes the fp32 path (this CPU has
// no fp16 products) on the values a GPU's fp16 products take: q, k, v widened,
// and the softmax, dO and dS rounded to fp16 on the way into the products (P
// is kept in fp16; dO and the result dqkv are fp32 buffers).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/vec_math.h"

namespace ctrl::cpu {

namespace {

// One (batch, head)'s q, k, v as fp32 with their leading dimension: the qkv
// buffer itself when it is fp32, else the head's fp16 slices widened into scratch.
struct HeadInputs {
  const float *q, *k, *v;
  int64_t ld;
};

HeadInputs head_inputs(TensorRef qkv, int64_t b, int64_t h, int64_t T, int64_t D, int64_t hd, float* scratch) {
  const int64_t row0 = b * T * 3 * D + h * hd;
  if (qkv.dtype == DType::F32) {
    const float* q = qkv.f32() + row0;
    return {q, q + D, q + 2 * D, 3 * D};
  }
  const uint16_t* src = qkv.u16() + row0;
  for (int part = 0; part < 3; ++part)
    for (int64_t t = 0; t < T; ++t) from_f16(src + t * 3 * D + part * D, scratch + (part * T + t) * hd, hd);
  return {scratch, scratch + T * hd, scratch + 2 * T * hd, hd};
}

// Runs fn(b, h, block, slices) for every (batch, head) pair, split statically
// over the threads. Each thread's scratch: `block`, a T×T fp32 block (scores,
// dP) followed by the room of another (bf16's dS; fp16's widened softmax), and
// `slices`, four T×hd fp32 slices (fp16's q, k, v widened, and its output or
// rounded dO; a softmax row in bf16).
template <typename Fn>
void for_each_head(std::vector<float>& scratch, int64_t B, int64_t H, int64_t T, int64_t hd, Fn fn) {
  const int threads = omp_get_max_threads();
  const size_t per_thread = size_t(2 * T * T + 4 * T * hd);
  scratch.resize(size_t(threads) * per_thread);
#pragma omp parallel num_threads(threads)
  {
    float* block = scratch.data() + size_t(omp_get_thread_num()) * per_thread;
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < B * H; ++bh) fn(bh / H, bh % H, block, block + 2 * T * T);
  }
}

constexpr int64_t kCausalBlock = 64;

// Calls fn(first, count) for each block of kCausalBlock rows of T. A product
// whose rows are queries needs keys [0, first + count) for the block; one
// whose rows are keys (Pᵀ·dO, dSᵀ·q) needs queries [first, T).
template <typename Fn>
void for_each_causal_block(int64_t T, Fn fn) {
  for (int64_t first = 0; first < T; first += kCausalBlock) fn(first, std::min(kCausalBlock, T - first));
}

// Causal softmax of the scores in place: row i sees positions 0..i (only
// those are read, so the scores above the diagonal may be left unset).
void causal_softmax(float* P, int64_t T) {
  for (int64_t i = 0; i < T; ++i) {
    float* row = P + i * T;
    const double sum = exp_shift_sum(row, i + 1, row_max(row, i + 1));
    row_scale(row, i + 1, float(1.0 / sum));
    for (int64_t j = i + 1; j < T; ++j) row[j] = 0.0f;
  }
}

// Softmax backward of one row, in place: d = factor · p ⊙ (d − Σ p·d).
void softmax_backward_row(const float* p, float* d, int64_t i, int64_t T, float factor) {
  float dot = 0;
  for (int64_t j = 0; j <= i; ++j) dot += p[j] * d[j];
  for (int64_t j = 0; j <= i; ++j) d[j] = factor * p[j] * (d[j] - dot);
  for (int64_t j = i + 1; j < T; ++j) d[j] = 0.0f;
}

}  // namespace

void CpuOps::attention_forward(TensorRef out_ref, TensorRef probs_ref, TensorRef qkv_ref, int64_t B, int64_t T,
                               int64_t D, int64_t H) {
  const bool bf16 = qkv_ref.dtype == DType::BF16, f16 = qkv_ref.dtype == DType::F16;
  CTRL_ASSERT(probs_ref.dtype == qkv_ref.dtype);
  const int64_t hd = D / H;
  const float scale = 1.0f / std::sqrt(float(hd));
  for_each_head(attention_scratch_, B, H, T, hd, [&](int64_t b, int64_t h, float* scores, float* slices) {
    const int64_t bh = b * H + h;
    if (bf16) {
      const uint16_t* q = qkv_ref.bf16() + b * T * 3 * D + h * hd;
      uint16_t* P = probs_ref.bf16() + bh * T * T;
      uint16_t* out = out_ref.bf16() + b * T * D + h * hd;
      for_each_causal_block(T, [&](int64_t i0, int64_t n) {
        gemm_bf16(false, true, n, i0 + n, hd, scale, q + i0 * 3 * D, 3 * D, q + D, 3 * D, 0.0f, scores + i0 * T, T);
      });
      causal_softmax(scores, T);
      to_bf16(scores, P, T * T);
      for_each_causal_block(T, [&](int64_t i0, int64_t n) {
        gemm_bf16_bias(false, false, n, hd, i0 + n, P + i0 * T, T, q + 2 * D, 3 * D, nullptr, out + i0 * D, true, D);
      });
      return;
    }
    const HeadInputs in = head_inputs(qkv_ref, b, h, T, D, hd, slices);
    float* P = f16 ? scores : probs_ref.f32() + bh * T * T;  // fp16: the softmax in scratch, kept rounded
    for_each_causal_block(T, [&](int64_t i0, int64_t n) {
      gemm_f32(false, true, n, i0 + n, hd, scale, in.q + i0 * in.ld, in.ld, in.k, in.ld, 0.0f, P + i0 * T, T);
    });
    causal_softmax(P, T);
    if (f16) {  // kept in fp16, and the product below takes that rounding
      to_f16(P, probs_ref.u16() + bh * T * T, T * T);
      from_f16(probs_ref.u16() + bh * T * T, P, T * T);
    }
    const bool f32_out = !out_ref.is_16bit();
    float* o = f32_out ? out_ref.f32() + b * T * D + h * hd : slices + 3 * T * hd;
    const int64_t ldo = f32_out ? D : hd;
    for_each_causal_block(T, [&](int64_t i0, int64_t n) {
      gemm_f32(false, false, n, hd, i0 + n, 1.0f, P + i0 * T, T, in.v, in.ld, 0.0f, o + i0 * ldo, ldo);
    });
    if (!f32_out)
      for (int64_t t = 0; t < T; ++t) to_f16(o + t * hd, out_ref.u16() + (b * T + t) * D + h * hd, hd);
  });
}

void CpuOps::attention_backward(TensorRef dqkv_ref, TensorRef dout_ref, TensorRef qkv_ref, TensorRef /*out*/,
                                TensorRef probs_ref, int64_t B, int64_t T, int64_t D, int64_t H) {
  const bool bf16 = qkv_ref.dtype == DType::BF16, f16 = qkv_ref.dtype == DType::F16;
  const DType grad = bf16 ? DType::BF16 : DType::F32;
  CTRL_ASSERT(probs_ref.dtype == qkv_ref.dtype && dout_ref.dtype == grad && dqkv_ref.dtype == grad);
  const int64_t hd = D / H;
  const float scale = 1.0f / std::sqrt(float(hd));
  for_each_head(attention_scratch_, B, H, T, hd, [&](int64_t b, int64_t h, float* dP, float* slices) {
    const int64_t bh = b * H + h;
    if (bf16) {
      const uint16_t* q = qkv_ref.bf16() + b * T * 3 * D + h * hd;
      const uint16_t* P = probs_ref.bf16() + bh * T * T;
      const uint16_t* dO = dout_ref.bf16() + b * T * D + h * hd;
      uint16_t* dq = dqkv_ref.bf16() + b * T * 3 * D + h * hd;
      uint16_t* dS = reinterpret_cast<uint16_t*>(dP + T * T);
      float* p_row = slices;
      for_each_causal_block(T, [&](int64_t i0, int64_t n) {  // dP = dO·vᵀ; dv = Pᵀ·dO
        gemm_bf16(false, true, n, i0 + n, hd, 1.0f, dO + i0 * D, D, q + 2 * D, 3 * D, 0.0f, dP + i0 * T, T);
        gemm_bf16_bias(true, false, n, hd, T - i0, P + i0 * T + i0, T, dO + i0 * D, D, nullptr, dq + 2 * D + i0 * 3 * D,
                       true, 3 * D);
      });
      for (int64_t i = 0; i < T; ++i) {  // dS/√hd, rounded once for the two products
        from_bf16(P + i * T, p_row, i + 1);
        softmax_backward_row(p_row, dP + i * T, i, T, scale);
        to_bf16(dP + i * T, dS + i * T, T);
      }
      for_each_causal_block(T, [&](int64_t i0, int64_t n) {  // dq = dS·k/√hd; dk = dSᵀ·q/√hd
        gemm_bf16_bias(false, false, n, hd, i0 + n, dS + i0 * T, T, q + D, 3 * D, nullptr, dq + i0 * 3 * D, true,
                       3 * D);
        gemm_bf16_bias(true, false, n, hd, T - i0, dS + i0 * T + i0, T, q + i0 * 3 * D, 3 * D, nullptr,
                       dq + D + i0 * 3 * D, true, 3 * D);
      });
      return;
    }
    const HeadInputs in = head_inputs(qkv_ref, b, h, T, D, hd, slices);
    const float* P = f16 ? dP + T * T : probs_ref.f32() + bh * T * T;
    const float* dO = dout_ref.f32() + b * T * D + h * hd;
    int64_t ld_dO = D;
    if (f16) {  // the softmax widened; dO rounded to fp16 (overflowing as fp16 does) in the fourth slice
      from_f16(probs_ref.u16() + bh * T * T, dP + T * T, T * T);
      float* rounded = slices + 3 * T * hd;
      for (int64_t t = 0; t < T; ++t) round_through_f16(dO + t * D, rounded + t * hd, hd);
      dO = rounded, ld_dO = hd;
    }
    float* dq = dqkv_ref.f32() + b * T * 3 * D + h * hd;
    for_each_causal_block(T, [&](int64_t i0, int64_t n) {  // dP = dO·vᵀ; dv = Pᵀ·dO
      gemm_f32(false, true, n, i0 + n, hd, 1.0f, dO + i0 * ld_dO, ld_dO, in.v, in.ld, 0.0f, dP + i0 * T, T);
      gemm_f32(true, false, n, hd, T - i0, 1.0f, P + i0 * T + i0, T, dO + i0 * ld_dO, ld_dO, 0.0f,
               dq + 2 * D + i0 * 3 * D, 3 * D);
    });
    // fp32: dS in place in dP, 1/√hd in the products; fp16: dS/√hd rounded to fp16 once, as bf16's.
    const float softmax_factor = f16 ? scale : 1.0f, product_factor = f16 ? 1.0f : scale;
    for (int64_t i = 0; i < T; ++i) softmax_backward_row(P + i * T, dP + i * T, i, T, softmax_factor);
    if (f16) round_through_f16(dP, dP, T * T);
    for_each_causal_block(T, [&](int64_t i0, int64_t n) {  // dq = dS·k; dk = dSᵀ·q
      gemm_f32(false, false, n, hd, i0 + n, product_factor, dP + i0 * T, T, in.k, in.ld, 0.0f, dq + i0 * 3 * D, 3 * D);
      gemm_f32(true, false, n, hd, T - i0, product_factor, dP + i0 * T + i0, T, in.q + i0 * in.ld, in.ld, 0.0f,
               dq + D + i0 * 3 * D, 3 * D);
    });
  });
}

void CpuOps::attention_decode(float* out, const float* q, const float* k_cache, const float* v_cache, int64_t n,
                              int64_t D, int64_t H) {
  const int64_t hd = D / H;
  const float scale = 1.0f / std::sqrt(float(hd));
#pragma omp parallel for schedule(static)
  for (int64_t h = 0; h < H; ++h) {
    std::vector<float> p(static_cast<size_t>(n));
    const float* qh = q + h * hd;
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      const float* k = k_cache + j * D + h * hd;
      float s = 0;
      for (int64_t i = 0; i < hd; ++i) s += qh[i] * k[i];
      p[size_t(j)] = s * scale;
      mx = std::max(mx, p[size_t(j)]);
    }
    float sum = 0;
    for (auto& x : p) sum += (x = std::exp(x - mx));
    float* o = out + h * hd;
    for (int64_t i = 0; i < hd; ++i) o[i] = 0;
    for (int64_t j = 0; j < n; ++j) {
      const float w = p[size_t(j)] / sum;
      const float* v = v_cache + j * D + h * hd;
      for (int64_t i = 0; i < hd; ++i) o[i] += w * v[i];
    }
  }
}

}  // namespace ctrl::cpu
