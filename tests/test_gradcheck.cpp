// Finite-difference gradient checks: every backward of the Ops interface and
// the whole model's forward_backward against central differences of a scalar
// objective, plus the accumulation promises (parameter gradients add up
// across calls and across micro-batches).
//
// How the comparison is made, and why these tolerances (fp32 kernels):
//  - The objective is L = Σ r_i·out_i with fixed random r (or the loss itself),
//    summed in double, so the only noise is the fp32 rounding of the op's
//    outputs: about 6e-8 relative per output element.
//  - Central difference (L(x+h) - L(x-h)) / (x+h - x-h), divided by the step
//    actually taken in fp32 (x±h rounds). Its truncation error is ~h²/6·L'''.
//  - Ops that are linear in the checked input (linear, embedding, dropout,
//    residual add, LayerNorm's beta, ReLU away from its kink) have no
//    truncation error, so they use a large step (h = 0.5; 0.05 for ReLU,
//    whose inputs are kept 0.1 from zero) that makes the rounding noise
//    negligible, and a tight tolerance: 1e-4 of the gradient's scale
//    (measured: below 2e-7).
//  - Smooth nonlinear ops (LayerNorm, attention, softmax cross-entropy) use
//    h = 1e-2: truncation ~1e-5 relative, rounding noise ~1e-7/2e-2 ~ 1e-5; the
//    tolerance 2e-3 of the scale is 100x the measured errors (below 2.1e-5)
//    and still fails for a real bug, which shows up as an O(1) relative
//    error (a test below checks that the checker sees a 1% error).
//  - "Scale" is the largest |analytic gradient| of the whole tensor: elements
//    whose true gradient is ~0 are judged against the tensor's scale rather
//    than their own tiny value.
//  - The whole model needs a smaller step and a noise floor: see kModelStep.
#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "core/rng.h"
#include "core/safetensors.h"
#include "model/model.h"
#include "ops/ops.h"
#include "test_support.h"

using namespace ctrl;

namespace {

std::vector<float> randn(size_t n, uint64_t seed, double sd = 1.0, double mean = 0.0) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(mean + sd * random_normal(seed, 17, i));
  return v;
}

double dot(const std::vector<float>& r, const float* out) {
  double s = 0;
  for (size_t i = 0; i < r.size(); ++i) s += double(r[i]) * double(out[i]);
  return s;
}


struct CheckResult {
  double max_err = 0;  // largest |numeric - analytic| over the checked elements
  double scale = 0;    // largest |analytic| over the whole tensor
  size_t worst = 0;    // index of max_err
  double ratio() const { return max_err / std::max(scale, 1e-12); }
  // Passes when max_err < tol·scale + floor (floor: the difference quotient's
  // rounding noise, see kModelStep).
  bool ok(double tol, double floor = 0) const { return max_err < tol * scale + floor; }
};

// Compares analytic[0..n) with central differences of f at the elements
// `indices` of x (all of them when empty).
CheckResult check_gradient(float* x, const float* analytic, size_t n, float h, const std::function<double()>& f,
                           std::vector<size_t> indices = {}) {
  if (indices.empty())
    for (size_t i = 0; i < n; ++i) indices.push_back(i);
  CheckResult r;
  for (size_t i = 0; i < n; ++i) r.scale = std::max(r.scale, double(std::abs(analytic[i])));
  for (size_t i : indices) {
    const double err = std::abs(test_support::central_difference(x, i, h, f) - double(analytic[i]));
    if (err > r.max_err) r.max_err = err, r.worst = i;
  }
  if (std::getenv("CTRL_GRADCHECK_VERBOSE"))
    std::printf("  error %.2e, gradient scale %.3g, ratio %.2e\n", r.max_err, r.scale, r.ratio());
  return r;
}

#define EXPECT_GRAD_FLOOR(result, tol, floor, what)                                                           \
  do {                                                                                                        \
    const CheckResult res_ = (result);                                                                        \
    EXPECT_GT(res_.scale, 0.0) << what << ": analytic gradient is all zero";                                  \
    EXPECT_TRUE(res_.ok(tol, floor)) << what << ": worst element " << res_.worst << " error " << res_.max_err \
                                     << " vs gradient scale " << res_.scale << " (tolerance " << tol          \
                                     << " of the scale + " << (floor) << ")";                                 \
  } while (0)
#define EXPECT_GRAD(result, tol, what) EXPECT_GRAD_FLOOR(result, tol, 0.0, what)

