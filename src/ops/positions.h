// The sinusoidal position table as Hugging Face CTRL computes it, shared by the
// backends (the CUDA backend uploads the host's table, so both add the same floats).
#pragma once
#include <cmath>
#include <cstdint>

namespace ctrl {

// Column k < D/2 is sin(pos / 10000^(2k/D)), column D/2 + k the cosine of the same angle.
inline float sinusoid(int64_t pos, int64_t col, int64_t D) {
  const int64_t half = D / 2;
  const int64_t k = col < half ? col : col - half;
  const double angle = double(pos) / std::pow(10000.0, 2.0 * double(k) / double(D));
  return float(col < half ? std::sin(angle) : std::cos(angle));
}

}  // namespace ctrl
