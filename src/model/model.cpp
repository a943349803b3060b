#include "model/model.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/rng.h"

namespace ctrl {

KvCache::KvCache(Model& model) {
  const ModelConfig& c = model.config();
  const size_t n = size_t(c.n_layer) * size_t(c.n_ctx) * size_t(c.d_model);
  k = DeviceArray<float>(model.ops(), n, "kv_cache.k");
  v = DeviceArray<float>(model.ops(), n, "kv_cache.v");
}

Model::Model(const ModelConfig& config, Ops& ops, int64_t max_batch, DType low, bool with_gradients, int64_t max_T)
    : config_(config),
      ops_(ops),
      layout_(make_param_layout(config)),
      acts_layout_(make_activation_layout(config, max_batch, low, max_T,
                                          [&ops](int64_t B, int64_t T, int64_t D, int64_t H, DType type) {
                                            return ops.attention_saved_bytes(B, T, D, H, type);
                                          })) {
  CTRL_ASSERT(low == DType::F32 || low == DType::BF16 || low == DType::F16);
  params = DeviceArray<float>(ops, layout_.total, "model.params");
  if (with_gradients) grads = DeviceArray<float>(ops, layout_.total, "model.grads");
  activations_ = DeviceArray<float>(ops, acts_layout_.total, "model.activations");
  if (low != DType::F32) low_weights_ = DeviceArray<uint16_t>(ops, layout_.total, "model.low_weights");
  const size_t rows = size_t(acts_layout_.B * acts_layout_.T);  // sized by the layout, as the planner counts it
  tokens_ = DeviceArray<int32_t>(ops, rows, "model.tokens");
  targets_ = DeviceArray<int32_t>(ops, rows, "model.targets");
  for (int l = 0; l < int(config.n_layer); ++l) {
    auto at = [&](const std::string& suffix) { return layout_.get(layer_param_name(config, l, suffix)).offset; };
    const std::string a = "multi_head_attention.";
    lp_.push_back({at(a + "Wq.weight"), at(a + "Wq.bias"), at(a + "dense.weight"), at(a + "dense.bias"),
                   at("layernorm1.weight"), at("layernorm1.bias"), at("ffn.0.weight"), at("ffn.0.bias"),
                   at("ffn.2.weight"), at("ffn.2.bias"), at("layernorm2.weight"), at("layernorm2.bias")});
  }
  wte_ = layout_.get("transformer.w.weight").offset;
  lnf_w_ = layout_.get("transformer.layernorm.weight").offset;
  lnf_b_ = layout_.get("transformer.layernorm.bias").offset;
  head_b_ = layout_.get("lm_head.bias").offset;
  if (factorized()) {
    proj_in_w_ = layout_.get("transformer.w_proj_in.weight").offset;
    proj_in_b_ = layout_.get("transformer.w_proj_in.bias").offset;
    proj_out_w_ = layout_.get("transformer.w_proj_out.weight").offset;
    proj_out_b_ = layout_.get("transformer.w_proj_out.bias").offset;
  }
}

void Model::init_weights() {
  ops_.fill(params.data(), params.size(), 0.0f);
  // Staging of at most kInitStagingFloats (model/layout.h): each value depends
  // only on (seed, tensor, element), so the pieces give the whole tensor's bits.
  std::vector<float> host;
  for (size_t i = 0; i < layout_.tensors.size(); ++i) {
    const ParamTensor& t = layout_.tensors[i];
    const bool is_layernorm_weight = t.name.find("layernorm") != std::string::npos && t.name.size() > 7 &&
                                     t.name.compare(t.name.size() - 7, 7, ".weight") == 0;
    if (t.is_matrix) {
      for (size_t j0 = 0; j0 < t.numel; j0 += kInitStagingFloats) {
        const size_t n = std::min(kInitStagingFloats, t.numel - j0);
        host.resize(n);
        for (size_t j = 0; j < n; ++j)
          host[j] = float(config_.init_range * random_normal(config_.seed, i, j0 + j));
        params.upload(host.data(), n, t.offset + j0);
      }
    } else if (is_layernorm_weight) {
      ops_.fill(params.data() + t.offset, t.numel, 1.0f);
    }
  }
}

std::vector<float> Model::read_param(const std::string& name) const {
  const ParamTensor& t = layout_.get(name);
  std::vector<float> v(t.numel);
  params.download(v.data(), t.numel, t.offset);
  return v;
}

std::vector<float> Model::read_grad(const std::string& name) const {
  const ParamTensor& t = layout_.get(name);
  std::vector<float> v(t.numel);
  grads.download(v.data(), t.numel, t.offset);
  return v;
}

void Model::write_param(const std::string& name, const std::vector<float>& values) {
  const ParamTensor& t = layout_.get(name);
  CTRL_ASSERT(values.size() == t.numel);
  params.upload(values.data(), t.numel, t.offset);
}

void Model::pad_buffers(size_t total) {
  CTRL_ASSERT(total >= layout_.total);
  params = DeviceArray<float>(ops_, total, "model.params");
  grads = DeviceArray<float>(ops_, total, "model.grads");
}

void Model::upload_batch(const int32_t* tokens, const int32_t* targets, int64_t n) {
  CTRL_ASSERT(size_t(n) <= tokens_.size());
  tokens_.upload(tokens, size_t(n));
  if (targets) targets_.upload(targets, size_t(n));
}

DropoutSpec Model::dropout(double p, bool training, uint64_t seed, uint64_t stream) const {
  DropoutSpec s;
  if (training) s.p = float(p), s.seed = seed, s.stream = stream, s.first_index = first_index_;
  return s;
}

// The gradient reaching a residual branch y = x + dropout(b): the stream's
// gradient itself when the branch has no dropout (the branch's backward only
// reads it before the stream's gradient is added to), else a masked copy in scratch.
float* Model::branch_gradient(float* d_stream, float* scratch, size_t n, const DropoutSpec& spec) {
  if (spec.p <= 0) return d_stream;
  ops_.copy(scratch, d_stream, n);
  ops_.dropout(scratch, n, spec);
  return scratch;
}

void Model::forward(int64_t B, int64_t T, bool training, uint64_t seed) {
  CTRL_ASSERT(B * T <= acts_layout_.B * acts_layout_.T && T <= acts_layout_.T);
  if (low_weights_.size())
    ops_.copy(TensorRef(low_weights_.data(), acts_layout_.dtype), params.data(), layout_.total);
  const int64_t N = B * T, D = config_.d_model, E = embedding_width(config_);
  const size_t ND = size_t(N * D);
  float* P = params.data();
  const auto& A = acts_layout_;
  float* x0 = act(A.layers[0].x_in);
  const int32_t* tokens = tokens_.data();
  if (factorized()) {  // CTRL's embedding at width E (token × √E + E-wide positions), then Linear E→D
    ops_.embedding_forward(act(A.emb), tokens, P + wte_, B, T, E, std::sqrt(float(E)));
    ops_.linear_forward(x0, act(A.emb), P + proj_in_w_, P + proj_in_b_, N, D, E);
  } else {
    ops_.embedding_forward(x0, tokens, P + wte_, B, T, D, std::sqrt(float(D)));
  }
  ops_.dropout(x0, ND, dropout(config_.embd_pdrop, training, seed, 0));
  forward_from_stream(B, T, training, seed);
}

void Model::forward_from_stream(int64_t B, int64_t T, bool training, uint64_t seed, KvCache* cache) {
  const int64_t N = B * T, D = config_.d_model, E = embedding_width(config_);
  const size_t ND = size_t(N * D);
  float* P = params.data();
  const auto& A = acts_layout_;
  for (int l = 0; l < int(config_.n_layer); ++l) layer_forward(l, B, T, training, seed, true, cache);
  ops_.layernorm_forward(low(A.lnf_out), act(A.lnf_mean), act(A.lnf_rstd), layernorm_input(A.x_out, A.lnf_in, ND),
                         P + lnf_w_, P + lnf_b_, N, D, float(config_.layer_norm_eps));
  if (factorized())  // Linear D→E before the tied E-wide head
    ops_.linear_forward(low(A.head_in), low(A.lnf_out), weight(proj_out_w_), P + proj_out_b_, N, E, D);
}

void Model::layer_forward(int l, int64_t B, int64_t T, bool training, uint64_t seed, bool to_output,
                          KvCache* cache) {
  const int64_t N = B * T, D = config_.d_model, F = config_.d_ff, H = config_.n_head;
  const size_t ND = size_t(N * D);
  float* P = params.data();
  const auto& A = acts_layout_;
  const auto& L = A.layers[size_t(l)];
  const auto& W = lp_[size_t(l)];
  float* branch = act(A.d_x2);  // backward scratch doubles as the branch output in forward
  ops_.layernorm_forward(low(L.ln1_out), act(L.ln1_mean), act(L.ln1_rstd), layernorm_input(L.x_in, L.ln1_in, ND),
                         P + W.ln1_w, P + W.ln1_b, N, D, 1e-6f);
  ops_.linear_forward(low(L.qkv), low(L.ln1_out), weight(W.wqkv), P + W.bqkv, N, 3 * D, D);
  if (cache) {
    const size_t layer = size_t(l) * size_t(config_.n_ctx * D), at = layer + size_t(cache->length * D);
    float* qkv = act(L.qkv);
    ops_.copy(cache->k.data() + at, qkv + D, size_t(D));
    ops_.copy(cache->v.data() + at, qkv + 2 * D, size_t(D));
    ops_.attention_decode(act(L.att), qkv, cache->k.data() + layer, cache->v.data() + layer, cache->length + 1, D, H);
  } else {
    ops_.attention_forward(low(L.att), low(L.attention_saved), low(L.qkv), B, T, D, H);
  }
  ops_.linear_forward(branch, low(L.att), weight(W.wdense), P + W.bdense, N, D, D);
  ops_.residual_add(act(L.x_mid), act(L.x_in), branch, ND, dropout(config_.resid_pdrop, training, seed, 1 + 2 * l));
  ops_.layernorm_forward(low(L.ln2_out), act(L.ln2_mean), act(L.ln2_rstd), layernorm_input(L.x_mid, L.ln2_in, ND),
                         P + W.ln2_w, P + W.ln2_b, N, D, 1e-6f);
  ops_.linear_forward(low(L.ffn_h), low(L.ln2_out), weight(W.w0), P + W.b0, N, F, D);
  ops_.relu_forward(low(L.ffn_h), size_t(N * F));
  if (!to_output) return;
  float* x_out = l + 1 < int(config_.n_layer) ? act(A.layers[size_t(l) + 1].x_in) : act(A.x_out);
  ops_.linear_forward(branch, low(L.ffn_h), weight(W.w2), P + W.b2, N, D, F);
  ops_.residual_add(x_out, act(L.x_mid), branch, ND, dropout(config_.resid_pdrop, training, seed, 2 + 2 * l));
}

void Model::backward(int64_t B, int64_t T, bool training, uint64_t seed) {
  const int64_t N = B * T, D = config_.d_model, F = config_.d_ff, H = config_.n_head, E = embedding_width(config_);
  const size_t ND = size_t(N * D);
  float* P = params.data();
  float* G = grads.data();
  const auto& A = acts_layout_;
  const bool cheap = config_.recompute == "cheap", whole_layers = config_.recompute == "layers";
  float* d_x = act(A.d_x);    // gradient of the residual stream
  float* d_br = act(A.d_x2);  // scratch for a branch output's gradient (after dropout backward)
  float* d_ln = act(A.d_ln);
  const int32_t* tokens = tokens_.data();

  if (factorized())  // head_in = lnf_out · w_proj_outᵀ + b
    ops_.linear_backward(d_ln, G + proj_out_w_, G + proj_out_b_, act(A.d_emb), low(A.lnf_out), weight(proj_out_w_), N,
                         E, D, false);
  ops_.fill(d_x, ND, 0.0f);
  ops_.layernorm_backward(d_x, G + lnf_w_, G + lnf_b_, d_ln, inner(A.lnf_in), act(A.lnf_mean), act(A.lnf_rstd),
                          P + lnf_w_, N, D);
  for (int l = int(config_.n_layer) - 1; l >= 0; --l) {
    const auto& L = A.layers[size_t(l)];
    const auto& W = lp_[size_t(l)];
    // Recomputation refills what the forward did not keep, with the same
    // inputs, parameters and dropout masks, so the values are bit-identical.
    if (whole_layers) layer_forward(l, B, T, training, seed, false);
    if (cheap) {
      ops_.layernorm_forward(low(L.ln2_out), act(L.ln2_mean), act(L.ln2_rstd), inner(L.ln2_in), P + W.ln2_w,
                             P + W.ln2_b, N, D, 1e-6f);
      ops_.linear_forward(low(L.ffn_h), low(L.ln2_out), weight(W.w0), P + W.b0, N, F, D);
      ops_.relu_forward(low(L.ffn_h), size_t(N * F));
    }
    // x_out = x_mid + dropout(ffn(ln2(x_mid)))
    float* d_ffn_out = branch_gradient(d_x, d_br, ND, dropout(config_.resid_pdrop, training, seed, 2 + 2 * l));
    ops_.linear_backward(inner(A.d_ffn), G + W.w2, G + W.b2, d_ffn_out, low(L.ffn_h), weight(W.w2), N, D, F, false);
    ops_.relu_backward(inner(A.d_ffn), low(L.ffn_h), size_t(N * F));
    ops_.linear_backward(d_ln, G + W.w0, G + W.b0, inner(A.d_ffn), low(L.ln2_out), weight(W.w0), N, F, D, false);
    ops_.layernorm_backward(d_x, G + W.ln2_w, G + W.ln2_b, d_ln, inner(L.ln2_in), act(L.ln2_mean), act(L.ln2_rstd),
                            P + W.ln2_w, N, D);
    // x_mid = x_in + dropout(dense(attention(qkv(ln1(x_in)))))
    if (cheap)  // ln1_out shares its scratch with ln2_out
      ops_.layernorm_forward(low(L.ln1_out), act(L.ln1_mean), act(L.ln1_rstd), inner(L.ln1_in), P + W.ln1_w,
                             P + W.ln1_b, N, D, 1e-6f);
    float* d_att_out = branch_gradient(d_x, d_br, ND, dropout(config_.resid_pdrop, training, seed, 1 + 2 * l));
    ops_.linear_backward(inner(A.d_att), G + W.wdense, G + W.bdense, d_att_out, low(L.att), weight(W.wdense), N, D, D,
                         false);
    ops_.attention_backward(inner(A.d_qkv), inner(A.d_att), low(L.qkv), low(L.att), low(L.attention_saved), B, T, D, H);
    ops_.linear_backward(d_ln, G + W.wqkv, G + W.bqkv, inner(A.d_qkv), low(L.ln1_out), weight(W.wqkv), N, 3 * D, D,
                         false);
    ops_.layernorm_backward(d_x, G + W.ln1_w, G + W.ln1_b, d_ln, inner(L.ln1_in), act(L.ln1_mean), act(L.ln1_rstd),
                            P + W.ln1_w, N, D);
    if (layer_hook_) layer_hook_(l);
  }
  ops_.dropout(d_x, ND, dropout(config_.embd_pdrop, training, seed, 0));
  if (factorized()) {
    ops_.linear_backward(act(A.d_emb), G + proj_in_w_, G + proj_in_b_, d_x, act(A.emb), P + proj_in_w_, N, D, E, false);
    ops_.embedding_backward(G + wte_, act(A.d_emb), tokens, B, T, E, std::sqrt(float(E)));
  } else {
    ops_.embedding_backward(G + wte_, d_x, tokens, B, T, D, std::sqrt(float(D)));
  }
}

TensorRef Model::layernorm_input(size_t stream, size_t rounded, size_t n) {
  if (stream == rounded) return act(stream);
  ops_.copy(inner(rounded), act(stream), n);
  return inner(rounded);
}

void Model::head_loss(int64_t N, float grad_scale, bool training, float* row_loss, double* loss_sum, double* sum,
                      const Distillation* distill) {
  const auto& A = acts_layout_;
  DeviceArray<double> own;
  if (!loss_sum) {
    own = DeviceArray<double>(ops_, 1, "model.loss_sum");
    loss_sum = own.data();
  }
  if (distill) {
    const TeacherHead t = distill->teacher->teacher_head();
    ops_.lm_head_distill(head_input(), weight(wte_), params.data() + head_b_, targets_.data(), t, N,
                         embedding_width(config_), config_.vocab_size, distill->alpha, distill->temperature,
                         grad_scale, training ? d_head() : nullptr, training ? grads.data() + wte_ : nullptr,
                         training ? grads.data() + head_b_ : nullptr, loss_sum, distill->kl_sum, act(A.logits),
                         std::min(A.logits_rows, distill->teacher->head_chunk_rows()));
  } else {
    ops_.lm_head_loss(head_input(), weight(wte_), params.data() + head_b_, targets_.data(), N,
                      embedding_width(config_), config_.vocab_size, grad_scale, training ? d_head() : nullptr,
                      training ? grads.data() + wte_ : nullptr, training ? grads.data() + head_b_ : nullptr, loss_sum,
                      row_loss, act(A.logits), A.logits_rows);
  }
  if (own.size()) own.download(sum, 1);
}

LossSum Model::forward_backward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T, float grad_scale,
                                uint64_t dropout_seed, uint64_t first_sequence, double* loss_sum,
                                const Distillation* distill) {
  CTRL_ASSERT(grads.size() > 0);
  first_index_ = first_sequence * uint64_t(T * config_.d_model);
  upload_batch(tokens, targets, B * T);
  forward(B, T, true, dropout_seed);
  if (distill) {
    CTRL_ASSERT(distill->teacher && distill->kl_sum && distill->teacher->config().vocab_size == config_.vocab_size);
    distill->teacher->forward_only(tokens, B, T);
  }
  const int64_t N = B * T;
  LossSum loss;
  for (int64_t i = 0; i < N; ++i) loss.count += targets[i] >= 0;
  head_loss(N, grad_scale, true, nullptr, loss_sum, &loss.sum, distill);
  backward(B, T, true, dropout_seed);
  return loss;
}

