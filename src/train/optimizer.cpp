#include "train/optimizer.h"

#include <algorithm>
#include <cmath>

namespace ctrl {

Optimizer::Optimizer(const TrainConfig& config, const ParamLayout& layout, Ops& ops, size_t shard_begin,
                     size_t shard_size)
    : config_(config), layout_(layout), ops_(ops), shard_begin_(shard_begin),
      shard_size_(shard_size ? shard_size : layout.total) {
  v_ = DeviceArray<float>(ops, shard_size_, config.optimizer == "adamw" ? "optimizer.adamw.v" : "optimizer.adagrad.acc");
  if (config.optimizer == "adamw") {
    m_ = DeviceArray<float>(ops, shard_size_, "optimizer.adamw.m");
  } else {
    ops_.fill(v_.data(), v_.size(), float(config.adagrad_initial_accumulator));
  }
}

double Optimizer::grad_norm(const DeviceArray<float>& grads) const {
  DeviceArray<double> sum(ops_, 1, "optimizer.sum_squares");
  ops_.sum_squares(grads.data(), grads.size(), sum.data());
  double host = 0;
  sum.download(&host, 1);
  return std::sqrt(host);
}

double Optimizer::clip(DeviceArray<float>& grads, double max_norm) const {
  const double norm = grad_norm(grads);
  if (max_norm > 0) {
    const double factor = max_norm / (norm + 1e-6);
    if (factor < 1.0) ops_.scale(grads.data(), grads.size(), float(factor));
  }
  return norm;
}

void Optimizer::step(DeviceArray<float>& params, const float* shard_grads, double lr, const float* grad_factor) {
  ++t_;
  if (segments_.empty()) {  // the parts of each tensor inside the shard, computed once
    const size_t end = shard_begin_ + shard_size_;
    for (const auto& t : layout_.tensors) {
      const size_t lo = std::max(t.offset, shard_begin_), hi = std::min(t.offset + t.numel, end);
      if (lo < hi)
        segments_.push_back({lo, lo - shard_begin_, hi - lo, t.is_matrix ? float(config_.weight_decay) : 0.0f});
    }
  }
  if (config_.optimizer == "adamw")
    ops_.adamw_update(params.data(), shard_grads, m_.data(), v_.data(), segments_, float(lr), float(config_.beta1),
                      float(config_.beta2), float(config_.eps), t_, grad_factor);
  else
    ops_.adagrad_update(params.data(), shard_grads, v_.data(), segments_, float(lr), grad_factor);
}

std::vector<std::pair<std::string, DeviceArray<float>*>> Optimizer::state() {
  if (config_.optimizer == "adamw") return {{"adamw.m", &m_}, {"adamw.v", &v_}};
  return {{"adagrad.accumulator", &v_}};
}

void Optimizer::load_state(const StateReader& read, size_t piece_floats) {
  CTRL_ASSERT(piece_floats > 0);
  const size_t total = layout_.total, shard_end = std::min(shard_begin_ + shard_size_, total);
  std::vector<float> piece(std::min(piece_floats, total));
  for (auto& [name, buffer] : state())
    for (size_t at = 0; at < total; at += piece.size()) {
      const size_t n = std::min(piece.size(), total - at);
      read(name, at, n, piece.data());
      const size_t lo = std::max(at, shard_begin_), hi = std::min(at + n, shard_end);
      if (lo < hi) buffer->upload(piece.data() + (lo - at), hi - lo, lo - shard_begin_);
    }
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
