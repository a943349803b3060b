// Linear layer y = x·Wᵀ + b, forward and backward, on the CPU.
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/gemm.h"

namespace ctrl::cpu {

void CpuOps::linear_forward(TensorRef out_ref, TensorRef in_ref, const float* w, const float* b, int64_t N,
                            int64_t Dout, int64_t Din) {
  float* out = out_ref.f32();
  const float* in = in_ref.f32();
  float beta = 0.0f;
  if (b) {  // start from the bias so the product accumulates onto it in one pass
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; ++r)
      for (int64_t c = 0; c < Dout; ++c) out[r * Dout + c] = b[c];
    beta = 1.0f;
  }
  gemm_f32(false, true, N, Dout, Din, 1.0f, in, Din, w, Din, beta, out, Dout);
}

void CpuOps::linear_backward(TensorRef din_ref, float* dw, float* db, TensorRef dout_ref, TensorRef in_ref,
                             const float* w, int64_t N, int64_t Dout, int64_t Din, bool accumulate_din) {
  const float* dout = dout_ref.f32();
  const float* in = in_ref.f32();
  if (din_ref.data)
    gemm_f32(false, false, N, Din, Dout, 1.0f, dout, Dout, w, Din, accumulate_din ? 1.0f : 0.0f, din_ref.f32(), Din);
  gemm_f32(true, false, Dout, Din, N, 1.0f, dout, Dout, in, Din, 1.0f, dw, Din);
  if (db) add_column_sums(db, dout, N, Dout);
}

}  // namespace ctrl::cpu
