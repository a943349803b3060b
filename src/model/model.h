// The CTRL model (Hugging Face CTRLLMHeadModel): forward and hand-written
// backward over flat parameter, gradient and activation buffers laid out by
// layout.h, computed through the Ops interface. Every buffer is the backend's
// (DeviceArray); the model never dereferences one: host data (tokens,
// targets, initial weights, losses) moves through upload and download.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "model/config.h"
#include "model/layout.h"
#include "ops/ops.h"

namespace ctrl {

struct LossSum {
  double sum = 0;     // Σ per-token cross-entropy (nats)
  int64_t count = 0;  // tokens with a target
  double mean() const { return count ? sum / double(count) : 0.0; }
};

class Model;

// The keys and values of the positions decoded so far, for Model::decode:
// [n_layer, n_ctx, d_model] each, in the model's backend.
struct KvCache {
  explicit KvCache(Model& model);
  DeviceArray<float> k, v;
  int64_t length = 0;  // positions cached; the next token decodes at this position
};

// Distillation in forward_backward: the teacher runs forward (no dropout, no
// gradients) on the same micro-batch, and the head's loss becomes
// Ops::lm_head_distill's (1 − α)·cross-entropy + α·τ²·KL(teacher‖student).
struct Distillation {
  Model* teacher = nullptr;  // same vocabulary and activation type; n_ctx >= the batch's T
  float alpha = 0.5f, temperature = 2.0f;
  double* kl_sum = nullptr;  // backend double: the rows' summed KL is added here
};
// The distillation train.distill_alpha and train.distill_temperature ask for, from `teacher`.
inline Distillation distillation(Model* teacher, const TrainConfig& t, double* kl_sum) {
  return {teacher, float(t.distill_alpha), float(t.distill_temperature), kl_sum};
}

class Model {
 public:
  // Allocates parameters, gradients and activations for micro-batches of up to
  // max_batch sequences of up to n_ctx tokens. With low = BF16 or F16 (mixed
  // precision) the matrix products run in that type on a copy of the weights,
  // refreshed from the fp32 master weights at every forward pass, and the
  // activations that feed them are stored in it.
  // with_gradients = false (a teacher, run forward only) allocates no gradient buffer.
  // max_T (0: n_ctx) bounds the tokens per sequence; a model that only decodes needs max_batch = max_T = 1.
  Model(const ModelConfig& config, Ops& ops, int64_t max_batch, DType low = DType::F32, bool with_gradients = true,
        int64_t max_T = 0);

  const ModelConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }
  const ActivationLayout& activation_layout() const { return acts_layout_; }
  Ops& ops() { return ops_; }
  // Backend pointers to a tensor, for passing to ops (not for host access).
  float* param(const std::string& name) { return params.data() + layout_.get(name).offset; }
  float* grad(const std::string& name) { return grads.data() + layout_.get(name).offset; }
  // Host copies of one tensor, through staging: reading and writing one.
  std::vector<float> read_param(const std::string& name) const;
  std::vector<float> read_grad(const std::string& name) const;
  void write_param(const std::string& name, const std::vector<float>& values);

  // Hugging Face's initialization from config.seed: matrices N(0, init_range),
  // biases 0, LayerNorm weight 1 and bias 0 (computed on the host and
  // uploaded kInitStagingFloats at a time, model/layout.h).
  void init_weights();
  void zero_grads() { ops_.fill(grads.data(), grads.size(), 0.0f); }
  // ZeRO-1: reallocates params and grads with `total` >= layout().total
  // elements (zero padding at the end), so equal shards tile them exactly.
  void pad_buffers(size_t total);

