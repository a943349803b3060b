// CPU GEMM through oneDNN (chosen by measurement, see the README, "CPU matrix products").
//
// fp32 uses dnnl_sgemm: JIT AVX-512 kernels, no per-shape object, and it runs
// single-threaded by itself inside an OpenMP parallel region. It measured as
// fast as or faster than oneDNN's matmul primitive on most training shapes;
// the products x·Wᵀ that it splits poorly over the threads go through the
// primitive (sgemm_splits_poorly below).
// bf16 uses oneDNN's matmul primitive (the public bf16 path; AVX512-BF16 /
// AMX kernels JIT-compiled for the exact shape and strides). Primitives are
// created once per (transposes, shape, leading dimensions, alpha, beta,
// thread count) and kept in a process-wide cache guarded by a shared mutex;
// execution uses a per-thread stream, a per-thread user-managed scratchpad
// and per-thread memory objects re-pointed at each call's buffers, so
// concurrent calls from an OpenMP parallel region are safe.
#include "ops/cpu/gemm.h"

#include <malloc.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <shared_mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/safetensors.h"
#include "ops/cpu/vec_math.h"

namespace ctrl::cpu {
namespace {

using md = dnnl::memory::desc;
using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

// Everything a primitive is specialised on.
struct Key {
  bool bf16, ta, tb;
  int64_t M, N, K, lda, ldb, ldc;
  float alpha, beta;
  int threads;
  bool bias = false, c_bf16 = false;  // a bias row added to C; C stored as bf16
  auto tie() const { return std::tie(bf16, ta, tb, M, N, K, lda, ldb, ldc, alpha, beta, threads, bias, c_bf16); }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

struct Entry {
  dnnl::matmul prim;  // empty when oneDNN has no implementation (bf16 fallback)
  md a, b, c, bias;
  size_t scratch_bytes = 0;
};

// Memory descriptors of the row-major operands: op(A) is M x K, op(B) K x N.
void describe(const Key& k, Entry& e) {
  const auto dtype = k.bf16 ? dt::bf16 : dt::f32;
  e.a = md({k.M, k.K}, dtype, k.ta ? dims{1, k.lda} : dims{k.lda, 1});
  e.b = md({k.K, k.N}, dtype, k.tb ? dims{1, k.ldb} : dims{k.ldb, 1});
  e.c = md({k.M, k.N}, k.c_bf16 ? dt::bf16 : dt::f32, dims{k.ldc, 1});
  if (k.bias) e.bias = md({1, k.N}, dt::f32, dims{k.N, 1});
}

std::shared_ptr<const Entry> create(const Key& k) {
  auto e = std::make_shared<Entry>();
  describe(k, *e);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (k.alpha != 1.f) attr.set_output_scales(0, {k.alpha});
  if (k.beta != 0.f) {
    dnnl::post_ops po;
    po.append_sum(k.beta);  // C = alpha*A*B + beta*C_old
    attr.set_post_ops(po);
  }
  // oneDNN sizes a primitive's work split by omp_get_max_threads() at
  // creation; inside a parallel region the ICV is set to 1 for this task only.
  const int saved = omp_get_max_threads();
  omp_set_num_threads(k.threads);
  try {
    const auto desc = k.bias ? dnnl::matmul::desc(e->a, e->b, e->bias, e->c) : dnnl::matmul::desc(e->a, e->b, e->c);
    dnnl::matmul::primitive_desc pd(desc, attr, engine());
    e->prim = dnnl::matmul(pd);
    e->scratch_bytes = pd.scratchpad_desc().get_size();
  } catch (const dnnl::error&) {
    if (!k.bf16) {
      omp_set_num_threads(saved);
      throw;  // fp32 matmul always has an implementation
    }
    // No bf16 matmul on this CPU: gemm_bf16 falls back to widening to fp32.
  }
  omp_set_num_threads(saved);
  return e;
}

std::shared_ptr<const Entry> lookup(const Key& k) {
  static std::shared_mutex mu;
  static std::map<Key, std::shared_ptr<const Entry>> cache;
  {
    std::shared_lock lock(mu);
    auto it = cache.find(k);
    if (it != cache.end()) return it->second;
  }
  auto e = create(k);  // outside the lock: creation JIT-compiles (milliseconds)
  std::unique_lock lock(mu);
  // Bound the cache for callers with ever-changing shapes (generation with a
  // growing context): start afresh; entries in use stay alive via shared_ptr.
  if (cache.size() >= 4096) cache.clear();
  return cache.emplace(k, std::move(e)).first->second;
}

void check_args(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc) {
  CTRL_ASSERT(M >= 0 && N >= 0 && K >= 0);
  CTRL_ASSERT(lda >= std::max<int64_t>(1, ta ? M : K));
  CTRL_ASSERT(ldb >= std::max<int64_t>(1, tb ? K : N));
  CTRL_ASSERT(ldc >= std::max<int64_t>(1, N));
}

// C = beta*C for the K == 0 case (beta == 0 overwrites with zeros).
void scale_c(int64_t M, int64_t N, float beta, float* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.f ? 0.f : beta * C[i * ldc + j];
}

thread_local std::vector<uint8_t> primitive_scratch;  // per thread: the running primitive's scratchpad

// A primitive's arguments on one thread: memory objects built once and
// pointed at each call's buffers. Building them per call (heap allocations
// for the objects and the argument map) took about 2 µs, which attention's
// many small per-head products paid thousands of times a step.
struct Bound {
  std::shared_ptr<const Entry> entry;  // keeps the entry, and so its address (the key below), alive
  std::unordered_map<int, dnnl::memory> args;
};

std::unordered_map<int, dnnl::memory>& bound_args(const std::shared_ptr<const Entry>& e, bool bias) {
  thread_local std::unordered_map<const Entry*, Bound> bound;
  if (auto it = bound.find(e.get()); it != bound.end()) return it->second.args;
  if (bound.size() >= 4096) bound.clear();  // bounded, as the primitive cache is
  auto& eng = engine();
  Bound b{e,
          {{DNNL_ARG_SRC, dnnl::memory(e->a, eng, nullptr)},
           {DNNL_ARG_WEIGHTS, dnnl::memory(e->b, eng, nullptr)},
           {DNNL_ARG_DST, dnnl::memory(e->c, eng, nullptr)},
           {DNNL_ARG_SCRATCHPAD,
            dnnl::memory(md({static_cast<int64_t>(e->scratch_bytes)}, dt::u8, dnnl::memory::format_tag::a), eng,
                         nullptr)}}};
  if (bias) b.args.emplace(DNNL_ARG_BIAS, dnnl::memory(e->bias, eng, nullptr));
  return bound.emplace(e.get(), std::move(b)).first->second.args;
}

// Runs the cached primitive; returns false when there is none (bf16 fallback).
bool run(const Key& k, const void* A, const void* B, void* C, const float* bias = nullptr) {
  auto e = lookup(k);
  if (!e->prim) return false;
  thread_local dnnl::stream strm(engine());
  auto& scratch = primitive_scratch;
  if (scratch.size() < e->scratch_bytes) scratch.resize(e->scratch_bytes);
  auto& args = bound_args(e, k.bias);
  args.at(DNNL_ARG_SRC).set_data_handle(const_cast<void*>(A));
  args.at(DNNL_ARG_WEIGHTS).set_data_handle(const_cast<void*>(B));
  args.at(DNNL_ARG_DST).set_data_handle(C);
  args.at(DNNL_ARG_SCRATCHPAD).set_data_handle(scratch.data());
  if (k.bias) args.at(DNNL_ARG_BIAS).set_data_handle(const_cast<float*>(bias));
  e->prim.execute(strm, args);
  strm.wait();
  return true;
}

int current_threads() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

float bf16_to_f32(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::atomic<bool> widen_bf16{false};
thread_local std::vector<float> widen_buffers[2];  // per thread: A and B of the widened path

// Widens a rows x cols bf16 matrix (leading dimension ld) into the calling
// thread's fp32 buffer `slot` (0: A, 1: B), dense; the buffer lives until
// that thread's next call with the same slot. Outside a parallel region the
// conversion is split over the threads.
float* widen(int slot, const uint16_t* X, int64_t rows, int64_t cols, int64_t ld) {
  auto& buffer = widen_buffers[slot];
  if (buffer.size() < size_t(rows * cols)) buffer.resize(size_t(rows * cols));
  float* out = buffer.data();
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && rows * cols >= 65536)
  for (int64_t i = 0; i < rows; ++i) from_bf16(X + i * ld, out + i * cols, cols);
  return out;
}

template <typename T>
void reference(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const T* A, int64_t lda, const T* B,
               int64_t ldb, float beta, float* C, int64_t ldc, float (*load)(T)) {
  check_args(ta, tb, M, N, K, lda, ldb, ldc);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < K; ++p) {
        const double a = load(ta ? A[p * lda + i] : A[i * lda + p]);
        const double b = load(tb ? B[j * ldb + p] : B[p * ldb + j]);
        acc += a * b;
      }
      const double old = beta == 0.f ? 0.0 : double(beta) * C[i * ldc + j];
      C[i * ldc + j] = static_cast<float>(double(alpha) * acc + old);
    }
}

std::atomic<bool> tile_products{false};
// Products of fewer multiply-adds stay whole and with dnnl_sgemm: tiling or a
// primitive buys nothing there.
constexpr int64_t kSmallProduct = int64_t(1) << 22;

// Runs `tile(i, j, m, n)` for C's tiles (row i, column j, m x n), handed out
// dynamically; false, having run nothing, when the products are not tiled.
template <class Tile>
bool run_tiled(int64_t M, int64_t N, int64_t K, Tile&& tile) {
  if (!tile_products.load(std::memory_order_relaxed) || omp_in_parallel()) return false;
  const int64_t tm = (M + kTileRows - 1) / kTileRows, tn = (N + kTileCols - 1) / kTileCols;
  if (tm * tn < 2 || M * N * K < kSmallProduct) return false;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < tm * tn; ++t) {
    const int64_t i = t / tn * kTileRows, j = t % tn * kTileCols;
    tile(i, j, std::min(kTileRows, M - i), std::min(kTileCols, N - j));
  }
  return true;
}

