// The ops interface: every computation of the model goes through it, so a
// backend (cpu/ now, cuda/ later) is a folder implementing this class and the
// model never sees a backend header. Each op has a plain reference semantics
// stated here; tests run every backend against the CPU reference.
//
// The backend also owns memory (allocate, upload, download, fill, synchronize):
// the pointers that ops take are the backend's (a DeviceArray's data()), and
// host code never reads or writes through them; host data moves only by
// upload and download, through host staging (core/buffer.h). The `checked`
// backend enforces this on the CPU (docs/design-backend.md).
//
// Shapes: B batch, T context, D width, H heads, N = B*T rows.
// Activations are passed as TensorRef (pointer + element type) so that bf16 and
// fp16 activations (mixed precision) reuse the same signatures; parameters,
// their gradients, LayerNorm statistics and optimizer state are always fp32.
// Parameter gradients accumulate (+=); activation gradients overwrite unless
// an op says otherwise.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace ctrl {

struct TensorRef {
  void* data = nullptr;
  DType dtype = DType::F32;
  TensorRef() = default;
  TensorRef(float* p) : data(p), dtype(DType::F32) {}  // NOLINT: fp32 buffers convert implicitly
  TensorRef(const float* p) : data(const_cast<float*>(p)), dtype(DType::F32) {}  // NOLINT: read-only uses
  TensorRef(void* p, DType t) : data(p), dtype(t) {}
  float* f32() const {
    CTRL_ASSERT(dtype == DType::F32);
    return static_cast<float*>(data);
  }
  uint16_t* bf16() const {
    CTRL_ASSERT(dtype == DType::BF16);
    return static_cast<uint16_t*>(data);
  }
  bool is_16bit() const { return dtype == DType::BF16 || dtype == DType::F16; }
  uint16_t* u16() const {  // either 16-bit float, as bits
    CTRL_ASSERT(is_16bit());
    return static_cast<uint16_t*>(data);
  }
};

// Masks are pure functions of (seed, stream, first_index + i), recomputed in
// backward. The model numbers elements by global sequence index, so a
// sequence gets the same mask whichever micro-batch or rank processes it.
struct DropoutSpec {
  float p = 0;  // probability of zeroing; 0 disables
  uint64_t seed = 0;
  uint64_t stream = 0;       // distinguishes the dropout sites (layer, branch)
  uint64_t first_index = 0;  // index of the buffer's first element
};

struct UpdateSegment {
  size_t param_offset = 0;  // in the parameter buffer
  size_t state_offset = 0;  // in the gradient and optimizer-state buffers
  size_t n = 0;
  float weight_decay = 0;  // AdamW only
};

// The teacher's side of lm_head_distill: the teacher model's head input and
// tied output head (its own width Dt), and room for one chunk of its logits.
struct TeacherHead {
  TensorRef h;               // [N, Dt], the same element type as the student's h
  TensorRef w;               // [V, Dt], the same element type as h
  const float* b = nullptr;  // [V]
  int64_t D = 0;             // Dt
  float* scratch = nullptr;  // chunk_rows × head_row_stride(V) floats
};

// The row stride a backend may give the head's logits in its scratch: V
// rounded up to 16 elements, so that rows of fp32 logits and of their 16-bit
// copies start 64- and 32-byte aligned and GPU products get aligned leading
// dimensions whatever V is (the `ctrl` preset's V = 246,534 is not a multiple
// of 8). The CPU backend keeps the rows V apart.
inline int64_t head_row_stride(int64_t V) { return (V + 15) / 16 * 16; }
// Vocabulary entries per block of the CPU head (ops/cpu/lm_head.cpp); the
// planner counts that backend's per-thread widened blocks by it.
inline constexpr int64_t kCpuHeadVocabBlock = 2048;
// Bytes of the causal softmax probs[B,H,T,T] of type `type`, which the CPU's
// attention keeps from forward to backward.
inline size_t attention_probs_bytes(int64_t B, int64_t T, int64_t H, DType type) {
  return size_t(B) * size_t(H) * size_t(T) * size_t(T) * dtype_size(type);
}

