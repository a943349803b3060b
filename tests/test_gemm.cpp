// Tests of the CPU GEMM layer (src/ops/cpu/gemm.h) against the double-
// accumulating references: every transpose combination, odd sizes, alpha and
// beta, padded leading dimensions, determinism, calls from inside an
// OpenMP parallel region, and tiled products; the bf16 ones on both of its paths (oneDNN's bf16
// kernels and the widened fp32 products). Shape letters: C is M x N, reduced
// over K.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

#include "ops/cpu/gemm.h"

using namespace ctrl::cpu;

namespace {

// Deterministic values in [-1, 1).
std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& f : v) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    f = static_cast<float>((x >> 40) & 0xffffff) / 8388608.f - 1.f;
  }
  return v;
}

uint16_t to_bf16(float f) {  // round to nearest even
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = to_bf16(v[i]);
  return out;
}

std::vector<float> abs_of(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = std::fabs(v[i]);
  return out;
}

std::vector<uint16_t> abs_of(const std::vector<uint16_t>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = v[i] & 0x7fff;
  return out;
}

// Runs `body` once per bf16 path, naming the path in failures, and restores
// the process-wide default.
template <typename Body>
void on_both_bf16_paths(Body body) {
  const bool saved = bf16_widened();
  for (bool widened : {false, true}) {
    SCOPED_TRACE(widened ? "bf16 widened to fp32" : "bf16 through oneDNN's kernels");
    set_bf16_widened(widened);
    body();
    if (::testing::Test::HasFatalFailure()) break;
  }
  set_bf16_widened(saved);
}

struct Case {
  bool ta, tb;
  int64_t M, N, K;
  float alpha, beta;
  int64_t pad;  // extra columns in every leading dimension
};

// Runs one case through gemm (fp32 or bf16) and the reference, and checks
// every element of C against the reference within the fp32 rounding bound
// 2*K*eps*(|alpha|*|A|·|B| + |beta*C|) and that the padding is untouched.
template <typename T>
void check_case(const Case& c, bool bf16) {
  const int64_t ra = c.ta ? c.K : c.M, ca = c.ta ? c.M : c.K;
  const int64_t rb = c.tb ? c.N : c.K, cb = c.tb ? c.K : c.N;
  const int64_t lda = ca + c.pad, ldb = cb + c.pad, ldc = c.N + c.pad;
  const auto af = random_floats(ra * lda, c.M * 131 + c.K);
  const auto bf = random_floats(rb * ldb, c.N * 7 + c.K * 3);
  const auto c0 = random_floats(c.M * ldc, 99);
  std::vector<float> got = c0, want = c0, bound(c.M * ldc, 0.f);
  if constexpr (std::is_same_v<T, uint16_t>) {
    const auto a = to_bf16(af), b = to_bf16(bf);
    gemm_bf16(c.ta, c.tb, c.M, c.N, c.K, c.alpha, a.data(), lda, b.data(), ldb, c.beta, got.data(), ldc);
    gemm_bf16_reference(c.ta, c.tb, c.M, c.N, c.K, c.alpha, a.data(), lda, b.data(), ldb, c.beta, want.data(), ldc);
    const auto aa = abs_of(a), ab = abs_of(b);
    gemm_bf16_reference(c.ta, c.tb, c.M, c.N, c.K, 1.f, aa.data(), lda, ab.data(), ldb, 0.f, bound.data(), ldc);
  } else {
    gemm_f32(c.ta, c.tb, c.M, c.N, c.K, c.alpha, af.data(), lda, bf.data(), ldb, c.beta, got.data(), ldc);
    gemm_f32_reference(c.ta, c.tb, c.M, c.N, c.K, c.alpha, af.data(), lda, bf.data(), ldb, c.beta, want.data(), ldc);
    const auto aa = abs_of(af), ab = abs_of(bf);
    gemm_f32_reference(c.ta, c.tb, c.M, c.N, c.K, 1.f, aa.data(), lda, ab.data(), ldb, 0.f, bound.data(), ldc);
  }
  const float eps = std::numeric_limits<float>::epsilon();
  for (int64_t i = 0; i < c.M; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const int64_t at = i * ldc + j;
      if (j >= c.N) {  // padding: never written
        ASSERT_EQ(got[at], c0[at]) << "padding changed at " << i << "," << j;
        continue;
      }
      const float tol = 2.f * (c.K + 2) * eps * (std::fabs(c.alpha) * bound[at] + std::fabs(c.beta * c0[at])) + 1e-30f;
      ASSERT_NEAR(got[at], want[at], tol)
          << (bf16 ? "bf16" : "f32") << " ta=" << c.ta << " tb=" << c.tb << " M=" << c.M << " N=" << c.N << " K=" << c.K
          << " alpha=" << c.alpha << " beta=" << c.beta << " pad=" << c.pad << " at " << i << "," << j;
    }
  }
}