constexpr float kLinearStep = 0.5f;   // exact for functions linear in the input
constexpr float kSmoothStep = 1e-2f;  // nonlinear ops
constexpr double kLinearTol = 1e-4;
constexpr double kSmoothTol = 2e-3;

// a - b element-wise (recovers what an accumulating backward added).
std::vector<float> minus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

// lm_head_loss's summed loss as a value (the CPU reference takes a host double).
double head_loss(Ops& ops, TensorRef h, TensorRef w, const float* b, const int32_t* targets, int64_t N, int64_t D,
                 int64_t V, float grad_scale, float* dh, float* dw, float* db, float* row_loss, float* scratch,
                 int64_t chunk) {
  double sum = 0;
  ops.lm_head_loss(h, w, b, targets, N, D, V, grad_scale, dh, dw, db, &sum, row_loss, scratch, chunk);
  return sum;
}

double max_abs_diff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, double(std::abs(a[i] - b[i])));
  return m;
}

TEST(GradCheck, CheckerDetectsAOnePercentError) {
  // The tolerances above must be tight enough to see a small scaling bug.
  auto ops = test_support::make_cpu_reference();
  const int64_t N = 4, Din = 5, Dout = 3;
  auto x = randn(N * Din, 1), w = randn(Dout * Din, 2), r = randn(N * Dout, 3);
  std::vector<float> out(N * Dout), dx(N * Din), dw(Dout * Din, 0.0f);
  auto f = [&] {
    ops->linear_forward(out.data(), x.data(), w.data(), nullptr, N, Dout, Din);
    return dot(r, out.data());
  };
  ops->linear_backward(dx.data(), dw.data(), nullptr, r.data(), x.data(), w.data(), N, Dout, Din, false);
  for (float& g : dx) g *= 1.01f;
  EXPECT_GT(check_gradient(x.data(), dx.data(), dx.size(), kLinearStep, f).ratio(), kSmoothTol);
}

TEST(GradCheck, Linear) {
  auto ops = test_support::make_cpu_reference();
  const int64_t N = 5, Din = 7, Dout = 6;
  auto x = randn(N * Din, 1), w = randn(Dout * Din, 2, 0.5), b = randn(Dout, 3, 0.5), r = randn(N * Dout, 4);
  std::vector<float> out(N * Dout);
  auto f = [&] {
    ops->linear_forward(out.data(), x.data(), w.data(), b.data(), N, Dout, Din);
    return dot(r, out.data());
  };
  // din is overwritten (garbage before), dw and db accumulate onto what is there.
  std::vector<float> din(N * Din, 1e3f);
  const auto dw0 = randn(Dout * Din, 5), db0 = randn(Dout, 6);
  auto dw = dw0, db = db0;
  ops->linear_backward(din.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), N, Dout, Din, false);
  const auto dw_added = minus(dw, dw0), db_added = minus(db, db0);
  EXPECT_GRAD(check_gradient(x.data(), din.data(), din.size(), kLinearStep, f), kLinearTol, "linear din");
  EXPECT_GRAD(check_gradient(w.data(), dw_added.data(), dw.size(), kLinearStep, f), kLinearTol, "linear dw");
  EXPECT_GRAD(check_gradient(b.data(), db_added.data(), db.size(), kLinearStep, f), kLinearTol, "linear db");

  // accumulate_din adds onto din; a null din or db skips them, dw is unchanged.
  auto din_acc = randn(N * Din, 7);
  const auto din_acc0 = din_acc;
  std::vector<float> dw2(Dout * Din, 0.0f), dw3(Dout * Din, 0.0f), db2(Dout, 0.0f);
  ops->linear_backward(din_acc.data(), dw2.data(), db2.data(), r.data(), x.data(), w.data(), N, Dout, Din, true);
  const auto din_added = minus(din_acc, din_acc0);
  EXPECT_LT(max_abs_diff(din_added.data(), din.data(), din.size()), 1e-5);
  ops->linear_backward(TensorRef(), dw3.data(), nullptr, r.data(), x.data(), w.data(), N, Dout, Din, false);
  EXPECT_LT(max_abs_diff(dw3.data(), dw2.data(), dw2.size()), 1e-6);
  EXPECT_LT(max_abs_diff(dw2.data(), dw_added.data(), dw2.size()), 1e-5);
  EXPECT_LT(max_abs_diff(db2.data(), db_added.data(), db2.size()), 1e-5);

  // Without a bias the forward is the product alone.
  std::vector<float> out_nb(N * Dout);
  ops->linear_forward(out_nb.data(), x.data(), w.data(), nullptr, N, Dout, Din);
  ops->linear_forward(out.data(), x.data(), w.data(), b.data(), N, Dout, Din);
  for (int64_t i = 0; i < N * Dout; ++i) EXPECT_NEAR(out[i] - out_nb[i], b[i % Dout], 1e-5);
}

