#include "model/layout.h"

#include <algorithm>
#include <array>

#include "core/error.h"
#include "ops/cpu/gemm.h"
#include "ops/gpu_scratch.h"
#include "ops/ops.h"

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

bool shares_attention(const ModelConfig& c) { return c.sharing == "all" || c.sharing == "attention"; }
bool shares_ffn(const ModelConfig& c) { return c.sharing == "all" || c.sharing == "ffn"; }
int64_t embedding_width(const ModelConfig& c) { return c.embedding_dim > 0 ? c.embedding_dim : c.d_model; }

std::string layer_param_name(const ModelConfig& c, int layer, const std::string& suffix) {
  const bool ffn_part = suffix.rfind("ffn.", 0) == 0 || suffix.rfind("layernorm2.", 0) == 0;
  const bool shared = ffn_part ? shares_ffn(c) : shares_attention(c);
  return "transformer.h." + std::to_string(shared ? 0 : layer) + "." + suffix;
}

ParamLayout make_param_layout(const ModelConfig& c) {
  ParamLayout p;
  // pad=false keeps the next tensor exactly adjacent (the fused Q/K/V matrix and bias).
  auto add = [&](std::string name, std::vector<int64_t> shape, int layer, bool pad = true, bool shared = false) {
    ParamTensor t;
    t.name = std::move(name);
    t.numel = 1;
    for (int64_t d : shape) t.numel *= size_t(d);
    t.shape = std::move(shape);
    t.is_matrix = t.shape.size() >= 2;
    t.layer = layer;
    t.shared = shared;
    t.offset = p.total;
    p.total = pad ? align_up(p.total + t.numel) : p.total + t.numel;
    p.tensors.push_back(std::move(t));
  };
  const int64_t V = c.vocab_size, D = c.d_model, F = c.d_ff, E = embedding_width(c);
  const bool factorized = c.embedding_dim > 0;
  add("transformer.w.weight", {V, E}, -1);
  if (factorized) {
    add("transformer.w_proj_in.weight", {D, E}, -1);
    add("transformer.w_proj_in.bias", {D}, -1);
  }
  const bool share_att = shares_attention(c) && c.n_layer > 1, share_ffn = shares_ffn(c) && c.n_layer > 1;
  for (int l = 0; l < int(c.n_layer); ++l) {
    const std::string h = "transformer.h." + std::to_string(l) + ".";
    const std::string a = h + "multi_head_attention.";
    if (l == 0 || !share_att) {
      const bool s = share_att;
      add(a + "Wq.weight", {D, D}, l, false, s);
      add(a + "Wk.weight", {D, D}, l, false, s);
      add(a + "Wv.weight", {D, D}, l, true, s);
      add(a + "Wq.bias", {D}, l, false, s);
      add(a + "Wk.bias", {D}, l, false, s);
      add(a + "Wv.bias", {D}, l, true, s);
      add(a + "dense.weight", {D, D}, l, true, s);
      add(a + "dense.bias", {D}, l, true, s);
      add(h + "layernorm1.weight", {D}, l, true, s);
      add(h + "layernorm1.bias", {D}, l, true, s);
    }
    if (l == 0 || !share_ffn) {
      const bool s = share_ffn;
      add(h + "ffn.0.weight", {F, D}, l, true, s);
      add(h + "ffn.0.bias", {F}, l, true, s);
      add(h + "ffn.2.weight", {D, F}, l, true, s);
      add(h + "ffn.2.bias", {D}, l, true, s);
      add(h + "layernorm2.weight", {D}, l, true, s);
      add(h + "layernorm2.bias", {D}, l, true, s);
    }
  }
  add("transformer.layernorm.weight", {D}, -1);
  add("transformer.layernorm.bias", {D}, -1);
  if (factorized) {
    add("transformer.w_proj_out.weight", {E, D}, -1);
    add("transformer.w_proj_out.bias", {E}, -1);
  }
  add("lm_head.bias", {V}, -1);
  return p;
}

