#include "train/synthetic_steps.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <limits>

#include "train/checkpoint.h"

namespace ctrl {

SyntheticSteps::SyntheticSteps(const Config& config, Ops& ops)
    : config_(config),
      ops_(ops),
      model_(config.model, ops, config.train.micro_batch, activation_dtype(config.train.precision)),
      optimizer_(config.train, model_.layout(), ops),
      batches_(Batches::synthetic(config.model.vocab_size, config.model.n_ctx, 1)),
      tokens_(size_t(config.train.micro_batch * config.model.n_ctx)),
      targets_(tokens_.size()) {
  // Distillation: the teacher as the trainer builds it.
  if (const std::unique_ptr<Checkpoint> teacher = open_teacher(config, "ctrl bench")) {
    teacher_ = std::make_unique<Model>(plan::teacher_forward_config(teacher->config().model), ops,
                                       config.train.micro_batch, activation_dtype(config.train.precision), false);
    teacher->load_parameters(*teacher_);
    kl_sum_ = DeviceArray<double>(ops, 1, "distill.kl_sum");
  }
  model_.init_weights();
}

double SyntheticSteps::step() {
  const int64_t B = config_.train.micro_batch, T = config_.model.n_ctx;
  batches_.train(steps_ * B, B, tokens_.data(), targets_.data());
  model_.zero_grads();
  const Distillation distill = distillation(teacher_.get(), config_.train, kl_sum_.data());
  const double loss = model_
                          .forward_backward(tokens_.data(), targets_.data(), B, T, 1.0f / float(B * T),
                                            uint64_t(steps_), 0, nullptr, teacher_ ? &distill : nullptr)
                          .mean();
  optimizer_.clip(model_.grads, config_.train.clip_norm);
  optimizer_.step(model_.params, model_.grads, config_.train.lr);
  ops_.synchronize();
  ++steps_;
  return loss;
}

plan::Bf16StepTimes probe_bf16_steps(const Config& config, Ops& ops, double seconds, uint64_t room_bytes) {
  plan::Bf16StepTimes probe;
  probe.of_layers = config.model.n_layer;
  Config bf16 = config, fp32 = config;
  bf16.train.precision = "bf16";
  fp32.train.precision = "fp32";
  // With the teacher, whose forward runs in the student's precision too (a
  // probe of the student alone overstated fp32's gain for a distilling run:
  // 1.57x against 1.26x for whole steps). The student is cut, the teacher not.
  const std::optional<ModelConfig> teacher = teacher_of(config);
  const ModelConfig* t = teacher ? &*teacher : nullptr;
  // Both models' bytes at `layers` layers: every layer past the first adds the same.
  const int64_t B = config.train.micro_batch;
  auto bytes = [&](int64_t layers) {
    bf16.model.n_layer = fp32.model.n_layer = layers;
    return double(plan::memory_estimate(bf16, B, 1, 0, t).buffers() +
                  plan::memory_estimate(fp32, B, 1, 0, t).buffers());
  };
  const double one = bytes(1), per_layer = bytes(2) - one;
  if (room_bytes == 0) room_bytes = plan::available_memory_bytes() / 4;
  const double room = room_bytes > 0 ? double(room_bytes) : 1e300;  // 0: /proc/meminfo unreadable
  if (one > room) {
    probe.skipped = "a bf16 and an fp32 copy of the model cut to 1 layer" +
                    std::string(t ? ", each with its teacher," : "") + " need " + std::to_string(int64_t(one) >> 20) +
                    " MiB, over the " + std::to_string(room_bytes >> 20) + " MiB the probe may take";
    return probe;
  }
  probe.layers =
      per_layer > 0 ? std::min(config.model.n_layer, 1 + int64_t((room - one) / per_layer)) : config.model.n_layer;
  bf16.model.n_layer = fp32.model.n_layer = probe.layers;
  double best[2] = {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
  {
    SyntheticSteps runs[2] = {SyntheticSteps(bf16, ops), SyntheticSteps(fp32, ops)};
    double spent = 0;
    for (int round = 0; round < 2 || spent < seconds; ++round)
      for (int p = 0; p < 2; ++p) {
        const auto start = std::chrono::steady_clock::now();
        runs[p].step();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (round > 0) best[p] = std::min(best[p], s), spent += s;  // round 0 warms up
      }
  }
  // The two models' memory goes back to the system: `ctrl train` probes before
  // it trains, and freed heap memory would otherwise stay in its RSS.
  malloc_trim(0);
  probe.measured = true;
  probe.bf16_step_s = best[0];
  probe.fp32_step_s = best[1];
  return probe;
}

}  // namespace ctrl
