// Optimizer updates on the CPU, element-wise over one parameter tensor.
#include <cmath>

#include "ops/cpu/cpu_ops.h"

namespace ctrl::cpu {

void CpuOps::adamw_update(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                          float eps, float weight_decay, int64_t t) {
  // The same arithmetic as torch.optim.AdamW (single-tensor path), in fp32.
  const double bias1 = 1.0 - std::pow(double(beta1), double(t));
  const double bias2_sqrt = std::sqrt(1.0 - std::pow(double(beta2), double(t)));
  const float step_size = float(double(lr) / bias1);
  const float bias2_sqrt_f = float(bias2_sqrt);
  const float decay = 1.0f - lr * weight_decay;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i];
    m[i] = beta1 * m[i] + (1.0f - beta1) * gi;
    v[i] = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    const float denom = std::sqrt(v[i]) / bias2_sqrt_f + eps;
    p[i] = p[i] * decay - step_size * (m[i] / denom);
  }
}

void CpuOps::adagrad_update(float* p, const float* g, float* acc, size_t n, float lr) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) {
    acc[i] += g[i] * g[i];
    p[i] -= lr * g[i] / std::sqrt(acc[i]);
  }
}

}  // namespace ctrl::cpu
