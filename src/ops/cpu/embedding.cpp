// Token embedding scaled by √D plus sinusoidal positions, forward and backward.
#include "ops/cpu/cpu_ops.h"

namespace ctrl::cpu {

void CpuOps::embedding_forward(TensorRef x_ref, const int32_t* tokens, const float* w, int64_t B, int64_t T,
                               int64_t D, float scale) {
  if (positions_T_ < T || positions_D_ != D) {
    positions_.resize(size_t(T * D));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < D; ++c) positions_[t * D + c] = sinusoid(t, c, D);
    positions_T_ = T;
    positions_D_ = D;
  }
  float* x = x_ref.f32();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < B * T; ++r) {
    const float* e = w + int64_t(tokens[r]) * D;
    const float* p = positions_.data() + (r % T) * D;
    float* y = x + r * D;
    for (int64_t c = 0; c < D; ++c) y[c] = e[c] * scale + p[c];
  }
}

void CpuOps::embedding_backward(float* dw, TensorRef dx_ref, const int32_t* tokens, int64_t B, int64_t T, int64_t D,
                                float scale) {
  const float* dx = dx_ref.f32();
  // Rows of dw are split across threads by column block; each adds tokens in
  // order, so repeated tokens accumulate deterministically without atomics.
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < D; c0 += 16) {
    const int64_t c1 = std::min(D, c0 + 16);
    for (int64_t r = 0; r < B * T; ++r) {
      float* g = dw + int64_t(tokens[r]) * D;
      const float* d = dx + r * D;
      for (int64_t c = c0; c < c1; ++c) g[c] += d[c] * scale;
    }
  }
}

void CpuOps::embedding_at(float* x, int32_t token, int64_t position, const float* w, int64_t D, float scale) {
  const float* e = w + int64_t(token) * D;
  for (int64_t c = 0; c < D; ++c) x[c] = e[c] * scale + sinusoid(position, c, D);
}

}  // namespace ctrl::cpu
