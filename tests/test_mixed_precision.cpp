// Mixed precision: bf16 or fp16 matrix products on 16-bit activations and a
// 16-bit copy of the weights; fp32 master weights, LayerNorm statistics,
// softmax, loss and optimizer state; fp16 with dynamic loss scaling. Checked
// against the fp32 engine.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/file_io.h"
#include "model/model.h"
#include "ops/cpu/gemm.h"
#include "test_support.h"
#include "train/loss_scaler.h"
#include "train/trainer.h"

using namespace ctrl;

namespace {

std::string fresh_dir(const std::string& name) { return test_support::fresh_dir("ctrl_mp", name); }

// A corpus a model can learn: each code's stream repeats a fixed 37-token phrase.
std::string learnable_corpus() {
  const std::string dir = fresh_dir("corpus");
  std::vector<uint32_t> a, b;
  for (int i = 0; i < 6000; ++i) a.push_back(10 + uint32_t((i * 7) % 37)), b.push_back(60 + uint32_t((i * 11) % 37));
  test_support::write_two_code_corpus(dir, a, b, 128);
  return dir;
}

Config tiny_config(const std::string& data, const std::string& precision) {
  Config c = load_config("tiny");
  for (const char* s :
       {"model.vocab_size=128", "model.n_layer=2", "model.d_model=64", "model.n_head=4", "model.d_ff=128",
        "model.n_ctx=32", "train.micro_batch=8", "train.global_batch=8", "train.eval_every=0",
        "train.checkpoint_every=0", "train.warmup_steps=20", "train.lr=3e-3", "train.log_every=50", "train.steps=200"})
    apply_override(c, s);
  c.train.data = data;
  c.train.precision = precision;
  return c;
}

// The `tiny` preset's architecture (L 4, D 256, H 4, F 1024, T 128, V 8000) on
// the learnable corpus, 200 steps of 4 sequences from the same initial weights.
Config tiny_preset_config(const std::string& data, const std::string& precision) {
  Config c = load_config("tiny");
  for (const char* s : {"train.micro_batch=4", "train.global_batch=4", "train.eval_every=0",
                        "train.checkpoint_every=0", "train.warmup_steps=20", "train.lr=1e-3", "train.log_every=50",
                        "train.steps=200"})
    apply_override(c, s);
  c.train.data = data;
  c.train.precision = precision;
  return c;
}

// Stated tolerance: at every one of the 200 steps the loss is within 0.02 nats
// plus 1% of the fp32 run's (measured: at most 0.001 nats apart, from 9.04
// down to 0.028), the weights stay finite, and fp16's scale (2^16) never
// overflows here.
TEST(MixedPrecision, LossCurvesOnTinyStayCloseToFp32) {
  const std::string data = learnable_corpus();
  TrainerOptions o32{fresh_dir("fp32"), false, true};
  Trainer fp32(tiny_preset_config(data, "fp32"), o32);
  fp32.run();
  const auto& a = fp32.step_losses();
  ASSERT_EQ(a.size(), 200u);
  EXPECT_LT(a.back(), 0.5 * a.front());  // it learns at all
  for (const char* precision : {"bf16", "fp16"}) {
    TrainerOptions o16{fresh_dir(precision), false, true};
    Trainer low(tiny_preset_config(data, precision), o16);
    low.run();
    const auto& b = low.step_losses();
    ASSERT_EQ(b.size(), a.size()) << precision;
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_TRUE(std::isfinite(b[i])) << precision << " step " << i;
      EXPECT_LT(std::abs(a[i] - b[i]), 0.02 + 0.01 * a[i]) << precision << " step " << i;
    }
    for (float p : low.model().params.to_host()) ASSERT_TRUE(std::isfinite(p));
    EXPECT_EQ(low.state().scaler.skipped_steps, 0) << precision;
  }
}

