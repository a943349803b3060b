#include "generate/generator.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_set>

#include "core/error.h"

namespace ctrl {

Generator::Generator(Model& model) : model_(model) {
  const auto& c = model.config();
  const size_t D = size_t(c.d_model);
  k_cache_.resize(size_t(c.n_layer) * size_t(c.n_ctx) * D);
  v_cache_.resize(k_cache_.size());
  x_.resize(D), ln_.resize(D), qkv_.resize(3 * D), att_.resize(D), branch_.resize(D);
  ffn_.resize(size_t(c.d_ff));
  emb_.resize(size_t(embedding_width(c)));
  logits_.resize(size_t(c.vocab_size));
  mean_.resize(1), rstd_.resize(1);
}

const std::vector<float>& Generator::feed(int32_t token) {
  const auto& c = model_.config();
  if (position_ >= c.n_ctx) fail("generation reached the model's context of " + std::to_string(c.n_ctx) + " tokens");
  if (token < 0 || token >= c.vocab_size) fail("token id " + std::to_string(token) + " is outside the vocabulary");
  Ops& ops = model_.ops();
  const int64_t D = c.d_model, F = c.d_ff, H = c.n_head;
  const DropoutSpec none;
  if (c.embedding_dim > 0) {  // factorized embedding (README, "Lighter models"): E-wide, then Linear E→D
    const int64_t E = c.embedding_dim;
    ops.embedding_at(emb_.data(), token, position_, model_.param("transformer.w.weight"), E, std::sqrt(float(E)));
    ops.linear_forward(x_.data(), emb_.data(), model_.param("transformer.w_proj_in.weight"),
                       model_.param("transformer.w_proj_in.bias"), 1, D, E);
  } else {
    ops.embedding_at(x_.data(), token, position_, model_.param("transformer.w.weight"), D, std::sqrt(float(D)));
  }
  for (int l = 0; l < int(c.n_layer); ++l) {
    // Layers that share parameters (model.sharing) read layer 0's tensors.
    auto param = [&](const std::string& suffix) { return model_.param(layer_param_name(c, l, suffix)); };
    ops.layernorm_forward(ln_.data(), mean_.data(), rstd_.data(), x_.data(), param("layernorm1.weight"),
                          param("layernorm1.bias"), 1, D, 1e-6f);
    ops.linear_forward(qkv_.data(), ln_.data(), param("multi_head_attention.Wq.weight"),
                       param("multi_head_attention.Wq.bias"), 1, 3 * D, D);
    float* k_cache = k_cache_.data() + size_t(l) * size_t(c.n_ctx * D);
    float* v_cache = v_cache_.data() + size_t(l) * size_t(c.n_ctx * D);
    std::copy(qkv_.begin() + D, qkv_.begin() + 2 * D, k_cache + position_ * D);
    std::copy(qkv_.begin() + 2 * D, qkv_.end(), v_cache + position_ * D);
    ops.attention_decode(att_.data(), qkv_.data(), k_cache, v_cache, position_ + 1, D, H);
    ops.linear_forward(branch_.data(), att_.data(), param("multi_head_attention.dense.weight"),
                       param("multi_head_attention.dense.bias"), 1, D, D);
    ops.residual_add(x_.data(), x_.data(), branch_.data(), size_t(D), none);
    ops.layernorm_forward(ln_.data(), mean_.data(), rstd_.data(), x_.data(), param("layernorm2.weight"),
                          param("layernorm2.bias"), 1, D, 1e-6f);
    ops.linear_forward(ffn_.data(), ln_.data(), param("ffn.0.weight"), param("ffn.0.bias"), 1, F, D);
    ops.relu_forward(ffn_.data(), size_t(F));
    ops.linear_forward(branch_.data(), ffn_.data(), param("ffn.2.weight"), param("ffn.2.bias"), 1, D, F);
    ops.residual_add(x_.data(), x_.data(), branch_.data(), size_t(D), none);
  }
  ops.layernorm_forward(ln_.data(), mean_.data(), rstd_.data(), x_.data(), model_.param("transformer.layernorm.weight"),
                        model_.param("transformer.layernorm.bias"), 1, D, float(c.layer_norm_eps));
  float* head_in = ln_.data();
  if (c.embedding_dim > 0) {  // Linear D→E before the tied E-wide head
    ops.linear_forward(emb_.data(), ln_.data(), model_.param("transformer.w_proj_out.weight"),
                       model_.param("transformer.w_proj_out.bias"), 1, c.embedding_dim, D);
    head_in = emb_.data();
  }
  ops.linear_forward(logits_.data(), head_in, model_.param("transformer.w.weight"), model_.param("lm_head.bias"), 1,
                     c.vocab_size, embedding_width(c));
  ++position_;
  return logits_;
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