DType activation_dtype(const std::string& precision) {
  if (precision == "bf16") return DType::BF16;
  if (precision == "fp16") return DType::F16;
  return DType::F32;
}

int64_t cpu_head_vocab_block() { return kCpuHeadVocabBlock; }
int64_t cpu_tile_operand_rows() { return cpu::kTileRows + cpu::kTileCols; }

ActivationLayout make_activation_layout(const ModelConfig& c, int64_t B, DType low, int64_t T,
                                        const AttentionSavedBytes& attention_saved_bytes) {
  ActivationLayout a;
  a.dtype = low;
  a.inner = low == DType::BF16 ? DType::BF16 : DType::F32;
  a.B = B;
  a.T = T > 0 ? T : c.n_ctx;
  const size_t N = size_t(B) * size_t(a.T), D = size_t(c.d_model), F = size_t(c.d_ff);
  const size_t E = size_t(embedding_width(c));
  const size_t attention_saved = attention_saved_bytes ? attention_saved_bytes(B, a.T, c.d_model, c.n_head, low)
                                                       : attention_probs_bytes(B, a.T, c.n_head, low);
  const bool factorized = c.embedding_dim > 0;
  const bool cheap = c.recompute == "cheap", whole_layers = c.recompute == "layers";
  size_t at = 0;
  auto take = [&](size_t n) {
    const size_t o = at;
    at = align_up(at + n);
    return o;
  };
  auto take_low = [&](size_t n) { return take((n * dtype_size(low) + 3) / 4); };
  auto take_inner = [&](size_t n) { return take((n * dtype_size(a.inner) + 3) / 4); };
  // bf16: LayerNorms read bf16 roundings of the fp32 stream, and those are saved.
  const bool rounded_stream = a.inner == DType::BF16;
  // Everything of one layer but its input, at fresh offsets (skipping the
  // outputs that "cheap" recomputes into shared scratch).
  auto take_layer_body = [&](ActivationLayout::Layer& L, bool keep_recomputable) {
    if (rounded_stream) L.ln1_in = take_inner(N * D);
    L.ln1_mean = take(N);
    L.ln1_rstd = take(N);
    if (keep_recomputable) L.ln1_out = take_low(N * D);
    L.qkv = take_low(N * 3 * D);
    L.attention_saved = take((attention_saved + 3) / 4);
    L.att = take_low(N * D);
    if (!rounded_stream || whole_layers) L.x_mid = take(N * D);
    if (rounded_stream) L.ln2_in = take_inner(N * D);
    L.ln2_mean = take(N);
    L.ln2_rstd = take(N);
    if (keep_recomputable) {
      L.ln2_out = take_low(N * D);
      L.ffn_h = take_low(N * F);
    }
  };
  if (factorized) a.emb = take(N * E);
  for (int l = 0; l < int(c.n_layer); ++l) {
    ActivationLayout::Layer L{};
    if (!rounded_stream || whole_layers) L.x_in = take(N * D);
    if (!whole_layers) take_layer_body(L, !cheap);
    a.layers.push_back(L);
  }
  if (rounded_stream)
    a.lnf_in = take_inner(N * D);
  else
    a.x_out = take(N * D);
  a.lnf_mean = take(N);
  a.lnf_rstd = take(N);
  a.lnf_out = take_low(N * D);
  if (factorized) a.head_in = take_low(N * E);
  a.saved = at;
  if (whole_layers) {  // one layer's activations, refilled by the backward's recomputation
    ActivationLayout::Layer work{};
    take_layer_body(work, true);
    for (auto& L : a.layers) {
      const size_t x_in = L.x_in;
      L = work;
      L.x_in = x_in;
    }
  } else if (cheap) {  // one LayerNorm output (ln1 and ln2 in turn) and one ReLU output
    const size_t ln = take_low(N * D), ffn_h = take_low(N * F);
    for (auto& L : a.layers) L.ln1_out = L.ln2_out = ln, L.ffn_h = ffn_h;
  }
  a.d_x = take(N * D);
  a.d_x2 = take(N * D);
  a.d_ln = take(N * D);
  a.d_qkv = take_inner(N * 3 * D);
  a.d_att = take_inner(N * D);
  a.d_ffn = take_inner(N * F);
  if (factorized) a.d_emb = take(N * E);
  if (rounded_stream) {
    // The fp32 stream, used by the forward only: it may share the room of the
    // backward's residual gradient and LayerNorm gradient.
    for (auto& L : a.layers) {
      if (!whole_layers) L.x_in = a.d_x, L.x_mid = a.d_ln;
    }
    a.x_out = a.d_x;
  } else {
    for (auto& L : a.layers) L.ln1_in = L.x_in, L.ln2_in = L.x_mid;
    a.lnf_in = a.x_out;
  }
  // The fused head works on row chunks so the [N, V] logits never exist whole.
  a.logits_rows = std::min<int64_t>(int64_t(N), kHeadChunkRows);
  a.logits = take(size_t(a.logits_rows) * size_t(head_row_stride(c.vocab_size)));
  a.total = at;
  a.scratch = a.total - a.saved;
  return a;
}