class Ops {
 public:
  virtual ~Ops() = default;
  virtual const char* name() const = 0;
  // Worker threads of a CPU backend (the OpenMP thread count), for reports; 0 elsewhere.
  virtual int threads() const { return 0; }
  // Measured peak of this backend's matrix products (GFLOP/s) in fp32 or bf16,
  // running for about `seconds` (ctrl bench, ctrl plan --hardware cpu).
  virtual double measure_peak_gflops(bool bf16, double seconds) = 0;
  // Called between optimizer steps (trainer, ctrl bench), and between
  // generated tokens: a backend may adapt itself there (the CPU backend its
  // thread count to a shared machine and to one-row work,
  // ops/cpu/thread_adapter.h). Returns a note for the user, or "".
  virtual std::string between_steps() { return ""; }
  virtual std::string between_tokens() { return ""; }

  // Memory. `name` says what the buffer holds (e.g. "model.params"), for
  // diagnostics. Returns zero-filled, 64-byte-aligned backend memory.
  virtual void* allocate(size_t bytes, const char* name) = 0;
  virtual void release(void* p) = 0;
  // Host -> backend and backend -> host copies of `bytes` bytes; they return
  // when the copy is complete (the host buffer may be reused).
  virtual void upload(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, size_t bytes) = 0;
  // The fence: returns when all work issued so far has finished (on the CPU
  // every op finishes before it returns). The trainer calls it before it hands
  // gradients that ops wrote to the communicator (dist/communicator.h).
  virtual void synchronize() = 0;
  // A communicator whose data plane runs on the host (MPI) reads and writes
  // backend memory directly when the backend's memory is host memory (cpu,
  // checked). It does so only between begin_host_access(p) and the matching
  // end_host_access(p), p being a pointer into one allocation; the checked
  // backend opens that allocation to the host for the duration.
  virtual void begin_host_access(const void* p) {}
  virtual void end_host_access(const void* p) {}
  // Whether the backend's memory is host memory that such a data plane may
  // lend (cpu, checked); false for device memory (cuda), which a
  // multi-rank run would need a device communicator (NCCL) for.
  virtual bool host_memory() const { return true; }
  // High-water mark of the device memory this backend allocated (buffers,
  // scratch, library workspace; not the driver's context), for ctrl bench;
  // 0 for backends whose memory is host memory (see peak resident memory).
  virtual uint64_t peak_device_bytes() const { return 0; }
  // Device memory this backend can still fill: what the device has free now
  // plus what the backend already holds (the buffers a run's plan counts);
  // 0 for backends whose memory is host memory. The trainer's memory check
  // holds a GPU run to it before the engine's buffers are allocated.
  virtual uint64_t device_room_bytes() const { return 0; }
  // The GPU this backend runs on (as in --device cuda:N) and its name
  // (e.g. "NVIDIA H200"), or -1 and "" for host backends.
  virtual int gpu() const { return -1; }
  virtual std::string gpu_name() const { return ""; }
  // The GPU's UUID as nvidia-smi -L prints it ("GPU-" and 32 hex digits in
  // groups), "" for host backends: which physical device this is, whatever
  // number CUDA_VISIBLE_DEVICES gave it.
  virtual std::string gpu_uuid() const { return ""; }
  // The queue this backend's ops run on, for a device communicator that
  // orders its collectives after them by events instead of host fences (the
  // cuda backend's cudaStream_t); null for backends whose ops finish on return.
  virtual void* work_queue() const { return nullptr; }
  // A clock on the backend's queue, for the profiler (`ctrl bench
  // --profile`): timer_mark() records a point after every op queued so far
  // and returns its number; timer_seconds(from, to) waits for `to` and gives
  // the device time between the two; timer_reset() lets the numbers be used
  // again. -1 from timer_mark(): no such clock (ops finish on return).
  virtual int timer_mark() { return -1; }
  virtual double timer_seconds(int from, int to) { return 0; }
  virtual void timer_reset() {}
  // How a CPU backend runs bf16 products (train.cpu_bf16): "native" (oneDNN's
  // bf16 kernels), "widened" (fp32 products of the bf16 values), or "auto":
  // both measured for about `seconds` each, in alternating halves so that a
  // passing load on the machine slows both alike, widened when its fastest
  // is at least kWidenedWorthIt times the native fastest. auto measures once
  // per process and then repeats that answer, so the runs of one process agree. Where oneDNN has no
  // bf16 kernels for the CPU every setting runs widened. Returns the path
  // taken and what was measured (0: not measured this call). Other backends
  // run bf16 natively and measure nothing.
  struct Bf16Choice {
    bool widened = false;
    bool no_bf16_kernels = false;  // oneDNN has no bf16 products for this CPU: always widened
    double native_gflops = 0, widened_gflops = 0;
    // For the user: "widened to fp32 (auto measured oneDNN's bf16 kernels at
    // 153.4 GFLOP/s, the widened products at 263.1; ...)", or "native (train.cpu_bf16)" when pinned.
    std::string describe() const;
  };
  static constexpr double kWidenedWorthIt = 1.1;
  virtual Bf16Choice choose_bf16_products(const std::string& setting, double seconds) { return {}; }
  // The bf16 products as they run now: "native", "emulated" (oneDNN's kernels
  // on a CPU without AVX512-BF16 or AMX) or "widened" (chosen, or no oneDNN
  // bf16 kernels for this CPU).
  virtual std::string bf16_path() const { return "native"; }
  // What a user should know about running products in `low` precision on this
  // backend's hardware (emulated, or no faster than fp32), or "" when it runs natively.
  virtual std::string precision_note(DType low) const = 0;

