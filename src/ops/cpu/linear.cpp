// Linear layer y = x·Wᵀ + b, forward and backward, on the CPU, in fp32 or
// with bf16 inputs and weights (fp32 accumulation and gradients).
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/gemm.h"

namespace ctrl::cpu {

namespace {
// out[N, D] = the bias in every row, for a product that accumulates onto it; nothing without one.
void fill_rows(float* out, const float* b, int64_t N, int64_t D) {
  if (!b) return;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < D; ++c) out[r * D + c] = b[c];
}
}  // namespace

void CpuOps::linear_forward(TensorRef out_ref, TensorRef in_ref, TensorRef w_ref, const float* b, int64_t N,
                            int64_t Dout, int64_t Din) {
  if (in_ref.dtype == DType::BF16 && !bf16_widened() && out_ref.dtype != DType::F16) {  // bf16 kernels, bias fused
    gemm_bf16_bias(false, true, N, Dout, Din, in_ref.bf16(), Din, w_ref.bf16(), Din, b, out_ref.data,
                   out_ref.dtype == DType::BF16, Dout);
    return;
  }
  // fp32; fp16 (this CPU has no fp16 products) and widened bf16 (gemm.h) as
  // fp32 products of the 16-bit values, in the scratch slots the backward
  // reuses: x in 0, W in 1, a 16-bit result's fp32 values in 2.
  float* out = out_ref.dtype == DType::F32 ? out_ref.f32() : widened_scratch(size_t(N * Dout), 2);
  fill_rows(out, b, N, Dout);
  gemm_f32(false, true, N, Dout, Din, 1.0f, widened(in_ref, size_t(N * Din), 0), Din,
           widened(w_ref, size_t(Dout * Din), 1), Din, b ? 1.0f : 0.0f, out, Dout);
  if (out_ref.dtype != DType::F32) store_as(out_ref, out, size_t(N * Dout));
}

void CpuOps::linear_backward(TensorRef din_ref, float* dw, float* db, TensorRef dout_ref, TensorRef in_ref,
                             TensorRef w_ref, int64_t N, int64_t Dout, int64_t Din, bool accumulate_din) {
  const float beta = accumulate_din ? 1.0f : 0.0f;
  if (in_ref.dtype == DType::BF16 && !bf16_widened()) {  // bf16 kernels
    const uint16_t* g = nullptr;  // dout in bf16
    if (dout_ref.dtype == DType::BF16) {
      g = dout_ref.bf16();
      if (db) add_column_sums(db, g, N, Dout);
    } else {
      uint16_t* rounded = bf16_scratch(size_t(N * Dout));
      convert_to_bf16(dout_ref.f32(), rounded, size_t(N * Dout));
      g = rounded;
      if (db) add_column_sums(db, dout_ref.f32(), N, Dout);
    }
    if (din_ref.dtype == DType::BF16) {
      CTRL_ASSERT(!accumulate_din);
      gemm_bf16_bias(false, false, N, Din, Dout, g, Dout, w_ref.bf16(), Din, nullptr, din_ref.data, true, Din);
    } else if (din_ref.data) {
      gemm_bf16(false, false, N, Din, Dout, 1.0f, g, Dout, w_ref.bf16(), Din, beta, din_ref.f32(), Din);
    }
    gemm_bf16(true, false, Dout, Din, N, 1.0f, g, Dout, in_ref.bf16(), Din, 1.0f, dw, Din);
    return;
  }
  // fp32; fp16 and widened bf16 as fp32 products of the 16-bit values: an
  // fp32 dout is rounded to the operands' type first (fp16's rounding and
  // overflow as on a GPU, bf16's as oneDNN's kernels round it) and widened
  // once for both products (slot 2), as are x (0) and W (1). dW comes first,
  // so that a 16-bit dx can take x's slot for its fp32 values.
  const size_t n_out = size_t(N * Dout);
  const float* g = dout_ref.dtype != DType::F32 ? widened(dout_ref, n_out, 2)
                   : in_ref.dtype != DType::F32 ? rounded_through(in_ref.dtype, dout_ref.f32(), n_out, 2)
                                                : dout_ref.f32();
  const float* w = widened(w_ref, size_t(Dout * Din), 1);
  gemm_f32(true, false, Dout, Din, N, 1.0f, g, Dout, widened(in_ref, size_t(N * Din), 0), Din, 1.0f, dw, Din);
  if (din_ref.data && din_ref.dtype != DType::F32) {
    CTRL_ASSERT(!accumulate_din);
    float* din = widened_scratch(size_t(N * Din), 0);
    gemm_f32(false, false, N, Din, Dout, 1.0f, g, Dout, w, Din, 0.0f, din, Din);
    store_as(din_ref, din, size_t(N * Din));
  } else if (din_ref.data) {
    gemm_f32(false, false, N, Din, Dout, 1.0f, g, Dout, w, Din, beta, din_ref.f32(), Din);
  }
  if (db) add_column_sums(db, dout_ref.dtype == DType::F32 ? dout_ref.f32() : g, N, Dout);  // the unrounded dout
}

}  // namespace ctrl::cpu
