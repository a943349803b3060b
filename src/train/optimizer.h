// Optimizers over the model's flat buffers: AdamW (PyTorch semantics, weight
// decay on matrices only) and Adagrad (TensorFlow semantics, as CTRL was
// trained), global-norm clipping and the learning-rate schedules.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "model/config.h"
#include "model/layout.h"
#include "ops/ops.h"

namespace ctrl {

class Optimizer {
 public:
  Optimizer(const TrainConfig& config, const ParamLayout& layout, Ops& ops);

  // Global L2 norm of the gradients.
  double grad_norm(const Buffer& grads) const;
  // Scales gradients so their norm is at most max_norm, as
  // torch.nn.utils.clip_grad_norm_ does (factor max_norm / (norm + 1e-6)).
  // Returns the norm before clipping.
  double clip(Buffer& grads, double max_norm) const;
  // One update with learning rate lr; increments step().
  void step(Buffer& params, const Buffer& grads, double lr);

  int64_t step_count() const { return t_; }
  void set_step_count(int64_t t) { t_ = t; }
  // Optimizer state tensors for checkpoints: name -> buffer (m, v or accumulator).
  std::vector<std::pair<std::string, Buffer*>> state();

 private:
  TrainConfig config_;
  const ParamLayout& layout_;
  Ops& ops_;
  Buffer m_, v_;  // AdamW moments, or v_ as the Adagrad accumulator
  int64_t t_ = 0;
};

// Learning rate at a step (0-based) under the configured schedule:
// constant; warmup (linear from lr/warmup to lr, then constant, as CTRL); or
// cosine (linear warmup, then cosine decay to lr·min_lr_ratio at `steps`).
double learning_rate(const TrainConfig& config, int64_t step);

}  // namespace ctrl