// Whether a multi-threaded fp32 product goes through oneDNN's matmul primitive
// instead of dnnl_sgemm: the form x·Wᵀ (every linear layer's forward) where
// sgemm splits it poorly over the threads, with 16 to 1,023 rows (micro-batches
// of under 1,024 tokens, prompts) or a reduction longer than the output (the
// feed-forward's second layer). Measured on a Zen 4 at 2 threads
// (bench/results/fp32-forward-route-zen4-2026-12-05.md): there sgemm ran such
// products at 0.2-0.97x of the primitive's rate, and the others at 1.0-1.1x.
// Below 16 rows (generation's one token) sgemm is up to 4x faster; products
// inside a parallel region (attention's heads, the head's blocks, tiles) gained
// nothing in a step, so they stay with sgemm.
bool sgemm_splits_poorly(bool ta, bool tb, int64_t M, int64_t N, int64_t K) {
  if (ta || !tb || omp_in_parallel() || M < 16 || M * N * K < kSmallProduct) return false;
  return M < 1024 || K > N;
}

}  // namespace

void set_gemm_tiled(bool tiled) { tile_products.store(tiled); }
bool gemm_tiled() { return tile_products.load(); }

void gemm_f32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  check_args(ta, tb, M, N, K, lda, ldb, ldc);
  if (M == 0 || N == 0) return;
  if (K == 0) return scale_c(M, N, beta, C, ldc);
  if (run_tiled(M, N, K, [&](int64_t i, int64_t j, int64_t m, int64_t n) {
        gemm_f32(ta, tb, m, n, K, alpha, ta ? A + i : A + i * lda, lda, tb ? B + j * ldb : B + j, ldb, beta,
                 C + i * ldc + j, ldc);
      }))
    return;
  if (sgemm_splits_poorly(ta, tb, M, N, K)) {
    const Key k{false, ta, tb, M, N, K, lda, ldb, ldc, alpha, beta, current_threads()};
    CTRL_ASSERT(run(k, A, B, C));  // fp32 matmul always has an implementation
    return;
  }
  // fp32: oneDNN's sgemm (JIT AVX-512 kernels, no primitive to create); it
  // runs single-threaded by itself inside an OpenMP parallel region.
  const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  CTRL_ASSERT(st == dnnl_success);
}

void gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A, int64_t lda,
               const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  check_args(ta, tb, M, N, K, lda, ldb, ldc);
  if (M == 0 || N == 0) return;
  if (K == 0) return scale_c(M, N, beta, C, ldc);
  if (run_tiled(M, N, K, [&](int64_t i, int64_t j, int64_t m, int64_t n) {
        gemm_bf16(ta, tb, m, n, K, alpha, ta ? A + i : A + i * lda, lda, tb ? B + j * ldb : B + j, ldb, beta,
                  C + i * ldc + j, ldc);
      }))
    return;
  const Key k{true, ta, tb, M, N, K, lda, ldb, ldc, alpha, beta, current_threads()};
  if (!widen_bf16.load(std::memory_order_relaxed) && run(k, A, B, C)) return;
  // Widened (chosen, or no bf16 kernel in oneDNN for this CPU): the products
  // of bf16 values are exact in fp32, so the fp32 path computes the same sums.
  const float* a = widen(0, A, ta ? K : M, ta ? M : K, lda);
  const float* b = widen(1, B, tb ? N : K, tb ? K : N, ldb);
  gemm_f32(ta, tb, M, N, K, alpha, a, ta ? M : K, b, tb ? K : N, beta, C, ldc);
}

void gemm_bf16_bias(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                    const uint16_t* B, int64_t ldb, const float* bias, void* C, bool c_bf16, int64_t ldc) {
  check_args(ta, tb, M, N, K, lda, ldb, ldc);
  if (M == 0 || N == 0) return;
  const size_t c_size = c_bf16 ? 2 : 4;
  if (run_tiled(M, N, K, [&](int64_t i, int64_t j, int64_t m, int64_t n) {
        gemm_bf16_bias(ta, tb, m, n, K, ta ? A + i : A + i * lda, lda, tb ? B + j * ldb : B + j, ldb,
                       bias ? bias + j : nullptr, static_cast<char*>(C) + (i * ldc + j) * c_size, c_bf16, ldc);
      }))
    return;
  Key k{true, ta, tb, M, N, K, lda, ldb, ldc, 1.0f, 0.0f, current_threads()};
  k.bias = bias != nullptr, k.c_bf16 = c_bf16;
  if (!widen_bf16.load(std::memory_order_relaxed) && K > 0 && run(k, A, B, C, bias)) return;
  // Widened, no bf16 kernel, or nothing to reduce: the product in fp32 onto
  // the bias, then rounded to bf16 if C is bf16.
  thread_local std::vector<float> rounded_rows;
  if (c_bf16 && rounded_rows.size() < size_t(M * N)) rounded_rows.resize(size_t(M * N));
  float* out = c_bf16 ? rounded_rows.data() : static_cast<float*>(C);
  const int64_t ldo = c_bf16 ? N : ldc;
  const bool parallel = !omp_in_parallel() && M * N >= 65536;
  if (bias) {
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) out[i * ldo + j] = bias[j];
  }
  gemm_bf16(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, bias ? 1.0f : 0.0f, out, ldo);
  if (!c_bf16) return;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t i = 0; i < M; ++i) to_bf16(out + i * N, static_cast<uint16_t*>(C) + i * ldc, N);
}

