// The bf16 paths of the CPU ops against their fp32 paths on the same
// bf16-rounded inputs: attention (bf16 products on q, k, v, P, dO, dS; fp32
// softmax), linear backward with bf16 gradients in and out, ReLU backward on a
// bf16 gradient. Differences must stay within bf16 rounding of the results.
// Also fp16's attention and linear backward, whose products run in fp32 on
// 16-bit values.
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
  ops->attention_backward(dqkv32.data(), dout.f32.data(), qkv.f32.data(), out32.data(), probs32.data(), B, T, D, H);
  ops->attention_forward(TensorRef(out16.data(), DType::BF16), TensorRef(probs16.data(), DType::BF16),
                         TensorRef(const_cast<uint16_t*>(qkv.bf16.data()), DType::BF16), B, T, D, H);
  ops->attention_backward(TensorRef(dqkv16.data(), DType::BF16),
                          TensorRef(const_cast<uint16_t*>(dout.bf16.data()), DType::BF16),
                          TensorRef(const_cast<uint16_t*>(qkv.bf16.data()), DType::BF16),
                          TensorRef(out16.data(), DType::BF16), TensorRef(probs16.data(), DType::BF16), B, T, D, H);
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

// The widened bf16 products (train.cpu_bf16=widened) must round what the
// bf16 kernels round: an fp32 dout that bf16 cannot hold exactly goes into the
// products as its bf16 rounding on both paths, so dx and dw agree to fp32
// accumulation order (unrounded, they would differ by bf16's 2^-9).
TEST(Bf16Ops, WidenedLinearBackwardRoundsAnFp32GradientAsTheBf16KernelsDo) {
  auto ops = test_support::make_cpu_reference();
  const int64_t N = 300, Dout = 48, Din = 40;  // dout above the size whose conversion is split over threads
  const auto x = rounded(size_t(N * Din), 4), w = rounded(size_t(Dout * Din), 5, 0.2);
  std::vector<float> dy(size_t(N * Dout));
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = float(random_normal(9, 3, i));
  const TensorRef x16(const_cast<uint16_t*>(x.bf16.data()), DType::BF16),
      w16(const_cast<uint16_t*>(w.bf16.data()), DType::BF16);
  const bool saved = cpu::bf16_widened();
  std::vector<float> dx[2], dw[2], db[2];
  std::vector<uint16_t> dx16[2];
  for (int widened : {0, 1}) {
    cpu::set_bf16_widened(widened);
    dx[widened].assign(size_t(N * Din), 0.75f), dw[widened].assign(size_t(Dout * Din), 0.5f);
    db[widened].assign(size_t(Dout), 0.25f), dx16[widened].assign(size_t(N * Din), 0);
    ops->linear_backward(TensorRef(dx[widened].data()), dw[widened].data(), db[widened].data(), dy.data(), x16, w16, N,
                         Dout, Din, true);
    std::vector<float> unused_dw(size_t(Dout * Din));
    ops->linear_backward(TensorRef(dx16[widened].data(), DType::BF16), unused_dw.data(), nullptr, dy.data(), x16, w16,
                         N, Dout, Din, false);
  }
  cpu::set_bf16_widened(saved);
  EXPECT_LT(relative_error(dx[1], dx[0]), 1e-5);
  EXPECT_LT(relative_error(dw[1], dw[0]), 1e-5);
  EXPECT_EQ(db[1], db[0]);
  EXPECT_LT(relative_error(widen(dx16[1]), widen(dx16[0])), 1e-2);
}