TEST(GradCheck, LayerNorm) {
  auto ops = test_support::make_cpu_reference();
  const int64_t N = 4, D = 10;
  auto x = randn(N * D, 1, 1.0, 0.5), gamma = randn(D, 2, 0.3, 1.0), beta = randn(D, 3, 0.3), r = randn(N * D, 4);
  std::vector<float> out(N * D), mean(N), rstd(N);
  auto f = [&] {
    ops->layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), gamma.data(), beta.data(), N, D, 1e-5f);
    return dot(r, out.data());
  };
  f();  // saves mean and rstd for the backward
  // din, dgamma and dbeta all accumulate (+=) onto what is there.
  const auto din0 = randn(N * D, 5), dg0 = randn(D, 6), db0 = randn(D, 7);
  auto din = din0, dg = dg0, db = db0;
  ops->layernorm_backward(din.data(), dg.data(), db.data(), r.data(), x.data(), mean.data(), rstd.data(), gamma.data(),
                          N, D);
  const auto din_added = minus(din, din0), dg_added = minus(dg, dg0), db_added = minus(db, db0);
  EXPECT_GRAD(check_gradient(x.data(), din_added.data(), din.size(), kSmoothStep, f), kSmoothTol, "layernorm din");
  EXPECT_GRAD(check_gradient(gamma.data(), dg_added.data(), dg.size(), kSmoothStep, f), kSmoothTol, "layernorm dgamma");
  EXPECT_GRAD(check_gradient(beta.data(), db_added.data(), db.size(), kLinearStep, f), kLinearTol, "layernorm dbeta");
  // The input gradient of LayerNorm sums to zero per row (shift invariance).
  for (int64_t n = 0; n < N; ++n) {
    double s = 0;
    for (int64_t i = 0; i < D; ++i) s += din_added[n * D + i];
    EXPECT_NEAR(s, 0.0, 1e-5);
  }
}

TEST(GradCheck, CausalAttention) {
  auto ops = test_support::make_cpu_reference();
  // Three heads of width 4 at T = 7 (not a power of two); two heads of width 4
  // at T = 150, which the products cut into causal blocks of 64 rows and columns.
  for (auto [B, T, D, H] : std::vector<std::array<int64_t, 4>>{{2, 7, 12, 3}, {1, 150, 8, 2}}) {
    SCOPED_TRACE("T = " + std::to_string(T));
    auto qkv = randn(B * T * 3 * D, 1), r = randn(B * T * D, 2);
    std::vector<float> out(B * T * D), probs(B * H * T * T);
    auto f = [&] {
      ops->attention_forward(out.data(), probs.data(), qkv.data(), B, T, D, H);
      return dot(r, out.data());
    };
    f();
    std::vector<float> dqkv(qkv.size(), 1e3f);  // overwritten
    ops->attention_backward(dqkv.data(), r.data(), qkv.data(), out.data(), probs.data(), B, T, D, H);
    EXPECT_GRAD(check_gradient(qkv.data(), dqkv.data(), dqkv.size(), kSmoothStep, f), kSmoothTol, "attention dqkv");

    // Causality: the first position sees only itself, so its output is its own
    // value vector, and no later query affects an earlier output.
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = 0; c < D; ++c) EXPECT_NEAR(out[b * T * D + c], qkv[b * T * 3 * D + 2 * D + c], 1e-6);
    for (int64_t i = 0; i < B * H * T; ++i) {
      const int64_t row = i % T;
      double s = 0;
      for (int64_t j = 0; j < T; ++j) {
        s += probs[i * T + j];
        if (j > row) {
          EXPECT_EQ(probs[i * T + j], 0.0f);
        }
      }
      EXPECT_NEAR(s, 1.0, 1e-6);
    }
  }
}

