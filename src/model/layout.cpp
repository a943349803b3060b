#include "model/layout.h"

#include <algorithm>

#include "core/error.h"

namespace ctrl {

static size_t align_up(size_t n) { return (n + kAlignElements - 1) / kAlignElements * kAlignElements; }

size_t ParamLayout::count() const {
  size_t n = 0;
  for (const auto& t : tensors) n += t.numel;
  return n;
}

const ParamTensor* ParamLayout::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const ParamTensor& ParamLayout::get(const std::string& name) const {
  const ParamTensor* t = find(name);
  if (!t) fail("no parameter named '" + name + "' in this model");
  return *t;
}

ParamLayout make_param_layout(const ModelConfig& c) {
  ParamLayout p;
  // pad=false keeps the next tensor exactly adjacent (the fused Q/K/V matrix and bias).
  auto add = [&](std::string name, std::vector<int64_t> shape, int layer, bool pad = true) {
    ParamTensor t;
    t.name = std::move(name);
    t.numel = 1;
    for (int64_t d : shape) t.numel *= size_t(d);
    t.shape = std::move(shape);
    t.is_matrix = t.shape.size() >= 2;
    t.layer = layer;
    t.offset = p.total;
    p.total = pad ? align_up(p.total + t.numel) : p.total + t.numel;
    p.tensors.push_back(std::move(t));
  };
  const int64_t V = c.vocab_size, D = c.d_model, F = c.d_ff;
  add("transformer.w.weight", {V, D}, -1);
  for (int l = 0; l < int(c.n_layer); ++l) {
    const std::string h = "transformer.h." + std::to_string(l) + ".";
    const std::string a = h + "multi_head_attention.";
    add(a + "Wq.weight", {D, D}, l, false);
    add(a + "Wk.weight", {D, D}, l, false);
    add(a + "Wv.weight", {D, D}, l);
    add(a + "Wq.bias", {D}, l, false);
    add(a + "Wk.bias", {D}, l, false);
    add(a + "Wv.bias", {D}, l);
    add(a + "dense.weight", {D, D}, l);
    add(a + "dense.bias", {D}, l);
    add(h + "layernorm1.weight", {D}, l);
    add(h + "layernorm1.bias", {D}, l);
    add(h + "ffn.0.weight", {F, D}, l);
    add(h + "ffn.0.bias", {F}, l);
    add(h + "ffn.2.weight", {D, F}, l);
    add(h + "ffn.2.bias", {D}, l);
    add(h + "layernorm2.weight", {D}, l);
    add(h + "layernorm2.bias", {D}, l);
  }
  add("transformer.layernorm.weight", {D}, -1);
  add("transformer.layernorm.bias", {D}, -1);
  add("lm_head.bias", {V}, -1);
  return p;
}

ActivationLayout make_activation_layout(const ModelConfig& c, int64_t B) {
  ActivationLayout a;
  a.B = B;
  a.T = c.n_ctx;
  const size_t N = size_t(B) * size_t(c.n_ctx), D = size_t(c.d_model), F = size_t(c.d_ff);
  const size_t probs = size_t(B) * size_t(c.n_head) * size_t(c.n_ctx) * size_t(c.n_ctx);
  size_t at = 0;
  auto take = [&](size_t n) {
    const size_t o = at;
    at = align_up(at + n);
    return o;
  };
  for (int l = 0; l < int(c.n_layer); ++l) {
    ActivationLayout::Layer L;
    L.x_in = take(N * D);
    L.ln1_mean = take(N);
    L.ln1_rstd = take(N);
    L.ln1_out = take(N * D);
    L.qkv = take(N * 3 * D);
    L.probs = take(probs);
    L.att = take(N * D);
    L.x_mid = take(N * D);
    L.ln2_mean = take(N);
    L.ln2_rstd = take(N);
    L.ln2_out = take(N * D);
    L.ffn_h = take(N * F);
    a.layers.push_back(L);
  }
  a.x_out = take(N * D);
  a.lnf_mean = take(N);
  a.lnf_rstd = take(N);
  a.lnf_out = take(N * D);
  a.saved = at;
  a.d_x = take(N * D);
  a.d_x2 = take(N * D);
  a.d_ln = take(N * D);
  a.d_qkv = take(N * 3 * D);
  a.d_att = take(N * D);
  a.d_ffn = take(N * F);
  // The fused head works on row chunks so the [N, V] logits never exist whole.
  a.logits_rows = std::min<int64_t>(int64_t(N), 256);
  a.logits = take(size_t(a.logits_rows) * size_t(c.vocab_size));
  a.total = at;
  a.scratch = a.total - a.saved;
  return a;
}

double train_flops_per_token(const ModelConfig& c) {
  const double D = double(c.d_model), F = double(c.d_ff), V = double(c.vocab_size), T = double(c.n_ctx);
  const double matmul_params = double(c.n_layer) * (4 * D * D + 2 * D * F) + V * D;  // weights in products
  // Attention scores and weighted sum: 2 products of T x T x D per layer, as computed (full square).
  const double attention = double(c.n_layer) * 2.0 * 2.0 * T * D;
  return 3.0 * (2.0 * matmul_params + attention);  // backward costs twice the forward
}

}  // namespace ctrl
