// Lighter models (README, "Lighter models"): cross-layer sharing, the factorized
// embedding and activation recomputation.
//  - Every variant's gradients against central differences of the loss
//    (Model::evaluate sums the loss in double), every element of every
//    parameter tensor, with the whole-model step and tolerance that
//    test_gradcheck.cpp derives (h = 3e-3; error < 1e-3 of the tensor's
//    gradient scale + the fp32 rounding noise of the loss, ulp(L)/h).
//  - Sharing: an all-shared model equals an unshared one whose layers hold the
//    same weights, and its gradient is the sum of that model's layer gradients.
//  - Factorization: with identity projections and E = D it is the plain model.
//  - Recomputation: the same loss and bit-identical gradients as storing,
//    with dropout on, and an activation layout smaller by exactly what is
//    no longer stored.
//  - FLOPs, Hugging Face export refusal, generation, checkpoint resume.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <unistd.h>

#include "core/error.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "generate/generator.h"
#include "io/hf.h"
#include "model/model.h"
#include "train/trainer.h"
#include "test_support.h"

using namespace ctrl;

namespace {

// V 11, L 2, D 8, H 2, F 12, T 5: small enough for every element to be checked.
ModelConfig tiny(const std::string& sharing = "none", int64_t E = 0, const std::string& recompute = "none",
                 double dropout = 0.0) {
  ModelConfig c;
  c.vocab_size = 11, c.n_layer = 2, c.d_model = 8, c.n_head = 2, c.d_ff = 12, c.n_ctx = 5;
  c.embd_pdrop = c.resid_pdrop = dropout;
  c.layer_norm_eps = 1e-5;
  c.sharing = sharing, c.embedding_dim = E, c.recompute = recompute;
  return c;
}

struct Batch {
  int64_t B = 2, T = 5;
  std::vector<int32_t> tokens = {3, 7, 3, 0, 10, 5, 5, 1, 3, 9};
  std::vector<int32_t> targets = {7, 3, -1, 10, 2, 5, 1, 3, 9, -1};
};

// Parameters large enough that every layer is nonlinear (as test_gradcheck.cpp),
// except that the ReLU inputs are kept far from the kink: ffn.0's bias is ±4
// (one unit in three off), while ffn.0·x varies by about ±1. Otherwise, with
// some 240 ReLU inputs per layer near N(0, 1), a step of 3e-3 pushes one
// across zero for about half of all seeds, and that kink shows as a 1-5%
// error in every tensor upstream of it (measured while writing this test).
void randomize(Model& m, uint64_t seed) {
  for (size_t k = 0; k < m.layout().tensors.size(); ++k) {
    const ParamTensor& t = m.layout().tensors[k];
    const bool ln_weight = t.name.find("layernorm") != std::string::npos && t.name.find("weight") != std::string::npos;
    const bool relu_bias = t.name.find("ffn.0.bias") != std::string::npos;
    std::vector<float> p(t.numel);
    for (size_t i = 0; i < t.numel; ++i)
      p[i] = relu_bias ? (i % 3 == 0 ? -4.0f : 4.0f)
                       : float((ln_weight ? 1.0 : 0.0) + (t.is_matrix ? 0.3 : 0.2) * random_normal(seed * 1000 + k, 17, i));
    m.write_param(t.name, p);
  }
}

std::vector<float> grads_of(const Model& m) { return m.grads.to_host(); }

// The finite-difference loops call the tiny model thousands of times; one
// thread avoids two threads meeting at every op's barrier on a loaded machine.
struct SingleThreaded {
  int saved = omp_get_max_threads();
  SingleThreaded() { omp_set_num_threads(1); }
  ~SingleThreaded() { omp_set_num_threads(saved); }
};

constexpr float kStep = 3e-3f;
constexpr double kTol = 1e-3;

// Every element of every tensor against (L(θ+h) − L(θ−h)) / (2h), h as rounded in fp32.
void check_every_parameter(Model& model, const std::vector<float>& analytic, const Batch& d, const std::string& what) {
  SingleThreaded one;
  auto loss = [&] { return model.evaluate(d.tokens.data(), d.targets.data(), d.B, d.T).sum; };
  const double floor = std::abs(loss()) * std::ldexp(1.0, -23) / kStep;
  for (const auto& t : model.layout().tensors) {
    std::vector<float> x = model.read_param(t.name);  // perturbed on the host, uploaded for each loss
    auto set = [&](size_t i, float v) {
      x[i] = v;
      model.params.upload(&x[i], 1, t.offset + i);
    };
    double scale = 0, err = 0;
    for (size_t i = 0; i < t.numel; ++i) scale = std::max(scale, double(std::abs(analytic[t.offset + i])));
    for (size_t i = 0; i < t.numel; ++i) {
      const float x0 = x[i], xp = x0 + kStep, xm = x0 - kStep;
      set(i, xp);
      const double fp = loss();
      set(i, xm);
      const double fm = loss();
      set(i, x0);
      err = std::max(err, std::abs((fp - fm) / (double(xp) - double(xm)) - double(analytic[t.offset + i])));
    }
    EXPECT_GT(scale, 0.0) << what << " " << t.name << ": analytic gradient is all zero";
    EXPECT_LT(err, kTol * scale + floor) << what << " " << t.name << " (gradient scale " << scale << ")";
  }
}

struct Variant {
  std::string name, sharing;
  int64_t E;
  std::string recompute;
};

void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

class LighterGradCheck : public ::testing::TestWithParam<Variant> {};

TEST_P(LighterGradCheck, EveryParameterMatchesCentralDifferences) {
  const Variant& v = GetParam();
  auto ops = test_support::make_test_ops();
  Batch d;
  Model model(tiny(v.sharing, v.E, v.recompute), *ops, d.B);
  randomize(model, 11);  // also passes at seeds 1, 12..15 and at h = 1e-3 (checked while writing it)
  model.zero_grads();
  const LossSum fb = model.forward_backward(d.tokens.data(), d.targets.data(), d.B, d.T, 1.0f, 0);
  EXPECT_EQ(fb.count, 8);
  EXPECT_NEAR(fb.sum, model.evaluate(d.tokens.data(), d.targets.data(), d.B, d.T).sum, 1e-5);
  check_every_parameter(model, grads_of(model), d, v.name);
}

INSTANTIATE_TEST_SUITE_P(Variants, LighterGradCheck,
                         ::testing::Values(Variant{"plain", "none", 0, "none"}, Variant{"share_all", "all", 0, "none"},
                                           Variant{"share_attention", "attention", 0, "none"},
                                           Variant{"share_ffn", "ffn", 0, "none"},
                                           Variant{"factorized", "none", 4, "none"},
                                           Variant{"recompute_cheap", "none", 0, "cheap"},
                                           Variant{"recompute_layers", "none", 0, "layers"},
                                           Variant{"all_together", "all", 4, "layers"}),
                         [](const auto& info) { return info.param.name; });

// ---- Sharing -----------------------------------------------------------------

// Elements of one layer's attention block (Wq..layernorm1) and FFN block.
size_t block_numel(const ParamLayout& p, int layer, bool ffn) {
  size_t n = 0;
  const std::string h = "transformer.h." + std::to_string(layer) + ".";
  for (const auto& t : p.tensors) {
    if (t.name.rfind(h, 0) != 0) continue;
    const std::string rest = t.name.substr(h.size());
    const bool is_ffn = rest.rfind("ffn.", 0) == 0 || rest.rfind("layernorm2.", 0) == 0;
    if (is_ffn == ffn) n += t.numel;
  }
  return n;
}

TEST(LighterSharing, LayoutHoldsEachSharedTensorOnce) {
  ModelConfig none = tiny();
  none.n_layer = 3;
  const ParamLayout base = make_param_layout(none);
  const size_t att = block_numel(base, 0, false), ffn = block_numel(base, 0, true);
  EXPECT_EQ(att, 3 * 8 * 8 + 3 * 8 + 8 * 8 + 8 + 2 * 8u);
  EXPECT_EQ(ffn, 12 * 8 + 12 + 8 * 12 + 8 + 2 * 8u);
  struct Case {
    std::string sharing;
    size_t saved;
  };
  for (const Case& c : {Case{"all", 2 * (att + ffn)}, Case{"attention", 2 * att}, Case{"ffn", 2 * ffn}}) {
    ModelConfig m = none;
    m.sharing = c.sharing;
    const ParamLayout p = make_param_layout(m);
    EXPECT_EQ(p.count(), base.count() - c.saved) << c.sharing;
    EXPECT_LT(p.total, base.total) << c.sharing;  // the buffers (and optimizer state) shrink too
    for (const auto& t : p.tensors) {
      if (t.layer < 0) continue;
      const bool is_ffn = t.name.find(".ffn.") != std::string::npos || t.name.find("layernorm2") != std::string::npos;
      const bool shared = is_ffn ? c.sharing != "attention" : c.sharing != "ffn";
      EXPECT_EQ(t.shared, shared) << t.name;
      if (shared) {
        EXPECT_EQ(t.layer, 0) << t.name;  // one copy, under layer 0's Hugging Face name
      }
    }
    // Every layer resolves every tensor it uses.
    for (int l = 0; l < 3; ++l)
      for (const char* s : {"multi_head_attention.Wq.weight", "multi_head_attention.dense.bias", "layernorm1.weight",
                            "ffn.0.weight", "ffn.2.bias", "layernorm2.bias"}) {
        const std::string name = layer_param_name(m, l, s);
        EXPECT_NE(p.find(name), nullptr) << name;
        const bool is_ffn = std::string(s).find("ffn") == 0 || std::string(s).find("layernorm2") == 0;
        const bool shared = is_ffn ? c.sharing != "attention" : c.sharing != "ffn";
        EXPECT_EQ(name, "transformer.h." + std::to_string(shared ? 0 : l) + "." + s);
      }
  }
  EXPECT_EQ(layer_param_name(none, 2, "ffn.0.weight"), "transformer.h.2.ffn.0.weight");
}

// The unshared name that holds a copy of a shared model's tensor for layer l.
std::string unshared_name(const std::string& name, int l) {
  const std::string h0 = "transformer.h.0.";
  return name.rfind(h0, 0) == 0 ? "transformer.h." + std::to_string(l) + "." + name.substr(h0.size()) : name;
}

class LighterSharingSum : public ::testing::TestWithParam<std::string> {};

// A shared model is an unshared one whose layers hold equal weights: the same
// loss bit for bit (the forward computes the same thing), and each shared
// tensor's gradient is the sum of the unshared layers' gradients (rounding of
// the differently ordered sums only), with dropout active.
TEST_P(LighterSharingSum, GradientIsTheSumOfTheLayersOfAnEqualUnsharedModel) {
  const std::string sharing = GetParam();
  auto ops = test_support::make_test_ops();
  Batch d;
  Model shared(tiny(sharing, 0, "none", 0.2), *ops, d.B), plain(tiny("none", 0, "none", 0.2), *ops, d.B);
  randomize(shared, 21);
  randomize(plain, 22);
  for (const auto& t : plain.layout().tensors) {  // each layer gets the tensor the shared model's layer uses
    const std::string from =
        t.layer < 0 ? t.name
                    : layer_param_name(shared.config(), t.layer, t.name.substr(std::string("transformer.h.0.").size()));
    plain.write_param(t.name, shared.read_param(from));
  }
  shared.zero_grads();
  plain.zero_grads();
  const uint64_t seed = 5;
  const LossSum a = shared.forward_backward(d.tokens.data(), d.targets.data(), d.B, d.T, 0.125f, seed);
  const LossSum b = plain.forward_backward(d.tokens.data(), d.targets.data(), d.B, d.T, 0.125f, seed);
  EXPECT_EQ(a.sum, b.sum);
  EXPECT_EQ(shared.layout().count() + (sharing == "all"         ? block_numel(plain.layout(), 1, false) +
                                                                      block_numel(plain.layout(), 1, true)
                                       : sharing == "attention" ? block_numel(plain.layout(), 1, false)
                                                                : block_numel(plain.layout(), 1, true)),
            plain.layout().count());
  for (const auto& t : shared.layout().tensors) {
    const std::vector<float> g = shared.read_grad(t.name);
    if (!t.shared) {  // embedding, head, final LayerNorm, unshared blocks: the very same computation
      const std::vector<float> e = plain.read_grad(t.name);
      for (size_t i = 0; i < t.numel; ++i) ASSERT_EQ(g[i], e[i]) << t.name << " element " << i;
      continue;
    }
    const std::vector<float> g0 = plain.read_grad(unshared_name(t.name, 0));
    const std::vector<float> g1 = plain.read_grad(unshared_name(t.name, 1));
    double scale = 1e-30, err = 0, layer1 = 0;
    for (size_t i = 0; i < t.numel; ++i) {
      scale = std::max(scale, double(std::abs(g[i])));
      err = std::max(err, std::abs(double(g[i]) - (double(g0[i]) + double(g1[i]))));
      layer1 = std::max(layer1, double(std::abs(g1[i])));
    }
    EXPECT_GT(layer1, 0.0) << t.name;  // both layers contribute
    if (t.name.find("Wk.bias") != std::string::npos) EXPECT_LT(err, 1e-6) << t.name;  // exact value 0
    else EXPECT_LT(err / scale, 1e-5) << t.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, LighterSharingSum, ::testing::Values("all", "attention", "ffn"));

// ---- Factorized embedding ----------------------------------------------------

// E = D with identity projections and zero biases is the plain model: the
// embedding is CTRL's at width E (× √E, E-wide positions), then Linear E→D.
TEST(LighterFactorized, IdentityProjectionsGiveThePlainModel) {
  auto ops = test_support::make_test_ops();
  Batch d;
  Model fact(tiny("none", 8), *ops, d.B), plain(tiny(), *ops, d.B);
  randomize(plain, 31);
  randomize(fact, 32);
  for (const auto& t : plain.layout().tensors) fact.write_param(t.name, plain.read_param(t.name));
  for (const char* p : {"transformer.w_proj_in", "transformer.w_proj_out"}) {
    std::vector<float> w(64);
    for (int i = 0; i < 8; ++i)
      for (int j = 0; j < 8; ++j) w[size_t(i * 8 + j)] = i == j ? 1.0f : 0.0f;
    fact.write_param(std::string(p) + ".weight", w);
    fact.write_param(std::string(p) + ".bias", std::vector<float>(8, 0.0f));
  }
  EXPECT_EQ(fact.layout().count(), plain.layout().count() + 2 * (64 + 8));
  EXPECT_EQ(fact.layout().get("transformer.w.weight").shape, (std::vector<int64_t>{11, 8}));
  std::vector<float> lf(size_t(d.B * d.T * 11)), lp(lf.size());
  fact.logits(d.tokens.data(), d.B, d.T, lf.data());
  plain.logits(d.tokens.data(), d.B, d.T, lp.data());
  for (size_t i = 0; i < lf.size(); ++i) ASSERT_NEAR(lf[i], lp[i], 1e-6) << i;
  fact.zero_grads();
  plain.zero_grads();
  const double a = fact.forward_backward(d.tokens.data(), d.targets.data(), d.B, d.T, 1.0f, 0).sum;
  const double b = plain.forward_backward(d.tokens.data(), d.targets.data(), d.B, d.T, 1.0f, 0).sum;
  EXPECT_NEAR(a, b, 1e-5);
  for (const auto& t : plain.layout().tensors) {
    const std::vector<float> g = fact.read_grad(t.name), e = plain.read_grad(t.name);
    double scale = 1e-3, err = 0;
    for (size_t i = 0; i < t.numel; ++i) {
      scale = std::max(scale, double(std::abs(e[i])));
      err = std::max(err, double(std::abs(g[i] - e[i])));
    }
    EXPECT_LT(err / scale, 1e-5) << t.name;
  }
}

TEST(LighterFactorized, ShapesFlopsAndValidation) {
  ModelConfig c = tiny("none", 4);
  const ParamLayout p = make_param_layout(c);
  EXPECT_EQ(p.get("transformer.w.weight").shape, (std::vector<int64_t>{11, 4}));
  EXPECT_EQ(p.get("transformer.w_proj_in.weight").shape, (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(p.get("transformer.w_proj_out.weight").shape, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(p.get("transformer.w_proj_out.bias").shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(make_param_layout(tiny()).count() - p.count(), size_t(11 * 4 - 2 * 8 * 4 - 8 - 4));
  // Head and embedding FLOPs: 6·(V·E + 2·D·E) instead of 6·V·D.
  EXPECT_DOUBLE_EQ(train_flops_per_token(tiny()) - train_flops_per_token(c), 6.0 * (11 * 8 - 11 * 4 - 2 * 8 * 4));
  Config odd;
  odd.model.embedding_dim = 5;
  EXPECT_THROW(validate(odd), Error);  // E-wide sinusoids need an even E
}

// Incremental generation (KV cache) computes the same logits as the batched
// forward, for a shared, factorized model.
TEST(LighterFactorized, GeneratorMatchesTheModel) {
  auto ops = test_support::make_test_ops();
  Model model(tiny("attention", 4), *ops, 1);
  randomize(model, 41);
  const std::vector<int32_t> tokens = {3, 9, 1, 4, 4};
  std::vector<float> full(5 * 11);
  model.logits(tokens.data(), 1, 5, full.data());
  Generator gen(model);
  for (size_t t = 0; t < tokens.size(); ++t) {
    const auto& row = gen.feed(tokens[t]);
    for (size_t v = 0; v < 11; ++v) ASSERT_NEAR(row[v], full[t * 11 + v], 1e-5) << t << " " << v;
  }
}

// ---- Recomputation -----------------------------------------------------------

class LighterRecompute : public ::testing::TestWithParam<std::string> {};

// Recomputation repeats the same operations on the same inputs with the same
// dropout masks, so loss and gradients are bit-identical to storing, in fp32
// and in bf16 (where the LayerNorms read bf16 roundings of the fp32 stream).
TEST_P(LighterRecompute, SameLossAndBitIdenticalGradients) {
  auto ops = test_support::make_test_ops();
  Batch d;
  const std::vector<std::pair<std::string, int64_t>> variants{{"none", 0}, {"ffn", 4}};
  for (const DType low : {DType::F32, DType::BF16}) {
    for (const auto& [sharing, E] : variants) {
      Model stored(tiny(sharing, E, "none", 0.25), *ops, d.B, low);
      Model again(tiny(sharing, E, GetParam(), 0.25), *ops, d.B, low);
      randomize(stored, 51);
      again.params.from_host(stored.params.to_host());
      stored.zero_grads();
      again.zero_grads();
      for (uint64_t seed : {3, 4}) {  // two micro-batches accumulate
        const double a = stored.forward_backward(d.tokens.data(), d.targets.data(), d.B, d.T, 0.5f, seed).sum;
        const double b = again.forward_backward(d.tokens.data(), d.targets.data(), d.B, d.T, 0.5f, seed).sum;
        EXPECT_EQ(a, b) << sharing;
      }
      const std::vector<float> gs = stored.grads.to_host(), ga = again.grads.to_host();
      for (size_t i = 0; i < gs.size(); ++i) ASSERT_EQ(gs[i], ga[i]) << sharing << " " << i;
      EXPECT_EQ(stored.evaluate(d.tokens.data(), d.targets.data(), d.B, d.T).sum,
                again.evaluate(d.tokens.data(), d.targets.data(), d.B, d.T).sum);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, LighterRecompute, ::testing::Values("cheap", "layers"));

// Sizes are multiples of the 16-element alignment, so every saving is exact:
// "cheap" drops ln1_out, ln2_out, ffn_h per layer for one scratch copy of an
// LN output and a ReLU output; "layers" keeps only x_in per layer plus one
// layer's set of activations as scratch.
TEST(LighterRecompute, ActivationLayoutShrinksByWhatIsNotStored) {
  ModelConfig c = tiny();
  c.n_layer = 3, c.d_model = 16, c.n_head = 2, c.d_ff = 32, c.n_ctx = 8;
  const int64_t B = 2;
  const size_t N = 16, D = 16, F = 32, L = 3, probs = 2 * 2 * 8 * 8;
  const ActivationLayout none = make_activation_layout(c, B);
  c.recompute = "cheap";
  const ActivationLayout cheap = make_activation_layout(c, B);
  c.recompute = "layers";
  const ActivationLayout layers = make_activation_layout(c, B);
  const size_t per_layer_cheap = 2 * N * D + N * F;
  EXPECT_EQ(none.saved - cheap.saved, L * per_layer_cheap);
  EXPECT_EQ(cheap.scratch - none.scratch, N * D + N * F);
  EXPECT_EQ(none.bytes() - cheap.bytes(), (L * per_layer_cheap - (N * D + N * F)) * 4);
  const size_t body = 4 * N + N * D + 3 * N * D + probs + N * D + N * D + N * D + N * F;  // all but x_in
  EXPECT_EQ(none.saved - layers.saved, L * body);
  EXPECT_EQ(layers.scratch - none.scratch, body);
  EXPECT_EQ(none.bytes() - layers.bytes(), (L - 1) * body * 4);
  EXPECT_LT(layers.bytes(), cheap.bytes());
  EXPECT_LT(cheap.bytes(), none.bytes());
  // FLOPs: recomputation is hardware work, not model work.
  c.recompute = "none";
  const double model = train_flops_per_token(c);
  EXPECT_EQ(train_hardware_flops_per_token(c), model);
  c.recompute = "cheap";
  EXPECT_EQ(train_flops_per_token(c), model);
  EXPECT_DOUBLE_EQ(train_hardware_flops_per_token(c) - model, double(L * 2 * D * F));
  c.recompute = "layers";
  EXPECT_DOUBLE_EQ(train_hardware_flops_per_token(c) - model, double(L * (2 * (4 * D * D + D * F) + 4 * 8 * D)));
}

TEST(LighterFlops, PlainAndSharedCountTheSame) {
  Config tiny_preset = load_config("tiny");
  // 3 · (2 · (L(4D² + 2DF) + VD) + 4LTD) for tiny (L 4, D 256, F 1024, V 8000, T 128).
  EXPECT_DOUBLE_EQ(train_flops_per_token(tiny_preset.model), 32735232.0);
  for (const char* s : {"all", "attention", "ffn"}) {
    ModelConfig m = tiny_preset.model;
    m.sharing = s;
    EXPECT_EQ(train_flops_per_token(m), train_flops_per_token(tiny_preset.model)) << s;
    EXPECT_LT(make_param_layout(m).count(), make_param_layout(tiny_preset.model).count()) << s;
  }
}

// ---- Export and checkpoints --------------------------------------------------

std::string fresh_dir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("ctrl_lighter_" + name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(p);
  return p.string();
}

// Shared layers are exported unrolled: imported back (as an unshared model)
// they give the shared model's logits bit for bit. A factorized embedding has
// no Hugging Face equal and is refused with one line, writing nothing.
TEST(LighterExport, SharedLayersExportUnrolledAndAFactorizedEmbeddingIsRefused) {
  auto ops = test_support::make_test_ops();
  const std::string dir = fresh_dir("export");
  std::filesystem::create_directories(dir);
  Batch d;
  for (const std::string sharing : {"all", "ffn", "attention", "none"}) {
    CheckpointContents contents;
    contents.config.model = tiny(sharing);
    contents.config.model.n_layer = 3;
    Model model(contents.config.model, *ops, d.B);
    randomize(model, 31);
    const std::string ckpt = dir + "/m.ckpt", hf = dir + "/hf-" + sharing, back = dir + "/back-" + sharing + ".ckpt";
    save_checkpoint(ckpt, contents, model, nullptr);
    export_hf(ckpt, hf);
    import_hf(hf, back, {}, "");
    Checkpoint imported(back);
    EXPECT_EQ(imported.config().model.sharing, "none");
    Model unrolled(imported.config().model, *ops, d.B);
    imported.load_parameters(unrolled);
    ModelConfig plain = contents.config.model;
    plain.sharing = "none";
    EXPECT_EQ(unrolled.layout().count(), make_param_layout(plain).count());  // every layer its own tensors
    const size_t V = size_t(contents.config.model.vocab_size);
    std::vector<float> want(size_t(d.B * d.T) * V), got(want.size());
    model.logits(d.tokens.data(), d.B, d.T, want.data());
    unrolled.logits(d.tokens.data(), d.B, d.T, got.data());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << sharing << " logit " << i;
  }
  CheckpointContents contents;
  contents.config.model = tiny("none", 4);
  Model model(contents.config.model, *ops, 0);
  model.init_weights();
  save_checkpoint(dir + "/f.ckpt", contents, model, nullptr);
  const std::string refused = test_support::error_of([&] { export_hf(dir + "/f.ckpt", dir + "/hf_bad"); });
  EXPECT_NE(refused.find("cannot export to Hugging Face CTRL: this model has a factorized embedding "
                         "(model.embedding_dim=4)"),
            std::string::npos)
      << refused;
  EXPECT_EQ(refused.find('\n'), std::string::npos) << refused;
  EXPECT_FALSE(std::filesystem::exists(dir + "/hf_bad"));
  std::filesystem::remove_all(dir);
}

Config small_trainer_config(int64_t steps) {
  Config c = load_config("tiny");
  for (const char* s : {"model.vocab_size=64", "model.n_layer=3", "model.d_model=32", "model.n_head=2",
                        "model.d_ff=64", "model.n_ctx=16", "model.sharing=all", "model.embedding_dim=16",
                        "model.recompute=cheap", "train.micro_batch=2", "train.global_batch=4", "train.eval_every=0",
                        "train.checkpoint_every=3", "train.warmup_steps=2", "train.lr=0.01", "train.log_every=1"})
    apply_override(c, s);
  c.train.steps = steps;
  return c;
}

// A shared, factorized model saves one copy of each shared tensor (and its
// optimizer state) and resumes bit for bit.
TEST(LighterCheckpoint, SharedFactorizedModelResumesBitForBit) {
  const Config c = small_trainer_config(6);
  const std::string whole = fresh_dir("whole"), parts = fresh_dir("parts");
  const std::vector<double> losses = test_support::expect_resume_bit_exact(c, 3, whole, parts, "shared, factorized", [&] {
    SafetensorsReader file(checkpoint_path(parts, 3));
    EXPECT_TRUE(file.has("transformer.h.0.ffn.0.weight"));
    EXPECT_TRUE(file.has("optimizer.adamw.m.transformer.h.0.ffn.0.weight"));
    EXPECT_TRUE(file.has("transformer.w_proj_in.weight"));
    for (const auto& [name, info] : file.tensors()) EXPECT_EQ(name.find("transformer.h.1."), std::string::npos) << name;
  });
  EXPECT_LT(losses.back(), losses.front());  // it trains
  std::filesystem::remove_all(whole);
  std::filesystem::remove_all(parts);
}

}  // namespace
