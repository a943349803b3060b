// Causal multi-head attention, forward and backward, on the CPU. Each
// (batch, head) pair is one task on one thread; its products run
// single-threaded inside the parallel region. Only the softmax P[T,T] per head
// is kept for backward (fp32, or bf16 under bf16 mixed precision); the
// products run in fp32 on widened head slices either way.
#include <omp.h>

#include <cmath>
#include <vector>

#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/vec_math.h"

namespace ctrl::cpu {

namespace {

// One (batch, head)'s q, k, v as fp32 with their leading dimension: the qkv
// buffer itself when it is fp32, else the head's slices widened into scratch
// (attention is a small share of the work, so it runs in fp32 either way).
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
  const auto widen = qkv.dtype == DType::F16 ? from_f16 : from_bf16;
  for (int part = 0; part < 3; ++part)
    for (int64_t t = 0; t < T; ++t) widen(src + t * 3 * D + part * D, scratch + (part * T + t) * hd, hd);
  return {scratch, scratch + T * hd, scratch + 2 * T * hd, hd};
}

// Per thread: two T×T blocks (scores or dP; the widened bf16 softmax) and
// seven T×hd slices (q, k, v widened; the output or dO; dq, dk, dv before
// they are rounded to bf16).
size_t scratch_per_thread(int64_t T, int64_t hd) { return size_t(2 * T * T + 7 * T * hd); }

// Rows of one head's T×hd slice between a [T, ld] 16-bit buffer and dense fp32.
void widen_rows(const uint16_t* src, int64_t ld, float* dst, int64_t T, int64_t hd) {
  for (int64_t t = 0; t < T; ++t) from_bf16(src + t * ld, dst + t * hd, hd);
}
void narrow_rows(const float* src, DType type, uint16_t* dst, int64_t ld, int64_t T, int64_t hd) {
  const auto narrow = type == DType::F16 ? to_f16 : to_bf16;
  for (int64_t t = 0; t < T; ++t) narrow(src + t * hd, dst + t * ld, hd);
}

}  // namespace

void CpuOps::attention_forward(TensorRef out_ref, TensorRef probs_ref, TensorRef qkv_ref, int64_t B, int64_t T,
                               int64_t D, int64_t H) {
  const int64_t hd = D / H;
  const float scale = 1.0f / std::sqrt(float(hd));
  const int threads = omp_get_max_threads();
  attention_scratch_.resize(size_t(threads) * scratch_per_thread(T, hd));
#pragma omp parallel num_threads(threads)
  {
    float* scratch = attention_scratch_.data() + size_t(omp_get_thread_num()) * scratch_per_thread(T, hd);
    float* slices = scratch + 2 * T * T;
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < B * H; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      const HeadInputs in = head_inputs(qkv_ref, b, h, T, D, hd, slices);
      // The softmax in fp32: in place when probs are fp32, else in scratch and rounded once.
      float* P = probs_ref.dtype == DType::F32 ? probs_ref.f32() + bh * T * T : scratch;
      gemm_f32(false, true, T, T, hd, scale, in.q, in.ld, in.k, in.ld, 0.0f, P, T);
      for (int64_t i = 0; i < T; ++i) {  // causal softmax: row i sees positions 0..i
        float* row = P + i * T;
        const double sum = exp_shift_sum(row, i + 1, row_max(row, i + 1));
        row_scale(row, i + 1, float(1.0 / sum));
        for (int64_t j = i + 1; j < T; ++j) row[j] = 0.0f;
      }
      if (probs_ref.dtype == DType::BF16) to_bf16(P, probs_ref.bf16() + bh * T * T, T * T);
      if (!out_ref.is_16bit()) {
        gemm_f32(false, false, T, hd, T, 1.0f, P, T, in.v, in.ld, 0.0f, out_ref.f32() + b * T * D + h * hd, D);
        continue;
      }
      float* o = slices + 3 * T * hd;
      gemm_f32(false, false, T, hd, T, 1.0f, P, T, in.v, in.ld, 0.0f, o, hd);
      narrow_rows(o, out_ref.dtype, out_ref.u16() + b * T * D + h * hd, D, T, hd);
    }
  }
}

void CpuOps::attention_backward(TensorRef dqkv_ref, TensorRef dout_ref, TensorRef qkv_ref, TensorRef probs_ref,
                                int64_t B, int64_t T, int64_t D, int64_t H) {
  const bool low_grads = dqkv_ref.dtype == DType::BF16;
  CTRL_ASSERT(dout_ref.dtype == dqkv_ref.dtype);
  const int64_t hd = D / H;
  const float scale = 1.0f / std::sqrt(float(hd));
  const int threads = omp_get_max_threads();
  attention_scratch_.resize(size_t(threads) * scratch_per_thread(T, hd));
#pragma omp parallel num_threads(threads)
  {
    float* dP = attention_scratch_.data() + size_t(omp_get_thread_num()) * scratch_per_thread(T, hd);
    float* slices = dP + 2 * T * T;
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < B * H; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      const HeadInputs in = head_inputs(qkv_ref, b, h, T, D, hd, slices);
      const float* P = probs_ref.dtype == DType::F32 ? probs_ref.f32() + bh * T * T : dP + T * T;
      if (probs_ref.dtype == DType::BF16) from_bf16(probs_ref.bf16() + bh * T * T, dP + T * T, T * T);
      // dO and dq | dk | dv: the buffers themselves in fp32, else fp32 slices in scratch.
      const float* dO = low_grads ? slices + 3 * T * hd : dout_ref.f32() + b * T * D + h * hd;
      const int64_t ld_out = low_grads ? hd : D;
      if (low_grads) widen_rows(dout_ref.bf16() + b * T * D + h * hd, D, slices + 3 * T * hd, T, hd);
      float* dq = low_grads ? slices + 4 * T * hd : dqkv_ref.f32() + b * T * 3 * D + h * hd;
      const int64_t ld_dq = low_grads ? hd : 3 * D;
      float* dk = low_grads ? dq + T * hd : dq + D;
      float* dv = low_grads ? dq + 2 * T * hd : dq + 2 * D;
      gemm_f32(false, true, T, T, hd, 1.0f, dO, ld_out, in.v, in.ld, 0.0f, dP, T);  // dP = dO·vᵀ
      gemm_f32(true, false, T, hd, T, 1.0f, P, T, dO, ld_out, 0.0f, dv, ld_dq);     // dv = Pᵀ·dO
      for (int64_t i = 0; i < T; ++i) {  // softmax backward, in place: dS = P ⊙ (dP − Σ P·dP)
        const float* p = P + i * T;
        float* d = dP + i * T;
        float dot = 0;
        for (int64_t j = 0; j <= i; ++j) dot += p[j] * d[j];
        for (int64_t j = 0; j <= i; ++j) d[j] = p[j] * (d[j] - dot);
        for (int64_t j = i + 1; j < T; ++j) d[j] = 0.0f;
      }
      gemm_f32(false, false, T, hd, T, scale, dP, T, in.k, in.ld, 0.0f, dq, ld_dq);  // dq = dS·k/√hd
      gemm_f32(true, false, T, hd, T, scale, dP, T, in.q, in.ld, 0.0f, dk, ld_dq);   // dk = dSᵀ·q/√hd
      if (low_grads)
        for (int part = 0; part < 3; ++part)
          narrow_rows(dq + part * T * hd, DType::BF16, dqkv_ref.bf16() + b * T * 3 * D + part * D + h * hd, 3 * D, T,
                      hd);
    }
  }
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