TEST(GradCheck, EmbeddingWithRepeatedTokensAndScale) {
  auto ops = test_support::make_cpu_reference();
  const int64_t B = 2, T = 6, D = 8, V = 5;
  const float scale = std::sqrt(float(D));
  const std::vector<int32_t> tokens = {3, 1, 3, 3, 0, 4, 1, 1, 2, 3, 0, 3};  // repeats within and across rows
  auto w = randn(V * D, 1), r = randn(B * T * D, 2);
  std::vector<float> x(B * T * D);
  auto f = [&] {
    ops->embedding_forward(x.data(), tokens.data(), w.data(), B, T, D, scale);
    return dot(r, x.data());
  };
  f();
  for (int64_t t = 0; t < T; ++t)  // position part: sin half | cos half
    for (int64_t c = 0; c < D; ++c) {
      const double k = double(c % (D / 2));
      const double angle = double(t) / std::pow(10000.0, 2.0 * k / double(D));
      const double pos = c < D / 2 ? std::sin(angle) : std::cos(angle);
      EXPECT_NEAR(x[t * D + c], w[tokens[t] * D + c] * scale + pos, 1e-5);
    }
  const auto dw0 = randn(V * D, 3);
  auto dw = dw0;
  ops->embedding_backward(dw.data(), r.data(), tokens.data(), B, T, D, scale);
  const auto dw_added = minus(dw, dw0);
  EXPECT_GRAD(check_gradient(w.data(), dw_added.data(), dw.size(), kLinearStep, f), kLinearTol, "embedding dw");
  // Token 2 appears once (row 1, t 2): its gradient is exactly scale·r of that row.
  for (int64_t c = 0; c < D; ++c) EXPECT_NEAR(dw_added[2 * D + c], scale * r[(T + 2) * D + c], 1e-5);
}

TEST(GradCheck, Relu) {
  auto ops = test_support::make_cpu_reference();
  const size_t n = 40;
  auto x = randn(n, 1), r = randn(n, 2);
  for (float& v : x) v = v < 0 ? v - 0.1f : v + 0.1f;  // keep every input 0.1 away from the kink
  std::vector<float> y(n);
  auto f = [&] {
    y = x;
    ops->relu_forward(y.data(), n);
    return dot(r, y.data());
  };
  f();
  auto dx = r;
  ops->relu_backward(dx.data(), y.data(), n);
  EXPECT_GRAD(check_gradient(x.data(), dx.data(), n, 0.05f, f), kLinearTol, "relu dx");
}

TEST(GradCheck, DropoutBackwardIsTheSameMask) {
  auto ops = test_support::make_cpu_reference();
  const size_t n = 1000;
  const DropoutSpec spec{0.3f, 5, 2};
  auto x = randn(n, 1), r = randn(n, 2);
  std::vector<float> y(n);
  auto f = [&] {
    y = x;
    ops->dropout(y.data(), n, spec);
    return dot(r, y.data());
  };
  f();
  size_t dropped = 0;
  for (size_t i = 0; i < n; ++i) {
    if (y[i] == 0.0f) {
      ++dropped;
    } else {
      EXPECT_FLOAT_EQ(y[i], x[i] / 0.7f);
    }
  }
  EXPECT_GT(dropped, 240u);  // binomial(1000, 0.3): mean 300, sd 14.5
  EXPECT_LT(dropped, 360u);
  auto dx = r;  // backward = dropout applied to the gradient with the same spec
  ops->dropout(dx.data(), n, spec);
  std::vector<size_t> some;
  for (size_t i = 0; i < n; i += 7) some.push_back(i);
  EXPECT_GRAD(check_gradient(x.data(), dx.data(), n, kLinearStep, f, some), kLinearTol, "dropout dx");

  // Another stream or seed gives another mask; p = 0 is the identity.
  auto other = x;
  ops->dropout(other.data(), n, DropoutSpec{0.3f, 5, 3});
  EXPECT_GT(max_abs_diff(other.data(), y.data(), n), 0.0);
  auto same = x;
  ops->dropout(same.data(), n, DropoutSpec{0.0f, 5, 2});
  EXPECT_EQ(max_abs_diff(same.data(), x.data(), n), 0.0);
}

