// Dynamic loss scaling for fp16 mixed precision, as PyTorch's GradScaler and
// apex do it: the loss (so every gradient) is multiplied by `scale`; a step
// whose gradients hold an inf or NaN is skipped and the scale halved; after
// `window` clean steps in a row the scale doubles.
#pragma once
#include <cstdint>

namespace ctrl {

struct LossScalerState {
  double scale = 65536.0;     // 2^16
  int64_t clean_steps = 0;    // since the last change
  int64_t skipped_steps = 0;  // in the whole run
};

class LossScaler {
 public:
  LossScaler(double initial_scale, int64_t window) : window_(window) { state_.scale = initial_scale; }
  double scale() const { return state_.scale; }
  // Records one step's outcome; returns true if the optimizer may step.
  bool update(bool gradients_finite);
  const LossScalerState& state() const { return state_; }
  void restore(const LossScalerState& s) { state_ = s; }

 private:
  int64_t window_;
  LossScalerState state_;
};

}  // namespace ctrl
