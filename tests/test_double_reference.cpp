// Gradient checks in double precision: an independent, plain-loop CTRL forward
// in double (this file; the semantics of Hugging Face's CTRLLMHeadModel, as the
// fixtures pin them) gives the loss, and central differences of it with a tiny
// step give every parameter's gradient to about 1e-8 relative. The engine's
// fp32 forward and hand-written backward must match both: the loss to fp32
// rounding (measured: 3e-8 relative), every gradient element to 2e-5 of its
// tensor's largest gradient (measured: at most 1.8e-6).
// Variants: plain, shared layers, factorized embedding.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/layout.h"
#include "model/model.h"
#include "ops/ops.h"
#include "test_support.h"

using namespace ctrl;

namespace {

using Vec = std::vector<double>;

// y[N, Dout] = x[N, Din] · W[Dout, Din]ᵀ + b.
Vec linear(const Vec& x, const double* W, const double* b, int64_t N, int64_t Dout, int64_t Din) {
  Vec y(size_t(N * Dout));
  for (int64_t r = 0; r < N; ++r)
    for (int64_t o = 0; o < Dout; ++o) {
      double s = b[o];
      for (int64_t i = 0; i < Din; ++i) s += x[size_t(r * Din + i)] * W[o * Din + i];
      y[size_t(r * Dout + o)] = s;
    }
  return y;
}

Vec layernorm(const Vec& x, const double* gamma, const double* beta, int64_t N, int64_t D, double eps) {
  Vec y(x.size());
  for (int64_t r = 0; r < N; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < D; ++i) mean += x[size_t(r * D + i)];
    mean /= double(D);
    for (int64_t i = 0; i < D; ++i) var += (x[size_t(r * D + i)] - mean) * (x[size_t(r * D + i)] - mean);
    const double rstd = 1.0 / std::sqrt(var / double(D) + eps);
    for (int64_t i = 0; i < D; ++i) y[size_t(r * D + i)] = (x[size_t(r * D + i)] - mean) * rstd * gamma[i] + beta[i];
  }
  return y;
}

// Causal multi-head attention of q | k | v rows [B*T, 3D] -> [B*T, D].
Vec attention(const Vec& qkv, int64_t B, int64_t T, int64_t D, int64_t H) {
  const int64_t hd = D / H;
  Vec out(size_t(B * T * D), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const double* q = &qkv[size_t((b * T + i) * 3 * D + h * hd)];
        Vec p(size_t(i + 1));
        double mx = -1e300, z = 0;
        for (int64_t j = 0; j <= i; ++j) {
          const double* k = &qkv[size_t((b * T + j) * 3 * D + D + h * hd)];
          double s = 0;
          for (int64_t c = 0; c < hd; ++c) s += q[c] * k[c];
          p[size_t(j)] = s / std::sqrt(double(hd));
          mx = std::max(mx, p[size_t(j)]);
        }
        for (auto& v : p) z += (v = std::exp(v - mx));
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t c = 0; c < hd; ++c)
            out[size_t((b * T + i) * D + h * hd + c)] += p[size_t(j)] / z * qkv[size_t((b * T + j) * 3 * D + 2 * D + h * hd + c)];
      }
  return out;
}

// Summed cross-entropy of CTRL on tokens [B, T] with targets (negative: ignored).
double reference_loss(const ModelConfig& c, const ParamLayout& layout, const Vec& P, const std::vector<int32_t>& tokens,
                      const std::vector<int32_t>& targets, int64_t B, int64_t T) {
  const int64_t N = B * T, D = c.d_model, F = c.d_ff, V = c.vocab_size, E = embedding_width(c);
  auto at = [&](const std::string& name) { return P.data() + layout.get(name).offset; };
  // Token embedding × √E plus E-wide sinusoidal positions (sin half | cos half).
  Vec emb(size_t(N * E));
  for (int64_t r = 0; r < N; ++r)
    for (int64_t col = 0; col < E; ++col) {
      const int64_t k = col < E / 2 ? col : col - E / 2;
      const double angle = double(r % T) / std::pow(10000.0, 2.0 * double(k) / double(E));
      emb[size_t(r * E + col)] = at("transformer.w.weight")[tokens[size_t(r)] * E + col] * std::sqrt(double(E)) +
                                 (col < E / 2 ? std::sin(angle) : std::cos(angle));
    }
  const bool factorized = c.embedding_dim > 0;
  Vec x = factorized ? linear(emb, at("transformer.w_proj_in.weight"), at("transformer.w_proj_in.bias"), N, D, E) : emb;
  for (int l = 0; l < int(c.n_layer); ++l) {
    auto p = [&](const std::string& suffix) { return at(layer_param_name(c, l, suffix)); };
    const Vec h1 = layernorm(x, p("layernorm1.weight"), p("layernorm1.bias"), N, D, 1e-6);
    Vec qkv(size_t(N * 3 * D));
    const char* parts[] = {"Wq", "Wk", "Wv"};
    for (int part = 0; part < 3; ++part) {
      const std::string name = std::string("multi_head_attention.") + parts[part];
      const Vec y = linear(h1, p(name + ".weight"), p(name + ".bias"), N, D, D);
      for (int64_t r = 0; r < N; ++r)
        for (int64_t i = 0; i < D; ++i) qkv[size_t(r * 3 * D + part * D + i)] = y[size_t(r * D + i)];
    }
    const Vec a = linear(attention(qkv, B, T, D, c.n_head), p("multi_head_attention.dense.weight"),
                         p("multi_head_attention.dense.bias"), N, D, D);
    for (size_t i = 0; i < x.size(); ++i) x[i] += a[i];
    Vec f = linear(layernorm(x, p("layernorm2.weight"), p("layernorm2.bias"), N, D, 1e-6), p("ffn.0.weight"),
                   p("ffn.0.bias"), N, F, D);
    for (auto& v : f) v = std::max(v, 0.0);
    const Vec g = linear(f, p("ffn.2.weight"), p("ffn.2.bias"), N, D, F);
    for (size_t i = 0; i < x.size(); ++i) x[i] += g[i];
  }
  Vec h = layernorm(x, at("transformer.layernorm.weight"), at("transformer.layernorm.bias"), N, D, c.layer_norm_eps);
  if (factorized) h = linear(h, at("transformer.w_proj_out.weight"), at("transformer.w_proj_out.bias"), N, E, D);
  const Vec logits = linear(h, at("transformer.w.weight"), at("lm_head.bias"), N, V, E);
  double loss = 0;
  for (int64_t r = 0; r < N; ++r) {
    if (targets[size_t(r)] < 0) continue;
    double mx = -1e300, z = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, logits[size_t(r * V + v)]);
    for (int64_t v = 0; v < V; ++v) z += std::exp(logits[size_t(r * V + v)] - mx);
    loss += mx + std::log(z) - logits[size_t(r * V + targets[size_t(r)])];
  }
  return loss;
}

