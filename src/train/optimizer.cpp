#include "train/optimizer.h"

#include <cmath>

namespace ctrl {

Optimizer::Optimizer(const TrainConfig& config, const ParamLayout& layout, Ops& ops)
    : config_(config), layout_(layout), ops_(ops) {
  v_ = Buffer(layout.total);
  if (config.optimizer == "adamw") {
    m_ = Buffer(layout.total);
  } else {
    ops_.fill(v_.data(), v_.size(), float(config.adagrad_initial_accumulator));
  }
}

double Optimizer::grad_norm(const Buffer& grads) const {
  return std::sqrt(ops_.sum_squares(grads.data(), grads.size()));
}

double Optimizer::clip(Buffer& grads, double max_norm) const {
  const double norm = grad_norm(grads);
  if (max_norm > 0) {
    const double factor = max_norm / (norm + 1e-6);
    if (factor < 1.0) ops_.scale(grads.data(), grads.size(), float(factor));
  }
  return norm;
}

void Optimizer::step(Buffer& params, const Buffer& grads, double lr) {
  ++t_;
  for (const auto& t : layout_.tensors) {
    float* p = params.data() + t.offset;
    const float* g = grads.data() + t.offset;
    if (config_.optimizer == "adamw") {
      ops_.adamw_update(p, g, m_.data() + t.offset, v_.data() + t.offset, t.numel, float(lr), float(config_.beta1),
                        float(config_.beta2), float(config_.eps), t.is_matrix ? float(config_.weight_decay) : 0.0f, t_);
    } else {
      ops_.adagrad_update(p, g, v_.data() + t.offset, t.numel, float(lr));
    }
  }
}

std::vector<std::pair<std::string, Buffer*>> Optimizer::state() {
  if (config_.optimizer == "adamw") return {{"adamw.m", &m_}, {"adamw.v", &v_}};
  return {{"adagrad.accumulator", &v_}};
}

double learning_rate(const TrainConfig& c, int64_t step) {
  if (c.schedule == "constant") return c.lr;
  const double warm = double(c.warmup_steps);
  if (step < c.warmup_steps) return c.lr * double(step + 1) / warm;
  if (c.schedule == "warmup") return c.lr;
  const double span = std::max(1.0, double(c.steps) - warm);
  const double progress = std::min(1.0, (double(step) - warm) / span);
  const double floor = c.lr * c.min_lr_ratio;
  return floor + (c.lr - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace ctrl