  // out[N,Dout] = in[N,Din] · w[Dout,Din]ᵀ + b[Dout] (b may be null). With
  // bf16 `in` the weight is its bf16 copy and the product runs in bf16 with
  // fp32 accumulation; fp16 likewise (a CPU without fp16 arithmetic widens the
  // fp16 operands to fp32); out may be any of the types.
  virtual void linear_forward(TensorRef out, TensorRef in, TensorRef w, const float* b, int64_t N, int64_t Dout,
                              int64_t Din) = 0;
  // din[N,Din] = dout · w (overwritten; added when accumulate_din), dw += doutᵀ · in, db += Σ_rows dout.
  // din may be null (no input gradient needed).
  // dw and db are fp32. With bf16 `in` and `w`, dout may be bf16 (used as is)
  // or fp32 (rounded to bf16 for both products), and din may be bf16 (then
  // not accumulated). Otherwise din and dout are fp32; with fp16 `in` and `w`
  // the products take an fp16 copy of dout (it can overflow to inf, which loss
  // scaling detects).
  virtual void linear_backward(TensorRef din, float* dw, float* db, TensorRef dout, TensorRef in, TensorRef w,
                               int64_t N, int64_t Dout, int64_t Din, bool accumulate_din) = 0;

  // out = (in - mean) * rstd * gamma + beta per row of D; saves mean and rstd (fp32).
  // `in` is fp32, or bf16 (a rounding of the fp32 residual stream, under bf16); dout and din are fp32.
  virtual void layernorm_forward(TensorRef out, float* mean, float* rstd, TensorRef in, const float* gamma,
                                 const float* beta, int64_t N, int64_t D, float eps) = 0;
  // din += ∂/∂in (accumulates: din is the residual stream's gradient), dgamma += , dbeta += .
  virtual void layernorm_backward(TensorRef din, float* dgamma, float* dbeta, TensorRef dout, TensorRef in,
                                  const float* mean, const float* rstd, const float* gamma, int64_t N, int64_t D) = 0;

