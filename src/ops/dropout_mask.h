// The dropout mask that every backend applies: a pure function of (seed,
// stream, global element index) through core/rng.h's counter bits, so CPU and
// GPU runs with dropout on zero the same elements and scale the others alike.
// One definition for host and device code (nvcc compiles it __host__ __device__).
#pragma once
#include <cstdint>

#include "core/rng.h"

namespace ctrl {

// Kept with probability 1-p and scaled by 1/(1-p), as PyTorch's Dropout; 0 when dropped.
CTRL_HOST_DEVICE inline float dropout_factor(float p, uint64_t seed, uint64_t stream, uint64_t index) {
  return random_uniform(seed, stream, index) < p ? 0.0f : 1.0f / (1.0f - p);
}

}  // namespace ctrl
