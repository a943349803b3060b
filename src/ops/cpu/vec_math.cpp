#include "ops/cpu/vec_math.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/safetensors.h"

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

namespace ctrl::cpu {

float row_max_reference(const float* x, int64_t n) {
  float m = x[0];
  for (int64_t i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

double exp_shift_sum_reference(float* x, int64_t n, float shift) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - shift));
  return sum;
}

void to_bf16_reference(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = float_to_bf16(in[i]);
}

void from_bf16(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = uint32_t(in[i]) << 16;
    std::memcpy(out + i, &u, 4);
  }
}

#ifdef __AVX512F__
void to_f16(const float* in, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) out[i] = float_to_f16(in[i]);
}
void from_f16(const uint16_t* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i))));
  for (; i < n; ++i) out[i] = f16_to_float(in[i]);
}
#else
void to_f16(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = float_to_f16(in[i]);
}
void from_f16(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = f16_to_float(in[i]);
}
#endif

void round_through_f16(const float* in, float* out, int64_t n) {
  uint16_t rounded[256];
  for (int64_t i0 = 0; i0 < n; i0 += 256) {
    const int64_t len = std::min<int64_t>(256, n - i0);
    to_f16(in + i0, rounded, len);
    from_f16(rounded, out + i0, len);
  }
}

#if defined(__AVX512BF16__) && defined(__AVX512VL__)
void to_bf16(const float* in, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(in + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), reinterpret_cast<const __m256i&>(h));
  }
  to_bf16_reference(in + i, out + i, n - i);
}
#else
void to_bf16(const float* in, uint16_t* out, int64_t n) { to_bf16_reference(in, out, n); }
#endif

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
// The vector exps: exp(x) = 2^k · exp(r), k = round(x · log2 e), r = x − k·ln 2
// (ln 2 in two parts), exp(r) by its degree-6 Taylor polynomial on
// |r| <= ln2/2, highest coefficient first (Horner).
constexpr float kLog2e = 1.44269504088896341f, kLn2High = 0.693359375f, kLn2Low = -2.12194440e-4f;
constexpr float kExpTaylor[7] = {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};
#endif

#ifdef __AVX512F__

bool have_avx512() { return true; }

// 2^k is applied by vscalef.
static inline __m512 exp_ps(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(88.8f));
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(kLn2High), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(kLn2Low), r);
  __m512 p = _mm512_set1_ps(kExpTaylor[0]);
  for (int i = 1; i < 7; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpTaylor[i]));
  return _mm512_scalef_ps(p, k);
}

void exp16(const float* in, float* out) { _mm512_storeu_ps(out, exp_ps(_mm512_loadu_ps(in))); }

float row_max(const float* x, int64_t n) {
  if (n < 16) return row_max_reference(x, n);
  __m512 m = _mm512_loadu_ps(x);
  int64_t i = 16;
  for (; i + 16 <= n; i += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(x + i));
  if (i < n) m = _mm512_max_ps(m, _mm512_mask_loadu_ps(m, __mmask16((1u << (n - i)) - 1), x + i));
  return _mm512_reduce_max_ps(m);
}

double exp_shift_sum(float* x, int64_t n, float shift) {
  const __m512 s = _mm512_set1_ps(shift);
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), s));
    _mm512_storeu_ps(x + i, e);
    acc = _mm512_add_ps(acc, e);
  }
  if (i < n) {
    const __mmask16 mask = __mmask16((1u << (n - i)) - 1);
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, x + i), s));
    _mm512_mask_storeu_ps(x + i, mask, e);
    acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(mask, e));
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc);
  double sum = 0;
  for (float l : lanes) sum += l;
  return sum;
}

void row_scale(float* x, int64_t n, float factor) {
  const __m512 f = _mm512_set1_ps(factor);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), f));
  for (; i < n; ++i) x[i] *= factor;
}

#elif defined(__AVX2__) && defined(__FMA__)

// AVX2 (Zen 2/3, most laptops), 8 lanes at a time. Without vscalef, 2^k is built in the
// exponent bits as 2^(k−1) (k ≤ 128 stays finite) times 2p; inputs below
// −86.6, where 2^(k−1) would leave the normal range, give 0, and inputs
// above log(FLT_MAX) give inf.
static inline __m256 exp_ps(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-86.6f), hi = _mm256_set1_ps(88.7228f);
  const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ), overflow = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  const __m256 k =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(kLn2High), x);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(kLn2Low), r);
  __m256 p = _mm256_set1_ps(kExpTaylor[0]);
  for (int i = 1; i < 7; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpTaylor[i]));
  const __m256i half_scale = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(126)), 23);
  const __m256 y = _mm256_mul_ps(_mm256_add_ps(p, p), _mm256_castsi256_ps(half_scale));
  return _mm256_andnot_ps(underflow, _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), overflow));
}

// Lanes [0, n) set, for the tail of a row (0 <= n < 8).
static inline __m256i tail_mask(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

bool have_avx512() { return false; }

void exp16(const float* in, float* out) {
  _mm256_storeu_ps(out, exp_ps(_mm256_loadu_ps(in)));
  _mm256_storeu_ps(out + 8, exp_ps(_mm256_loadu_ps(in + 8)));
}

float row_max(const float* x, int64_t n) {
  if (n < 8) return row_max_reference(x, n);
  __m256 m = _mm256_loadu_ps(x);
  int64_t i = 8;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float best = lanes[0];
  for (float l : lanes) best = l > best ? l : best;
  for (; i < n; ++i) best = x[i] > best ? x[i] : best;
  return best;
}

// Four independent accumulators: the adds do not wait on each other, and
// each lane sums a quarter as many terms (better rounding for V = 32000).
double exp_shift_sum(float* x, int64_t n, float shift) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int a = 0; a < 4; ++a) {
      const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8 * a), s));
      _mm256_storeu_ps(x + i + 8 * a, e);
      acc[a] = _mm256_add_ps(acc[a], e);
    }
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
    _mm256_storeu_ps(x + i, e);
    acc[0] = _mm256_add_ps(acc[0], e);
  }
  if (i < n) {
    const __m256i mask = tail_mask(n - i);
    const __m256 e =
        _mm256_and_ps(exp_ps(_mm256_sub_ps(_mm256_maskload_ps(x + i, mask), s)), _mm256_castsi256_ps(mask));
    _mm256_maskstore_ps(x + i, mask, e);
    acc[1] = _mm256_add_ps(acc[1], e);
  }
  alignas(32) float lanes[32];
  for (int a = 0; a < 4; ++a) _mm256_store_ps(lanes + 8 * a, acc[a]);
  double sum = 0;
  for (float l : lanes) sum += l;
  return sum;
}

#else

bool have_avx512() { return false; }
void exp16(const float* in, float* out) {
  for (int i = 0; i < 16; ++i) out[i] = std::exp(in[i]);
}
float row_max(const float* x, int64_t n) { return row_max_reference(x, n); }
double exp_shift_sum(float* x, int64_t n, float shift) { return exp_shift_sum_reference(x, n, shift); }

#endif

#ifndef __AVX512F__
// AVX2 and plain builds: the compiler vectorizes this loop by itself.
void row_scale(float* x, int64_t n, float factor) {
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}
#endif

}  // namespace ctrl::cpu
