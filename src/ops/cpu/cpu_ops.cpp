#include "ops/cpu/cpu_ops.h"

#include <omp.h>

#include <cmath>

namespace ctrl {

std::unique_ptr<Ops> make_cpu_ops() { return std::make_unique<cpu::CpuOps>(); }

namespace cpu {

void add_column_sums(float* out, const float* x, int64_t rows, int64_t cols) {
  // Columns are split across threads; each column sums its rows in order.
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < cols; c0 += 64) {
    const int64_t c1 = std::min(cols, c0 + 64);
    float acc[64] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = x + r * cols;
      for (int64_t c = c0; c < c1; ++c) acc[c - c0] += row[c];
    }
    for (int64_t c = c0; c < c1; ++c) out[c] += acc[c - c0];
  }
}

float sinusoid(int64_t pos, int64_t col, int64_t D) {
  const int64_t half = D / 2;
  const int64_t k = col < half ? col : col - half;
  const double angle = double(pos) / std::pow(10000.0, 2.0 * double(k) / double(D));
  return float(col < half ? std::sin(angle) : std::cos(angle));
}

}  // namespace cpu
}  // namespace ctrl