void Model::forward_only(const int32_t* tokens, int64_t B, int64_t T) {
  upload_batch(tokens, nullptr, B * T);
  forward(B, T, false, 0);
}

TeacherHead Model::teacher_head() {
  TeacherHead t;
  t.h = head_input();
  t.w = weight(wte_);
  t.b = params.data() + head_b_;
  t.D = embedding_width(config_);
  t.scratch = act(acts_layout_.logits);
  return t;
}

LossSum Model::evaluate(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T, float* row_loss,
                        double* loss_sum) {
  upload_batch(tokens, targets, B * T);
  forward(B, T, false, 0);
  const int64_t N = B * T;
  LossSum loss;
  for (int64_t i = 0; i < N; ++i) loss.count += targets[i] >= 0;
  float* rows = nullptr;
  if (row_loss) {
    if (row_loss_.size() < size_t(N)) row_loss_ = DeviceArray<float>(ops_, tokens_.size(), "model.row_loss");
    row_loss_.upload(row_loss, size_t(N));
    rows = row_loss_.data();
  }
  head_loss(N, 0.0f, false, rows, loss_sum, &loss.sum);
  if (row_loss) row_loss_.download(row_loss, size_t(N));
  return loss;
}

void Model::logits(const int32_t* tokens, int64_t B, int64_t T, float* out) {
  upload_batch(tokens, nullptr, B * T);
  forward(B, T, false, 0);
  const size_t n = size_t(B * T * config_.vocab_size);
  DeviceArray<float> logits(ops_, n, "model.logits");
  ops_.linear_forward(logits.data(), head_input(), weight(wte_), params.data() + head_b_, B * T, config_.vocab_size,
                      embedding_width(config_));
  logits.download(out, n);
}

