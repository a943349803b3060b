// The vectorized softmax primitives against their scalar references.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "core/safetensors.h"
#include "ops/cpu/vec_math.h"

using namespace ctrl;
using namespace ctrl::cpu;

TEST(VecMath, ExpMatchesStdExpAcrossTheFloatRange) {
  double worst = 0;
  for (float x0 = -100.0f; x0 < 88.0f; x0 += 0.37f) {
    float in[16], out[16];
    for (int i = 0; i < 16; ++i) in[i] = x0 + 0.0231f * float(i);
    exp16(in, out);
    for (int i = 0; i < 16; ++i) {
      const double ref = std::exp(double(in[i]));
      if (ref < 1e-37) continue;  // denormal range: only needs to be tiny
      worst = std::max(worst, std::abs(out[i] - ref) / ref);
    }
  }
  EXPECT_LT(worst, 4e-7);
  float big[16], out[16];
  for (int i = 0; i < 16; ++i) big[i] = i < 8 ? -1000.0f : 1000.0f;
  exp16(big, out);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_TRUE(std::isinf(out[15]));
}

TEST(VecMath, RowPrimitivesMatchTheReferenceForEveryLength) {
  for (int64_t n : {1, 5, 15, 16, 17, 31, 100, 32000}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[size_t(i)] = float(10.0 * random_normal(3, 4, uint64_t(i)));
    EXPECT_EQ(row_max(x.data(), n), row_max_reference(x.data(), n)) << n;
    std::vector<float> a = x, b = x;
    const float shift = row_max(x.data(), n);
    const double sa = exp_shift_sum(a.data(), n, shift), sb = exp_shift_sum_reference(b.data(), n, shift);
    EXPECT_NEAR(sa, sb, 1e-6 * sb) << n;
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(a[size_t(i)], b[size_t(i)], 1e-6 * (b[size_t(i)] + 1e-30)) << n;
    std::vector<float> c = x;
    row_scale(c.data(), n, 0.5f);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(c[size_t(i)], x[size_t(i)] * 0.5f);
  }
}

TEST(VecMath, Bf16ConversionMatchesTheScalarRounding) {
  std::vector<float> x;
  for (int i = 0; i < 1000; ++i) x.push_back(float(100.0 * random_normal(7, 8, uint64_t(i))));
  for (float special : {0.0f, -0.0f, 1.00390625f, 1.01171875f, 3.4e38f, INFINITY, -INFINITY}) x.push_back(special);
  std::vector<uint16_t> fast(x.size()), ref(x.size());
  to_bf16(x.data(), fast.data(), int64_t(x.size()));
  to_bf16_reference(x.data(), ref.data(), int64_t(x.size()));
  EXPECT_EQ(fast, ref);
  std::vector<float> back(x.size());
  from_bf16(fast.data(), back.data(), int64_t(x.size()));
  for (size_t i = 0; i < 1000; ++i) EXPECT_NEAR(back[i], x[i], std::abs(x[i]) * (1.0 / 256));
  // Denormal inputs may flush to zero (AVX512-BF16 does); they keep their sign.
  const float tiny = -1e-40f;
  uint16_t h;
  to_bf16(&tiny, &h, 1);
  EXPECT_TRUE(h == 0x8000 || h == float_to_bf16(tiny)) << h;
}