TEST(MixedPrecision, Bf16GradientsMatchFp32WithinBf16Rounding) {
  ModelConfig c;
  c.vocab_size = 50, c.n_layer = 2, c.d_model = 32, c.n_head = 4, c.d_ff = 48, c.n_ctx = 16, c.seed = 5;
  c.embd_pdrop = c.resid_pdrop = 0;
  auto ops = test_support::make_test_ops();
  Model m32(c, *ops, 2), m16(c, *ops, 2, DType::BF16);
  m32.init_weights();
  m16.init_weights();
  std::vector<int32_t> tokens(32), targets(32);
  for (int i = 0; i < 32; ++i) tokens[size_t(i)] = (i * 13) % 50, targets[size_t(i)] = (i * 13 + 5) % 50;
  const LossSum l32 = m32.forward_backward(tokens.data(), targets.data(), 2, 16, 1.0f / 32, 0);
  const LossSum l16 = m16.forward_backward(tokens.data(), targets.data(), 2, 16, 1.0f / 32, 0);
  EXPECT_NEAR(l16.mean(), l32.mean(), 0.01 * l32.mean());
  // Relative L2 error per tensor: bf16 keeps 8 significant bits (about 0.4% per
  // rounding), and the roundings of activations and of the gradients inside
  // the layers add up to a few percent (measured at most 3.0%, in ffn.0.bias and
  // layernorm2.bias, which sum many rounded terms that largely cancel).
  const std::vector<float> g32 = m32.grads.to_host(), g16 = m16.grads.to_host();
  for (const auto& t : m32.layout().tensors) {
    if (t.name.find("Wk.bias") != std::string::npos) continue;  // exact gradient 0: noise on both sides
    double diff = 0, norm = 0;
    for (size_t i = 0; i < t.numel; ++i) {
      const double d = double(g16[t.offset + i]) - double(g32[t.offset + i]);
      diff += d * d;
      norm += double(g32[t.offset + i]) * double(g32[t.offset + i]);
    }
    EXPECT_LT(std::sqrt(diff / norm), 0.04) << t.name;
  }
}

TEST(MixedPrecision, Bf16StoresTheMatrixInputsSoftmaxAndInnerGradientsInHalfTheRoom) {
  ModelConfig c;
  c.vocab_size = 100, c.n_layer = 3, c.d_model = 64, c.n_head = 4, c.d_ff = 256, c.n_ctx = 32;
  const auto a32 = make_activation_layout(c, 4), a16 = make_activation_layout(c, 4, DType::BF16);
  const size_t N = 4 * 32, D = 64, F = 256, probs = 4 * 4 * 32 * 32;
  // Per layer ln1_out, qkv, probs, att, ln2_out, ffn_h, plus lnf_out after the
  // last, and the scratch d_qkv, d_att, d_ffn: halved (up to alignment).
  const size_t low = 3 * (N * D + 3 * N * D + probs + N * D + N * D + N * F) + N * D + (3 * N * D + N * D + N * F);
  // The residual stream: per layer x_in and x_mid, and x_out, saved in fp32
  // become the LayerNorms' bf16 inputs; the fp32 stream lives in backward scratch.
  const size_t stream = 3 * 2 * N * D + N * D;
  EXPECT_NEAR(double(a32.total - a16.total), double(low) / 2 + double(stream) / 2, 16.0 * 30);
  EXPECT_EQ(a16.inner, DType::BF16);
  // fp16 halves the matrix inputs and the softmax only (its activation gradients stay fp32).
  const auto f16 = make_activation_layout(c, 4, DType::F16);
  EXPECT_EQ(f16.inner, DType::F32);
  EXPECT_LT(a16.bytes(), f16.bytes());
  EXPECT_LT(f16.bytes(), a32.bytes());
}

// Runs 6 steps whole and as 3 + 3 with a resume; the resumed losses must be
// bit-identical. Returns the run directory of the resumed run.
std::string check_resume(const std::string& data, const std::string& precision, int64_t loss_scale_window) {
  Config c = tiny_config(data, precision);
  c.train.steps = 6;
  c.train.checkpoint_every = 3;
  c.train.loss_scale_window = loss_scale_window;
  const std::string parts = fresh_dir("parts" + precision);
  test_support::expect_resume_bit_exact(c, 3, fresh_dir("whole" + precision), parts, precision);
  return parts;
}

TEST(MixedPrecision, ResumesInBf16AndSwitchesPrecisionOnResume) {
  const std::string data = learnable_corpus();
  TrainerOptions parts{check_resume(data, "bf16", 2000), true, true};
  // The same run continues in fp32: precision is a training setting, not part of the model.
  Config more = tiny_config(data, "fp32");
  more.train.steps = 8;
  more.train.checkpoint_every = 3;
  Trainer switched(more, parts);
  EXPECT_EQ(switched.state().step, 6);
  switched.run();
  EXPECT_TRUE(std::isfinite(switched.step_losses().back()));
}

