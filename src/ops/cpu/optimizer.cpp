// Optimizer updates on the CPU: one parallel pass over all segments, each
// thread taking a contiguous share of the concatenated elements.
#include <omp.h>

#include <cmath>

#include "ops/cpu/cpu_ops.h"

namespace ctrl::cpu {

namespace {

// Calls update(segment, first, count) for this thread's share of the elements.
template <class F>
void for_my_share(const std::vector<UpdateSegment>& segments, F&& update) {
  size_t total = 0;
  for (const auto& s : segments) total += s.n;
  const size_t threads = size_t(omp_get_num_threads()), tid = size_t(omp_get_thread_num());
  // Shares are multiples of 16 elements so vector loops stay aligned with the buffers.
  const size_t chunk = (total + threads * 16 - 1) / (threads * 16) * 16;
  const size_t lo = std::min(total, tid * chunk), hi = std::min(total, lo + chunk);
  size_t start = 0;
  for (const auto& s : segments) {
    const size_t a = std::max(lo, start), b = std::min(hi, start + s.n);
    if (a < b) update(s, a - start, b - a);
    start += s.n;
  }
}

}  // namespace

void CpuOps::adamw_update(float* params, const float* grads, float* m, float* v,
                          const std::vector<UpdateSegment>& segments, float lr, float beta1, float beta2, float eps,
                          int64_t t, const float* grad_factor) {
  // The same arithmetic as torch.optim.AdamW (single-tensor path), in fp32.
  const double bias1 = 1.0 - std::pow(double(beta1), double(t));
  const float step_size = float(double(lr) / bias1);
  const float bias2_sqrt = float(std::sqrt(1.0 - std::pow(double(beta2), double(t))));
  const float factor = grad_factor ? *grad_factor : 1.0f;
#pragma omp parallel
  for_my_share(segments, [&](const UpdateSegment& s, size_t first, size_t count) {
    float* p = params + s.param_offset + first;
    const float* g = grads + s.state_offset + first;
    float* ms = m + s.state_offset + first;
    float* vs = v + s.state_offset + first;
    const float decay = 1.0f - lr * s.weight_decay;
#pragma omp simd
    for (size_t i = 0; i < count; ++i) {
      const float gi = g[i] * factor;  // × 1 is exact: unclipped steps are unchanged
      ms[i] = beta1 * ms[i] + (1.0f - beta1) * gi;
      vs[i] = beta2 * vs[i] + (1.0f - beta2) * gi * gi;
      const float denom = std::sqrt(vs[i]) / bias2_sqrt + eps;
      p[i] = p[i] * decay - step_size * (ms[i] / denom);
    }
  });
}

void CpuOps::adagrad_update(float* params, const float* grads, float* acc, const std::vector<UpdateSegment>& segments,
                            float lr, const float* grad_factor) {
  const float factor = grad_factor ? *grad_factor : 1.0f;
#pragma omp parallel
  for_my_share(segments, [&](const UpdateSegment& s, size_t first, size_t count) {
    float* p = params + s.param_offset + first;
    const float* g = grads + s.state_offset + first;
    float* a = acc + s.state_offset + first;
#pragma omp simd
    for (size_t i = 0; i < count; ++i) {
      const float gi = g[i] * factor;
      a[i] += gi * gi;
      p[i] -= lr * gi / std::sqrt(a[i]);
    }
  });
}

}  // namespace ctrl::cpu