TEST(GradCheck, ResidualAdd) {
  auto ops = test_support::make_cpu_reference();
  const size_t n = 300;
  for (float p : {0.0f, 0.25f}) {
    const DropoutSpec spec{p, 9, 4};
    auto x = randn(n, 1), b = randn(n, 2), r = randn(n, 3);
    std::vector<float> y(n);
    auto f = [&] {
      ops->residual_add(y.data(), x.data(), b.data(), n, spec);
      return dot(r, y.data());
    };
    f();
    // y may alias x.
    auto x_alias = x;
    ops->residual_add(x_alias.data(), x_alias.data(), b.data(), n, spec);
    EXPECT_EQ(max_abs_diff(x_alias.data(), y.data(), n), 0.0);
    // ∂L/∂x = r, ∂L/∂b = dropout(r), as the model's backward computes it (copy + dropout).
    std::vector<float> db(n);
    ops->copy(db.data(), r.data(), n);
    ops->dropout(db.data(), n, spec);
    EXPECT_GRAD(check_gradient(x.data(), r.data(), n, kLinearStep, f), kLinearTol, "residual dx p=" << p);
    EXPECT_GRAD(check_gradient(b.data(), db.data(), n, kLinearStep, f), kLinearTol, "residual db p=" << p);
  }
}

TEST(GradCheck, LmHeadLossWithIgnoredTargetsAndGradScale) {
  auto ops = test_support::make_cpu_reference();
  const int64_t N = 7, D = 6, V = 9, chunk = 3;  // chunks of 3, 3 and 1 rows
  const float grad_scale = 0.37f;
  const std::vector<int32_t> targets = {4, -1, 0, 8, 4, -1, 2};
  auto h = randn(N * D, 1), w = randn(V * D, 2, 0.7), b = randn(V, 3, 0.5);
  std::vector<float> scratch(size_t(chunk * head_row_stride(V)));
  auto f = [&] {
    return double(grad_scale) * head_loss(*ops, h.data(), w.data(), b.data(), targets.data(), N, D, V, 0.0f, nullptr,
                                                  nullptr, nullptr, nullptr, scratch.data(), chunk);
  };
  std::vector<float> dh(N * D, 1e3f);  // overwritten
  const auto dw0 = randn(V * D, 4), db0 = randn(V, 5);
  auto dw = dw0, db = db0;
  std::vector<float> row_loss(N, 1.0f);  // added to
  const double total = head_loss(*ops, h.data(), w.data(), b.data(), targets.data(), N, D, V, grad_scale, dh.data(),
                                         dw.data(), db.data(), row_loss.data(), scratch.data(), chunk);
  const auto dw_added = minus(dw, dw0), db_added = minus(db, db0);
  EXPECT_GRAD(check_gradient(h.data(), dh.data(), dh.size(), kSmoothStep, f), kSmoothTol, "lm_head dh");
  EXPECT_GRAD(check_gradient(w.data(), dw_added.data(), dw.size(), kSmoothStep, f), kSmoothTol, "lm_head dw");
  EXPECT_GRAD(check_gradient(b.data(), db_added.data(), db.size(), kSmoothStep, f), kSmoothTol, "lm_head db");

  // Ignored rows: no loss, zero dh. Row losses add up to the total.
  double sum = 0;
  for (int64_t r = 0; r < N; ++r) {
    sum += row_loss[r] - 1.0;
    if (targets[r] < 0) {
      EXPECT_EQ(row_loss[r], 1.0f);
      for (int64_t c = 0; c < D; ++c) EXPECT_EQ(dh[r * D + c], 0.0f);
    }
  }
  EXPECT_NEAR(sum, total, 1e-5);
  // The loss is the mean-free cross-entropy of the explicit logits.
  double expected = 0;
  for (int64_t r = 0; r < N; ++r) {
    if (targets[r] < 0) continue;
    std::vector<double> logit(V);
    double mx = -1e30;
    for (int64_t v = 0; v < V; ++v) {
      logit[v] = b[v];
      for (int64_t c = 0; c < D; ++c) logit[v] += double(h[r * D + c]) * w[v * D + c];
      mx = std::max(mx, logit[v]);
    }
    double z = 0;
    for (double l : logit) z += std::exp(l - mx);
    expected += mx + std::log(z) - logit[targets[r]];
  }
  EXPECT_NEAR(total, expected, 1e-4);
  // The chunk size changes nothing but the memory used.
  std::vector<float> scratch_all(size_t(N * head_row_stride(V))), dh_all(N * D), dw_all(V * D, 0.0f), db_all(V, 0.0f);
  const double total_all =
      head_loss(*ops, h.data(), w.data(), b.data(), targets.data(), N, D, V, grad_scale, dh_all.data(), dw_all.data(),
                        db_all.data(), nullptr, scratch_all.data(), N);
  EXPECT_NEAR(total_all, total, 1e-6);
  EXPECT_LT(max_abs_diff(dh_all.data(), dh.data(), dh.size()), 1e-6);
  EXPECT_LT(max_abs_diff(dw_all.data(), dw_added.data(), dw.size()), 1e-5);
}