// bf16 on a CPU runs its products on one of two paths (train.cpu_bf16) that
// round differently. A run records the path it took in config.json and its
// checkpoints, and --resume under auto keeps it: the resumed run reproduces
// the uninterrupted one for either recorded path, whichever this process's
// auto would pick. A GPU runs bf16 natively: there the setting takes no path
// and is recorded as given (auto stays auto), and resume is still bit-exact.
TEST(MixedPrecision, ResumeUnderAutoKeepsTheRecordedBf16Path) {
  const bool gpu = test_support::test_backend_is_gpu();
  const std::string data = learnable_corpus();
  Config probe = tiny_config(data, "bf16");
  probe.train.steps = 1;
  const std::string probe_dir = fresh_dir("bf16_auto");
  Trainer(probe, TrainerOptions{probe_dir, false, true}).run();
  const std::string recorded = read_file(probe_dir + "/config.json");
  if (gpu)
    EXPECT_NE(recorded.find("\"train.cpu_bf16\": \"auto\""), std::string::npos) << recorded;
  else
    EXPECT_TRUE(recorded.find("\"train.cpu_bf16\": \"native\"") != std::string::npos ||
                recorded.find("\"train.cpu_bf16\": \"widened\"") != std::string::npos)
        << recorded;
  // The checkpoint records the same path as config.json (it said "auto", so a resume measured again).
  const std::vector<std::string> saved = list_checkpoints(probe_dir);
  ASSERT_FALSE(saved.empty());
  const std::string in_checkpoint = Checkpoint(saved.back()).config().train.cpu_bf16;
  EXPECT_NE(recorded.find("\"train.cpu_bf16\": \"" + in_checkpoint + "\""), std::string::npos) << in_checkpoint;
  for (const char* path : {"native", "widened"}) {
    Config c = tiny_config(data, "bf16");
    c.train.steps = 6;
    c.train.checkpoint_every = 3;
    c.train.cpu_bf16 = path;
    Trainer full(c, TrainerOptions{fresh_dir(std::string("whole_") + path), false, true});
    full.run();
    Config first = c;
    first.train.steps = 3;
    const std::string parts = fresh_dir(std::string("parts_") + path);
    Trainer(first, TrainerOptions{parts, false, true}).run();
    // Without oneDNN bf16 kernels for this CPU a pinned native runs, and is recorded, as widened.
    const std::string taken = gpu || cpu::onednn_has_bf16_matmul() ? path : "widened";
    EXPECT_NE(read_file(parts + "/config.json").find("\"train.cpu_bf16\": \"" + taken + "\""), std::string::npos);
    Config rest_config = c;
    rest_config.train.cpu_bf16 = "auto";
    Trainer rest(rest_config, TrainerOptions{parts, true, true});
    rest.run();
    const std::vector<double> tail(full.step_losses().begin() + 3, full.step_losses().end());
    EXPECT_EQ(rest.step_losses(), tail) << path;
    EXPECT_TRUE(rest.model().params.to_host() == full.model().params.to_host()) << path;
  }
}

// `ctrl train` probes bf16 and fp32 steps before it trains (two copies of the
// model): their memory goes back to the system, so a run under auto peaks
// where the same run with its path pinned does, not 28 MiB above for its whole
// length (a small model: 69 MiB against 41).
TEST(MixedPrecision, TheStartUpProbesLeaveNoMemoryBehind) {
  if (test_support::test_backend_is_gpu()) GTEST_SKIP() << "a CPU's bf16 probes";
  double peak[2] = {0, 0};
  const char* paths[2] = {"auto", "widened"};
  for (int i = 0; i < 2; ++i) {
    std::string out;
    ASSERT_EQ(test_support::run_shell("CTRL_DEVICE=cpu " + test_support::ctrl_binary() +
                                          " train --config tiny --threads 1 --out " + fresh_dir(paths[i]) +
                                          " --set model.n_layer=2 --set model.d_model=64 --set model.n_head=2"
                                          " --set model.d_ff=128 --set model.n_ctx=32 --set train.micro_batch=4"
                                          " --set train.global_batch=4 --set train.steps=3 --set train.precision=bf16"
                                          " --set train.cpu_bf16=" +
                                          paths[i] + " 2>&1",
                                      &out),
              0)
        << out;
    peak[i] = test_support::peak_memory_mib(out);
    ASSERT_GT(peak[i], 0) << out;
  }
  EXPECT_LE(peak[0], peak[1] + 8) << "auto " << peak[0] << " MiB, widened " << peak[1] << " MiB";
}