  // Causal multi-head attention. qkv[B,T,3D] holds q | k | v per row; heads are
  // D/H-wide column blocks; out[B,T,D], of qkv's type. `saved` (of qkv's type)
  // is what the forward keeps for the backward, attention_saved_bytes() of it:
  // on the CPU the softmax probs[B,H,T,T] (the only T×T matrix kept per head),
  // computed in fp32 and stored in qkv's type, the 16-bit types' rounding being
  // what their products take.
  virtual void attention_forward(TensorRef out, TensorRef saved, TensorRef qkv, int64_t B, int64_t T, int64_t D,
                                 int64_t H) = 0;
  // dqkv[B,T,3D] overwritten; dqkv and dout are bf16 when qkv is, else fp32. out is the
  // forward's output (a backend that keeps only the softmax's row statistics
  // needs it; the CPU does not read it).
  virtual void attention_backward(TensorRef dqkv, TensorRef dout, TensorRef qkv, TensorRef out, TensorRef saved,
                                  int64_t B, int64_t T, int64_t D, int64_t H) = 0;
  // Bytes of `saved` for that shape when q, k, v are of type `qkv_type`: here
  // the softmax, B·H·T·T of that type; a backend with fused kernels may keep
  // less (the CUDA backend's keep each row's log-sum-exp: B·H·T fp32).
  virtual size_t attention_saved_bytes(int64_t B, int64_t T, int64_t /*D*/, int64_t H, DType qkv_type) const {
    return attention_probs_bytes(B, T, H, qkv_type);
  }

  // x[B,T,D] = w[tokens] * scale + sinusoidal position (sin half | cos half).
  virtual void embedding_forward(TensorRef x, const int32_t* tokens, const float* w, int64_t B, int64_t T, int64_t D,
                                 float scale) = 0;
  virtual void embedding_backward(float* dw, TensorRef dx, const int32_t* tokens, int64_t B, int64_t T, int64_t D,
                                  float scale) = 0;

  // Generation, one position at a time: x[D] = w[token] * scale + position row.
  virtual void embedding_at(float* x, int32_t token, int64_t position, const float* w, int64_t D, float scale) = 0;
  // Attention of one query row q[3D] (q | k | v of the newest position, whose k
  // and v are already appended) over the cached keys/values k_cache, v_cache
  // [n, D] (n positions including the newest); out[D].
  virtual void attention_decode(float* out, const float* q, const float* k_cache, const float* v_cache, int64_t n,
                                int64_t D, int64_t H) = 0;

  virtual void relu_forward(TensorRef x, size_t n) = 0;                 // in place
  virtual void relu_backward(TensorRef dx, TensorRef y, size_t n) = 0;  // dx *= (y > 0); dx fp32 or bf16
  // x = dropout(x) in place; backward applies the same mask and scale to dx.
  virtual void dropout(TensorRef x, size_t n, const DropoutSpec& spec) = 0;
  // y = x + dropout(b) (y may alias x).
  virtual void residual_add(TensorRef y, TensorRef x, TensorRef b, size_t n, const DropoutSpec& spec) = 0;
  // dst = src; conversions between fp32 and bf16/fp16 round to nearest even.
  virtual void copy(TensorRef dst, TensorRef src, size_t n) = 0;

  // The output head fused with the loss, over row chunks of `chunk_rows` so
  // that [N,V] logits never exist whole: logits = h·wᵀ + b, loss per row =
  // logsumexp - logit[target]; rows whose target is negative are ignored.
  // Adds the sum of row losses to *loss_sum (one double of backend memory:
  // micro-batches accumulate there, and the host reads it once per step) and
  // each row's loss to row_loss if not null.
  // If dh is not null (training), also: dh = ∂(grad_scale·Σloss)/∂h
  // (overwritten), dw += , db += . `scratch` holds chunk_rows × head_row_stride(V) floats.
  virtual void lm_head_loss(TensorRef h, TensorRef w, const float* b, const int32_t* targets, int64_t N, int64_t D,
                            int64_t V, float grad_scale, float* dh, float* dw, float* db, double* loss_sum,
                            float* row_loss, float* scratch, int64_t chunk_rows) = 0;

