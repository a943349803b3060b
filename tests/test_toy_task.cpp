// The trainer's end-to-end sanity check: a tiny CTRL model must learn to copy
// (a random first half, then the same tokens again) within a bounded number
// of AdamW steps, and training must be reproducible bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/rng.h"
#include "model/model.h"
#include "train/optimizer.h"
#include "test_support.h"

using namespace ctrl;

namespace {

constexpr int64_t kV = 16, kT = 16, kHalf = kT / 2, kB = 16;

ModelConfig toy_model(double dropout) {
  ModelConfig c;
  c.vocab_size = kV;
  c.n_layer = 2;
  c.d_model = 32;
  c.n_head = 2;
  c.d_ff = 64;
  c.n_ctx = kT;
  c.embd_pdrop = c.resid_pdrop = dropout;
  c.seed = 1;
  return c;
}

// B copy sequences drawn from (seed, stream): tokens 0..7 random, 8..15 repeat
// them. Position t predicts token t+1; only the predictions of the repeated
// half (t = 7..14) are scored, the rest have target -1.
void copy_batch(uint64_t seed, uint64_t stream, std::vector<int32_t>& tokens, std::vector<int32_t>& targets) {
  CounterRng rng{seed, stream};
  tokens.assign(kB * kT, 0);
  targets.assign(kB * kT, -1);
  for (int64_t b = 0; b < kB; ++b) {
    int32_t* s = tokens.data() + b * kT;
    for (int64_t t = 0; t < kHalf; ++t) s[t] = int32_t(rng.below(kV));
    for (int64_t t = kHalf; t < kT; ++t) s[t] = s[t - kHalf];
    for (int64_t t = kHalf - 1; t + 1 < kT; ++t) targets[b * kT + t] = s[t + 1];
  }
}

struct TrainRun {
  std::vector<double> losses;  // mean training loss per step
  std::vector<float> params;   // final parameters
  double held_out = 0;         // mean loss on the copied half of unseen sequences
};

TrainRun train_copy(uint64_t seed, int64_t steps, double dropout) {
  auto ops = test_support::make_test_ops();
  Model model(toy_model(dropout), *ops, kB);
  model.init_weights();
  TrainConfig tc;
  tc.optimizer = "adamw";
  // 1e-2 learns the task by step ~200 for every data seed tried (1-6: held-out
  // loss 0.002-0.031 after 300 steps); 6e-3 is slower (up to 0.43), 3e-2 diverges.
  tc.lr = 1e-2;
  tc.schedule = "cosine";
  tc.warmup_steps = 20;
  tc.steps = steps;
  tc.weight_decay = 0.01;
  tc.clip_norm = 1.0;
  Optimizer opt(tc, model.layout(), *ops);
  TrainRun run;
  std::vector<int32_t> tokens, targets;
  for (int64_t step = 0; step < steps; ++step) {
    copy_batch(seed, uint64_t(step), tokens, targets);
    model.zero_grads();
    const LossSum l = model.forward_backward(tokens.data(), targets.data(), kB, kT,
                                             1.0f / float((kT - kHalf) * kB), seed * 1000003 + uint64_t(step));
    run.losses.push_back(l.mean());
    opt.clip(model.grads, tc.clip_norm);
    opt.step(model.params, model.grads, learning_rate(tc, step));
  }
  LossSum held;
  for (uint64_t k = 0; k < 4; ++k) {  // streams far from the training ones
    copy_batch(seed, (1ull << 40) + k, tokens, targets);
    const LossSum l = model.evaluate(tokens.data(), targets.data(), kB, kT);
    held.sum += l.sum;
    held.count += l.count;
  }
  run.held_out = held.mean();
  run.params = model.params.to_host();
  return run;
}

TEST(ToyTask, LearnsToCopyWithinABoundedNumberOfSteps) {
  const TrainRun run = train_copy(1, 300, 0.0);
  const double chance = std::log(double(kV));  // 2.77 nats
  EXPECT_NEAR(run.losses.front(), chance, 0.3);  // starts at chance
  EXPECT_LT(run.held_out, 0.3) << "after 300 steps; chance is " << chance;
}

TEST(ToyTask, SameSeedGivesBitIdenticalTraining) {
  // Dropout on, so the masks' derivation from the seed is covered too.
  const TrainRun a = train_copy(7, 30, 0.1), b = train_copy(7, 30, 0.1);
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t s = 0; s < a.losses.size(); ++s) EXPECT_EQ(a.losses[s], b.losses[s]) << "step " << s;
  EXPECT_EQ(std::memcmp(a.params.data(), b.params.data(), a.params.size() * sizeof(float)), 0);
  EXPECT_EQ(a.held_out, b.held_out);
  // A different seed gives different data and masks: the check can fail.
  const TrainRun c = train_copy(8, 30, 0.1);
  EXPECT_NE(a.losses.back(), c.losses.back());
}

}  // namespace