TEST(MixedPrecision, LossScalerSkipsBacksOffAndGrowsAsGradScalerDoes) {
  LossScaler s(65536, 3);
  EXPECT_FALSE(s.update(false));  // overflow: skip, halve
  EXPECT_EQ(s.scale(), 32768);
  EXPECT_TRUE(s.update(true));
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 32768);
  EXPECT_TRUE(s.update(true));  // third clean step in a row: double
  EXPECT_EQ(s.scale(), 65536);
  EXPECT_TRUE(s.update(true));
  EXPECT_FALSE(s.update(false));  // an overflow resets the clean-step count
  EXPECT_TRUE(s.update(true));
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 32768);
  EXPECT_EQ(s.state().skipped_steps, 2);
}

TEST(MixedPrecision, ForcedOverflowsAreSkippedAndNeverReachTheWeights) {
  // A scale of 2^40 overflows fp16 gradients at once: the trainer must skip
  // steps and halve the scale until the gradients fit, then train normally.
  const std::string data = learnable_corpus();
  Config c = tiny_config(data, "fp16");
  c.train.loss_scale = 1099511627776.0;  // 2^40
  c.train.loss_scale_window = 10;
  c.train.steps = 60;
  TrainerOptions o{fresh_dir("overflow"), false, true};
  Trainer t(c, o);
  const std::vector<float> before = t.model().params.to_host();
  t.run();
  const auto& s = t.state().scaler;
  EXPECT_GT(s.skipped_steps, 5);
  EXPECT_LT(s.scale, 1099511627776.0);
  const std::vector<float> after = t.model().params.to_host();
  for (float p : after) ASSERT_TRUE(std::isfinite(p));
  EXPECT_NE(after, before);  // it did train afterwards
  EXPECT_LT(t.step_losses().back(), t.step_losses().front());
  EXPECT_LT(s.clean_steps, c.train.loss_scale_window);
  // Growth in the trainer: from scale 1, 20 clean steps with a window of 5 double it four times.
  Config g = tiny_config(data, "fp16");
  g.train.loss_scale = 1;
  g.train.loss_scale_window = 5;
  g.train.steps = 20;
  TrainerOptions og{fresh_dir("growth"), false, true};
  Trainer grow(g, og);
  grow.run();
  EXPECT_EQ(grow.state().scaler.skipped_steps, 0);
  EXPECT_EQ(grow.state().scaler.scale, 16.0);
}

// A run whose loss goes non-finite stops with "diverged" before the step
// reaches the weights; under fp16 once the loss scale has halved to 1 (from
// 4 here: two skipped steps first), instead of skipping forever while the
// scale underflows (at about 2^-128 its inverse is inf, and inf · 0 turns the
// weights to NaN).
TEST(MixedPrecision, ADivergingRunStopsInsteadOfSkippingForever) {
  const std::string data = learnable_corpus();
  for (const std::string precision : {"fp32", "fp16"}) {
    Config c = tiny_config(data, precision);
    c.train.lr = 100;
    c.train.warmup_steps = 0;
    c.train.clip_norm = 0;
    c.train.loss_scale = 4;
    c.train.steps = 60;
    Trainer trainer(c, TrainerOptions{fresh_dir("diverge_" + precision), false, true});
    const std::string message = test_support::error_of([&] { trainer.run(); });
    EXPECT_NE(message.find("training diverged at step"), std::string::npos) << precision << ": " << message;
    EXPECT_EQ(message.find("at fp16 loss scale 1 ") != std::string::npos, precision == "fp16") << message;
    // The step that diverged never reached the weights.
    for (float w : trainer.model().params.to_host()) ASSERT_TRUE(std::isfinite(w)) << precision;
  }
}

TEST(MixedPrecision, Fp16ResumesBitForBitWithItsLossScale) {
  // A window of 2 changes the scale within the run, so it must be restored.
  check_resume(learnable_corpus(), "fp16", 2);
}

}  // namespace
