// Element-wise ops: ReLU, dropout, residual add, copy, scale, fill, Σx².
#include <omp.h>

#include <cmath>

#include <vector>

#include "ops/dropout_mask.h"
#include "ops/cpu/cpu_ops.h"

namespace ctrl::cpu {

void CpuOps::relu_forward(TensorRef x_ref, size_t n) {
  if (x_ref.is_16bit()) {  // a bf16 or fp16 value is negative exactly when its sign bit is set
    uint16_t* x = x_ref.u16();
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) x[i] = (x[i] & 0x8000) ? 0 : x[i];
    return;
  }
  float* x = x_ref.f32();
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void CpuOps::relu_backward(TensorRef dx_ref, TensorRef y_ref, size_t n) {
  if (dx_ref.dtype == DType::BF16) {
    CTRL_ASSERT(y_ref.is_16bit());
    uint16_t* dx = dx_ref.bf16();
    const uint16_t* y = y_ref.u16();
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) dx[i] = (y[i] != 0 && !(y[i] & 0x8000)) ? dx[i] : uint16_t(0);
    return;
  }
  float* dx = dx_ref.f32();
  if (y_ref.is_16bit()) {
    const uint16_t* y = y_ref.u16();
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) dx[i] = (y[i] != 0 && !(y[i] & 0x8000)) ? dx[i] : 0.0f;
    return;
  }
  const float* y = y_ref.f32();
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) dx[i] = y[i] > 0.0f ? dx[i] : 0.0f;
}

// The mask of ops/dropout_mask.h (the same function on every backend).
static inline float dropout_factor(const DropoutSpec& s, size_t i) {
  return ctrl::dropout_factor(s.p, s.seed, s.stream, s.first_index + i);
}

void CpuOps::dropout(TensorRef x_ref, size_t n, const DropoutSpec& spec) {
  if (spec.p <= 0) return;
  float* x = x_ref.f32();
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) x[i] *= dropout_factor(spec, i);
}

void CpuOps::residual_add(TensorRef y_ref, TensorRef x_ref, TensorRef b_ref, size_t n, const DropoutSpec& spec) {
  float* y = y_ref.f32();
  const float* x = x_ref.f32();
  const float* b = b_ref.f32();
  if (spec.p > 0) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) y[i] = x[i] + b[i] * dropout_factor(spec, i);
  } else {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) y[i] = x[i] + b[i];
  }
}

void CpuOps::copy(TensorRef dst, TensorRef src, size_t n) {
  if (dst.is_16bit() && src.dtype == DType::F32) return store_as(dst, src.f32(), n);
  if (dst.dtype == DType::F32 && src.is_16bit()) return load_as_f32(src, dst.f32(), n);
  float* d = dst.f32();
  const float* s = src.f32();
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) d[i] = s[i];
}

void CpuOps::sum_squares(const float* x, size_t n, double* out) {
  const int threads = omp_get_max_threads();
  std::vector<double> partial(size_t(threads), 0.0);
#pragma omp parallel num_threads(threads)
  {
    // kLanes independent sums, so that the loop runs at memory speed instead of
    // one double addition's latency per element (base's 110M gradients took 78
    // ms per step that way); lane l sums the elements i with i % kLanes == l.
    constexpr size_t kLanes = 16;
    double lanes[kLanes] = {};
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const size_t rows = n / kLanes, begin = rows * size_t(t) / size_t(nt), end = rows * size_t(t + 1) / size_t(nt);
    for (size_t r = begin; r < end; ++r) {
      const float* row = x + r * kLanes;
#pragma omp simd
      for (size_t l = 0; l < kLanes; ++l) lanes[l] += double(row[l]) * double(row[l]);
    }
    if (t == nt - 1)
      for (size_t i = rows * kLanes; i < n; ++i) lanes[i % kLanes] += double(x[i]) * double(x[i]);
    double acc = 0;
    for (double lane : lanes) acc += lane;
    partial[size_t(t)] = acc;
  }
  double total = 0;
  for (double p : partial) total += p;
  *out += total;
}

void CpuOps::clip_factor(const double* sum_squares, double loss_scale, double max_norm, float* factor) {
  const double norm = std::sqrt(*sum_squares) / loss_scale;
  double f = 1.0 / loss_scale;
  if (max_norm > 0 && max_norm / (norm + 1e-6) < 1.0) f *= max_norm / (norm + 1e-6);
  *factor = float(f);
}

void CpuOps::scale(float* x, size_t n, float factor) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) x[i] *= factor;
}

void CpuOps::fill(float* x, size_t n, float value) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) x[i] = value;
}

}  // namespace ctrl::cpu
