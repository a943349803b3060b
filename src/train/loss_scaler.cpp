#include "train/loss_scaler.h"

namespace ctrl {

bool LossScaler::update(bool gradients_finite) {
  if (!gradients_finite) {
    state_.scale *= 0.5;
    state_.clean_steps = 0;
    ++state_.skipped_steps;
    return false;
  }
  if (++state_.clean_steps >= window_) {
    state_.scale *= 2.0;
    state_.clean_steps = 0;
  }
  return true;
}

}  // namespace ctrl
