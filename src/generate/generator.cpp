#include "generate/generator.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_set>

#include "core/error.h"

namespace ctrl {

Generator::Generator(Model& model) : model_(model) {
  const auto& c = model.config();
  Ops& ops = model.ops();
  const size_t D = size_t(c.d_model);
  for (int l = 0; l < int(c.n_layer); ++l) {
    auto p = [&](const std::string& suffix) { return model.param(layer_param_name(c, l, suffix)); };
    const std::string a = "multi_head_attention.";
    layers_.push_back({p("layernorm1.weight"), p("layernorm1.bias"), p(a + "Wq.weight"), p(a + "Wq.bias"),
                       p(a + "dense.weight"), p(a + "dense.bias"), p("layernorm2.weight"), p("layernorm2.bias"),
                       p("ffn.0.weight"), p("ffn.0.bias"), p("ffn.2.weight"), p("ffn.2.bias")});
  }
  k_cache_ = DeviceArray<float>(ops, size_t(c.n_layer) * size_t(c.n_ctx) * D, "generator.k_cache");
  v_cache_ = DeviceArray<float>(ops, k_cache_.size(), "generator.v_cache");
  x_ = DeviceArray<float>(ops, D, "generator.x");
  ln_ = DeviceArray<float>(ops, D, "generator.ln");
  qkv_ = DeviceArray<float>(ops, 3 * D, "generator.qkv");
  att_ = DeviceArray<float>(ops, D, "generator.att");
  branch_ = DeviceArray<float>(ops, D, "generator.branch");
  ffn_ = DeviceArray<float>(ops, size_t(c.d_ff), "generator.ffn");
  emb_ = DeviceArray<float>(ops, size_t(embedding_width(c)), "generator.emb");
  logits_ = DeviceArray<float>(ops, size_t(c.vocab_size), "generator.logits");
  mean_ = DeviceArray<float>(ops, 1, "generator.mean");
  rstd_ = DeviceArray<float>(ops, 1, "generator.rstd");
  host_logits_.resize(size_t(c.vocab_size));
}

const std::vector<float>& Generator::feed(int32_t token) {
  const auto& c = model_.config();
  if (position_ >= c.n_ctx) fail("generation reached the model's context of " + std::to_string(c.n_ctx) + " tokens");
  if (token < 0 || token >= c.vocab_size) fail("token id " + std::to_string(token) + " is outside the vocabulary");
  Ops& ops = model_.ops();
  const int64_t D = c.d_model, F = c.d_ff, H = c.n_head;
  const DropoutSpec none;
  float *x = x_.data(), *ln = ln_.data(), *qkv = qkv_.data(), *att = att_.data(), *branch = branch_.data();
  float *ffn = ffn_.data(), *emb = emb_.data(), *mean = mean_.data(), *rstd = rstd_.data();
  if (c.embedding_dim > 0) {  // factorized embedding (README, "Lighter models"): E-wide, then Linear E→D
    const int64_t E = c.embedding_dim;
    ops.embedding_at(emb, token, position_, model_.param("transformer.w.weight"), E, std::sqrt(float(E)));
    ops.linear_forward(x, emb, model_.param("transformer.w_proj_in.weight"),
                       model_.param("transformer.w_proj_in.bias"), 1, D, E);
  } else {
    ops.embedding_at(x, token, position_, model_.param("transformer.w.weight"), D, std::sqrt(float(D)));
  }
  for (int l = 0; l < int(c.n_layer); ++l) {
    const LayerParams& p = layers_[size_t(l)];
    ops.layernorm_forward(ln, mean, rstd, x, p.ln1_w, p.ln1_b, 1, D, 1e-6f);
    ops.linear_forward(qkv, ln, p.wqkv, p.bqkv, 1, 3 * D, D);
    float* k_cache = k_cache_.data() + size_t(l) * size_t(c.n_ctx * D);
    float* v_cache = v_cache_.data() + size_t(l) * size_t(c.n_ctx * D);
    // Append this position's key and value to the cache (backend copies).
    ops.copy(k_cache + position_ * D, qkv + D, size_t(D));
    ops.copy(v_cache + position_ * D, qkv + 2 * D, size_t(D));
    ops.attention_decode(att, qkv, k_cache, v_cache, position_ + 1, D, H);
    ops.linear_forward(branch, att, p.wdense, p.bdense, 1, D, D);
    ops.residual_add(x, x, branch, size_t(D), none);
    ops.layernorm_forward(ln, mean, rstd, x, p.ln2_w, p.ln2_b, 1, D, 1e-6f);
    ops.linear_forward(ffn, ln, p.w0, p.b0, 1, F, D);
    ops.relu_forward(ffn, size_t(F));
    ops.linear_forward(branch, ffn, p.w2, p.b2, 1, D, F);
    ops.residual_add(x, x, branch, size_t(D), none);
  }
  ops.layernorm_forward(ln, mean, rstd, x, model_.param("transformer.layernorm.weight"),
                        model_.param("transformer.layernorm.bias"), 1, D, float(c.layer_norm_eps));
  float* head_in = ln;
  if (c.embedding_dim > 0) {  // Linear D→E before the tied E-wide head
    ops.linear_forward(emb, ln, model_.param("transformer.w_proj_out.weight"),
                       model_.param("transformer.w_proj_out.bias"), 1, c.embedding_dim, D);
    head_in = emb;
  }
  ops.linear_forward(logits_.data(), head_in, model_.param("transformer.w.weight"), model_.param("lm_head.bias"), 1,
                     c.vocab_size, embedding_width(c));
  logits_.download(host_logits_.data(), host_logits_.size());
  ++position_;
  return host_logits_;
}

int32_t sample_next(std::vector<float> logits, const std::vector<int32_t>& history, const SamplingOptions& o,
                    CounterRng& rng) {
  if (o.penalty != 1.0) {
    std::unordered_set<int32_t> seen(history.begin(), history.end());
    for (int32_t t : seen) {
      if (t < 0 || size_t(t) >= logits.size()) continue;
      float& l = logits[size_t(t)];
      l = l > 0 ? l / float(o.penalty) : l * float(o.penalty);
    }
  }
  if (o.temperature <= 0) return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] != logits[size_t(b)] ? logits[size_t(a)] > logits[size_t(b)] : a < b;
  });
  size_t keep = order.size();
  if (o.top_k > 0) keep = std::min(keep, size_t(o.top_k));
  std::vector<double> p(keep);
  const double mx = logits[size_t(order[0])];
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += (p[i] = std::exp((logits[size_t(order[i])] - mx) / o.temperature));
  if (o.top_p < 1.0) {  // smallest prefix whose probability reaches top_p
    double cum = 0;
    for (size_t i = 0; i < keep; ++i) {
      cum += p[i] / sum;
      if (cum >= o.top_p) {
        keep = i + 1;
        break;
      }
    }
    sum = 0;
    for (size_t i = 0; i < keep; ++i) sum += p[i];
  }
  double u = rng.uniform() * sum;
  for (size_t i = 0; i < keep; ++i) {
    u -= p[i];
    if (u <= 0) return order[i];
  }
  return order[keep - 1];
}

}  // namespace ctrl