  // Knowledge distillation fused with the output head (as lm_head_loss, over
  // row chunks so that neither [N,V] logits exists whole; the teacher's come
  // from `teacher`, whose head input the caller computed with the same rows).
  // Per row r with target t >= 0, student logits z = h·wᵀ + b, teacher logits
  // u = teacher.h·teacher.wᵀ + teacher.b, temperature τ and weight α:
  //   ce_r = logsumexp(z) − z[t]                         (lm_head_loss's row loss)
  //   kl_r = Σ_v p_v (log p_v − log q_v),  p = softmax(u/τ), q = softmax(z/τ)
  //   the objective is Σ_r (1 − α)·ce_r + α·τ²·kl_r.
  // Rows whose target is negative are ignored (no ce, no kl, zero dh).
  // Adds Σ ce_r to *loss_sum and Σ kl_r (unweighted) to *kl_sum (backend doubles).
  // If dh is not null: with dz = grad_scale·((1 − α)(softmax(z) − onehot(t)) + α·τ·(q − p)),
  // dh = dz·w (overwritten), dw += dzᵀ·h, db += Σ_rows dz. Nothing flows to the teacher.
  // `scratch` holds chunk_rows × head_row_stride(V) floats for the student's logits. With α = 0 the
  // gradients and *loss_sum equal lm_head_loss's (the CPU backends: bit for bit).
  // Backends without it throw ctrl::Error (this default).
  virtual void lm_head_distill(TensorRef h, TensorRef w, const float* b, const int32_t* targets,
                               const TeacherHead& teacher, int64_t N, int64_t D, int64_t V, float alpha,
                               float temperature, float grad_scale, float* dh, float* dw, float* db, double* loss_sum,
                               double* kl_sum, float* scratch, int64_t chunk_rows) {
    fail(std::string("backend ") + name() + " has no lm_head_distill (distillation, ctrl train --teacher)");
  }

  // *out += Σ x² in double (one double of backend memory), for the global gradient norm.
  virtual void sum_squares(const float* x, size_t n, double* out) = 0;
  // The factor the optimizer update multiplies the gradients by, from the
  // summed squares of the loss-scaled gradients (backend double): unscaling
  // and torch.nn.utils.clip_grad_norm_'s clipping in one number,
  // 1/loss_scale × (max_norm / (norm + 1e-6) if that is below 1, else 1), with
  // norm = √sum_squares / loss_scale; max_norm <= 0 disables clipping. Into *factor (backend float).
  virtual void clip_factor(const double* sum_squares, double loss_scale, double max_norm, float* factor) = 0;
  virtual void scale(float* x, size_t n, float factor) = 0;
  virtual void fill(float* x, size_t n, float value) = 0;

  // Optimizer updates over a list of segments (one per parameter tensor or
  // part of one), in one pass: segment k updates params[param_offset, +n)
  // from grads and state at [state_offset, +n). The gradient used is
  // grads[i] × *grad_factor (a backend float from clip_factor: unscaling and
  // clipping fused into the update), or grads[i] when grad_factor is null.
  // PyTorch AdamW: p -= lr·wd·p; m, v moments; p -= lr/(1-β1ᵗ) · m / (√v/√(1-β2ᵗ) + eps).
  virtual void adamw_update(float* params, const float* grads, float* m, float* v,
                            const std::vector<UpdateSegment>& segments, float lr, float beta1, float beta2, float eps,
                            int64_t t, const float* grad_factor) = 0;
  // TensorFlow Adagrad: acc += g²; p -= lr · g / √acc (acc starts at a positive value, no epsilon).
  virtual void adagrad_update(float* params, const float* grads, float* acc, const std::vector<UpdateSegment>& segments,
                              float lr, const float* grad_factor) = 0;
};