  // One micro-batch: tokens and targets are [B, T] host arrays (T <= n_ctx,
  // targets < 0 ignored), which the model uploads into its own backend
  // buffers (it counts the targets on the host). Adds grad_scale · ∂(Σ token losses)/∂θ to the gradients. Dropout
  // masks derive from dropout_seed and the global index of the batch's first
  // sequence (first_sequence), so they do not depend on how a global batch is
  // split. Returns the summed loss.
  // With loss_sum (one double of backend memory) the summed loss is added
  // there and not read back (LossSum::sum is 0): the trainer reads it once per
  // optimizer step. Without, it is read back into LossSum::sum.
  // With `distill`, the teacher runs forward on the same tokens and the loss is the distillation objective
  // (LossSum and loss_sum still count the cross-entropy alone; the KL goes to distill->kl_sum).
  LossSum forward_backward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T, float grad_scale,
                           uint64_t dropout_seed, uint64_t first_sequence = 0, double* loss_sum = nullptr,
                           const Distillation* distill = nullptr);
  // Forward without dropout up to the head's input, for a teacher: afterwards
  // teacher_head() describes this batch's head input and the tied head.
  void forward_only(const int32_t* tokens, int64_t B, int64_t T);
  TeacherHead teacher_head();
  int64_t head_chunk_rows() const { return acts_layout_.logits_rows; }
  // Called after the backward pass has issued each transformer layer's
  // parameter gradients (layers in reverse order), e.g. to start reducing them
  // once a fence (Ops::synchronize) says they are written.
  void set_layer_backward_hook(std::function<void(int layer)> hook) { layer_hook_ = std::move(hook); }
  // Forward without dropout or gradients. row_loss (optional, host, [B*T]) gets each token's loss added.
  // loss_sum as for forward_backward.
  LossSum evaluate(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T, float* row_loss = nullptr,
                   double* loss_sum = nullptr);
  // Full logits [B, T, V] into host memory, for tests and small models.
  void logits(const int32_t* tokens, int64_t B, int64_t T, float* out);
  // Generation: runs `token` at position cache.length through the same layer
  // forward as training (one row, fp32 activations), appending each layer's
  // key and value to the cache, and writes the next token's logits [V] to
  // host memory. Fails in one line once the cache holds n_ctx positions.
  void decode(int32_t token, KvCache& cache, float* logits);

  DeviceArray<float> params, grads;

 private:
  // Uploads B*T host tokens (and targets, if not null) into the model's buffers.
  void upload_batch(const int32_t* tokens, const int32_t* targets, int64_t n);
  // The head and loss over the current batch, adding the summed loss to loss_sum, or reading it into *sum.
  void head_loss(int64_t N, float grad_scale, bool training, float* row_loss, double* loss_sum, double* sum,
                 const Distillation* distill = nullptr);
  void forward(int64_t B, int64_t T, bool training, uint64_t seed);
  // From the first layer's input x_in to the head's input: the layers, the final LayerNorm and (factorized) w_proj_out.
  void forward_from_stream(int64_t B, int64_t T, bool training, uint64_t seed, KvCache* cache = nullptr);
  // Layer l's forward from its saved input x_in. With to_output it ends in the
  // next layer's input (or x_out); without, it stops once everything the
  // backward reads exists (after the ReLU), as recompute="layers" needs.
  // With a cache (decoding one row) attention appends this position's key and
  // value to layer l's cache and attends over every cached position.
  void layer_forward(int l, int64_t B, int64_t T, bool training, uint64_t seed, bool to_output,
                     KvCache* cache = nullptr);
  // Expects the gradient of the summed loss w.r.t. the head's input in d_head().
  void backward(int64_t B, int64_t T, bool training, uint64_t seed);
  bool factorized() const { return config_.embedding_dim > 0; }
  // The tied head's input ([N, E] after w_proj_out, or the final LayerNorm's
  // [N, D] output) and the scratch that receives its gradient.
  TensorRef head_input() { return low(factorized() ? acts_layout_.head_in : acts_layout_.lnf_out); }
  // A slot of the activations that feed matrix products, in their storage type.
  TensorRef low(size_t offset) { return TensorRef(act(offset), acts_layout_.dtype); }
  // The saved softmax, a LayerNorm input or a gradient inside a layer, in its storage type.
  TensorRef inner(size_t offset) { return TensorRef(act(offset), acts_layout_.inner); }
  // A LayerNorm's input for the fp32 stream at `stream`: the stream itself, or
  // (bf16) its rounding, written into `rounded` for the backward to read again.
  TensorRef layernorm_input(size_t stream, size_t rounded, size_t n);
  // A weight matrix as the matrix products take it: the bf16 copy under mixed precision.
  TensorRef weight(size_t offset) {
    return low_weights_.size() ? TensorRef(low_weights_.data() + offset, acts_layout_.dtype)
                               : TensorRef(params.data() + offset);
  }
  float* d_head() { return act(factorized() ? acts_layout_.d_emb : acts_layout_.d_ln); }
  DropoutSpec dropout(double p, bool training, uint64_t seed, uint64_t stream) const;
  float* branch_gradient(float* d_stream, float* scratch, size_t n, const DropoutSpec& spec);
  float* act(size_t offset) { return activations_.data() + offset; }
  std::function<void(int)> layer_hook_;
  uint64_t first_index_ = 0;  // dropout numbering of the current micro-batch

  ModelConfig config_;
  Ops& ops_;
  ParamLayout layout_;
  ActivationLayout acts_layout_;
  DeviceArray<float> activations_;
  DeviceArray<uint16_t> low_weights_;  // bf16/fp16 copy of params (mixed precision only)
  DeviceArray<int32_t> tokens_, targets_;  // the current micro-batch, [max_batch, n_ctx]
  DeviceArray<float> row_loss_;            // evaluate(row_loss): per-token losses
  // Per-layer parameter offsets, resolved once; layers that share a block
  // (config.sharing) hold the same offsets, so their gradients add up there.
  struct LayerParams {
    size_t wqkv, bqkv, wdense, bdense, ln1_w, ln1_b, w0, b0, w2, b2, ln2_w, ln2_b;
  };
  std::vector<LayerParams> lp_;
  size_t wte_, lnf_w_, lnf_b_, head_b_;
  size_t proj_in_w_ = 0, proj_in_b_ = 0, proj_out_w_ = 0, proj_out_b_ = 0;  // factorized embedding only
};

}  // namespace ctrl