bool cuda_attention_fusion_requested() { return cuda_fused_attention_requested(); }
int cuda_min_compute_capability() { return kCudaMinComputeCapability; }
bool cuda_attention_fuses(const ModelConfig& c, DType low) {
  return cuda_fused_attention_shape(low, c.d_model, c.n_head);
}
AttentionSavedBytes cuda_attention_saved(bool fused_attention) {
  return [fused_attention](int64_t B, int64_t T, int64_t D, int64_t H, DType type) {
    return cuda_attention_saved_bytes(B, T, D, H, type, fused_attention);
  };
}

namespace {
// The attention's scratch slots in the CUDA backend (attention.cu,
// attention_fused.cu), in bytes, for model x at micro-batch B: the backward's
// (which holds the forward's), or the forward's alone (a teacher's).
enum { kHeadsIn, kHeadsOut, kHeadsGrad, kScores, kGradS, kRowDot, kAttentionSlots };
std::array<uint64_t, kAttentionSlots> cuda_attention_slots(const ModelConfig& x, uint64_t B, DType low, bool fused,
                                                           bool backward) {
  std::array<uint64_t, kAttentionSlots> s{};
  const uint64_t T = uint64_t(x.n_ctx), D = uint64_t(x.d_model), H = uint64_t(x.n_head);
  if (fused && cuda_fused_attention_shape(low, int64_t(D), int64_t(H))) {
    if (backward) s[kRowDot] = B * T * H * 4;
    return s;
  }
  // q, k, v (in their type) and their gradients (fp16's in fp32) in the
  // heads-major layout, fp32 scores, and under mixed precision dS in the 16-bit type.
  const bool sixteen = low != DType::F32;
  const uint64_t seqs = uint64_t(gpu_attention_sequences(int64_t(B), int64_t(H), int64_t(T)));
  const uint64_t in = sixteen ? 2 : 4, grad = low == DType::BF16 ? 2 : 4, scores = seqs * H * T * T;
  s[kHeadsIn] = seqs * T * 3 * D * in;
  if (!backward) {
    s[kHeadsOut] = seqs * T * D * in;
    s[kScores] = sixteen ? scores * 4 : 0;
    return s;
  }
  s[kHeadsOut] = seqs * T * 3 * D * grad;
  s[kHeadsGrad] = seqs * T * D * in;
  s[kScores] = scores * 4;
  s[kGradS] = sixteen ? scores * in : 0;
  return s;
}
}  // namespace

