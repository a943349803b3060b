// One op-test table for every backend (as ggml's test-backend-ops): every op
// of ops/ops.h, across element types and shapes (odd sizes, T = 1, a
// vocabulary that ends in a partial block of the fused head), runs on every
// backend in available_devices() against the CPU reference, with an error
// bound stated per case. A new backend joins by adding itself to that list.
//
// Each case names its buffers (type, size, how they start: random, zero, or
// token ids) and a function that runs the op on them. The harness allocates
// the buffers on the backend, uploads the same host values as the reference
// gets, runs the op, downloads every buffer the case marks as output and
// compares: max |backend - reference| <= bound × max(1, max |reference|).
// The CPU backends run the same kernels, so their bound is met with 0; the
// bounds are what a GPU backend (other summation orders, fused kernels) must meet.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/safetensors.h"
#include "ops/cpu/gemm.h"
#include "ops/ops.h"
#include "test_support.h"
#ifdef CTRL_HAVE_CUDA
#include "ops/cuda/cuda_backend.h"
#endif

namespace ctrl {
namespace {

enum class Init { Random, Wide, Zero, Positive, Tokens, Targets };

struct Slot {
  DType dtype;
  size_t n;
  Init init = Init::Random;
  bool output = false;
  int64_t vocab = 0;  // Tokens/Targets: ids in [0, vocab); Targets also has some -1
};

struct Case {
  std::string name;
  double bound;  // allowed max |backend - reference| relative to max(1, max |reference|)
  std::vector<Slot> slots;
  // Runs the op on the slots' backend pointers; returns the op's scalar result (or 0).
  std::function<double(Ops&, const std::vector<void*>&)> run;
  // An op whose default in ops.h throws (lm_head_distill): a backend without
  // it skips the case with a note instead of failing the table.
  bool optional = false;
};

size_t element_size(DType t) { return t == DType::F64 ? 8 : t == DType::F32 || t == DType::I32 ? 4 : 2; }

// The host values a slot starts from, as raw bytes of its type.
std::vector<uint8_t> initial(const Slot& s, uint64_t seed) {
  std::vector<uint8_t> bytes(s.n * element_size(s.dtype));
  for (size_t i = 0; i < s.n; ++i) {
    double v = 0;
    if (s.init == Init::Random) v = random_normal(seed, 1, i);
    if (s.init == Init::Wide) v = 3 * random_normal(seed, 1, i);
    if (s.init == Init::Positive) v = 0.5 + std::abs(random_normal(seed, 2, i));
    if (s.init == Init::Tokens || s.init == Init::Targets) {
      int32_t id = int32_t(random_bits(seed, 3, i) % uint64_t(s.vocab));
      if (s.init == Init::Targets && i % 5 == 3) id = -1;  // ignored rows
      std::memcpy(&bytes[i * 4], &id, 4);
      continue;
    }
    const float f = float(v);
    if (s.dtype == DType::F64) std::memcpy(&bytes[i * 8], &v, 8);
    else if (s.dtype == DType::F32) std::memcpy(&bytes[i * 4], &f, 4);
    else {
      const uint16_t h = s.dtype == DType::BF16 ? float_to_bf16(f) : float_to_f16(f);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  }
  return bytes;
}

std::vector<double> as_doubles(const Slot& s, const std::vector<uint8_t>& bytes) {
  std::vector<double> out(s.n);
  for (size_t i = 0; i < s.n; ++i) {
    if (s.dtype == DType::F64) {
      std::memcpy(&out[i], &bytes[i * 8], 8);
    } else if (s.dtype == DType::F32) {
      float f;
      std::memcpy(&f, &bytes[i * 4], 4);
      out[i] = f;
    } else if (s.dtype == DType::I32) {
      int32_t v;
      std::memcpy(&v, &bytes[i * 4], 4);
      out[i] = v;
    } else {
      uint16_t h;
      std::memcpy(&h, &bytes[i * 2], 2);
      out[i] = s.dtype == DType::BF16 ? bf16_to_float(h) : f16_to_float(h);
    }
  }
  return out;
}

struct Result {
  std::vector<std::vector<double>> outputs;
  double value = 0;
};

Result run_case(Ops& ops, const Case& c) {
  std::vector<DeviceArray<uint8_t>> buffers;
  std::vector<void*> ptrs;
  for (size_t k = 0; k < c.slots.size(); ++k) {
    const auto bytes = initial(c.slots[k], 100 + k);
    buffers.emplace_back(ops, bytes.size(), "op-test");
    buffers.back().upload(bytes.data(), bytes.size());
    ptrs.push_back(buffers.back().data());
  }
  Result r;
  r.value = c.run(ops, ptrs);
  ops.synchronize();
  for (size_t k = 0; k < c.slots.size(); ++k)
    if (c.slots[k].output) r.outputs.push_back(as_doubles(c.slots[k], buffers[k].to_host()));
  return r;
}

float* F(void* p) { return static_cast<float*>(p); }
const int32_t* I(void* p) { return static_cast<const int32_t*>(p); }
Slot in(DType t, size_t n, Init i = Init::Random) { return {t, n, i, false}; }
Slot out(DType t, size_t n, Init i = Init::Random) { return {t, n, i, true}; }
Slot ids(size_t n, int64_t vocab, bool targets = false) {
  return {DType::I32, n, targets ? Init::Targets : Init::Tokens, false, vocab};
}
std::string str(DType t) { return t == DType::F32 ? "f32" : t == DType::BF16 ? "bf16" : "f16"; }
// fp32 results to 1e-5 of their scale; results through 16-bit products or storage to 16-bit rounding.
double bound_for(DType t) { return t == DType::F32 ? 1e-5 : t == DType::BF16 ? 1.6e-2 : 2e-3; }
// The head's: its gradients also pass through the logit gradients' 16-bit rounding.
double head_bound(DType t) { return t == DType::F32 ? 1e-5 : t == DType::BF16 ? 2e-2 : 3e-3; }

// Attention: T = 1, odd T, several heads, and T = 150 for the causal blocks
// of 64 (two whole, one partial); fp32, and bf16 or fp16 activations (fp16's
// gradients are fp32 buffers). The heads of
// width 64 and 80 at T up to 256 are the shapes of the CUDA backend's fused
// kernels (tiles of 64 rows; CTRL's own heads are 80 wide): whole tiles (64,
// 256), one key past a tile (65, 129), several heads and sequences at width
// 80, and q, k, v three times as wide (`wide`), whose scores move each row's
// running maximum between key tiles. What the forward saves for the backward
// is the backend's own (the CPU's softmax, or row statistics), so it is
// compared only through the backward's result.
struct AttentionShape {
  int64_t B, T, D, H;
  bool wide = false;
};

std::vector<Case> attention_cases(const std::vector<DType>& types, const std::vector<AttentionShape>& shapes) {
  std::vector<Case> cases;
  const DType F32 = DType::F32, BF16 = DType::BF16;
  for (DType t : types)
    for (auto [B, T, D, H, wide] : shapes) {
      const std::string shape = " B" + std::to_string(B) + " T" + std::to_string(T) + " D" + std::to_string(D) + " H" +
                                std::to_string(H) + (wide ? " wide" : "");
      const Init qkv = wide ? Init::Wide : Init::Random;
      const DType g = t == BF16 ? BF16 : F32;                                   // dout and dqkv
      const double backward_bound = t == F32 ? 1e-4 : t == BF16 ? 3e-2 : 5e-3;  // through P's and dS's rounding
      const size_t rows = size_t(B * T), saved = size_t(B * H * T * (T + 2));  // the softmax, or fp32 row statistics
      cases.push_back(
          {"attention_forward " + str(t) + shape,
           bound_for(t),
           {out(t, rows * size_t(D), Init::Zero), in(t, saved, Init::Zero), in(t, rows * size_t(3 * D), qkv)},
           [=](Ops& ops, const std::vector<void*>& p) {
             ops.attention_forward({p[0], t}, {p[1], t}, {p[2], t}, B, T, D, H);
             return 0.0;
           }});
      // The backward reads what the forward saved.
      cases.push_back(
          {"attention_backward " + str(t) + shape,
           backward_bound,
           {out(g, rows * size_t(3 * D), Init::Zero), in(g, rows * size_t(D)), in(t, rows * size_t(3 * D), qkv),
            in(t, saved, Init::Zero), in(t, rows * size_t(D), Init::Zero)},
           [=](Ops& ops, const std::vector<void*>& p) {
             ops.attention_forward({p[4], t}, {p[3], t}, {p[2], t}, B, T, D, H);
             ops.attention_backward({p[0], g}, {p[1], g}, {p[2], t}, {p[4], t}, {p[3], t}, B, T, D, H);
             return 0.0;
           }});
    }
  return cases;
}

std::vector<Case> attention_cases() {
  return attention_cases({DType::F32, DType::BF16, DType::F16}, {{1, 1, 8, 2},
                                                                 {2, 5, 12, 3},
                                                                 {1, 17, 16, 4},
                                                                 {1, 150, 16, 2},
                                                                 {2, 1, 128, 2},
                                                                 {1, 64, 128, 2},
                                                                 {2, 100, 128, 2},
                                                                 {1, 129, 128, 2, true},
                                                                 {1, 256, 128, 2},
                                                                 {1, 17, 128, 2},
                                                                 {1, 70, 160, 2},
                                                                 {1, 129, 160, 2, true},
                                                                 {2, 65, 240, 3}});
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  const DType F32 = DType::F32, BF16 = DType::BF16, F16 = DType::F16;
  // Matrix products: odd shapes, a single row (T = 1), with and without bias.
  for (DType t : {F32, BF16, F16})
    for (auto [N, Dout, Din] : std::vector<std::array<int64_t, 3>>{{1, 13, 9}, {7, 33, 17}, {64, 48, 32}})
      for (bool bias : {true, false}) {
        const DType o = t == BF16 ? BF16 : F32;
        cases.push_back({"linear_forward " + str(t) + " N" + std::to_string(N) + " " + std::to_string(Dout) + "x" +
                             std::to_string(Din) + (bias ? " bias" : ""),
                         bound_for(t),
                         {out(o, size_t(N * Dout), Init::Zero), in(t, size_t(N * Din)), in(t, size_t(Dout * Din)),
                          in(F32, size_t(Dout))},
                         [=](Ops& ops, const std::vector<void*>& p) {
                           ops.linear_forward({p[0], o}, {p[1], t}, {p[2], t}, bias ? F(p[3]) : nullptr, N, Dout, Din);
                           return 0.0;
                         }});
        if (t == F16) continue;
        for (bool acc : {false, true})
          cases.push_back({"linear_backward " + str(t) + " N" + std::to_string(N) + " " + std::to_string(Dout) + "x" +
                               std::to_string(Din) + (acc ? " accumulate" : ""),
                           bound_for(t),
                           {out(F32, size_t(N * Din)), out(F32, size_t(Dout * Din)), out(F32, size_t(Dout)),
                            in(F32, size_t(N * Dout)), in(t, size_t(N * Din)), in(t, size_t(Dout * Din))},
                           [=](Ops& ops, const std::vector<void*>& p) {
                             ops.linear_backward(F(p[0]), F(p[1]), bias ? F(p[2]) : nullptr, F(p[3]), {p[4], t},
                                                 {p[5], t}, N, Dout, Din, acc);
                             return 0.0;
                           }});
      }
  // LayerNorm: fp32 or bf16 input, odd widths, one row.
  for (DType t : {F32, BF16})
    for (auto [N, D] : std::vector<std::array<int64_t, 2>>{{1, 8}, {7, 33}, {16, 64}}) {
      const std::string shape = " N" + std::to_string(N) + " D" + std::to_string(D);
      cases.push_back({"layernorm_forward " + str(t) + shape, bound_for(t),
                       {out(t, size_t(N * D), Init::Zero), out(F32, size_t(N)), out(F32, size_t(N)),
                        in(t, size_t(N * D)), in(F32, size_t(D)), in(F32, size_t(D))},
                       [=](Ops& ops, const std::vector<void*>& p) {
                         ops.layernorm_forward({p[0], t}, F(p[1]), F(p[2]), {p[3], t}, F(p[4]), F(p[5]), N, D, 1e-5f);
                         return 0.0;
                       }});
      cases.push_back({"layernorm_backward " + str(t) + shape, 1e-4,
                       {out(F32, size_t(N * D)), out(F32, size_t(D)), out(F32, size_t(D)), in(F32, size_t(N * D)),
                        in(t, size_t(N * D)), in(F32, size_t(N)), in(F32, size_t(N), Init::Positive),
                        in(F32, size_t(D))},
                       [=](Ops& ops, const std::vector<void*>& p) {
                         ops.layernorm_backward(F(p[0]), F(p[1]), F(p[2]), F(p[3]), {p[4], t}, F(p[5]), F(p[6]),
                                                F(p[7]), N, D);
                         return 0.0;
                       }});
    }
  for (Case& c : attention_cases()) cases.push_back(std::move(c));
  // Embedding and position, at widths that are even (sin | cos halves).
  for (auto [B, T, D] : std::vector<std::array<int64_t, 3>>{{1, 1, 8}, {2, 7, 12}}) {
    const int64_t V = 11;
    const std::string shape = " B" + std::to_string(B) + " T" + std::to_string(T) + " D" + std::to_string(D);
    for (DType t : {F32})
      cases.push_back({"embedding_forward " + str(t) + shape, bound_for(t),
                       {out(t, size_t(B * T * D), Init::Zero), ids(size_t(B * T), V), in(F32, size_t(V * D))},
                       [=](Ops& ops, const std::vector<void*>& p) {
                         ops.embedding_forward({p[0], t}, I(p[1]), F(p[2]), B, T, D, 2.5f);
                         return 0.0;
                       }});
    cases.push_back({"embedding_backward f32" + shape, 1e-5,
                     {out(F32, size_t(V * D)), in(F32, size_t(B * T * D)), ids(size_t(B * T), V)},
                     [=](Ops& ops, const std::vector<void*>& p) {
                       ops.embedding_backward(F(p[0]), F(p[1]), I(p[2]), B, T, D, 2.5f);
                       return 0.0;
                     }});
  }
  cases.push_back({"embedding_at position 9", 1e-6, {out(F32, 12, Init::Zero), in(F32, 11 * 12)},
                   [](Ops& ops, const std::vector<void*>& p) {
                     ops.embedding_at(F(p[0]), 7, 9, F(p[1]), 12, 1.5f);
                     return 0.0;
                   }});
  for (int64_t n : {1, 6})
    cases.push_back({"attention_decode n" + std::to_string(n), 1e-5,
                     {out(F32, 12, Init::Zero), in(F32, 36), in(F32, size_t(n * 12)), in(F32, size_t(n * 12))},
                     [=](Ops& ops, const std::vector<void*>& p) {
                       ops.attention_decode(F(p[0]), F(p[1]), F(p[2]), F(p[3]), n, 12, 3);
                       return 0.0;
                     }});
  // Element-wise ops, odd lengths; ReLU in every storage type (dropout and
  // the residual stream are fp32 by the op contract).
  DropoutSpec drop;
  drop.p = 0.3f, drop.seed = 5, drop.stream = 2, drop.first_index = 77;
  for (DType t : {F32, BF16, F16})
    for (size_t n : {size_t(1), size_t(1037)}) {
      const std::string shape = " " + str(t) + " n" + std::to_string(n);
      if (t == F16) {  // relu_backward takes bf16 or fp32 gradients
        cases.push_back({"relu_forward" + shape, 0, {out(t, n)}, [=](Ops& ops, const std::vector<void*>& p) {
                           ops.relu_forward({p[0], t}, n);
                           return 0.0;
                         }});
        continue;
      }
      cases.push_back({"relu_forward" + shape, 0, {out(t, n)}, [=](Ops& ops, const std::vector<void*>& p) {
                         ops.relu_forward({p[0], t}, n);
                         return 0.0;
                       }});
      cases.push_back({"relu_backward" + shape, 0, {out(t, n), in(t, n)}, [=](Ops& ops, const std::vector<void*>& p) {
                         ops.relu_backward({p[0], t}, {p[1], t}, n);
                         return 0.0;
                       }});
      if (t != F32) continue;
      cases.push_back({"dropout" + shape, 0, {out(t, n)}, [=](Ops& ops, const std::vector<void*>& p) {
                         ops.dropout({p[0], t}, n, drop);
                         return 0.0;
                       }});
      cases.push_back({"residual_add" + shape, 1e-6, {out(F32, n), in(F32, n), in(t, n)},
                       [=](Ops& ops, const std::vector<void*>& p) {
                         ops.residual_add(F(p[0]), F(p[1]), {p[2], t}, n, drop);
                         return 0.0;
                       }});
    }
  // Conversions: fp32 to and from each type (copy's contract).
  for (DType from : {F32, BF16, F16})
    for (DType to : {F32, BF16, F16})
      if (from == F32 || to == F32) cases.push_back({"copy " + str(from) + "->" + str(to), 0, {out(to, 1037, Init::Zero), in(from, 1037)},
                       [=](Ops& ops, const std::vector<void*>& p) {
                         ops.copy({p[0], to}, {p[1], from}, 1037);
                         return 0.0;
                       }});
  // The fused head and loss: one row, odd rows in chunks of 3, and a
  // vocabulary of one full block of 2048 plus a partial one.
  for (DType t : {F32, BF16, F16})
    for (auto [N, D, V] : std::vector<std::array<int64_t, 3>>{{1, 8, 11}, {7, 12, 37}, {5, 16, 2085}})
      for (bool training : {false, true}) {
        const int64_t chunk = 3;
        cases.push_back(
            {"lm_head_loss " + str(t) + " N" + std::to_string(N) + " D" + std::to_string(D) + " V" + std::to_string(V) +
                 (training ? " train" : " eval"),
             head_bound(t),
             {in(t, size_t(N * D)), in(t, size_t(V * D)), in(F32, size_t(V)), ids(size_t(N), V, true),
              out(F32, size_t(N * D)), out(F32, size_t(V * D)), out(F32, size_t(V)), out(F32, size_t(N)),
              in(F32, size_t(chunk * head_row_stride(V)), Init::Zero), out(DType::F64, 1)},
             [=](Ops& ops, const std::vector<void*>& p) {
               ops.lm_head_loss({p[0], t}, {p[1], t}, F(p[2]), I(p[3]), N, D, V, 0.25f, training ? F(p[4]) : nullptr,
                                training ? F(p[5]) : nullptr, training ? F(p[6]) : nullptr,
                                static_cast<double*>(p[9]), F(p[7]), F(p[8]), chunk);
               return 0.0;
             }});
      }
  // Distillation fused with the head: a teacher of another width, ignored rows, chunks of 3,
  // the two-block vocabulary; α strictly inside (0, 1) so both gradients count.
  for (DType t : {F32, BF16, F16})
    for (auto [N, D, Dt, V] : std::vector<std::array<int64_t, 4>>{{1, 8, 8, 11}, {7, 12, 16, 37}, {5, 16, 8, 2085}})
      for (bool training : {false, true}) {
        const int64_t chunk = 3;
        cases.push_back(
            {"lm_head_distill " + str(t) + " N" + std::to_string(N) + " D" + std::to_string(D) + " Dt" +
                 std::to_string(Dt) + " V" + std::to_string(V) + (training ? " train" : " eval"),
             head_bound(t),
             {in(t, size_t(N * D)), in(t, size_t(V * D)), in(F32, size_t(V)), ids(size_t(N), V, true),
              in(t, size_t(N * Dt)), in(t, size_t(V * Dt)), in(F32, size_t(V)),
              in(F32, size_t(chunk * head_row_stride(V)), Init::Zero), out(F32, size_t(N * D)), out(F32, size_t(V * D)),
              out(F32, size_t(V)), in(F32, size_t(chunk * head_row_stride(V)), Init::Zero), out(DType::F64, 1),
              out(DType::F64, 1)},
             [=](Ops& ops, const std::vector<void*>& p) {
               const TeacherHead teacher{{p[4], t}, {p[5], t}, F(p[6]), Dt, F(p[7])};
               ops.lm_head_distill({p[0], t}, {p[1], t}, F(p[2]), I(p[3]), teacher, N, D, V, 0.4f, 2.0f, 0.25f,
                                   training ? F(p[8]) : nullptr, training ? F(p[9]) : nullptr,
                                   training ? F(p[10]) : nullptr, static_cast<double*>(p[12]),
                                   static_cast<double*>(p[13]), F(p[11]), chunk);
               return 0.0;
             },
             true});
      }
  // Reductions, scaling and the optimizer updates over segments that skip padding.
  cases.push_back({"sum_squares n1037 (adds)", 1e-6, {in(F32, 1037), out(DType::F64, 1)},
                   [](Ops& ops, const std::vector<void*>& p) {
                     ops.sum_squares(F(p[0]), 1037, static_cast<double*>(p[1]));
                     return 0.0;
                   }});
  // The clip factor: clipping, no clipping, disabled, and fp16 unscaling by 2^10.
  for (auto [scale, max_norm] : std::vector<std::array<double, 2>>{{1, 0.5}, {1, 1e6}, {1, 0}, {1024, 0.5}})
    cases.push_back({"clip_factor scale " + std::to_string(scale) + " max " + std::to_string(max_norm), 1e-7,
                     {in(DType::F64, 1, Init::Positive), out(F32, 1, Init::Zero)},
                     [=](Ops& ops, const std::vector<void*>& p) {
                       ops.clip_factor(static_cast<double*>(p[0]), scale, max_norm, F(p[1]));
                       return 0.0;
                     }});
  cases.push_back({"scale n1037", 0, {out(F32, 1037)}, [](Ops& ops, const std::vector<void*>& p) {
                     ops.scale(F(p[0]), 1037, 0.37f);
                     return 0.0;
                   }});
  cases.push_back({"fill n1037", 0, {out(F32, 1037)}, [](Ops& ops, const std::vector<void*>& p) {
                     ops.fill(F(p[0]) + 3, 1000, -2.5f);
                     return 0.0;
                   }});
  const std::vector<UpdateSegment> segments = {{0, 0, 13, 0.1f}, {16, 16, 1, 0.0f}, {32, 20, 999, 0.1f}};
  for (bool factor : {false, true}) {  // with a gradient factor (clip_factor's) and without
    cases.push_back({std::string("adamw_update") + (factor ? " factor" : ""), 1e-6,
                     {out(F32, 1040), in(F32, 1040), out(F32, 1040), out(F32, 1040, Init::Positive),
                      in(F32, 1, Init::Positive)},
                     [=](Ops& ops, const std::vector<void*>& p) {
                       ops.adamw_update(F(p[0]), F(p[1]), F(p[2]), F(p[3]), segments, 1e-2f, 0.9f, 0.95f, 1e-8f, 3,
                                        factor ? F(p[4]) : nullptr);
                       return 0.0;
                     }});
    cases.push_back({std::string("adagrad_update") + (factor ? " factor" : ""), 1e-6,
                     {out(F32, 1040), in(F32, 1040), out(F32, 1040, Init::Positive), in(F32, 1, Init::Positive)},
                     [=](Ops& ops, const std::vector<void*>& p) {
                       ops.adagrad_update(F(p[0]), F(p[1]), F(p[2]), segments, 5e-2f, factor ? F(p[3]) : nullptr);
                       return 0.0;
                     }});
  }
  return cases;
}

// Column reductions over more rows than a GPU grid has blocks in y (65535
// chunks of 64 rows): a bias gradient and LayerNorm's parameter gradients.
// Only device backends run them (the CPU's loops have no such limit, and the
// 4M-row inputs take seconds to make and compare).
std::vector<Case> grid_limit_cases() {
  const DType F32 = DType::F32;
  constexpr int64_t kRows = 65535 * 64 + 1;
  const std::string rows = " N" + std::to_string(kRows);
  return {
      {"linear_backward f32" + rows + " 2x1 bias",
       bound_for(F32),
       {out(F32, size_t(kRows)), out(F32, 2), out(F32, 2), in(F32, size_t(kRows * 2)), in(F32, size_t(kRows)),
        in(F32, 2)},
       [=](Ops& ops, const std::vector<void*>& p) {
         ops.linear_backward(F(p[0]), F(p[1]), F(p[2]), F(p[3]), {p[4], F32}, {p[5], F32}, kRows, 2, 1, false);
         return 0.0;
       }},
      {"layernorm_backward f32" + rows + " D2",
       1e-4,
       {out(F32, size_t(kRows * 2)), out(F32, 2), out(F32, 2), in(F32, size_t(kRows * 2)), in(F32, size_t(kRows * 2)),
        in(F32, size_t(kRows)), in(F32, size_t(kRows), Init::Positive), in(F32, 2)},
       [=](Ops& ops, const std::vector<void*>& p) {
         ops.layernorm_backward(F(p[0]), F(p[1]), F(p[2]), F(p[3]), {p[4], F32}, F(p[5]), F(p[6]), F(p[7]), kRows, 2);
         return 0.0;
       }}};
}

class OpTable : public ::testing::TestWithParam<std::string> {};

// True when the backend runs the case's op; false (with a note) when it lacks an optional one.
bool backend_runs(Ops& ops, const Case& c) {
  if (!c.optional) return true;
  try {
    run_case(ops, c);
    return true;
  } catch (const Error& e) {
    std::printf("note: %s: %s: not on this backend (%s)\n", ops.name(), c.name.c_str(), e.what());
    return false;
  }
}

// Every case on `backend` against the CPU reference, within the case's bound.
void expect_within_bounds(Ops& backend, const std::vector<Case>& cases, const std::string& label) {
  auto reference = test_support::make_cpu_reference();
  for (const Case& c : cases) {
    if (!backend_runs(backend, c)) continue;
    const Result want = run_case(*reference, c), got = run_case(backend, c);
    double scale = std::max(1.0, std::abs(want.value)), err = std::abs(got.value - want.value);
    for (size_t k = 0; k < want.outputs.size(); ++k)
      for (size_t i = 0; i < want.outputs[k].size(); ++i) {
        const double w = want.outputs[k][i], g = got.outputs[k][i];
        if (std::isnan(w) != std::isnan(g)) err = INFINITY;
        if (std::isnan(w)) continue;
        scale = std::max(scale, std::abs(w));
        err = std::max(err, std::abs(g - w));
      }
    EXPECT_LE(err, c.bound * scale) << label << ": " << c.name << " (error " << err << ", scale " << scale << ")";
  }
}

// Every case on `backend` twice: the same bits.
void expect_repeatable(Ops& backend, const std::vector<Case>& cases, const std::string& label) {
  for (const Case& c : cases) {
    if (!backend_runs(backend, c)) continue;
    const Result a = run_case(backend, c), b = run_case(backend, c);
    bool same = std::memcmp(&a.value, &b.value, sizeof a.value) == 0;
    for (size_t k = 0; k < a.outputs.size(); ++k)
      for (size_t i = 0; i < a.outputs[k].size(); ++i)
        same = same && (std::memcmp(&a.outputs[k][i], &b.outputs[k][i], sizeof(double)) == 0 ||
                        (std::isnan(a.outputs[k][i]) && std::isnan(b.outputs[k][i])));
    EXPECT_TRUE(same) << label << ": " << c.name << " differs between two runs";
  }
}

TEST_P(OpTable, EveryOpMatchesTheCpuReferenceWithinItsBound) {
  auto backend = make_ops(GetParam());
  auto cases = all_cases();
  EXPECT_GT(cases.size(), 100u);
  if (!backend->host_memory())
    for (Case& c : grid_limit_cases()) cases.push_back(std::move(c));
  expect_within_bounds(*backend, cases, GetParam());
}

// Determinism: every op gives the same bits when run again on the same
// inputs (no reduction whose order depends on scheduling, no float atomics).
TEST_P(OpTable, RepeatedRunsAreBitIdentical) {
  auto backend = make_ops(GetParam());
  expect_repeatable(*backend, all_cases(), GetParam());
}

// The CUDA backend's fused attention (CTRL_CUDA_ATTENTION=fused; bf16, heads
// of 64 or 80 columns), which keeps each row's log-sum-exp
// instead of the softmax, against the CPU reference and repeatable.
TEST(OpTable, CudaFusedAttentionMatchesTheCpuReference) {
  const auto devices = available_devices();
  if (std::find(devices.begin(), devices.end(), "cuda") == devices.end())
    GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
#ifdef CTRL_HAVE_CUDA
  if (const int sm = cuda::compute_capability(0); sm < 80)
    GTEST_SKIP() << "the fused attention needs sm_80 or newer (bf16 tensor cores); GPU 0 is sm_" << sm;
#endif
  auto backend = [] {
    test_support::ScopedEnv fused("CTRL_CUDA_ATTENTION", "fused");
    return make_ops("cuda");
  }();
  // The fused kernels are in use for bf16 at heads of 64 and 80 (row
  // statistics saved), not for fp32, fp16 or heads of 4.
  EXPECT_EQ(backend->attention_saved_bytes(2, 100, 128, 2, DType::BF16), size_t(2 * 2 * 100 * 4));
  EXPECT_EQ(backend->attention_saved_bytes(1, 70, 160, 2, DType::BF16), size_t(2 * 70 * 4));
  EXPECT_EQ(backend->attention_saved_bytes(2, 100, 128, 2, DType::F32), attention_probs_bytes(2, 100, 2, DType::F32));
  EXPECT_EQ(backend->attention_saved_bytes(2, 100, 128, 2, DType::F16), attention_probs_bytes(2, 100, 2, DType::F16));
  EXPECT_EQ(backend->attention_saved_bytes(1, 17, 16, 4, DType::BF16), attention_probs_bytes(1, 17, 4, DType::BF16));
  std::vector<Case> cases;
  for (Case& c : attention_cases())
    if (c.name.find(" bf16 ") != std::string::npos) cases.push_back(std::move(c));
  EXPECT_EQ(cases.size(), 26u);
  // More sequences than a grid has blocks in z: the kernels run in slices.
  for (Case& c : attention_cases({DType::BF16}, {{65537, 2, 64, 1}})) cases.push_back(std::move(c));
  expect_within_bounds(*backend, cases, "cuda fused attention");
  expect_repeatable(*backend, cases, "cuda fused attention");
}

// The CPU's two bf16 paths (ops/cpu/gemm.h: oneDNN's bf16 kernels, and the
// operands widened to fp32): every case with a bf16 operand gives the same
// results within the case's bound, and the widened path repeats its bits.
TEST(OpTable, CpuBf16WidenedProductsMatchOneDnnsBf16Kernels) {
  auto cpu = test_support::make_cpu_reference();
  const bool saved = cpu::bf16_widened();
  int compared = 0;
  for (const Case& c : all_cases()) {
    if (std::none_of(c.slots.begin(), c.slots.end(), [](const Slot& s) { return s.dtype == DType::BF16; })) continue;
    cpu::set_bf16_widened(false);
    const Result want = run_case(*cpu, c);
    cpu::set_bf16_widened(true);
    const Result got = run_case(*cpu, c), again = run_case(*cpu, c);
    cpu::set_bf16_widened(saved);
    double scale = std::max(1.0, std::abs(want.value)), err = std::abs(got.value - want.value);
    bool same = true;
    for (size_t k = 0; k < want.outputs.size(); ++k)
      for (size_t i = 0; i < want.outputs[k].size(); ++i) {
        scale = std::max(scale, std::abs(want.outputs[k][i]));
        err = std::max(err, std::abs(got.outputs[k][i] - want.outputs[k][i]));
        same = same && std::memcmp(&got.outputs[k][i], &again.outputs[k][i], sizeof(double)) == 0;
      }
    EXPECT_LE(err, c.bound * scale) << c.name << " (error " << err << ", scale " << scale << ")";
    EXPECT_TRUE(same) << c.name << ": the widened path differs between two runs";
    ++compared;
  }
  EXPECT_GT(compared, 20);
}

// The harness itself can fail: a backend that computes something else is caught.
TEST(OpTableHarness, DetectsAWrongResult) {
  auto reference = test_support::make_cpu_reference();
  Case c{"scale", 1e-6, {out(DType::F32, 100)}, [](Ops& ops, const std::vector<void*>& p) {
           ops.scale(F(p[0]), 100, 0.5f);
           return 0.0;
         }};
  Case wrong = c;
  wrong.run = [](Ops& ops, const std::vector<void*>& p) {
    ops.scale(F(p[0]), 100, 0.5f);
    ops.fill(F(p[0]) + 50, 1, 9.0f);
    return 0.0;
  };
  const Result a = run_case(*reference, c), b = run_case(*reference, wrong);
  EXPECT_EQ(a.outputs[0].size(), 100u);
  EXPECT_NE(a.outputs[0][50], b.outputs[0][50]);
  EXPECT_EQ(a.outputs[0][49], b.outputs[0][49]);
}

INSTANTIATE_TEST_SUITE_P(Backends, OpTable, ::testing::ValuesIn(available_devices()),
                         [](const auto& info) { return info.param; });  // named cpu, checked, cuda

}  // namespace
}  // namespace ctrl
