// Linear layer y = x·Wᵀ + b, forward and backward, on cuBLASLt (host code
// only: the products, conversions and column sums are CudaOps helpers).
// The type rules are the CPU backend's (ops/cpu/linear.cpp): bf16 products
// take bf16 operands with fp32 accumulation; fp16 products take an fp16 copy
// of the output gradient (which can overflow to inf, as loss scaling expects).
#include "ops/cuda/cuda_ops.h"

namespace ctrl::cuda {

void CudaOps::linear_forward(TensorRef out, TensorRef in, TensorRef w, const float* b, int64_t N, int64_t Dout,
                             int64_t Din) {
  CTRL_ASSERT(in.dtype == w.dtype);
  // One product with the bias in its epilogue; a 16-bit out is rounded once from the fp32 accumulator.
  gemm(false, true, N, Dout, Din, 1.0f, in, Din, w, Din, 0.0f, out, Dout, b);
}

void CudaOps::linear_backward(TensorRef din, float* dw, float* db, TensorRef dout, TensorRef in, TensorRef w,
                              int64_t N, int64_t Dout, int64_t Din, bool accumulate_din) {
  CTRL_ASSERT(in.dtype == w.dtype);
  const float beta = accumulate_din ? 1.0f : 0.0f;
  TensorRef g = dout;  // the output gradient in the products' type
  if (in.dtype != DType::F32 && dout.dtype != in.dtype) {
    CTRL_ASSERT(dout.dtype == DType::F32);
    g = TensorRef(scratch(kRound, size_t(N * Dout) * 2), in.dtype);
    convert(g, dout, size_t(N * Dout));
  }
  if (db) add_column_sums(db, dout, N, Dout, Dout);  // from dout as given (fp32, or bf16 when it came so)
  if (din.data) {
    if (din.dtype != DType::F32) CTRL_ASSERT(!accumulate_din);
    gemm(false, false, N, Din, Dout, 1.0f, g, Dout, w, Din, beta, din, Din);
  }
  gemm(true, false, Dout, Din, N, 1.0f, g, Dout, in, Din, 1.0f, dw, Din);
}

}  // namespace ctrl::cuda