uint64_t cuda_scratch_bytes(const ModelConfig& m, int64_t micro_batch, DType low, const ModelConfig* teacher,
                            bool fused_attention) {
  const bool bf16 = low == DType::BF16, fp16 = low == DType::F16;
  const uint64_t B = uint64_t(micro_batch), T = uint64_t(m.n_ctx), D = uint64_t(m.d_model), F = uint64_t(m.d_ff),
                 V = uint64_t(m.vocab_size), E = uint64_t(embedding_width(m)), N = B * T,
                 ld = uint64_t(head_row_stride(m.vocab_size));
  auto chunks = [](uint64_t rows) { return (rows + 63) / 64; };  // column sums' row chunks (ops/cuda/common.cuh)
  // The head (lm_head.cu): without a teacher its own chunk when larger than the caller's.
  const uint64_t caller_rows = std::min<uint64_t>(N, uint64_t(kHeadChunkRows));
  const uint64_t rows = teacher ? caller_rows : uint64_t(gpu_head_chunk_rows(int64_t(N), int64_t(V), int64_t(caller_rows)));
  const bool sixteen = bf16 || fp16;
  uint64_t head = (rows > caller_rows ? rows * ld * 4 : 0) + (sixteen ? rows * ld * 2 : 0) + N * 8;
  if (teacher) head += N * 8;  // the KL per row
  // Attention: each slot keeps its larger size, the student's backward's or the teacher's forward's.
  auto slots = cuda_attention_slots(m, B, low, fused_attention, true);
  if (teacher) {
    const auto forward = cuda_attention_slots(*teacher, B, low, fused_attention, false);
    for (int i = 0; i < kAttentionSlots; ++i) slots[i] = std::max(slots[i], forward[i]);
  }
  uint64_t attention = 0;
  for (uint64_t bytes : slots) attention += bytes;
  // Linear backward (linear.cpp): a 16-bit copy of an fp32 output gradient (bf16: the
  // residual stream's gradient into the projections; fp16: every layer's).
  const uint64_t rounded = bf16 ? N * std::max(D, E) * 2 : fp16 ? N * std::max({3 * D, F, E}) * 2 : 0;
  const uint64_t partials =
      std::max({chunks(N) * std::max(3 * D, F) * 4, chunks(rows) * V * 4, 2 * chunks(N) * D * 4, uint64_t(256 * 8)});
  uint64_t keys = 1;
  while (keys < N) keys *= 2;  // the embedding's sort keys, a power of two (embedding.cu)
  const uint64_t bias16 = std::max(3 * D, F) * 2;
  return head + attention + rounded + partials + keys * 8 + bias16 + T * D * 4 + kGpuGemmWorkspaceBytes;
}

double train_flops_per_token(const ModelConfig& c) {
  const double D = double(c.d_model), F = double(c.d_ff), V = double(c.vocab_size), T = double(c.n_ctx);
  const double E = double(embedding_width(c));
  const double projections = c.embedding_dim > 0 ? 2 * D * E : 0.0;  // w_proj_in and w_proj_out
  // Weights in products, each used once per token per layer (shared or not).
  const double matmul_params = double(c.n_layer) * (4 * D * D + 2 * D * F) + V * E + projections;
  // Attention scores and weighted sum: 2 products of T x T x D per layer, as computed (full square).
  const double attention = double(c.n_layer) * 2.0 * 2.0 * T * D;
  return 3.0 * (2.0 * matmul_params + attention);  // backward costs twice the forward
}

double train_hardware_flops_per_token(const ModelConfig& c) {
  const double D = double(c.d_model), F = double(c.d_ff), T = double(c.n_ctx), L = double(c.n_layer);
  double repeated = 0;
  if (c.recompute == "cheap") repeated = L * 2 * D * F;  // ffn.0 product (LayerNorms: no products)
  // Each layer's forward up to the ReLU: Q/K/V, dense, attention, ffn.0 (ffn.2's output is not needed).
  else if (c.recompute == "layers")
    repeated = L * (2 * (4 * D * D + D * F) + 2.0 * 2.0 * T * D);
  return train_flops_per_token(c) + repeated;
}

double forward_flops_per_token(const ModelConfig& c) { return train_flops_per_token(c) / 3.0; }

}  // namespace ctrl
