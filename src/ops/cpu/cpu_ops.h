// The CPU backend: OpenMP over rows/heads, oneDNN matrix products (gemm.h).
// Every op is deterministic for a fixed thread count: reductions split rows
// statically and combine per-thread partials in thread order.
#pragma once
#include <memory>
#include <vector>

#include "ops/cpu/thread_adapter.h"
#include "ops/ops.h"
#include "ops/positions.h"

namespace ctrl::cpu {

class CpuOps final : public Ops {
 public:
  // threads > 0 sets the OpenMP thread count (process-wide, as OpenMP has one).
  // Without it, and without OMP_NUM_THREADS, the count adapts to a shared
  // machine between steps (thread_adapter.h). Above the usable CPUs, pinned
  // or adapted, the matrix products run tiled (gemm.h).
  explicit CpuOps(int threads = 0);
  ~CpuOps() override;
  const char* name() const override { return "cpu"; }
  int threads() const override;
  double measure_peak_gflops(bool bf16, double seconds) override;
  std::string between_steps() override;
  std::string between_tokens() override;
  // Memory is host memory (aligned_alloc); upload and download are memcpy.
  void* allocate(size_t bytes, const char* name) override;
  void release(void* p) override;
  void upload(void* dst, const void* host_src, size_t bytes) override;
  void download(void* host_dst, const void* src, size_t bytes) override;
  void synchronize() override {}
  std::string precision_note(DType low) const override;
  Bf16Choice choose_bf16_products(const std::string& setting, double seconds) override;
  std::string bf16_path() const override;
  void linear_forward(TensorRef out, TensorRef in, TensorRef w, const float* b, int64_t N, int64_t Dout,
                      int64_t Din) override;
  void linear_backward(TensorRef din, float* dw, float* db, TensorRef dout, TensorRef in, TensorRef w, int64_t N,
                       int64_t Dout, int64_t Din, bool accumulate_din) override;
  void layernorm_forward(TensorRef out, float* mean, float* rstd, TensorRef in, const float* gamma, const float* beta,
                         int64_t N, int64_t D, float eps) override;
  void layernorm_backward(TensorRef din, float* dgamma, float* dbeta, TensorRef dout, TensorRef in, const float* mean,
                          const float* rstd, const float* gamma, int64_t N, int64_t D) override;
  void attention_forward(TensorRef out, TensorRef saved, TensorRef qkv, int64_t B, int64_t T, int64_t D,
                         int64_t H) override;
  void attention_backward(TensorRef dqkv, TensorRef dout, TensorRef qkv, TensorRef out, TensorRef saved, int64_t B,
                          int64_t T, int64_t D, int64_t H) override;
  void embedding_forward(TensorRef x, const int32_t* tokens, const float* w, int64_t B, int64_t T, int64_t D,
                         float scale) override;
  void embedding_backward(float* dw, TensorRef dx, const int32_t* tokens, int64_t B, int64_t T, int64_t D,
                          float scale) override;
  void embedding_at(float* x, int32_t token, int64_t position, const float* w, int64_t D, float scale) override;
  void attention_decode(float* out, const float* q, const float* k_cache, const float* v_cache, int64_t n, int64_t D,
                        int64_t H) override;
  void relu_forward(TensorRef x, size_t n) override;
  void relu_backward(TensorRef dx, TensorRef y, size_t n) override;
  void dropout(TensorRef x, size_t n, const DropoutSpec& spec) override;
  void residual_add(TensorRef y, TensorRef x, TensorRef b, size_t n, const DropoutSpec& spec) override;
  void copy(TensorRef dst, TensorRef src, size_t n) override;
  void lm_head_loss(TensorRef h, TensorRef w, const float* b, const int32_t* targets, int64_t N, int64_t D, int64_t V,
                    float grad_scale, float* dh, float* dw, float* db, double* loss_sum, float* row_loss, float* scratch,
                    int64_t chunk_rows) override;
  void lm_head_distill(TensorRef h, TensorRef w, const float* b, const int32_t* targets, const TeacherHead& teacher,
                       int64_t N, int64_t D, int64_t V, float alpha, float temperature, float grad_scale, float* dh,
                       float* dw, float* db, double* loss_sum, double* kl_sum, float* scratch,
                       int64_t chunk_rows) override;
  void sum_squares(const float* x, size_t n, double* out) override;
  void clip_factor(const double* sum_squares, double loss_scale, double max_norm, float* factor) override;
  void scale(float* x, size_t n, float factor) override;
  void fill(float* x, size_t n, float value) override;
  void adamw_update(float* params, const float* grads, float* m, float* v, const std::vector<UpdateSegment>& segments,
                    float lr, float beta1, float beta2, float eps, int64_t t, const float* grad_factor) override;
  void adagrad_update(float* params, const float* grads, float* acc, const std::vector<UpdateSegment>& segments,
                      float lr, const float* grad_factor) override;

