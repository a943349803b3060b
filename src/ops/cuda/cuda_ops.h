// The CUDA backend (src/ops/cuda/): device memory from cudaMalloc, one stream
// per backend on which every op is issued in order, matrix products through
// cuBLASLt, and its own kernels for everything else (one file per op group,
// as on the CPU). Private to this folder and ops/backends.cpp.
//
// Promises beyond ops.h:
//  - Ops are called on a thread whose current device is this backend's (the
//    thread that made it; the NCCL communicator's thread sets it itself).
//    Allocation and transfers set the device themselves.
//  - Asynchronous: ops return once their work is queued on the stream.
//    download() and synchronize() wait for it; upload() returns when the host
//    buffer may be reused.
//  - Deterministic: the same inputs on the same GPU give bit-identical
//    results. No kernel adds floats with atomics; every reduction has a fixed
//    shape (a fixed number of partials combined in a fixed order), and
//    cuBLASLt's algorithm for a shape is chosen once and cached.
//  - fp32 products run in fp32 (TF32 only when CTRL_CUDA_TF32=1 is set);
//    bf16/fp16 products accumulate in fp32.
//  - cuBLASLt is loaded at run time (dlopen), so a machine without it still
//    runs every op: the products then take a plain fallback kernel (slow),
//    with one warning. CTRL_CUDA_NO_CUBLASLT=1 forces that path (to tell a
//    cuBLASLt problem from a kernel problem).
//
// Run on one GPU so far, an NVIDIA H200 (sm_90), where every CUDA test
// passed; sm_75 to sm_89 have never run it (docs/design-backend.md, "The
// CUDA backend").
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "ops/ops.h"

namespace ctrl::cuda {

// Throws ctrl::Error naming the call when a CUDA runtime / cuBLASLt call fails.
void check(cudaError_t e, const char* what);
void check(cublasStatus_t s, const char* what);
#define CTRL_CUDA(call) ::ctrl::cuda::check((call), #call)
// After a kernel launch: a bad configuration throws here, not at the next sync.
#define CTRL_CUDA_LAUNCHED(name) ::ctrl::cuda::check(cudaGetLastError(), name)

class CudaOps final : public Ops {
 public:
  explicit CudaOps(int device);
  ~CudaOps() override;
  const char* name() const override { return "cuda"; }
  double measure_peak_gflops(bool bf16, double seconds) override;
  void* allocate(size_t bytes, const char* name) override;
  void release(void* p) override;
  void upload(void* dst, const void* host_src, size_t bytes) override;
  void download(void* host_dst, const void* src, size_t bytes) override;
  void synchronize() override;
  // Device memory cannot be lent to a host data plane: over more than one
  // rank (or with ZeRO-1) the trainer hands collectives to NCCL.
  bool host_memory() const override { return false; }
  uint64_t peak_device_bytes() const override { return peak_bytes_; }
  uint64_t device_room_bytes() const override;
  int gpu() const override { return device_; }
  std::string gpu_name() const override { return gpu_name_; }
  std::string gpu_uuid() const override { return gpu_uuid_; }
  int timer_mark() override;
  double timer_seconds(int from, int to) override;
  void timer_reset() override { timer_next_ = 0; }
  void* work_queue() const override { return stream_; }
  std::string precision_note(DType low) const override;
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
  size_t attention_saved_bytes(int64_t B, int64_t T, int64_t D, int64_t H, DType qkv_type) const override;
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