// fp16 attention on the CPU: fp32 products on the values a GPU's fp16
// products take. The softmax is kept as its fp16 rounding, which the forward's
// second product also takes; the fp32 dout enters the products as its fp16
// rounding (and overflows as fp16 does); dqkv is fp32.
TEST(Bf16Ops, Fp16AttentionTakesTheFp16RoundingsOfTheSoftmaxAndGradient) {
  auto ops = test_support::make_cpu_reference();
  const int64_t B = 2, T = 70, D = 32, H = 4;
  auto to_half = [](const std::vector<float>& x) {
    std::vector<uint16_t> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) h[i] = float_to_f16(x[i]);
    return h;
  };
  auto from_half = [](const std::vector<uint16_t>& h) {
    std::vector<float> x(h.size());
    for (size_t i = 0; i < h.size(); ++i) x[i] = f16_to_float(h[i]);
    return x;
  };
  std::vector<float> qkv_values(size_t(B * T * 3 * D)), dout(size_t(B * T * D));
  for (size_t i = 0; i < qkv_values.size(); ++i) qkv_values[i] = float(random_normal(11, 3, i));
  for (size_t i = 0; i < dout.size(); ++i) dout[i] = float(random_normal(12, 3, i));
  std::vector<uint16_t> qkv16 = to_half(qkv_values);
  const std::vector<float> qkv32 = from_half(qkv16), rounded_dout = from_half(to_half(dout));
  // The fp32 path on the same q, k, v values, with the rounded and the unrounded dout.
  std::vector<float> out32(size_t(B * T * D)), probs32(size_t(B * H * T * T)), want_dqkv(qkv32.size()),
      unrounded_dqkv(qkv32.size());
  ops->attention_forward(out32.data(), probs32.data(), qkv32.data(), B, T, D, H);
  ops->attention_backward(want_dqkv.data(), rounded_dout.data(), qkv32.data(), out32.data(), probs32.data(), B, T, D,
                          H);
  ops->attention_backward(unrounded_dqkv.data(), dout.data(), qkv32.data(), out32.data(), probs32.data(), B, T, D, H);
  std::vector<uint16_t> out16(out32.size()), probs16(probs32.size());
  std::vector<float> dqkv(qkv32.size());
  const TensorRef qkv(qkv16.data(), DType::F16), out(out16.data(), DType::F16), probs(probs16.data(), DType::F16);
  ops->attention_forward(out, probs, qkv, B, T, D, H);
  ops->attention_backward(dqkv.data(), dout.data(), qkv, out, probs, B, T, D, H);
  // The kept softmax is the fp32 softmax's fp16 rounding (to an ulp: the products' summation order may differ).
  EXPECT_LT(relative_error(from_half(probs16), probs32), 1e-3);
  EXPECT_LT(relative_error(from_half(out16), out32), 2e-3);
  // Within fp16's rounding of P and dS of the fp32 path on the rounded dout, and
  // measurably off the one on the unrounded dout.
  const double err = relative_error(dqkv, want_dqkv);
  EXPECT_LT(err, 4e-3);
  EXPECT_GT(relative_error(dqkv, unrounded_dqkv), err);
  // 70000 is beyond fp16's largest finite value: as dO's first column of token
  // 40 in head 1, it makes that token's dq in the head infinite or NaN, and
  // the first column of dv of a key it sees; token 39's dq stays finite.
  const int64_t t = 40, hd = D / H, h = 1;
  dout[size_t(t * D + h * hd)] = 70000.0f;
  ops->attention_backward(dqkv.data(), dout.data(), qkv, out, probs, B, T, D, H);
  EXPECT_FALSE(std::isfinite(dqkv[size_t(3 * 3 * D + 2 * D + h * hd)]));
  for (int64_t i = 0; i < hd; ++i) {
    EXPECT_FALSE(std::isfinite(dqkv[size_t(t * 3 * D + h * hd + i)])) << i;
    EXPECT_TRUE(std::isfinite(dqkv[size_t((t - 1) * 3 * D + h * hd + i)])) << i;
  }
}