// The backends this build has and this machine can run, in the order the op
// tests run them: "cpu", "checked", and "cuda" when the build has CUDA and a
// CUDA device is present.
std::vector<std::string> available_devices();
// Why "cuda" is not among them: "no NVIDIA driver", "no GPU", the CUDA
// runtime's error with the driver's and the build's CUDA versions (a driver
// too old for this build), or "this build has no CUDA"; "" when it is.
std::string cuda_unavailable_reason();
// The backend called `device` (train.device / --device): "cpu", "checked"
// (the CPU backend whose memory host code cannot touch: a stray access dies
// naming the buffer), "cuda" (the rank's own GPU: its index among the ranks
// on its machine, modulo the GPUs) or "cuda:N" (GPU N). threads > 0 sets a
// CPU backend's thread count (train.threads). rank_on_host is that index as
// the job's communicator knows it (Communicator::rank_on_host); -1 takes it
// from the launcher's environment (Open MPI, MPICH/Hydra, Slurm), else 0.
// The environment variable CTRL_DEVICE, when set, replaces "cpu" (the default),
// so that CI runs the whole suite on another backend; an unknown name throws.
std::unique_ptr<Ops> make_ops(const std::string& device = "cpu", int threads = 0, int rank_on_host = -1);
// The oldest GPU the CUDA backend runs on: compute capability 7.5 (Turing, T4),
// the oldest architecture the build compiles for (CTRL_CUDA_ARCHITECTURES).
constexpr int kCudaMinComputeCapability = 75;

// An array of T in a backend's memory, released with it. data() is for
// passing to ops only: host code reads and writes the contents with upload
// and download (no operator[] on purpose).
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(Ops& ops, size_t n, const char* name) : ops_(&ops), n_(n) {
    if (n) data_ = static_cast<T*>(ops.allocate(n * sizeof(T), name));
  }
  ~DeviceArray() {
    if (data_) ops_->release(data_);
  }
  DeviceArray(DeviceArray&& o) noexcept : ops_(o.ops_), data_(o.data_), n_(o.n_) { o.data_ = nullptr, o.n_ = 0; }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(ops_, o.ops_);
    std::swap(data_, o.data_);
    std::swap(n_, o.n_);
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* data() const { return data_; }
  size_t size() const { return n_; }
  // Elements [offset, offset + count) from / to host memory.
  void upload(const T* host, size_t count, size_t offset = 0) {
    CTRL_ASSERT(offset + count <= n_);
    if (count) ops_->upload(data_ + offset, host, count * sizeof(T));
  }
  void download(T* host, size_t count, size_t offset = 0) const {
    CTRL_ASSERT(offset + count <= n_);
    if (count) ops_->download(host, data_ + offset, count * sizeof(T));
  }
  std::vector<T> to_host() const {
    std::vector<T> v(n_);
    download(v.data(), n_);
    return v;
  }
  void from_host(const std::vector<T>& v) {
    CTRL_ASSERT(v.size() == n_);
    upload(v.data(), n_);
  }

 private:
  Ops* ops_ = nullptr;
  T* data_ = nullptr;
  size_t n_ = 0;
};

// Opens one allocation of a backend to host code for a scope (Ops::begin_host_access).
class HostAccess {
 public:
  HostAccess(Ops& ops, const void* p) : ops_(ops), p_(p) { ops_.begin_host_access(p_); }
  ~HostAccess() { ops_.end_host_access(p_); }
  HostAccess(const HostAccess&) = delete;
  HostAccess& operator=(const HostAccess&) = delete;

 private:
  Ops& ops_;
  const void* p_;
};

}  // namespace ctrl