// The head splits the vocabulary into blocks of 2048 per thread; with V = 5000
// (two full blocks and a partial one) and chunks of 16 rows, fp32 and bf16
// (inputs rounded to bf16, logit gradients rounded before the products) match
// a double-precision reference of loss, dh, dw and db.
TEST(GradCheck, LmHeadAcrossVocabularyBlocksMatchesDoubleReference) {
  auto ops = test_support::make_cpu_reference();
  const int64_t N = 37, D = 24, V = 5000, chunk = 16;
  const float grad_scale = 0.5f;
  std::vector<int32_t> targets(N);
  for (int64_t r = 0; r < N; ++r) targets[r] = r % 9 == 4 ? -1 : int32_t((r * 977) % V);
  for (bool bf16 : {false, true}) {
    auto h = randn(N * D, 11), w = randn(V * D, 12, 0.3), b = randn(V, 13, 0.5);
    std::vector<uint16_t> h16(h.size()), w16(w.size());
    if (bf16) {
      for (size_t i = 0; i < h.size(); ++i) h[i] = bf16_to_float(h16[i] = float_to_bf16(h[i]));
      for (size_t i = 0; i < w.size(); ++i) w[i] = bf16_to_float(w16[i] = float_to_bf16(w[i]));
    }
    // Reference in double.
    std::vector<double> dh_ref(N * D, 0.0), dw_ref(V * D, 0.0), db_ref(V, 0.0);
    double loss_ref = 0;
    for (int64_t r = 0; r < N; ++r) {
      if (targets[r] < 0) continue;
      std::vector<double> p(V);
      double mx = -1e300, z = 0;
      for (int64_t v = 0; v < V; ++v) {
        p[v] = b[v];
        for (int64_t c = 0; c < D; ++c) p[v] += double(h[r * D + c]) * w[v * D + c];
        mx = std::max(mx, p[v]);
      }
      for (int64_t v = 0; v < V; ++v) z += std::exp(p[v] - mx);
      loss_ref += mx + std::log(z) - p[targets[r]];
      for (int64_t v = 0; v < V; ++v) {
        const double g = grad_scale * (std::exp(p[v] - mx) / z - (v == targets[r] ? 1.0 : 0.0));
        db_ref[v] += g;
        for (int64_t c = 0; c < D; ++c) {
          dh_ref[r * D + c] += g * w[v * D + c];
          dw_ref[v * D + c] += g * h[r * D + c];
        }
      }
    }
    std::vector<float> scratch(size_t(chunk * head_row_stride(V))), dh(N * D), dw(V * D, 0.0f), db(V, 0.0f);
    const TensorRef h_ref = bf16 ? TensorRef(h16.data(), DType::BF16) : TensorRef(h.data());
    const TensorRef w_ref = bf16 ? TensorRef(w16.data(), DType::BF16) : TensorRef(w.data());
    const double loss = head_loss(*ops, h_ref, w_ref, b.data(), targets.data(), N, D, V, grad_scale, dh.data(),
                                          dw.data(), db.data(), nullptr, scratch.data(), chunk);
    EXPECT_NEAR(loss, loss_ref, 1e-4 * loss_ref) << (bf16 ? "bf16" : "fp32");
    // Gradient error relative to each gradient's largest element: fp32 rounding,
    // or the bf16 rounding of the logit gradients (2^-9 relative each).
    const double rel = bf16 ? 1e-2 : 1e-4;
    auto check = [&](const std::vector<float>& got, const std::vector<double>& want, const char* what) {
      double scale = 0, err = 0;
      for (size_t i = 0; i < want.size(); ++i)
        scale = std::max(scale, std::abs(want[i])), err = std::max(err, std::abs(got[i] - want[i]));
      EXPECT_LT(err, rel * scale) << what << (bf16 ? " bf16" : " fp32") << " scale " << scale;
    };
    check(dh, dh_ref, "dh");
    check(dw, dw_ref, "dw");
    check(db, db_ref, "db");
  }
}

// ---- The whole model --------------------------------------------------------

