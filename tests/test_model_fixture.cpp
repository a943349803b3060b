// The correctness oracle: tensors computed by Hugging Face's CTRLLMHeadModel
// (tools/make_fixture.py) for logits, loss, every parameter gradient and
// several AdamW and Adagrad steps, compared with the engine in fp32.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/safetensors.h"
#include "model/model.h"
#include "train/optimizer.h"
#include "test_support.h"

using namespace ctrl;

namespace {

struct Fixture {
  std::unique_ptr<SafetensorsReader> file;
  ModelConfig config;
  int64_t B = 0, T = 0;
  std::vector<int32_t> tokens, targets;
};

Fixture load(const std::string& name) {
  Fixture f;
  // CTRL_FIXTURE_DIR points the oracle tests at regenerated fixtures (tools/check_fixtures.sh).
  const char* dir = std::getenv("CTRL_FIXTURE_DIR");
  f.file = std::make_unique<SafetensorsReader>((dir ? std::string(dir) : test_support::source_dir() + "/tests/fixtures") +
                                               "/" + name);
  const auto hf = nlohmann::json::parse(f.file->metadata().at("config"));
  f.config.vocab_size = hf["vocab_size"];
  f.config.n_ctx = hf["n_positions"];
  f.config.d_model = hf["n_embd"];
  f.config.d_ff = hf["dff"];
  f.config.n_layer = hf["n_layer"];
  f.config.n_head = hf["n_head"];
  f.config.layer_norm_eps = hf["layer_norm_epsilon"];
  f.config.embd_pdrop = f.config.resid_pdrop = 0;
  const auto& ids = f.file->get("input_ids");
  f.B = ids.shape[0];
  f.T = ids.shape[1];
  for (int64_t v : f.file->read_ints("input_ids")) f.tokens.push_back(int32_t(v));
  // Hugging Face shifts labels inside the model: position t predicts t+1, the last predicts nothing.
  f.targets.assign(f.tokens.size(), -1);
  for (int64_t b = 0; b < f.B; ++b)
    for (int64_t t = 0; t + 1 < f.T; ++t) f.targets[b * f.T + t] = f.tokens[b * f.T + t + 1];
  return f;
}

void load_weights(Model& m, const SafetensorsReader& file, const std::string& prefix = "") {
  for (const auto& t : m.layout().tensors) {
    const auto v = file.read_floats(prefix + t.name, t.shape);
    m.params.upload(v.data(), t.numel, t.offset);
  }
}

// Largest |a - b| relative to the largest |b|, with a floor for tensors whose
// exact value is zero: the key bias's gradient vanishes mathematically (softmax
// ignores a per-row constant), so both sides hold only rounding noise there.
double rel_error(const float* a, const std::vector<float>& b, double floor = 1e-3) {
  double diff = 0, scale = floor;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, double(std::abs(a[i] - b[i])));
    scale = std::max(scale, double(std::abs(b[i])));
  }
  return diff / scale;
}

class FixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureTest, LogitsLossAndEveryGradientMatchHuggingFace) {
  Fixture f = load(GetParam());
  auto ops = test_support::make_test_ops();
  Model model(f.config, *ops, f.B);
  load_weights(model, *f.file);

  std::vector<float> logits(size_t(f.B * f.T * f.config.vocab_size));
  model.logits(f.tokens.data(), f.B, f.T, logits.data());
  EXPECT_LT(rel_error(logits.data(), f.file->read_floats("logits")), 1e-5);

  const float expected_loss = f.file->read_floats("loss")[0];
  model.zero_grads();
  LossSum loss = model.forward_backward(f.tokens.data(), f.targets.data(), f.B, f.T, 0.0f, 0);
  EXPECT_EQ(loss.count, f.B * (f.T - 1));
  EXPECT_NEAR(loss.mean(), expected_loss, 1e-5);
  EXPECT_NEAR(model.evaluate(f.tokens.data(), f.targets.data(), f.B, f.T).mean(), expected_loss, 1e-5);

  model.zero_grads();
  model.forward_backward(f.tokens.data(), f.targets.data(), f.B, f.T, 1.0f / float(loss.count), 0);
  for (const auto& t : model.layout().tensors) {
    const auto expected = f.file->read_floats("grad." + t.name, t.shape);
    EXPECT_LT(rel_error(model.read_grad(t.name).data(), expected), 1e-4) << t.name;
  }
}

void check_trajectory(const std::string& fixture, const std::string& optimizer) {
  Fixture f = load(fixture);
  const auto& meta = f.file->metadata();
  TrainConfig tc;
  tc.optimizer = optimizer;
  tc.schedule = "constant";
  if (optimizer == "adamw") {
    tc.lr = std::stod(meta.at("lr_adamw"));
    tc.clip_norm = std::stod(meta.at("clip_norm"));
    tc.weight_decay = std::stod(meta.at("weight_decay"));
    tc.eps = std::stod(meta.at("eps"));
    const auto betas = nlohmann::json::parse(meta.at("betas"));
    tc.beta1 = betas[0], tc.beta2 = betas[1];
  } else {
    tc.lr = std::stod(meta.at("lr_adagrad"));
    tc.clip_norm = std::stod(meta.at("clip_norm_adagrad"));
    tc.adagrad_initial_accumulator = std::stod(meta.at("adagrad_initial_accumulator"));
  }
  auto ops = test_support::make_test_ops();
  Model model(f.config, *ops, f.B);
  load_weights(model, *f.file);
  Optimizer opt(tc, model.layout(), *ops);
  const auto losses = f.file->read_floats(optimizer + ".losses");
  for (size_t s = 0; s < losses.size(); ++s) {
    model.zero_grads();
    const LossSum l = model.forward_backward(f.tokens.data(), f.targets.data(), f.B, f.T,
                                             1.0f / float(f.B * (f.T - 1)), 0);
    EXPECT_NEAR(l.mean(), losses[s], 2e-5 * (1 + s)) << optimizer << " step " << s;
    opt.clip(model.grads, tc.clip_norm);
    opt.step(model.params, model.grads, tc.lr);
  }
  // Adam divides by √v, so it turns rounding noise in near-zero gradients into
  // lr-sized steps: the key bias (exact gradient 0) is left out for AdamW and
  // the rest compared at 1e-3 of each tensor's scale; Adagrad stays at 1e-4.
  for (const auto& t : model.layout().tensors) {
    const bool noise_only = t.name.find("Wk.bias") != std::string::npos;
    if (optimizer == "adamw" && noise_only) continue;
    const auto expected = f.file->read_floats(optimizer + ".final." + t.name, t.shape);
    EXPECT_LT(rel_error(model.read_param(t.name).data(), expected), optimizer == "adamw" ? 1e-3 : 1e-4)
        << optimizer << " " << t.name;
  }
}

TEST_P(FixtureTest, AdamWStepsMatchPyTorch) { check_trajectory(GetParam(), "adamw"); }
TEST_P(FixtureTest, AdagradStepsMatchPyTorch) { check_trajectory(GetParam(), "adagrad"); }

INSTANTIATE_TEST_SUITE_P(Oracle, FixtureTest, ::testing::Values("ctrl_tiny.safetensors", "ctrl_tiny2.safetensors"),
                         [](const auto& info) { return info.param.substr(0, info.param.find('.')); });

}  // namespace
