// The output head fused with softmax cross-entropy, forward and backward, on
// row chunks so the full [N, V] logits are never materialized.
#include <cmath>
#include <vector>

#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/vec_math.h"

namespace ctrl::cpu {

double CpuOps::lm_head_loss(TensorRef h_ref, TensorRef w_ref, const float* b, const int32_t* targets, int64_t N,
                            int64_t D, int64_t V, float grad_scale, float* dh, float* dw, float* db, float* row_loss,
                            float* scratch, int64_t chunk_rows) {
  std::vector<double> losses(size_t(N), 0.0);
  // bf16 mode: h and w are bf16; the logits, softmax and loss stay fp32, and the
  // two backward products take a bf16 copy of the logit gradients.
  // fp16 mode widens h and w to fp32 (this CPU has no fp16 products) and keeps the logit gradients fp32.
  const bool low = h_ref.dtype == DType::BF16;
  uint16_t* dlogits_low = low && dh ? bf16_scratch(size_t(chunk_rows * V)) : nullptr;
  const float* h = low ? nullptr : widened(h_ref, size_t(N * D), 0);
  const float* w = low ? nullptr : widened(w_ref, size_t(V * D), 1);
  for (int64_t r0 = 0; r0 < N; r0 += chunk_rows) {
    const int64_t R = std::min(chunk_rows, N - r0);
    float* logits = scratch;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t v = 0; v < V; ++v) logits[r * V + v] = b[v];
    if (low) gemm_bf16(false, true, R, V, D, 1.0f, h_ref.bf16() + r0 * D, D, w_ref.bf16(), D, 1.0f, logits, V);
    else gemm_f32(false, true, R, V, D, 1.0f, h + r0 * D, D, w, D, 1.0f, logits, V);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < R; ++r) {
      float* row = logits + r * V;
      const int32_t target = targets[r0 + r];
      const float target_logit = target >= 0 ? row[target] : 0.0f;
      const float mx = row_max(row, V);
      const double sum = exp_shift_sum(row, V, mx);  // row now holds exp(logit - max)
      losses[size_t(r0 + r)] = target >= 0 ? double(mx) + std::log(sum) - double(target_logit) : 0.0;
      if (!dh) continue;
      if (target < 0) {
        row_scale(row, V, 0.0f);
        continue;
      }
      row_scale(row, V, float(double(grad_scale) / sum));  // softmax · grad_scale
      row[target] -= grad_scale;
    }
    if (!dh) continue;
    if (low) {
      convert_to_bf16(logits, dlogits_low, size_t(R * V));
      gemm_bf16(false, false, R, D, V, 1.0f, dlogits_low, V, w_ref.bf16(), D, 0.0f, dh + r0 * D, D);
      gemm_bf16(true, false, V, D, R, 1.0f, dlogits_low, V, h_ref.bf16() + r0 * D, D, 1.0f, dw, D);
    } else {
      gemm_f32(false, false, R, D, V, 1.0f, logits, V, w, D, 0.0f, dh + r0 * D, D);  // dh = dlogits·w
      gemm_f32(true, false, V, D, R, 1.0f, logits, V, h + r0 * D, D, 1.0f, dw, D);   // dw += dlogitsᵀ·h
    }
    add_column_sums(db, logits, R, V);
  }
  double total = 0;
  for (int64_t r = 0; r < N; ++r) {
    total += losses[size_t(r)];
    if (row_loss) row_loss[r] += float(losses[size_t(r)]);
  }
  return total;
}

}  // namespace ctrl::cpu
