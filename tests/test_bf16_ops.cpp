// The bf16 paths of the CPU ops against their fp32 paths on the same
// bf16-rounded inputs: attention (bf16 products on q, k, v, P, dO, dS; fp32
// softmax), linear backward with bf16 gradients in and out, ReLU backward on a
// bf16 gradient. Differences must stay within bf16 rounding of the results.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "core/safetensors.h"
#include "ops/cpu/gemm.h"
#include "ops/ops.h"
#include "test_support.h"

using namespace ctrl;

namespace {

// Normal values rounded to bf16: the fp32 copy holds exactly the bf16 values.
struct Rounded {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
};
Rounded rounded(size_t n, uint64_t seed, double sd = 1.0) {
  Rounded r{std::vector<float>(n), std::vector<uint16_t>(n)};
  for (size_t i = 0; i < n; ++i) {
    r.bf16[i] = float_to_bf16(float(sd * random_normal(seed, 3, i)));
    r.f32[i] = bf16_to_float(r.bf16[i]);
  }
  return r;
}

std::vector<float> widen(const std::vector<uint16_t>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = bf16_to_float(x[i]);
  return out;
}

// max |got - want| relative to max |want|.
double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i)
    err = std::max(err, double(std::abs(got[i] - want[i]))), scale = std::max(scale, double(std::abs(want[i])));
  return scale > 0 ? err / scale : err;
}

}  // namespace

TEST(Bf16Ops, AttentionMatchesFp32) {
  auto ops = test_support::make_cpu_reference();
  // T = 150: not a multiple of the vector width, and three causal blocks of 64, the last partial.
  const int64_t B = 2, T = 150, D = 32, H = 4;
  const auto qkv = rounded(size_t(B * T * 3 * D), 1), dout = rounded(size_t(B * T * D), 2);
  std::vector<float> out32(B * T * D), probs32(B * H * T * T), dqkv32(B * T * 3 * D);
  std::vector<uint16_t> out16(out32.size()), probs16(probs32.size()), dqkv16(dqkv32.size());
  ops->attention_forward(out32.data(), probs32.data(), qkv.f32.data(), B, T, D, H);
  ops->attention_backward(dqkv32.data(), dout.f32.data(), qkv.f32.data(), probs32.data(), B, T, D, H);
  ops->attention_forward(TensorRef(out16.data(), DType::BF16), TensorRef(probs16.data(), DType::BF16),
                         TensorRef(const_cast<uint16_t*>(qkv.bf16.data()), DType::BF16), B, T, D, H);
  ops->attention_backward(TensorRef(dqkv16.data(), DType::BF16),
                          TensorRef(const_cast<uint16_t*>(dout.bf16.data()), DType::BF16),
                          TensorRef(const_cast<uint16_t*>(qkv.bf16.data()), DType::BF16),
                          TensorRef(probs16.data(), DType::BF16), B, T, D, H);
  // Causality: exact zeros above the diagonal.
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = i + 1; j < T; ++j) ASSERT_EQ(probs16[size_t((bh * T + i) * T + j)], 0) << bh << " " << i;
  EXPECT_LT(relative_error(widen(probs16), probs32), 1e-2);
  EXPECT_LT(relative_error(widen(out16), out32), 1e-2);
  // dq, dk, dv pass through one more bf16 rounding (P, dS) than the forward.
  EXPECT_LT(relative_error(widen(dqkv16), dqkv32), 3e-2);
}

TEST(Bf16Ops, LinearBackwardWithBf16GradientsMatchesFp32) {
  auto ops = test_support::make_cpu_reference();
  const int64_t N = 45, Dout = 24, Din = 40;
  const auto x = rounded(size_t(N * Din), 4), w = rounded(size_t(Dout * Din), 5, 0.2),
             dy = rounded(size_t(N * Dout), 6);
  std::vector<float> dx32(N * Din), dw32(Dout * Din, 0.5f), db32(Dout, 0.25f);
  ops->linear_backward(dx32.data(), dw32.data(), db32.data(), dy.f32.data(), x.f32.data(), w.f32.data(), N, Dout, Din,
                       false);
  const TensorRef x16(const_cast<uint16_t*>(x.bf16.data()), DType::BF16),
      w16(const_cast<uint16_t*>(w.bf16.data()), DType::BF16);
  for (bool bf16_dout : {false, true})
    for (bool bf16_din : {false, true}) {
      std::vector<float> dx(N * Din), dw(Dout * Din, 0.5f), db(Dout, 0.25f);
      std::vector<uint16_t> dx16(dx.size());
      const TensorRef g =
          bf16_dout ? TensorRef(const_cast<uint16_t*>(dy.bf16.data()), DType::BF16) : TensorRef(dy.f32.data());
      const TensorRef din = bf16_din ? TensorRef(dx16.data(), DType::BF16) : TensorRef(dx.data());
      ops->linear_backward(din, dw.data(), db.data(), g, x16, w16, N, Dout, Din, false);
      if (bf16_din) dx = widen(dx16);
      // dy is exactly representable in bf16, so only fp32 accumulation order and
      // the final bf16 rounding of dx differ.
      EXPECT_LT(relative_error(dx, dx32), bf16_din ? 5e-3 : 1e-5) << bf16_dout << bf16_din;
      EXPECT_LT(relative_error(dw, dw32), 1e-5) << bf16_dout << bf16_din;
      EXPECT_LT(relative_error(db, db32), 1e-5) << bf16_dout << bf16_din;
    }
}

TEST(Bf16Ops, ReluBackwardOnBf16Gradient) {
  auto ops = test_support::make_cpu_reference();
  const auto y = rounded(1000, 7), g = rounded(1000, 8);
  std::vector<uint16_t> y16 = y.bf16, dx16 = g.bf16;
  ops->relu_forward(TensorRef(y16.data(), DType::BF16), y16.size());
  ops->relu_backward(TensorRef(dx16.data(), DType::BF16), TensorRef(y16.data(), DType::BF16), dx16.size());
  for (size_t i = 0; i < dx16.size(); ++i) ASSERT_EQ(dx16[i], y.f32[i] > 0 ? g.bf16[i] : uint16_t(0)) << i;
}

// The backend says when a precision is not native: fp16 always on the CPU
// (no fp16 products), bf16 exactly when oneDNN finds no AVX512-BF16 or AMX.
TEST(Bf16Ops, PrecisionNoteSaysWhenProductsAreNotNative) {
  auto ops = test_support::make_cpu_reference();
  EXPECT_EQ(ops->precision_note(DType::F32), "");
  EXPECT_NE(ops->precision_note(DType::F16).find("widened to fp32"), std::string::npos);
  EXPECT_EQ(ops->precision_note(DType::BF16).empty(), cpu::cpu_has_native_bf16());
}
