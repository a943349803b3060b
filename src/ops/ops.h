// The ops interface: every computation of the model goes through it, so a
// backend (cpu/ now, cuda/ later) is a folder implementing this class and the
// model never sees a backend header. Each op has a plain reference semantics
// stated here; tests run every backend against the CPU reference.
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

class Ops {
 public:
  virtual ~Ops() = default;
  virtual const char* name() const = 0;
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
  // D/H-wide column blocks. probs[B,H,T,T] saves the softmax (the only T×T
  // matrix kept per head), computed in fp32 and stored as fp32 or bf16; out[B,T,D].
  virtual void attention_forward(TensorRef out, TensorRef probs, TensorRef qkv, int64_t B, int64_t T, int64_t D,
                                 int64_t H) = 0;
  // dqkv[B,T,3D] overwritten; dqkv and dout are fp32, or both bf16.
  virtual void attention_backward(TensorRef dqkv, TensorRef dout, TensorRef qkv, TensorRef probs, int64_t B, int64_t T,
                                  int64_t D, int64_t H) = 0;

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
  // Returns the sum of row losses and adds them per row to row_loss if not null.
  // If dh is not null (training), also: dh = ∂(grad_scale·Σloss)/∂h
  // (overwritten), dw += , db += . `scratch` holds chunk_rows×V floats.
  virtual double lm_head_loss(TensorRef h, TensorRef w, const float* b, const int32_t* targets, int64_t N, int64_t D,
                              int64_t V, float grad_scale, float* dh, float* dw, float* db, float* row_loss,
                              float* scratch, int64_t chunk_rows) = 0;

  // Σ x² in double, for the global gradient norm.
  virtual double sum_squares(const float* x, size_t n) = 0;
  virtual void scale(float* x, size_t n, float factor) = 0;
  virtual void fill(float* x, size_t n, float value) = 0;

  // Optimizer updates over a list of segments (one per parameter tensor or
  // part of one), in one pass: segment k updates params[param_offset, +n)
  // from grads and state at [state_offset, +n).
  // PyTorch AdamW: p -= lr·wd·p; m, v moments; p -= lr/(1-β1ᵗ) · m / (√v/√(1-β2ᵗ) + eps).
  virtual void adamw_update(float* params, const float* grads, float* m, float* v,
                            const std::vector<UpdateSegment>& segments, float lr, float beta1, float beta2, float eps,
                            int64_t t) = 0;
  // TensorFlow Adagrad: acc += g²; p -= lr · g / √acc (acc starts at a positive value, no epsilon).
  virtual void adagrad_update(float* params, const float* grads, float* acc, const std::vector<UpdateSegment>& segments,
                              float lr) = 0;
};

// The CPU backend (OpenMP threads, oneDNN matrix products).
std::unique_ptr<Ops> make_cpu_ops();

}  // namespace ctrl
