// Vectorized row primitives for softmax-like ops: AVX-512 when the build
// targets it, else AVX2 with FMA, else plain loops. The plain loops are the
// reference the tests compare the vector paths with (tests/test_vec_math.cpp).
#pragma once
#include <cstdint>

namespace ctrl::cpu {

// max_i x[i] (n >= 1).
float row_max(const float* x, int64_t n);
// x[i] = exp(x[i] - shift) in place; returns Σ x[i] after the update.
double exp_shift_sum(float* x, int64_t n, float shift);
// x[i] *= factor.
void row_scale(float* x, int64_t n, float factor);

// The scalar references of the three above.
float row_max_reference(const float* x, int64_t n);
double exp_shift_sum_reference(float* x, int64_t n, float shift);

// fp32 <-> bf16 (bit patterns), rounding to nearest even; n elements.
// to_bf16 may flush denormal inputs to (signed) zero, as AVX512-BF16 does.
void to_bf16(const float* in, uint16_t* out, int64_t n);
void from_bf16(const uint16_t* in, float* out, int64_t n);
void to_bf16_reference(const float* in, uint16_t* out, int64_t n);
// fp32 <-> IEEE fp16 (F16C instructions where the build has them).
void to_f16(const float* in, uint16_t* out, int64_t n);
void from_f16(const uint16_t* in, float* out, int64_t n);
// out[i] = in[i]'s fp16 rounding (inf beyond fp16's range; in may be out):
// an fp16 operand held in fp32, for the products this CPU runs in fp32.
void round_through_f16(const float* in, float* out, int64_t n);

// exp of 16 floats with the vector path (about 1 ulp over the float range
// of normal results; 0 below about -103 with AVX-512 and -86.6 with AVX2,
// inf above about 88.7), exposed for tests.
void exp16(const float* in, float* out);
bool have_avx512();

}  // namespace ctrl::cpu