  // --- Shared by the op files (not part of Ops). ---
  cudaStream_t stream() const { return stream_; }
  int sm_major() const { return sm_major_; }
  // C[M,N] = alpha·op(A)·op(B) + beta·C (+ bias[N] on every row when bias is
  // not null), row-major as ops/cpu/gemm.h states it, for `batch` products
  // whose operands lie stride_* elements apart. A and B have one type (f32,
  // bf16 or f16); C may be f32 or either 16-bit type (rounded once, to nearest
  // even). beta must be 0 when C is 16-bit. cuBLASLt runs it with the
  // algorithm its heuristic picks for the shape (cached); shapes it has no
  // algorithm for run on a plain fallback kernel.
  void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, TensorRef A, int64_t lda,
            TensorRef B, int64_t ldb, float beta, TensorRef C, int64_t ldc, const float* bias = nullptr,
            int64_t batch = 1, int64_t stride_a = 0, int64_t stride_b = 0, int64_t stride_c = 0);
  // dst[i] = src[i] converted (round to nearest even into 16-bit types).
  void convert(TensorRef dst, TensorRef src, size_t n);
  // out[c] += Σ_r x[r·ld + c] (x fp32 or 16-bit), rows summed in a fixed order.
  void add_column_sums(float* out, TensorRef x, int64_t rows, int64_t cols, int64_t ld);
  // Scratch device memory owned by the backend, one buffer per slot, grown on
  // demand (growth waits for the stream, so earlier users have finished).
  // A slot's contents are valid until the next call that uses the same slot.
  enum Slot {
    kRound,
    kF32Out,
    kPartials,
    kScores,
    kGradS,
    kHeadLoss,
    kHeadLow,
    kSort,
    kHeadKl,
    kHeadsIn,
    kHeadsOut,
    kHeadsGrad,
    kHeadLogits,
    kBias16,
    kRowDot,
    kSlots
  };
  void* scratch(Slot slot, size_t bytes);
  // The sinusoidal table [rows >= T, D] in device memory, from the host's
  // ops/positions.h values (uploaded once per width and per growth in T).
  const float* positions(int64_t T, int64_t D);
  // Copies `parts` blocks of D = H·hd columns between the token-major layout
  // [B, T, parts·D] and the heads-major [parts, B, H, T, hd] (to_heads_layout:
  // src is token-major), converting the element type (attention.cu).
  void to_heads(void* dst, DType dst_type, const void* src, DType src_type, int64_t B, int64_t T, int64_t H, int64_t hd,
                int64_t parts, bool to_heads_layout);
  // Whether attention of that type and width runs on the fused kernels
  // (attention_fused.cu): CTRL_CUDA_ATTENTION=fused on a GPU and build that
  // can run them (prepare_fused_attention), bf16, heads of 64 or 80 columns
  // whose tiles fit the GPU's shared memory.
  // A function of the device and the shape alone, so the layout's
  // attention_saved_bytes and the calls agree.
  bool fused_attention(DType inner, int64_t D, int64_t H) const;
  // Once, at construction, with CTRL_CUDA_ATTENTION=fused: turns it off with
  // a note where this GPU or build cannot run the fused kernels (older than
  // sm_80, or code built only for such GPUs), else lets the kernels of every
  // width fused_attention() allows take their dynamic shared memory.
  void prepare_fused_attention();
  void fused_attention_forward(TensorRef out, TensorRef saved, TensorRef qkv, int64_t B, int64_t T, int64_t D,
                               int64_t H);
  void fused_attention_backward(TensorRef dqkv, TensorRef dout, TensorRef qkv, TensorRef out, TensorRef saved,
                                int64_t B, int64_t T, int64_t D, int64_t H);

 private:
  struct GemmPlan;  // gemm.cu
  GemmPlan* plan(const std::string& key, bool* found);
  // lm_head_loss, and with a teacher lm_head_distill (lm_head.cu).
  void head(TensorRef h, TensorRef w, const float* b, const int32_t* targets, int64_t N, int64_t D, int64_t V,
            float grad_scale, float* dh, float* dw, float* db, double* loss_sum, float* row_loss, float* logits,
            int64_t chunk_rows, const TeacherHead* teacher, float alpha, float temperature, double* kl_sum);
  void init_gemm();     // loads cuBLASLt (the major version built against) and makes the handle
  void release_gemm();  // the plans and the handle
  // Every device buffer comes from here, so that peak_device_bytes() sees it;
  // out of memory is a one-line error naming `what`.
  void* device_malloc(size_t bytes, const std::string& what);
  void device_free(void* p);
  void forget(void* p);  // drops p from the live-bytes accounting
  int device_ = 0, sm_major_ = 0, sm_minor_ = 0;
  std::string gpu_name_, gpu_uuid_;
  bool tf32_ = false;
  bool fused_attention_ = false;  // CTRL_CUDA_ATTENTION=fused
  size_t max_shared_optin_ = 0;   // dynamic shared memory a block may opt in to
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<std::string, GemmPlan*> plans_;
  void* slots_[kSlots] = {};
  size_t slot_bytes_[kSlots] = {};
  // One table per width: a student and its teacher (distillation) may differ.
  struct PositionTable {
    float* data = nullptr;
    int64_t rows = 0;
  };
  std::map<int64_t, PositionTable> positions_;
  // The optimizer's segment table on the device, re-uploaded when the list changes.
  std::vector<UpdateSegment> segments_host_;
  void* segments_dev_ = nullptr;
  size_t segments_capacity_ = 0;
  std::unordered_map<const void*, size_t> sizes_;
  std::vector<cudaEvent_t> timer_events_;  // the profiler's marks, reused after timer_reset
  size_t timer_next_ = 0;
  uint64_t live_bytes_ = 0, peak_bytes_ = 0;
  const void* segment_table(const std::vector<UpdateSegment>& segments);
};

}  // namespace ctrl::cuda
