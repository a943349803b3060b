// LayerNorm over the last dimension, forward and backward, on the CPU.
#include <omp.h>

#include <cmath>
#include <vector>

#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/vec_math.h"

namespace ctrl::cpu {

void CpuOps::layernorm_forward(TensorRef out_ref, float* mean, float* rstd, TensorRef in_ref, const float* gamma,
                               const float* beta, int64_t N, int64_t D, float eps) {
  const bool low = out_ref.is_16bit();
  const bool low_in = in_ref.dtype == DType::BF16;  // a bf16 rounding of the residual stream
#pragma omp parallel
  {
    std::vector<float> row(low ? size_t(D) : 0), x_row(low_in ? size_t(D) : 0);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < N; ++r) {
      const float* x = low_in ? x_row.data() : in_ref.f32() + r * D;
      if (low_in) from_bf16(in_ref.bf16() + r * D, x_row.data(), D);
      float sum = 0;
      for (int64_t i = 0; i < D; ++i) sum += x[i];
      const float m = sum / float(D);
      float var = 0;
      for (int64_t i = 0; i < D; ++i) var += (x[i] - m) * (x[i] - m);
      const float s = 1.0f / std::sqrt(var / float(D) + eps);
      float* y = low ? row.data() : out_ref.f32() + r * D;
      for (int64_t i = 0; i < D; ++i) y[i] = (x[i] - m) * s * gamma[i] + beta[i];
      if (out_ref.dtype == DType::BF16) to_bf16(y, out_ref.u16() + r * D, D);
      if (out_ref.dtype == DType::F16) to_f16(y, out_ref.u16() + r * D, D);
      mean[r] = m;
      rstd[r] = s;
    }
  }
}

void CpuOps::layernorm_backward(TensorRef din_ref, float* dgamma, float* dbeta, TensorRef dout_ref, TensorRef in_ref,
                                const float* mean, const float* rstd, const float* gamma, int64_t N, int64_t D) {
  float* din = din_ref.f32();
  const float* dout = dout_ref.f32();
  const bool low_in = in_ref.dtype == DType::BF16;
  const int threads = omp_get_max_threads();
  // Per-thread partial dgamma/dbeta, combined in thread order (deterministic).
  std::vector<float> partial(size_t(threads) * 2 * size_t(D), 0.0f);
#pragma omp parallel num_threads(threads)
  {
    const int tid = omp_get_thread_num();
    float* pg = partial.data() + size_t(tid) * 2 * size_t(D);
    float* pb = pg + D;
    std::vector<float> x_row(low_in ? size_t(D) : 0);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < N; ++r) {
      const float* x = low_in ? x_row.data() : in_ref.f32() + r * D;
      if (low_in) from_bf16(in_ref.bf16() + r * D, x_row.data(), D);
      const float* dy = dout + r * D;
      const float m = mean[r], s = rstd[r];
      float mean_dxhat = 0, mean_dxhat_xhat = 0;
      for (int64_t i = 0; i < D; ++i) {
        const float xhat = (x[i] - m) * s;
        const float dxhat = dy[i] * gamma[i];
        mean_dxhat += dxhat;
        mean_dxhat_xhat += dxhat * xhat;
        pg[i] += dy[i] * xhat;
        pb[i] += dy[i];
      }
      mean_dxhat /= float(D);
      mean_dxhat_xhat /= float(D);
      float* dx = din + r * D;
      for (int64_t i = 0; i < D; ++i) {
        const float xhat = (x[i] - m) * s;
        dx[i] += s * (dy[i] * gamma[i] - mean_dxhat - xhat * mean_dxhat_xhat);
      }
    }
  }
  for (int t = 0; t < threads; ++t) {
    const float* pg = partial.data() + size_t(t) * 2 * size_t(D);
    for (int64_t i = 0; i < D; ++i) {
      dgamma[i] += pg[i];
      dbeta[i] += pg[D + i];
    }
  }
}

}  // namespace ctrl::cpu
