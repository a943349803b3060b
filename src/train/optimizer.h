// Optimizers over the model's flat buffers: AdamW (PyTorch semantics, weight
// decay on matrices only) and Adagrad (TensorFlow semantics, as CTRL was
// trained), global-norm clipping and the learning-rate schedules.
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

class Optimizer {
 public:
  // Keeps state for, and updates, elements [shard_begin, shard_begin +
  // shard_size) of the flat parameter buffer: everything by default, one
  // rank's share under ZeRO-1 (then the state holds only that share).
  Optimizer(const TrainConfig& config, const ParamLayout& layout, Ops& ops, size_t shard_begin = 0,
            size_t shard_size = 0);

  // Global L2 norm of the gradients (backend buffers, like every buffer here;
  // reads one scalar back: for tools and tests, the trainer uses clip_factor).
  double grad_norm(const DeviceArray<float>& grads) const;
  // Scales gradients so their norm is at most max_norm, as
  // torch.nn.utils.clip_grad_norm_ does (factor max_norm / (norm + 1e-6)).
  // Returns the norm before clipping.
  double clip(DeviceArray<float>& grads, double max_norm) const;
  // One update of the shard with learning rate lr; shard_grads[i] is the
  // gradient of element shard_begin + i, used multiplied by *grad_factor (a
  // backend float from Ops::clip_factor: unscaling and clipping in the same
  // pass; null: 1). Increments step_count().
  void step(DeviceArray<float>& params, const float* shard_grads, double lr, const float* grad_factor = nullptr);
  void step(DeviceArray<float>& params, const DeviceArray<float>& grads, double lr,
            const float* grad_factor = nullptr) {
    step(params, grads.data() + shard_begin_, lr, grad_factor);
  }

  int64_t step_count() const { return t_; }
  void set_step_count(int64_t t) { t_ = t; }
  size_t shard_begin() const { return shard_begin_; }
  size_t shard_size() const { return shard_size_; }
  // The state buffers by name ("adamw.m", "adamw.v" or "adagrad.accumulator"),
  // each covering the shard.
  std::vector<std::pair<std::string, DeviceArray<float>*>> state();
  // Fills every state buffer a piece of at most piece_floats at a time:
  // read(name, begin, count, out) writes elements [begin, begin + count) of
  // the full-size buffer `name` (e.g. from a checkpoint) into out, and the
  // shard keeps its part. A resume never holds a whole buffer on the host.
  using StateReader = std::function<void(const std::string& name, size_t begin, size_t count, float* out)>;
  void load_state(const StateReader& read, size_t piece_floats);

 private:
  TrainConfig config_;
  const ParamLayout& layout_;
  Ops& ops_;
  size_t shard_begin_, shard_size_;
  DeviceArray<float> m_, v_;  // AdamW moments, or v_ as the Adagrad accumulator
  std::vector<UpdateSegment> segments_;
  int64_t t_ = 0;
};

// Learning rate at a step (0-based) under the configured schedule:
// constant; warmup (linear from lr/warmup to lr, then constant, as CTRL); or
// cosine (linear warmup, then cosine decay to lr·min_lr_ratio at `steps`).
double learning_rate(const TrainConfig& config, int64_t step);

}  // namespace ctrl
