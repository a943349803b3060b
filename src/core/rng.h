// Counter-based randomness: every random number is a pure function of
// (seed, stream, index), so results do not depend on thread count or order,
// and resuming needs only the step counter, not a generator state.
#pragma once
#include <cmath>
#include <cstdint>

// The counter functions below also compile as CUDA device code (the CUDA
// backend's dropout masks are these same bits), so they are marked
// __host__ __device__ when nvcc compiles them.
#if defined(__CUDACC__)
#define CTRL_HOST_DEVICE __host__ __device__
#else
#define CTRL_HOST_DEVICE
#endif

namespace ctrl {

CTRL_HOST_DEVICE inline uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

CTRL_HOST_DEVICE inline uint64_t random_bits(uint64_t seed, uint64_t stream, uint64_t index) {
  return mix64(mix64(seed ^ mix64(stream)) + index);
}

// Uniform in [0, 1) with 24 random bits (exactly representable as float).
CTRL_HOST_DEVICE inline float random_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return float(random_bits(seed, stream, index) >> 40) * (1.0f / 16777216.0f);
}

// Standard normal from two uniforms (Box-Muller), deterministic per index.
inline double random_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t bits = random_bits(seed, stream, index);
  const double u1 = (double((bits >> 11) & ((1ull << 26) - 1)) + 0.5) / double(1ull << 26);
  const double u2 = double(bits >> 37) / double(1ull << 27);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// A small sequential generator for sampling loops; its state is one counter.
struct CounterRng {
  uint64_t seed, stream, counter = 0;
  uint64_t next() { return random_bits(seed, stream, counter++); }
  double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }
};

}  // namespace ctrl
