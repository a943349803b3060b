// Learning-rate schedules (train/optimizer.h learning_rate) at their defining
// points, and global-norm clipping with torch.nn.utils.clip_grad_norm_'s
// semantics (Optimizer::clip).
#include <gtest/gtest.h>

#include <cmath>

#include "model/layout.h"
#include "train/optimizer.h"
#include "test_support.h"

using namespace ctrl;

namespace {

TrainConfig schedule(const std::string& name) {
  TrainConfig c;
  c.schedule = name;
  c.lr = 1e-3;
  c.warmup_steps = 10;
  c.steps = 110;
  c.min_lr_ratio = 0.1;
  return c;
}

TEST(Schedule, ConstantIsTheSameAtEveryStep) {
  const TrainConfig c = schedule("constant");
  for (int64_t s : {0, 1, 9, 10, 60, 110, 1000}) EXPECT_DOUBLE_EQ(learning_rate(c, s), 1e-3) << s;
}

TEST(Schedule, WarmupRisesLinearlyThenStaysConstant) {
  const TrainConfig c = schedule("warmup");
  EXPECT_DOUBLE_EQ(learning_rate(c, 0), 1e-4);  // lr / warmup at the first step, never 0
  EXPECT_DOUBLE_EQ(learning_rate(c, 4), 5e-4);
  EXPECT_DOUBLE_EQ(learning_rate(c, 9), 1e-3);  // the last warmup step reaches lr
  for (int64_t s : {10, 60, 110, 1000}) EXPECT_DOUBLE_EQ(learning_rate(c, s), 1e-3) << s;
  for (int64_t s = 1; s < 10; ++s) EXPECT_GT(learning_rate(c, s), learning_rate(c, s - 1));
}

TEST(Schedule, CosineWarmsUpThenDecaysToTheFloor) {
  const TrainConfig c = schedule("cosine");
  const double floor = 1e-4;  // lr · min_lr_ratio
  EXPECT_DOUBLE_EQ(learning_rate(c, 0), 1e-4);
  EXPECT_DOUBLE_EQ(learning_rate(c, 9), 1e-3);
  EXPECT_DOUBLE_EQ(learning_rate(c, 10), 1e-3);                       // end of warmup: the peak
  EXPECT_NEAR(learning_rate(c, 60), floor + (1e-3 - floor) * 0.5, 1e-15);  // half way: the mid point
  EXPECT_NEAR(learning_rate(c, 35), floor + (1e-3 - floor) * 0.5 * (1 + std::cos(M_PI / 4)), 1e-15);
  EXPECT_NEAR(learning_rate(c, 110), floor, 1e-15);  // the end
  EXPECT_NEAR(learning_rate(c, 500), floor, 1e-15);  // and after it
  for (int64_t s = 11; s <= 110; ++s) EXPECT_LT(learning_rate(c, s), learning_rate(c, s - 1)) << s;
}

TEST(Schedule, CosineWithoutWarmupStartsAtThePeak) {
  TrainConfig c = schedule("cosine");
  c.warmup_steps = 0;
  c.steps = 100;
  EXPECT_DOUBLE_EQ(learning_rate(c, 0), 1e-3);
  EXPECT_NEAR(learning_rate(c, 50), 1e-4 + 0.9e-3 * 0.5, 1e-15);
  EXPECT_NEAR(learning_rate(c, 100), 1e-4, 1e-15);
}

struct ClipFixture {
  ModelConfig mc;
  ParamLayout layout;
  std::unique_ptr<Ops> ops = test_support::make_test_ops();
  DeviceArray<float> grads;
  ClipFixture() {
    mc.vocab_size = 7, mc.n_layer = 1, mc.d_model = 4, mc.n_head = 1, mc.d_ff = 8, mc.n_ctx = 4;
    layout = make_param_layout(mc);
    std::vector<float> host(layout.total);
    // Two non-zero gradients, 3 and 4, in different tensors: norm 5.
    host[layout.get("transformer.w.weight").offset] = 3.0f;
    host[layout.get("lm_head.bias").offset + 2] = -4.0f;
    grads = DeviceArray<float>(*ops, layout.total, "grads");
    grads.from_host(host);
  }
  float at(size_t i) const {
    float v;
    grads.download(&v, 1, i);
    return v;
  }
};

TEST(Clip, ScalesByMaxOverNormWhenAbove) {
  ClipFixture f;
  Optimizer opt(TrainConfig{}, f.layout, *f.ops);
  EXPECT_DOUBLE_EQ(opt.grad_norm(f.grads), 5.0);
  EXPECT_DOUBLE_EQ(opt.clip(f.grads, 1.0), 5.0);  // returns the norm before clipping
  const float factor = float(1.0 / (5.0 + 1e-6));
  EXPECT_FLOAT_EQ(f.at(f.layout.get("transformer.w.weight").offset), 3.0f * factor);
  EXPECT_FLOAT_EQ(f.at(f.layout.get("lm_head.bias").offset + 2), -4.0f * factor);
  EXPECT_NEAR(opt.grad_norm(f.grads), 1.0, 1e-6);
  double others = 0;  // everything else stays zero
  for (float g : f.grads.to_host()) others += std::abs(g);
  EXPECT_NEAR(others, 7.0 * factor, 1e-6);
}

TEST(Clip, LeavesGradientsAloneWhenBelowOrDisabled) {
  ClipFixture f;
  Optimizer opt(TrainConfig{}, f.layout, *f.ops);
  const size_t a = f.layout.get("transformer.w.weight").offset, b = f.layout.get("lm_head.bias").offset + 2;
  for (double max_norm : {10.0, 5.0, 0.0}) {  // 5: factor 5/(5+1e-6) < 1 by a hair, see below
    ClipFixture g;
    EXPECT_DOUBLE_EQ(opt.clip(g.grads, max_norm), 5.0) << max_norm;
    if (max_norm == 5.0) {
      // clip_grad_norm_ still scales by max/(norm+1e-6) here: a change of 2e-7 relative.
      EXPECT_NEAR(g.at(a), 3.0f, 1e-6);
      EXPECT_LT(g.at(a), 3.0f);
    } else {
      EXPECT_EQ(g.at(a), 3.0f) << max_norm;
      EXPECT_EQ(g.at(b), -4.0f) << max_norm;
    }
  }
}

// The trainer's fused path: clip_factor from the backend's sum of squares
// gives torch's clip factor, times 1/loss_scale under fp16, and the update
// applies it; clipping the gradients first and updating with factor 1 is the same.
TEST(Clip, FactorOpUnscalesAndClipsLikeClipGradNorm) {
  ClipFixture f;
  DeviceArray<double> sum(*f.ops, 1, "sum");
  DeviceArray<float> factor(*f.ops, 1, "factor");
  f.ops->sum_squares(f.grads.data(), f.grads.size(), sum.data());
  f.ops->clip_factor(sum.data(), 1.0, 1.0, factor.data());
  EXPECT_EQ(factor.to_host()[0], float(1.0 / (5.0 + 1e-6)));
  f.ops->clip_factor(sum.data(), 1.0, 10.0, factor.data());
  EXPECT_EQ(factor.to_host()[0], 1.0f);  // below the limit: unscaled, unclipped
  f.ops->clip_factor(sum.data(), 1.0, 0.0, factor.data());
  EXPECT_EQ(factor.to_host()[0], 1.0f);  // clipping disabled
  // fp16: gradients scaled by 2^10 have 2^20 times the squares; the norm is of the unscaled ones.
  const double scaled = 25.0 * 1024.0 * 1024.0;
  sum.upload(&scaled, 1);
  f.ops->clip_factor(sum.data(), 1024.0, 1.0, factor.data());
  EXPECT_EQ(factor.to_host()[0], float(1.0 / 1024.0 / (5.0 + 1e-6)));
  // The fused update equals clip-then-update bit for bit.
  ClipFixture g;
  TrainConfig tc;
  Optimizer fused(tc, f.layout, *f.ops), separate(tc, g.layout, *g.ops);
  DeviceArray<float> pf(*f.ops, f.layout.total, "p"), ps(*g.ops, g.layout.total, "p");
  sum.upload(std::vector<double>{0.0}.data(), 1);
  f.ops->sum_squares(f.grads.data(), f.grads.size(), sum.data());
  f.ops->clip_factor(sum.data(), 1.0, 1.0, factor.data());
  fused.step(pf, f.grads, 1e-2, factor.data());
  separate.clip(g.grads, 1.0);
  separate.step(ps, g.grads, 1e-2);
  EXPECT_EQ(pf.to_host(), ps.to_host());
  EXPECT_NE(pf.to_host(), std::vector<float>(f.layout.total, 0.0f));
}

}  // namespace