void set_bf16_widened(bool widened) { widen_bf16.store(widened); }
bool bf16_widened() { return widen_bf16.load(); }

void gemm_f32_reference(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                        const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  reference<float>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, [](float x) { return x; });
}

void gemm_bf16_reference(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A, int64_t lda,
                         const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  reference<uint16_t>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bf16_to_f32);
}

bool cpu_has_native_bf16() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (isa & bf16) == bf16;
}

bool onednn_has_bf16_matmul() {
  static const bool has = [] {
    try {
      const md x({16, 16}, dt::bf16, dims{16, 1}), y({16, 16}, dt::f32, dims{16, 1});
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(x, x, y), engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return has;
}

double measure_gemm_peak_gflops(bool bf16, double seconds) {
  const int64_t n = 2048;  // large enough for peak, small enough for 2 cores
  std::vector<float> a(n * n), b(n * n), c(n * n);
  std::vector<uint16_t> a16(n * n), b16(n * n);
  for (int64_t i = 0; i < n * n; ++i) {
    a[i] = static_cast<float>(i % 17) * 0.01f;
    b[i] = static_cast<float>(i % 13) * 0.01f;
    a16[i] = 0x3c00 + static_cast<uint16_t>(i % 64);  // bf16 values in [2^-7, 2^-6)
    b16[i] = 0x3c00 + static_cast<uint16_t>(i % 31);
  }
  auto once = [&] {
    if (bf16)
      gemm_bf16(false, false, n, n, n, 1.f, a16.data(), n, b16.data(), n, 0.f, c.data(), n);
    else
      gemm_f32(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
  };
  once();  // primitive creation and first touch stay out of the timing
  double fastest = INFINITY, elapsed = 0;
  for (int reps = 0; reps < 2 || elapsed < seconds; ++reps) {
    const auto t0 = std::chrono::steady_clock::now();
    once();
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fastest = std::min(fastest, t);
    elapsed += t;
  }
  // The measurement's 2048² operands and scratch are not training's: they go
  // back to the system, lest a measurement at start-up raise a run's peak.
  for (auto* v : {&a, &b, &c, &widen_buffers[0], &widen_buffers[1]}) std::vector<float>().swap(*v);
  for (auto* v : {&a16, &b16}) std::vector<uint16_t>().swap(*v);
  std::vector<uint8_t>().swap(primitive_scratch);
  malloc_trim(0);
  return 2.0 * n * n * n / fastest / 1e9;
}

}  // namespace ctrl::cpu