ModelConfig tiny_config(double dropout) {
  ModelConfig c;
  c.vocab_size = 11;
  c.n_layer = 2;
  c.d_model = 8;
  c.n_head = 2;
  c.d_ff = 12;
  c.n_ctx = 5;
  c.embd_pdrop = c.resid_pdrop = dropout;
  c.layer_norm_eps = 1e-5;
  return c;
}

// Random parameters of a size that makes every layer nonlinear (the default
// init of 0.02 would leave the model nearly linear and its gradients tiny).
void randomize(Model& m, uint64_t seed) {
  for (size_t k = 0; k < m.layout().tensors.size(); ++k) {
    const ParamTensor& t = m.layout().tensors[k];
    const bool ln_weight = t.name.find("layernorm") != std::string::npos && t.name.find("weight") != std::string::npos;
    const auto v = randn(t.numel, seed * 1000 + k, t.is_matrix ? 0.3 : 0.2, ln_weight ? 1.0 : 0.0);
    m.params.upload(v.data(), t.numel, t.offset);
  }
}

struct Batch {
  int64_t B = 2, T = 5;
  std::vector<int32_t> tokens = {3, 7, 3, 0, 10, 5, 5, 1, 3, 9};
  std::vector<int32_t> targets = {7, 3, -1, 10, 2, 5, 1, 3, 9, -1};  // two ignored
};

// Whole-model differences use a smaller step than single ops: the stacked
// ReLUs have kinks, and with h = 1e-2 a perturbation of an embedding row
// (scaled by √D) moves some pre-activations across zero, which showed as
// errors of several percent; by h = 3e-3 the differences had converged to the
// analytic values (measured at h = 1e-1 ... 1e-4, README, "Gradient checks"). At this
// step the error is rounding noise of the fp32 loss, whatever the tensor:
// about one ulp of the loss divided by 2h, so the bound is
// kModelTol·scale + 2^-23·|L|/h (~9e-4 here for L ~ 24; measured noise errors
// stay below 4e-4), which also judges the key bias (true gradient 0: softmax
// ignores a per-row constant, so both sides are noise).
constexpr float kModelStep = 3e-3f;
constexpr double kModelTol = 1e-3;

// Runs the enclosing scope's OpenMP work on one thread: the finite-difference
// loops call the tiny model thousands of times, and on a loaded machine two
// threads meeting at each op's barrier made them 50x slower. The analytic
// gradients are computed before, with the default thread count.
struct SingleThreaded {
  int saved = omp_get_max_threads();
  SingleThreaded() { omp_set_num_threads(1); }
  ~SingleThreaded() { omp_set_num_threads(saved); }
};

// Checks every element of every parameter tensor of `model` against central
// differences of `loss` (a function of the parameters), given the analytic
// gradient buffer.
// The parameters are perturbed in a host copy, uploaded before each loss.
void check_every_parameter(Model& model, const std::vector<float>& analytic, const std::function<double()>& loss,
                           const std::string& what) {
  SingleThreaded one;
  // CTRL_GRADCHECK_STEP overrides the step, to reproduce the measurements above.
  const char* step_env = std::getenv("CTRL_GRADCHECK_STEP");
  const float step = step_env ? std::stof(step_env) : kModelStep;
  const double floor = std::abs(loss()) * std::ldexp(1.0, -23) / step;
  if (std::getenv("CTRL_GRADCHECK_VERBOSE"))
    std::printf("  step %g, loss %.4f, noise floor %.2e\n", step, loss(), floor);
  for (const auto& t : model.layout().tensors) {
    if (std::getenv("CTRL_GRADCHECK_VERBOSE")) std::printf("%s", t.name.c_str());
    std::vector<float> host = model.read_param(t.name);
    auto perturbed_loss = [&] {
      model.params.upload(host.data(), t.numel, t.offset);
      return loss();
    };
    const CheckResult r = check_gradient(host.data(), analytic.data() + t.offset, t.numel, step, perturbed_loss);
    model.params.upload(host.data(), t.numel, t.offset);  // restored
    EXPECT_GRAD_FLOOR(r, kModelTol, floor, what << " " << t.name);
  }
}

TEST(GradCheck, WholeModelEveryParameter) {
  auto ops = test_support::make_test_ops();
  Batch d;
  Model model(tiny_config(0.0), *ops, d.B);
  randomize(model, 1);
  model.zero_grads();
  const LossSum fb = model.forward_backward(d.tokens.data(), d.targets.data(), d.B, d.T, 1.0f, 0);
  EXPECT_EQ(fb.count, 8);
  const LossSum ev = model.evaluate(d.tokens.data(), d.targets.data(), d.B, d.T);
  EXPECT_NEAR(fb.sum, ev.sum, 1e-5);  // no dropout: training forward = evaluation forward
  const std::vector<float> analytic = model.grads.to_host();
  check_every_parameter(
      model, analytic, [&] { return model.evaluate(d.tokens.data(), d.targets.data(), d.B, d.T).sum; }, "model");
}