void Model::decode(int32_t token, KvCache& cache, float* logits) {
  if (cache.length >= config_.n_ctx)
    fail("generation reached the model's context of " + std::to_string(config_.n_ctx) + " tokens");
  if (token < 0 || token >= config_.vocab_size)
    fail("token id " + std::to_string(token) + " is outside the vocabulary of " + std::to_string(config_.vocab_size));
  CTRL_ASSERT(acts_layout_.dtype == DType::F32 && acts_layout_.B * acts_layout_.T >= 1);
  const int64_t D = config_.d_model, E = embedding_width(config_), V = config_.vocab_size;
  float* P = params.data();
  const auto& A = acts_layout_;
  float* x0 = act(A.layers[0].x_in);
  if (factorized()) {
    ops_.embedding_at(act(A.emb), token, cache.length, P + wte_, E, std::sqrt(float(E)));
    ops_.linear_forward(x0, act(A.emb), P + proj_in_w_, P + proj_in_b_, 1, D, E);
  } else {
    ops_.embedding_at(x0, token, cache.length, P + wte_, D, std::sqrt(float(D)));
  }
  forward_from_stream(1, 1, false, 0, &cache);
  ops_.linear_forward(act(A.logits), head_input(), weight(wte_), P + head_b_, 1, V, E);
  activations_.download(logits, size_t(V), A.logits);
  ++cache.length;
}

}  // namespace ctrl
