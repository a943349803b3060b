// A 64-byte-aligned, zero-initialized array of floats that owns its memory.
// The engine's parameters, gradients, optimizer state and activations are
// each one of these, sized from the layout tables.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>

namespace ctrl {

class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t n) : n_(n) {
    if (n == 0) return;
    const size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
    data_ = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (!data_) throw std::bad_alloc();
    std::memset(data_, 0, bytes);
  }
  ~Buffer() { std::free(data_); }
  Buffer(Buffer&& o) noexcept : data_(o.data_), n_(o.n_) { o.data_ = nullptr, o.n_ = 0; }
  Buffer& operator=(Buffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(n_, o.n_);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return n_; }
  float& operator[](size_t i) { return data_[i]; }
  float operator[](size_t i) const { return data_[i]; }
  void zero() { if (data_) std::memset(data_, 0, n_ * sizeof(float)); }

 private:
  float* data_ = nullptr;
  size_t n_ = 0;
};

}  // namespace ctrl