 private:
  std::unique_ptr<ThreadAdapter> adapter_;  // null when the thread count is pinned
  std::vector<float> positions_;  // cached sinusoidal table [T, D]
  int64_t positions_T_ = 0, positions_D_ = 0;
  std::vector<float> attention_scratch_;  // per thread: T x T, and q, k, v, out head slices in fp32
  std::vector<uint16_t> bf16_scratch_;    // bf16 copies of fp32 gradients for bf16 products
  // fp32 copies of fp16 operands and of widened bf16 ones (linear: 0 x or a 16-bit
  // dx, 1 W, 2 dy or a 16-bit result; 3, 4: lm_head_distill's teacher)
  std::vector<float> widened_[5];
  std::vector<float> head_dh_partial_;    // lm_head_loss: per group of vocabulary blocks, its share of dh
  std::vector<uint16_t> head_dlogits_;    // lm_head_loss: per thread, one block's bf16 logit gradients
  std::vector<float> distill_rows_;       // lm_head_distill: per thread, two rows of V
  // lm_head_loss, and lm_head_distill when `teacher` is not null (lm_head.cpp).
  void head_loss(TensorRef h, TensorRef w, const float* b, const int32_t* targets, int64_t N, int64_t D, int64_t V,
                 float grad_scale, float* dh, float* dw, float* db, double* loss_sum, float* row_loss, float* scratch,
                 int64_t chunk_rows, const TeacherHead* teacher, float alpha, float temperature, double* kl_sum);
  uint16_t* bf16_scratch(size_t n);
  // The tensor as fp32: itself, or its n 16-bit elements widened into scratch `slot`.
  const float* widened(TensorRef t, size_t n, int slot);
  // Scratch `slot` of widened() as room for n fp32 results.
  float* widened_scratch(size_t n, int slot);
  // x's n values rounded to `low` (bf16 or fp16) and back, in scratch `slot`: a 16-bit operand held in fp32.
  const float* rounded_through(DType low, const float* x, size_t n, int slot);
};

// Shared helpers for the op files.
// Adds row sums of x[rows, cols] into out[cols], deterministically.
void add_column_sums(float* out, const float* x, int64_t rows, int64_t cols);
void add_column_sums(float* out, const uint16_t* x_bf16, int64_t rows, int64_t cols);
// Parallel conversions between fp32 and bf16 buffers.
void convert_to_bf16(const float* in, uint16_t* out, size_t n);
void convert_from_bf16(const uint16_t* in, float* out, size_t n);
// Parallel conversions between fp32 and a buffer of `type` (F32, BF16 or F16).
void store_as(TensorRef out, const float* in, size_t n);
void load_as_f32(TensorRef in, float* out, size_t n);
// Sinusoidal position values: ops/positions.h (shared with the other backends).
using ctrl::sinusoid;

}  // namespace ctrl::cpu
