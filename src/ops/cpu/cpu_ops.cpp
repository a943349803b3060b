#include "ops/cpu/cpu_ops.h"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>

#include "core/sysinfo.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/vec_math.h"

namespace ctrl {

namespace cpu {

CpuOps::CpuOps(int threads) {
  if (threads > 0)
    omp_set_num_threads(threads);
  else if (!std::getenv("OMP_NUM_THREADS"))
    adapter_ = std::make_unique<ThreadAdapter>(omp_get_max_threads());
  set_gemm_tiled(omp_get_max_threads() > usable_cpus());
}

CpuOps::~CpuOps() = default;

std::string CpuOps::between_steps() { return adapter_ ? adapter_->between_steps() : ""; }
std::string CpuOps::between_tokens() { return adapter_ ? adapter_->between_tokens() : ""; }

int CpuOps::threads() const { return omp_get_max_threads(); }

double CpuOps::measure_peak_gflops(bool bf16, double seconds) { return measure_gemm_peak_gflops(bf16, seconds); }

void* CpuOps::allocate(size_t bytes, const char*) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return p;
}

void CpuOps::release(void* p) { std::free(p); }

void CpuOps::upload(void* dst, const void* host_src, size_t bytes) { std::memcpy(dst, host_src, bytes); }

void CpuOps::download(void* host_dst, const void* src, size_t bytes) { std::memcpy(host_dst, src, bytes); }

namespace {
// Columns are split across threads; each column sums its rows in order.
template <typename T, typename Load>
void column_sums(float* out, const T* x, int64_t rows, int64_t cols, Load load) {
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < cols; c0 += 64) {
    const int64_t c1 = std::min(cols, c0 + 64);
    float acc[64] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = x + r * cols;
      for (int64_t c = c0; c < c1; ++c) acc[c - c0] += load(row[c]);
    }
    for (int64_t c = c0; c < c1; ++c) out[c] += acc[c - c0];
  }
}
}  // namespace

void add_column_sums(float* out, const float* x, int64_t rows, int64_t cols) {
  column_sums(out, x, rows, cols, [](float v) { return v; });
}

void add_column_sums(float* out, const uint16_t* x_bf16, int64_t rows, int64_t cols) {
  // Inline widening (a shift), so the loop vectorizes.
  column_sums(out, x_bf16, rows, cols, [](uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); });
}

void convert_to_bf16(const float* in, uint16_t* out, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i0 = 0; i0 < n; i0 += 4096) to_bf16(in + i0, out + i0, int64_t(std::min<size_t>(4096, n - i0)));
}

void convert_from_bf16(const uint16_t* in, float* out, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i0 = 0; i0 < n; i0 += 4096) from_bf16(in + i0, out + i0, int64_t(std::min<size_t>(4096, n - i0)));
}

void store_as(TensorRef out, const float* in, size_t n) {
  if (out.dtype == DType::BF16) return convert_to_bf16(in, out.bf16(), n);
  if (out.dtype == DType::F16) {
    uint16_t* o = out.u16();
#pragma omp parallel for schedule(static)
    for (size_t i0 = 0; i0 < n; i0 += 4096) to_f16(in + i0, o + i0, int64_t(std::min<size_t>(4096, n - i0)));
    return;
  }
  if (out.f32() != in) std::copy(in, in + n, out.f32());
}

void load_as_f32(TensorRef in, float* out, size_t n) {
  if (in.dtype == DType::BF16) return convert_from_bf16(in.bf16(), out, n);
  if (in.dtype == DType::F16) {
    const uint16_t* x = in.u16();
#pragma omp parallel for schedule(static)
    for (size_t i0 = 0; i0 < n; i0 += 4096) from_f16(x + i0, out + i0, int64_t(std::min<size_t>(4096, n - i0)));
    return;
  }
  std::copy(in.f32(), in.f32() + n, out);
}

const float* CpuOps::widened(TensorRef t, size_t n, int slot) {
  if (t.dtype == DType::F32) return t.f32();
  float* out = widened_scratch(n, slot);
  load_as_f32(t, out, n);
  return out;
}

float* CpuOps::widened_scratch(size_t n, int slot) {
  auto& buffer = widened_[slot];
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

const float* CpuOps::rounded_through(DType low, const float* x, size_t n, int slot) {
  CTRL_ASSERT(low == DType::BF16 || low == DType::F16);
  float* out = widened_scratch(n, slot);
#pragma omp parallel for schedule(static)
  for (size_t i0 = 0; i0 < n; i0 += 4096) {
    const int64_t len = int64_t(std::min<size_t>(4096, n - i0));
    if (low == DType::F16) {
      round_through_f16(x + i0, out + i0, len);
      continue;
    }
    uint16_t rounded[4096];
    to_bf16(x + i0, rounded, len);
    from_bf16(rounded, out + i0, len);
  }
  return out;
}

uint16_t* CpuOps::bf16_scratch(size_t n) {
  if (bf16_scratch_.size() < n) bf16_scratch_.resize(n);
  return bf16_scratch_.data();
}

std::string CpuOps::precision_note(DType low) const {
  if (low == DType::F16)
    return "this CPU has no fp16 products: fp16 operands are widened to fp32 (fp16 storage, rounding and "
           "overflow are real; the speed is fp32's)";
  if (low == DType::BF16 && bf16_path() == "emulated")
    return "this CPU has no AVX512-BF16 or AMX: oneDNN emulates the bf16 products (same results, slower than "
           "fp32; --set train.cpu_bf16=widened or train.precision=fp32 is faster here)";
  return "";
}

std::string CpuOps::bf16_path() const {
  if (bf16_widened() || !onednn_has_bf16_matmul()) return "widened";
  return cpu_has_native_bf16() ? "native" : "emulated";
}

Ops::Bf16Choice CpuOps::choose_bf16_products(const std::string& setting, double seconds) {
  CTRL_ASSERT(setting == "auto" || setting == "native" || setting == "widened");
  static std::optional<bool> measured_choice;  // auto's answer, once per process
  Bf16Choice c;
  if (!onednn_has_bf16_matmul()) {  // nothing to choose, whatever the setting
    c.widened = c.no_bf16_kernels = true;
  } else if (setting != "auto") {
    c.widened = setting == "widened";
  } else if (measured_choice) {
    c.widened = *measured_choice;
  } else {
    // A competitor during one path's only window would pick the other path
    // for the whole run (on a Zen 4 under load, native once measured 198
    // GFLOP/s against its usual 370-390, level with widened's 200).
    // Both paths are measured untiled: tiled, the widened one would leave
    // every thread's allocator holding its tile copies (80 MiB at 16 threads
    // on 2 CPUs), which a run on the native path never uses.
    const bool tiled = gemm_tiled();
    set_gemm_tiled(false);
    for (int half = 0; half < 2; ++half) {
      set_bf16_widened(false);
      c.native_gflops = std::max(c.native_gflops, measure_gemm_peak_gflops(true, seconds / 2));
      set_bf16_widened(true);
      c.widened_gflops = std::max(c.widened_gflops, measure_gemm_peak_gflops(true, seconds / 2));
    }
    set_gemm_tiled(tiled);
    c.widened = c.widened_gflops >= kWidenedWorthIt * c.native_gflops;
    measured_choice = c.widened;
  }
  set_bf16_widened(c.widened);
  return c;
}

}  // namespace cpu
}  // namespace ctrl