// Every transpose combination over odd sizes, cycling alpha, beta and padding.
std::vector<Case> all_cases() {
  const int64_t sizes[] = {1, 7, 33, 65};
  const float alphas[] = {1.f, 0.5f, -2.f};
  const float betas[] = {0.f, 1.f, -0.75f};
  std::vector<Case> cases;
  int n = 0;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t M : sizes)
        for (int64_t N : sizes)
          for (int64_t K : sizes) {
            cases.push_back({ta, tb, M, N, K, alphas[n % 3], betas[(n / 3) % 3], (n % 2) * 3});
            ++n;
          }
  return cases;
}

}  // namespace

TEST(Gemm, F32MatchesReferenceAllTransposesOddSizes) {
  for (const auto& c : all_cases()) {
    check_case<float>(c, false);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(Gemm, Bf16MatchesReferenceOnRoundedInputs) {
  on_both_bf16_paths([] {
    for (const auto& c : all_cases()) {
      check_case<uint16_t>(c, true);
      if (::testing::Test::HasFatalFailure()) return;
    }
  });
}

TEST(Gemm, TrainingShapesMatchReference) {
  // The transposes the engine uses, at a size where the library blocks and threads.
  check_case<float>({false, true, 130, 96, 384, 1.f, 0.f, 0}, false);   // y = x·Wᵀ
  // y = x·Wᵀ on both of its fp32 routes (gemm.cpp, sgemm_splits_poorly):
  // oneDNN's matmul primitive for few rows or a long reduction, with alpha,
  // beta and padding; dnnl_sgemm for many rows and for one token's row.
  check_case<float>({false, true, 200, 96, 384, 0.5f, 1.f, 3}, false);
  check_case<float>({false, true, 1030, 64, 96, 1.f, 1.f, 0}, false);
  check_case<float>({false, true, 1030, 128, 64, 1.f, 0.f, 0}, false);
  check_case<float>({false, true, 8, 2048, 384, 1.f, 1.f, 0}, false);
  check_case<float>({false, false, 130, 384, 96, 1.f, 0.f, 0}, false);  // dx = dy·W
  check_case<float>({true, false, 96, 384, 130, 1.f, 1.f, 0}, false);   // dW += dyᵀ·x
  on_both_bf16_paths([] {
    check_case<uint16_t>({false, true, 130, 96, 384, 1.f, 0.f, 0}, true);
    check_case<uint16_t>({false, false, 130, 384, 96, 1.f, 0.f, 3}, true);
    check_case<uint16_t>({true, false, 96, 384, 130, 1.f, 1.f, 5}, true);
    // Operands above the size whose widening is split over the threads.
    check_case<uint16_t>({false, true, 300, 260, 384, 1.f, 0.f, 1}, true);
  });
}

// The fused bias and bf16 output: C = op(A)·op(B) + bias, stored as fp32 or
// rounded once to bf16, against the reference plus the bias.
TEST(Gemm, Bf16WithBiasAndBf16OutputMatchesReference) {
  on_both_bf16_paths([] {
    // The second size is above the widened path's threshold for splitting C's rows over the threads.
    for (const auto& [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{70, 45, 33}, {300, 260, 17}})
      for (bool tb : {false, true})
        for (bool with_bias : {false, true})
          for (bool c_bf16 : {false, true}) {
            const auto a = to_bf16(random_floats(M * K, 21)), b = to_bf16(random_floats(K * N, 22));
            const auto bias = random_floats(N, 23);
            std::vector<float> want(M * N), bound(M * N);
            gemm_bf16_reference(false, tb, M, N, K, 1.f, a.data(), K, b.data(), tb ? K : N, 0.f, want.data(), N);
            const auto aa = abs_of(a), ab = abs_of(b);
            gemm_bf16_reference(false, tb, M, N, K, 1.f, aa.data(), K, ab.data(), tb ? K : N, 0.f, bound.data(), N);
            std::vector<float> got32(M * N, std::numeric_limits<float>::quiet_NaN());
            std::vector<uint16_t> got16(M * N, 0xffff);
            void* out = c_bf16 ? static_cast<void*>(got16.data()) : static_cast<void*>(got32.data());
            gemm_bf16_bias(false, tb, M, N, K, a.data(), K, b.data(), tb ? K : N, with_bias ? bias.data() : nullptr,
                           out, c_bf16, N);
            for (int64_t i = 0; i < M * N; ++i) {
              const float expected = want[i] + (with_bias ? bias[i % N] : 0.f);
              float got = got32[i];
              if (c_bf16) {
                const uint32_t u = uint32_t(got16[i]) << 16;
                std::memcpy(&got, &u, 4);
              }
              // fp32 accumulation error, plus half a bf16 ulp when the output is rounded.
              const float tol = 2.f * (K + 2) * std::numeric_limits<float>::epsilon() * (bound[i] + 1.f) +
                                (c_bf16 ? std::fabs(expected) / 256.f : 0.f) + 1e-30f;
              ASSERT_NEAR(got, expected, tol)
                  << "M=" << M << " tb=" << tb << " bias=" << with_bias << " bf16 out=" << c_bf16 << " at " << i;
            }
          }
  });
}

TEST(Gemm, BetaZeroOverwritesNaN) {
  const int64_t M = 9, N = 11, K = 5;
  const auto a = random_floats(M * K, 1), b = random_floats(K * N, 2);
  std::vector<float> c(M * N, std::numeric_limits<float>::quiet_NaN()), want(M * N);
  gemm_f32(false, false, M, N, K, 1.f, a.data(), K, b.data(), N, 0.f, c.data(), N);
  gemm_f32_reference(false, false, M, N, K, 1.f, a.data(), K, b.data(), N, 0.f, want.data(), N);
  for (int64_t i = 0; i < M * N; ++i) ASSERT_NEAR(c[i], want[i], 1e-5f) << i;
  on_both_bf16_paths([&] {
    std::vector<float> c16(M * N, std::numeric_limits<float>::quiet_NaN());
    const auto a16 = to_bf16(a), b16 = to_bf16(b);
    gemm_bf16(false, false, M, N, K, 1.f, a16.data(), K, b16.data(), N, 0.f, c16.data(), N);
    for (int64_t i = 0; i < M * N; ++i) ASSERT_FALSE(std::isnan(c16[i])) << i;
  });
}

TEST(Gemm, EmptyDimensions) {
  std::vector<float> c = {1.f, 2.f, 3.f, 4.f};
  const float a = 5.f, b = 6.f;
  gemm_f32(false, false, 2, 2, 0, 1.f, &a, 1, &b, 2, 0.5f, c.data(), 2);  // K = 0: C = beta*C
  EXPECT_EQ(c, (std::vector<float>{0.5f, 1.f, 1.5f, 2.f}));
  gemm_f32(false, false, 0, 2, 3, 1.f, &a, 3, &b, 2, 0.f, c.data(), 2);  // M = 0: nothing
  EXPECT_EQ(c, (std::vector<float>{0.5f, 1.f, 1.5f, 2.f}));
  gemm_f32(false, false, 2, 2, 0, 1.f, &a, 1, &b, 2, 0.f, c.data(), 2);  // beta = 0: zeros
  EXPECT_EQ(c, (std::vector<float>(4, 0.f)));
}

// Same inputs twice with all threads → bit-identical outputs, for shapes where a
// library might split K across threads (small M, N, long K) and a large one.
TEST(Gemm, DeterministicForFixedThreadCount) {
  struct S {
    bool ta, tb;
    int64_t M, N, K;
  };
  for (const S s : {S{false, false, 16, 16, 8192}, S{true, false, 384, 64, 2048}, S{false, true, 512, 384, 384},
                    S{false, true, 1030, 128, 64}}) {
    const int64_t ra = s.ta ? s.K : s.M, ca = s.ta ? s.M : s.K;
    const int64_t rb = s.tb ? s.N : s.K, cb = s.tb ? s.K : s.N;
    const auto a = random_floats(ra * ca, 3), b = random_floats(rb * cb, 4);
    const auto a16 = to_bf16(a), b16 = to_bf16(b);
    for (int path : {0, 1, 2}) {  // fp32, bf16 through oneDNN's kernels, bf16 widened
      const bool bf16 = path > 0;
      set_bf16_widened(path == 2);
      std::vector<float> c1(s.M * s.N, 0.25f), c2 = c1;
      for (auto* c : {&c1, &c2}) {
        if (bf16)
          gemm_bf16(s.ta, s.tb, s.M, s.N, s.K, 1.f, a16.data(), ca, b16.data(), cb, 1.f, c->data(), s.N);
        else
          gemm_f32(s.ta, s.tb, s.M, s.N, s.K, 1.f, a.data(), ca, b.data(), cb, 1.f, c->data(), s.N);
      }
      set_bf16_widened(false);
      ASSERT_EQ(0, std::memcmp(c1.data(), c2.data(), c1.size() * sizeof(float)))
          << (path == 0   ? "f32"
              : path == 1 ? "bf16"
                          : "bf16 widened")
          << " M=" << s.M << " N=" << s.N << " K=" << s.K;
    }
  }
}

// Attention-style use: every thread of a parallel region runs its own heads
// concurrently (different shapes, so primitive creation races too). Each head
// must equal the same call made outside the region, bit for bit.
TEST(Gemm, InsideParallelRegionMatchesOutside) {
  const int heads = 12;
  const int64_t T = 64, hd = 16;
  auto shape_n = [&](int h) { return T + (h % 3); };  // three distinct shapes
  std::vector<std::vector<float>> q(heads), k(heads), inside(heads), outside(heads);
  std::vector<std::vector<uint16_t>> q16(heads), k16(heads);
  std::vector<std::vector<float>> inside16(heads), outside16(heads);
  for (int h = 0; h < heads; ++h) {
    q[h] = random_floats(T * hd, 10 + h);
    k[h] = random_floats(shape_n(h) * hd, 50 + h);
    q16[h] = to_bf16(q[h]);
    k16[h] = to_bf16(k[h]);
    inside[h].assign(T * shape_n(h), 0.f);
    inside16[h] = outside16[h] = outside[h] = inside[h];
  }
  auto head = [&](int h, std::vector<float>& c, std::vector<float>& c16) {  // scores = q·kᵀ
    gemm_f32(false, true, T, shape_n(h), hd, 0.25f, q[h].data(), hd, k[h].data(), hd, 0.f, c.data(), shape_n(h));
    gemm_bf16(false, true, T, shape_n(h), hd, 0.25f, q16[h].data(), hd, k16[h].data(), hd, 0.f, c16.data(), shape_n(h));
  };
  on_both_bf16_paths([&] {
    for (int h = 0; h < heads; ++h) head(h, outside[h], outside16[h]);
#pragma omp parallel for schedule(dynamic) num_threads(2)
    for (int h = 0; h < heads; ++h) head(h, inside[h], inside16[h]);
    for (int h = 0; h < heads; ++h) {
      ASSERT_EQ(inside[h], outside[h]) << "f32 head " << h;
      ASSERT_EQ(inside16[h], outside16[h]) << "bf16 head " << h;
      std::vector<float> want(T * shape_n(h));
      gemm_f32_reference(false, true, T, shape_n(h), hd, 0.25f, q[h].data(), hd, k[h].data(), hd, 0.f, want.data(),
                         shape_n(h));
      for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(inside[h][i], want[i], 1e-5f) << h << " " << i;
    }
  });
}

// Tiled products (the thread adapter's mode above the CPUs): C cut into
// 128 x 512 tiles handed to the threads one at a time. Shapes with edge tiles
// in both directions, every transpose, alpha, beta and padding, against the
// reference; the fused bias and bf16 output against the untiled product; and
// the same bits at 2 and 3 threads, since the tiles, not the threads, fix the
// order of the sums.
TEST(Gemm, TiledProductsMatchTheReferenceAndKeepTheirBitsAtAnyThreadCount) {
  struct Tiled {
    int threads = omp_get_max_threads();
    Tiled() { set_gemm_tiled(true); }
    ~Tiled() { set_gemm_tiled(false), omp_set_num_threads(threads); }
  } tiled;
  omp_set_num_threads(2);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Case c{ta, tb, 300, 1100, 40, -0.5f, ta == tb ? 1.f : 0.f, ta ? 3 : 0};  // 3 x 3 tiles, 13M products
      check_case<float>(c, false);
      on_both_bf16_paths([&] { check_case<uint16_t>(c, true); });
      if (::testing::Test::HasFatalFailure()) return;
    }
  const int64_t M = 260, N = 1030, K = 48;
  const auto a = random_floats(M * K, 31), b = random_floats(N * K, 32), bias = random_floats(N, 33);
  const auto a16 = to_bf16(a), b16 = to_bf16(b);
  on_both_bf16_paths([&] {
    for (bool c_bf16 : {false, true}) {
      std::vector<uint16_t> out16[2];
      std::vector<float> out32[2];
      for (int t : {0, 1}) {  // untiled, tiled
        set_gemm_tiled(t == 1);
        out16[t].assign(M * N, 0xffff), out32[t].assign(M * N, -1.f);
        void* out = c_bf16 ? static_cast<void*>(out16[t].data()) : static_cast<void*>(out32[t].data());
        gemm_bf16_bias(false, true, M, N, K, a16.data(), K, b16.data(), K, bias.data(), out, c_bf16, N);
      }
      for (int64_t i = 0; i < M * N; ++i) {
        float want = out32[0][i], got = out32[1][i];
        if (c_bf16) {  // tiled and untiled sums differ in the last place, so their bf16 roundings by one ulp at most
          ASSERT_LE(std::abs(int(out16[0][i]) - int(out16[1][i])), 1) << "bf16 out at " << i;
          continue;
        }
        ASSERT_NEAR(got, want, 1e-5f * (std::fabs(want) + 1.f)) << "fp32 out at " << i;
      }
    }
  });
  for (int path : {0, 1, 2}) {  // fp32, bf16 through oneDNN's kernels, bf16 widened
    set_bf16_widened(path == 2);
    std::vector<float> at[2];
    for (int threads : {2, 3}) {
      omp_set_num_threads(threads);
      auto& c = at[threads - 2];
      c.assign(M * N, 0.5f);
      if (path == 0)
        gemm_f32(false, true, M, N, K, 1.f, a.data(), K, b.data(), K, 1.f, c.data(), N);
      else
        gemm_bf16(false, true, M, N, K, 1.f, a16.data(), K, b16.data(), K, 1.f, c.data(), N);
    }
    set_bf16_widened(false);
    ASSERT_EQ(0, std::memcmp(at[0].data(), at[1].data(), at[0].size() * sizeof(float))) << "path " << path;
  }
}

TEST(Gemm, PeakMeasurementIsPositive) {
  for (bool bf16 : {false, true}) {
    const double g = measure_gemm_peak_gflops(bf16, 0.01);
    EXPECT_TRUE(std::isfinite(g) && g > 0) << g;
  }
}