TEST(GradCheck, WholeModelWithDropoutUsesTheSameMasks) {
  auto ops = test_support::make_test_ops();
  Batch d;
  Model model(tiny_config(0.3), *ops, d.B);
  randomize(model, 2);
  const uint64_t seed = 7;
  model.zero_grads();
  const LossSum fb = model.forward_backward(d.tokens.data(), d.targets.data(), d.B, d.T, 1.0f, seed);
  const std::vector<float> analytic = model.grads.to_host();
  // grad_scale 0 gives the dropped-out loss and adds nothing to the gradients.
  auto loss = [&] { return model.forward_backward(d.tokens.data(), d.targets.data(), d.B, d.T, 0.0f, seed).sum; };
  EXPECT_EQ(loss(), fb.sum);  // masks are a pure function of the seed
  EXPECT_EQ(max_abs_diff(model.grads.to_host().data(), analytic.data(), analytic.size()), 0.0);
  // Dropout is really active: another seed and the evaluation differ.
  EXPECT_GT(std::abs(model.forward_backward(d.tokens.data(), d.targets.data(), d.B, d.T, 0.0f, seed + 1).sum - fb.sum),
            1e-3);
  EXPECT_GT(std::abs(model.evaluate(d.tokens.data(), d.targets.data(), d.B, d.T).sum - fb.sum), 1e-3);
  check_every_parameter(model, analytic, loss, "model+dropout");
}

TEST(GradCheck, ParameterGradientsAccumulateAcrossCalls) {
  auto ops = test_support::make_test_ops();
  Batch d;
  Model model(tiny_config(0.0), *ops, d.B);
  randomize(model, 3);
  model.zero_grads();
  model.forward_backward(d.tokens.data(), d.targets.data(), d.B, d.T, 0.5f, 0);
  const std::vector<float> once = model.grads.to_host();
  model.forward_backward(d.tokens.data(), d.targets.data(), d.B, d.T, 0.5f, 0);
  const std::vector<float> twice = model.grads.to_host();
  double scale = 0, err = 0;
  for (size_t i = 0; i < once.size(); ++i) {
    scale = std::max(scale, double(std::abs(once[i])));
    err = std::max(err, double(std::abs(twice[i] - 2.0f * once[i])));
  }
  EXPECT_GT(scale, 0.0);
  EXPECT_LT(err / scale, 1e-6);
}

TEST(GradCheck, MicroBatchesSumToTheConcatenatedBatch) {
  auto ops = test_support::make_test_ops();
  Batch d;
  Model model(tiny_config(0.0), *ops, d.B);
  randomize(model, 4);
  const float grad_scale = 1.0f / 8.0f;  // e.g. 1 / tokens of the global batch
  model.zero_grads();
  const LossSum whole = model.forward_backward(d.tokens.data(), d.targets.data(), d.B, d.T, grad_scale, 0);
  const std::vector<float> expected = model.grads.to_host();
  model.zero_grads();
  LossSum parts;
  for (int64_t b = 0; b < d.B; ++b) {
    const LossSum l =
        model.forward_backward(d.tokens.data() + b * d.T, d.targets.data() + b * d.T, 1, d.T, grad_scale, 0);
    parts.sum += l.sum;
    parts.count += l.count;
  }
  EXPECT_EQ(parts.count, whole.count);
  EXPECT_NEAR(parts.sum, whole.sum, 1e-5);
  const std::vector<float> summed = model.grads.to_host();
  for (const auto& t : model.layout().tensors) {
    double scale = 1e-6, err = 0;
    for (size_t i = t.offset; i < t.offset + t.numel; ++i) {
      scale = std::max(scale, double(std::abs(expected[i])));
      err = std::max(err, double(std::abs(summed[i] - expected[i])));
    }
    if (t.name.find("Wk.bias") != std::string::npos) {
      EXPECT_LT(err, 1e-6) << t.name;  // exact value 0
    } else {
      EXPECT_LT(err / scale, 1e-5) << t.name;
    }
  }
}

}  // namespace