// fp16 runs its products in fp32 on the CPU, but an fp32 dout goes into them
// as its fp16 rounding, as a GPU stores it: the same values and the same
// overflow to infinity that the loss scaler must see. db sums the fp32 dout.
TEST(Bf16Ops, Fp16LinearBackwardRoundsAnFp32GradientAndOverflowsAsFp16Does) {
  auto ops = test_support::make_cpu_reference();
  const int64_t N = 300, Dout = 48, Din = 40;
  std::vector<uint16_t> x16(size_t(N * Din)), w16(size_t(Dout * Din));
  for (size_t i = 0; i < x16.size(); ++i) x16[i] = float_to_f16(float(random_normal(4, 3, i)));
  for (size_t i = 0; i < w16.size(); ++i) w16[i] = float_to_f16(float(0.2 * random_normal(5, 3, i)));
  std::vector<float> dy(size_t(N * Dout));
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = float(random_normal(9, 3, i));
  // The expected results (double accumulation), from dout as fp16 holds it
  // and, to show that the bound below tells the two apart, from the fp32 dout.
  std::vector<float> xf(x16.size()), wf(w16.size()), rounded_dy(dy.size());
  for (size_t i = 0; i < xf.size(); ++i) xf[i] = f16_to_float(x16[i]);
  for (size_t i = 0; i < wf.size(); ++i) wf[i] = f16_to_float(w16[i]);
  for (size_t i = 0; i < dy.size(); ++i) rounded_dy[i] = f16_to_float(float_to_f16(dy[i]));
  auto products = [&](const std::vector<float>& g, std::vector<float>& dx, std::vector<float>& dw) {
    dx.assign(size_t(N * Din), 0.0f), dw.assign(size_t(Dout * Din), 0.0f);
    cpu::gemm_f32_reference(false, false, N, Din, Dout, 1.0f, g.data(), Dout, wf.data(), Din, 0.0f, dx.data(), Din);
    cpu::gemm_f32_reference(true, false, Dout, Din, N, 1.0f, g.data(), Dout, xf.data(), Din, 0.0f, dw.data(), Din);
  };
  std::vector<float> want_dx, want_dw, unrounded_dx, unrounded_dw;
  products(rounded_dy, want_dx, want_dw);
  products(dy, unrounded_dx, unrounded_dw);
  ASSERT_GT(relative_error(unrounded_dx, want_dx), 1e-4);
  ASSERT_GT(relative_error(unrounded_dw, want_dw), 1e-4);
  const TensorRef x(x16.data(), DType::F16), w(w16.data(), DType::F16);
  std::vector<float> dx(size_t(N * Din)), dw(size_t(Dout * Din), 0.0f), db(size_t(Dout), 0.0f);
  ops->linear_backward(TensorRef(dx.data()), dw.data(), db.data(), dy.data(), x, w, N, Dout, Din, false);
  EXPECT_LT(relative_error(dx, want_dx), 1e-5);
  EXPECT_LT(relative_error(dw, want_dw), 1e-5);
  for (int64_t o = 0; o < Dout; ++o) {
    double sum = 0;
    for (int64_t n = 0; n < N; ++n) sum += dy[size_t(n * Dout + o)];
    EXPECT_NEAR(db[size_t(o)], sum, 1e-4) << o;
  }
  // 70000 is beyond fp16's largest finite value (65504): row 0 of dx and
  // dw's row for output 3 become infinite or NaN, as they would on a GPU.
  dy[3] = 70000.0f;
  std::fill(dw.begin(), dw.end(), 0.0f);
  ops->linear_backward(TensorRef(dx.data()), dw.data(), nullptr, dy.data(), x, w, N, Dout, Din, false);
  for (int64_t i = 0; i < Din; ++i) {
    EXPECT_FALSE(std::isfinite(dx[size_t(i)])) << i;
    EXPECT_FALSE(std::isfinite(dw[size_t(3 * Din + i)])) << i;
    EXPECT_TRUE(std::isfinite(dx[size_t(Din + i)])) << i;
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
// (no fp16 products), bf16 exactly when oneDNN emulates its bf16 kernels (it
// has them but finds no AVX512-BF16 or AMX). Widened bf16 products, chosen or
// for want of oneDNN kernels, need no note (fp32's speed less the conversions).
TEST(Bf16Ops, PrecisionNoteSaysWhenProductsAreNotNative) {
  auto ops = test_support::make_cpu_reference();
  const bool saved = cpu::bf16_widened();
  cpu::set_bf16_widened(false);
  EXPECT_EQ(ops->precision_note(DType::F32), "");
  EXPECT_NE(ops->precision_note(DType::F16).find("widened to fp32"), std::string::npos);
  const std::string path = !cpu::onednn_has_bf16_matmul() ? "widened"
                           : cpu::cpu_has_native_bf16()   ? "native"
                                                          : "emulated";
  EXPECT_EQ(ops->bf16_path(), path);
  EXPECT_EQ(ops->precision_note(DType::BF16).empty(), path != "emulated");
  cpu::set_bf16_widened(true);
  EXPECT_EQ(ops->precision_note(DType::BF16), "");
  EXPECT_EQ(ops->bf16_path(), "widened");
  cpu::set_bf16_widened(saved);
}

// train.cpu_bf16: native and widened are taken as given; auto measures both
// paths once per process and then repeats its answer without measuring.
// Without oneDNN bf16 kernels for the CPU every setting widens and says why.
TEST(Bf16Ops, ChoosingTheBf16PathMeasuresOncePerProcess) {
  auto ops = test_support::make_cpu_reference();
  const bool saved = cpu::bf16_widened();
  Ops::Bf16Choice c;
  if (!cpu::onednn_has_bf16_matmul()) {  // nothing to choose: every setting widens, and says why
    for (const char* setting : {"native", "widened", "auto"}) {
      c = ops->choose_bf16_products(setting, 0.01);
      EXPECT_TRUE(c.widened && c.no_bf16_kernels && cpu::bf16_widened()) << setting;
      EXPECT_EQ(c.native_gflops, 0);
      EXPECT_EQ(c.describe(), "widened to fp32 (oneDNN has no bf16 products for this CPU)");
    }
    EXPECT_EQ(ops->bf16_path(), "widened");
    cpu::set_bf16_widened(saved);
    return;
  }
  c = ops->choose_bf16_products("widened", 0);
  EXPECT_TRUE(c.widened && cpu::bf16_widened());
  EXPECT_EQ(c.native_gflops, 0);
  EXPECT_EQ(c.describe(), "widened to fp32 (train.cpu_bf16)");
  c = ops->choose_bf16_products("native", 0);
  EXPECT_FALSE(c.widened || c.no_bf16_kernels || cpu::bf16_widened());
  const Ops::Bf16Choice first = ops->choose_bf16_products("auto", 0.01),
                        second = ops->choose_bf16_products("auto", 0.01);
  EXPECT_EQ(first.widened, second.widened);
  EXPECT_EQ(cpu::bf16_widened(), first.widened);
  EXPECT_EQ(second.native_gflops, 0);  // the repeat measured nothing
  if (first.native_gflops > 0) {       // the first auto of this process measured both
    EXPECT_GT(first.widened_gflops, 0);
    EXPECT_NE(first.describe().find("auto measured oneDNN's bf16 kernels at"), std::string::npos) << first.describe();
    EXPECT_EQ(first.widened, first.widened_gflops >= Ops::kWidenedWorthIt * first.native_gflops);
  }
  cpu::set_bf16_widened(saved);
}
