// The CPU GEMM layer: every matrix product of the CPU engine goes through here.
// The library behind it was chosen by measurement (bench/gemm_libs.cpp,
// README, "CPU matrix products").
//
// Shape letters: C is M x N, the product reduces over K. All matrices are
// row-major with leading dimensions (lda >= columns of the stored A, etc.).
//
// Promises, for every function below:
//  - Called outside any OpenMP parallel region, it uses omp_get_max_threads()
//    threads. Called inside one (e.g. per attention head), it runs
//    single-threaded on the calling thread and may be called concurrently.
//  - Deterministic: for a fixed thread count, the same inputs give
//    bit-identical outputs (training is reproducible bit for bit).
//  - beta == 0 means C is overwritten (its old contents, even NaN, are ignored).
#pragma once
#include <cstdint>

namespace ctrl::cpu {

// C[M,N] = alpha * op(A) * op(B) + beta * C, op(X) = X or Xᵀ.
// A is stored M x K (K x M when trans_a), B is stored K x N (N x K when trans_b).
void gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// Same with bf16 inputs (uint16_t bit patterns), fp32 accumulation and fp32 C.
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A, int64_t lda,
               const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc);

// C[M,N] = op(A) * op(B) + bias (a row of N fp32 values added to every row;
// bias may be null), with bf16 inputs and fp32 accumulation; C is stored as
// bf16 (rounded to nearest even) when c_bf16, else as fp32. One pass over C:
// the bias and the rounding happen inside the product's kernel.
void gemm_bf16_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                    const uint16_t* B, int64_t ldb, const float* bias, void* C, bool c_bf16, int64_t ldc);

// How gemm_bf16 and gemm_bf16_bias run, process-wide: oneDNN's bf16 kernels
// (the default), or widened: the bf16 operands converted to fp32 (exactly)
// and multiplied by the fp32 path, on CPUs where that is faster (an Intel
// AVX512-BF16 core without AMX ran bf16 products at half fp32's rate; without
// AVX512-BF16 oneDNN emulates them at a third). Both compute fp32 sums of
// exact products of the same bf16 values, in different orders. Set it before
// the products run, not during them.
void set_bf16_widened(bool widened);
bool bf16_widened();

// How the products split over the threads, process-wide: inside oneDNN, a
// static split (the default), or tiled: C cut into fixed tiles that the
// threads take one at a time, each tile a single-threaded product. Beside a
// busy process a static split waits at its end for the thread whose CPU is
// shared; with tiles that thread takes fewer. The CPU backend tiles whenever
// it runs more threads than CPUs, by the thread adapter's choice
// (thread_adapter.h) or a pinned count.
// A tiled product's bits depend on the tiles, never on the thread count
// (they may differ from the untiled product's in the last place). Set it between
// products, not during one.
void set_gemm_tiled(bool tiled);
bool gemm_tiled();
// A tile of C: small enough that a product splits into a dozen or more of them
// (tiny's 2048 x 256 forward: 16; base's: 96), large enough that oneDNN's
// single-threaded kernels run at their full speed on it. Beside one busy
// process, in a build whose tile size an environment variable set (not
// kept), 128 x 512 tiles ran tiny 15-19% faster than 256 x 256 and base the
// same (bench/results/shared-machine-tiled-zen4-2026-12-04.md). Widened bf16
// products widen a tile's operands, (kTileRows + kTileCols) x K values, into
// each thread's own buffers (the planner counts them).
constexpr int64_t kTileRows = 128, kTileCols = 512;

// Plain triple-loop references with double accumulation, for tests. Slow.
void gemm_f32_reference(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                        int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
void gemm_bf16_reference(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
                         int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc);

// Whether the CPU runs bf16 products natively (AVX512-BF16 or AMX), as the
// GEMM library detects it; without it bf16 products are emulated (slower).
bool cpu_has_native_bf16();

// Whether oneDNN has bf16 matmul kernels for this CPU at all (oneDNN 2.6 has
// none below AVX-512, e.g. on a Zen 3). Without them gemm_bf16 always widens,
// whatever set_bf16_widened says, and so needs the widened path's memory.
bool onednn_has_bf16_matmul();

// Measured GEMM peak of this machine for the dtype with the current OpenMP
// thread count: runs a large square GEMM repeatedly for about `seconds` (at
// least twice) and returns the fastest repetition's GFLOP/s, so that a
// moment of load from other processes does not lower it (used by `ctrl bench`).
double measure_gemm_peak_gflops(bool bf16, double seconds = 1.0);

}  // namespace ctrl::cpu
