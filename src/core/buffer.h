// A 64-byte-aligned, zero-initialized array that owns its memory. The
// engine's parameters, gradients, optimizer state and activations are each a
// Buffer of floats, sized from the layout tables; the 16-bit weight copy of
// mixed precision is a Buffer16.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace ctrl {

template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t n) : n_(n) {
    if (n == 0) return;
    const size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
    data_ = static_cast<T*>(std::aligned_alloc(64, bytes));
    if (!data_) throw std::bad_alloc();
    std::memset(data_, 0, bytes);
  }
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(AlignedBuffer&& o) noexcept : data_(o.data_), n_(o.n_) { o.data_ = nullptr, o.n_ = 0; }
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(n_, o.n_);
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return data_[i]; }
  T operator[](size_t i) const { return data_[i]; }
  void zero() {
    if (data_) std::memset(data_, 0, n_ * sizeof(T));
  }

 private:
  T* data_ = nullptr;
  size_t n_ = 0;
};

using Buffer = AlignedBuffer<float>;
using Buffer16 = AlignedBuffer<uint16_t>;  // bf16 or fp16 bit patterns

}  // namespace ctrl