struct Variant {
  const char* name;
  std::string sharing;
  int64_t embedding_dim;
};

class DoubleReference : public ::testing::TestWithParam<Variant> {};

TEST_P(DoubleReference, EngineGradientsMatchDoublePrecisionDifferences) {
  const Variant& v = GetParam();
  ModelConfig c;
  c.vocab_size = 11, c.n_layer = 2, c.d_model = 8, c.n_head = 2, c.d_ff = 12, c.n_ctx = 5;
  c.embd_pdrop = c.resid_pdrop = 0;
  c.layer_norm_eps = 1e-5;
  c.sharing = v.sharing, c.embedding_dim = v.embedding_dim;
  const int64_t B = 2, T = 5;
  const std::vector<int32_t> tokens = {3, 7, 3, 0, 10, 5, 5, 1, 3, 9};
  const std::vector<int32_t> targets = {7, 3, -1, 10, 2, 5, 1, 3, 9, -1};
  auto ops = test_support::make_test_ops();
  Model model(c, *ops, B);
  // Parameters large enough that every layer is nonlinear (LayerNorm weights around 1).
  std::vector<float> host(model.params.size());
  for (size_t k = 0; k < model.layout().tensors.size(); ++k) {
    const ParamTensor& t = model.layout().tensors[k];
    const bool ln_weight = t.name.find("layernorm") != std::string::npos && t.name.find("weight") != std::string::npos;
    for (size_t i = 0; i < t.numel; ++i)
      host[t.offset + i] =
          float((ln_weight ? 1.0 : 0.0) + (t.is_matrix ? 0.3 : 0.2) * random_normal(900 + k, 17, i));
  }
  model.params.from_host(host);
  model.zero_grads();
  const LossSum engine = model.forward_backward(tokens.data(), targets.data(), B, T, 1.0f, 0);

  Vec P(model.params.size());
  for (size_t i = 0; i < P.size(); ++i) P[i] = double(host[i]);
  const std::vector<float> grads = model.grads.to_host();
  const double loss = reference_loss(c, model.layout(), P, tokens, targets, B, T);
  EXPECT_NEAR(engine.sum, loss, 1e-6 * std::abs(loss)) << v.name;

  // Central differences in double: step 1e-5 leaves truncation ~1e-10 and
  // rounding ~1e-16·L/1e-5 ~ 1e-10, far below the fp32 engine's own error.
  const double h = 1e-5;
  for (const auto& t : model.layout().tensors) {
    Vec numeric(t.numel);
    double scale = 0;
    for (size_t i = 0; i < t.numel; ++i) {
      double& p = P[t.offset + i];
      const double p0 = p;
      p = p0 + h;
      const double up = reference_loss(c, model.layout(), P, tokens, targets, B, T);
      p = p0 - h;
      const double down = reference_loss(c, model.layout(), P, tokens, targets, B, T);
      p = p0;
      numeric[i] = (up - down) / (2 * h);
      scale = std::max(scale, std::abs(numeric[i]));
    }
    double err = 0;
    for (size_t i = 0; i < t.numel; ++i) err = std::max(err, std::abs(double(grads[t.offset + i]) - numeric[i]));
    // The key bias's true gradient is 0 (softmax ignores a per-row constant): both sides are noise.
    const double bound = 2e-5 * scale + 1e-6;
    EXPECT_LE(err, bound) << v.name << " " << t.name << ": max error " << err << ", scale " << scale;
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, DoubleReference,
                         ::testing::Values(Variant{"plain", "none", 0}, Variant{"shared", "all", 0},
                                           Variant{"factorized", "none", 4}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
