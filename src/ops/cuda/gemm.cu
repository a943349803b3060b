// Matrix products through cuBLASLt, and the conversions and column sums the
// op files share.
//
// The engine states products row-major (ops/cpu/gemm.h); cuBLASLt is
// column-major, and a row-major C = op(A)·op(B) is the column-major
// Cᵀ = op(B)ᵀ·op(A)ᵀ, so each call swaps the operands: column-major m = N,
// n = M, with B first. Each distinct shape (types, transposes, sizes, leading
// dimensions, batch, pointer alignment, bias) gets its descriptors and the
// heuristic's first algorithm once; later calls reuse them, so a run's
// products always take the same algorithm (bit-identical reruns).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "ops/cuda/common.cuh"

namespace ctrl::cuda {

namespace {

// cuBLASLt's entry points, resolved with dlopen so that the binary does not
// need the library to start (the header gives the types; nothing links it).
struct LtApi {
  bool loaded = false;
  std::string from;  // the file loaded, or why none was
#define CTRL_LT_FN(name) decltype(&::name) name = nullptr;
  CTRL_LT_FN(cublasLtCreate)
  CTRL_LT_FN(cublasLtDestroy)
  CTRL_LT_FN(cublasLtMatmulDescCreate)
  CTRL_LT_FN(cublasLtMatmulDescDestroy)
  CTRL_LT_FN(cublasLtMatmulDescSetAttribute)
  CTRL_LT_FN(cublasLtMatrixLayoutCreate)
  CTRL_LT_FN(cublasLtMatrixLayoutDestroy)
  CTRL_LT_FN(cublasLtMatrixLayoutSetAttribute)
  CTRL_LT_FN(cublasLtMatmulPreferenceCreate)
  CTRL_LT_FN(cublasLtMatmulPreferenceDestroy)
  CTRL_LT_FN(cublasLtMatmulPreferenceSetAttribute)
  CTRL_LT_FN(cublasLtMatmulAlgoGetHeuristic)
  CTRL_LT_FN(cublasLtMatmul)
#undef CTRL_LT_FN
};

const LtApi& lt_api() {
  static LtApi api;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* off = std::getenv("CTRL_CUDA_NO_CUBLASLT");
    if (off && std::strcmp(off, "1") == 0) {
      api.from = "CTRL_CUDA_NO_CUBLASLT=1";
      return;
    }
    // Only the major version this was compiled against: another major's
    // enums and structs need not match the header's.
    const std::string name = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    api.from = name;
    if (!lib) {
      api.from += " not found on the library path (built with cuBLAS " + std::to_string(CUBLAS_VER_MAJOR) + ")";
      return;
    }
    bool ok = true;
#define CTRL_LT_LOAD(name) \
  ok = ok && (api.name = reinterpret_cast<decltype(api.name)>(dlsym(lib, #name))) != nullptr;
    CTRL_LT_LOAD(cublasLtCreate)
    CTRL_LT_LOAD(cublasLtDestroy)
    CTRL_LT_LOAD(cublasLtMatmulDescCreate)
    CTRL_LT_LOAD(cublasLtMatmulDescDestroy)
    CTRL_LT_LOAD(cublasLtMatmulDescSetAttribute)
    CTRL_LT_LOAD(cublasLtMatrixLayoutCreate)
    CTRL_LT_LOAD(cublasLtMatrixLayoutDestroy)
    CTRL_LT_LOAD(cublasLtMatrixLayoutSetAttribute)
    CTRL_LT_LOAD(cublasLtMatmulPreferenceCreate)
    CTRL_LT_LOAD(cublasLtMatmulPreferenceDestroy)
    CTRL_LT_LOAD(cublasLtMatmulPreferenceSetAttribute)
    CTRL_LT_LOAD(cublasLtMatmulAlgoGetHeuristic)
    CTRL_LT_LOAD(cublasLtMatmul)
#undef CTRL_LT_LOAD
    if (!ok) api.from += " lacks a cuBLASLt function";
    api.loaded = ok;
  });
  return api;
}

}  // namespace

struct CudaOps::GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool usable = false;  // false: cuBLASLt had no algorithm; the fallback kernel runs it
  // The epilogue takes a copy of the fp32 bias rounded to C's 16-bit type:
  // cuBLASLt offered no algorithm for an fp32 bias into a 16-bit C (seen on
  // an H200 with cuBLASLt 13). Sums still run in fp32 and C is rounded once.
  bool bias16 = false;
  ~GemmPlan() {
    const LtApi& lt = lt_api();
    if (a) lt.cublasLtMatrixLayoutDestroy(a);
    if (b) lt.cublasLtMatrixLayoutDestroy(b);
    if (c) lt.cublasLtMatrixLayoutDestroy(c);
    if (desc) lt.cublasLtMatmulDescDestroy(desc);
  }
};

void CudaOps::init_gemm() {
  const LtApi& lt = lt_api();
  std::string why = lt.from;
  if (lt.loaded) {
    const cublasStatus_t st = lt.cublasLtCreate(&lt_);
    if (st == CUBLAS_STATUS_SUCCESS) return;
    lt_ = nullptr;
    why += ": cublasLtCreate failed with status " + std::to_string(int(st));
  }
  static std::once_flag warned;
  std::call_once(warned, [&] {
    std::fprintf(stderr, "ctrl: cuda: no cuBLASLt (%s); matrix products run on a slow fallback kernel\n", why.c_str());
  });
}

void CudaOps::release_gemm() {
  for (auto& [key, p] : plans_) delete p;
  plans_.clear();
  if (lt_) lt_api().cublasLtDestroy(lt_);
  lt_ = nullptr;
}

CudaOps::GemmPlan* CudaOps::plan(const std::string& key, bool* found) {
  auto it = plans_.find(key);
  *found = it != plans_.end();
  if (*found) return it->second;
  GemmPlan* p = new GemmPlan;
  plans_[key] = p;
  return p;
}

namespace {

cudaDataType_t cuda_type(DType t) {
  if (t == DType::BF16) return CUDA_R_16BF;
  if (t == DType::F16) return CUDA_R_16F;
  CTRL_ASSERT(t == DType::F32);
  return CUDA_R_32F;
}

// The largest power of two (up to 256) that divides the address, and for a
// batch also every operand's address (base + i·stride elements).
int alignment(const void* p, int64_t stride_elements = 0, size_t element = 0) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) | uintptr_t(stride_elements) * element;
  int k = 1;
  while (k < 256 && a % uintptr_t(2 * k) == 0) k *= 2;
  return k;
}

// The safety net: one thread per element of C, fp32 accumulation in k order.
// Slow, but runs any shape, type mix and alignment.
__global__ void gemm_fallback(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const void* A, int ka,
                              int64_t lda, int64_t sa, const void* B, int kb, int64_t ldb, int64_t sb, float beta,
                              void* C, int kc, int64_t ldc, int64_t sc, const float* bias, int64_t batch) {
  const int64_t total = M * N * batch;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t z = e / (M * N), i = e % (M * N) / N, j = e % N;
    float acc = 0;
    for (int64_t k = 0; k < K; ++k) {
      const float a = load(A, ka, size_t(z * sa + (ta ? k * lda + i : i * lda + k)));
      const float b = load(B, kb, size_t(z * sb + (tb ? j * ldb + k : k * ldb + j)));
      acc += a * b;
    }
    float v = alpha * acc;
    const size_t ci = size_t(z * sc + i * ldc + j);
    if (beta != 0.0f) v += beta * load(C, kc, ci);
    if (bias) v += bias[j];
    store(C, kc, ci, v);
  }
}

__global__ void convert_kernel(void* dst, int kd, const void* src, int ks, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    store(dst, kd, i, load(src, ks, i));
}

// Column sums in two fixed stages: block (x, y) sums rows [y·R, (y+1)·R) of
// columns [x·128, +128) into partial[y][col] (rows in order, one thread per
// column), then one thread per column adds the partials in order. R comes
// from chunk_rows(), a function of the row count alone.
__global__ void column_partials(float* partial, const void* x, int kx, int64_t rows, int64_t cols, int64_t ld,
                                int64_t rows_per_chunk) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, y = blockIdx.y;
  if (c >= cols) return;
  const int64_t r1 = min(rows, (y + 1) * rows_per_chunk);
  float acc = 0;
  for (int64_t r = y * rows_per_chunk; r < r1; ++r) acc += load(x, kx, size_t(r * ld + c));
  partial[y * cols + c] = acc;
}
__global__ void add_partials(float* out, const float* partial, int64_t chunks, int64_t cols) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= cols) return;
  float acc = 0;
  for (int64_t y = 0; y < chunks; ++y) acc += partial[y * cols + c];
  out[c] += acc;
}

}  // namespace

void CudaOps::gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, TensorRef A, int64_t lda,
                   TensorRef B, int64_t ldb, float beta, TensorRef C, int64_t ldc, const float* bias, int64_t batch,
                   int64_t stride_a, int64_t stride_b, int64_t stride_c) {
  if (M == 0 || N == 0 || batch == 0) return;
  CTRL_ASSERT(A.dtype == B.dtype);
  CTRL_ASSERT(beta == 0.0f || C.dtype == DType::F32);
  const int64_t many = batch > 1 ? 1 : 0;
  const int align_a = alignment(A.data, many * stride_a, dtype_size(A.dtype)),
            align_b = alignment(B.data, many * stride_b, dtype_size(B.dtype)),
            align_c = alignment(C.data, many * stride_c, dtype_size(C.dtype));
  char key[512];
  std::snprintf(key, sizeof key, "%d%d|%lld,%lld,%lld|%d,%d|%lld,%lld,%lld|%lld,%lld,%lld,%lld|%d,%d,%d,%d|%d|%d",
                int(ta), int(tb), (long long)M, (long long)N, (long long)K, int(A.dtype), int(C.dtype),
                (long long)lda, (long long)ldb, (long long)ldc, (long long)batch, (long long)stride_a,
                (long long)stride_b, (long long)stride_c, align_a, align_b, align_c,
                bias ? alignment(bias) : 0, bias != nullptr, int(tf32_));
  bool found = false;
  GemmPlan* p = plan(key, &found);
  const LtApi& lt = lt_api();
  if (!found && lt_) {
    // Column-major view: D (m×n) = op(A')·op(B'), A' = B (m×k after op), B' = A (k×n after op).
    const uint64_t m = uint64_t(N), n = uint64_t(M), k = uint64_t(K);
    const cudaDataType_t in = cuda_type(A.dtype), out = cuda_type(C.dtype);
    const cublasComputeType_t compute =
        A.dtype == DType::F32 ? (tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F) : CUBLAS_COMPUTE_32F;
    bool ok = lt.cublasLtMatmulDescCreate(&p->desc, compute, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS;
    const cublasOperation_t op_a = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    ok = ok && lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a) == 0;
    ok = ok && lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b) == 0;
    if (bias) {
      const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      const cudaDataType_t bias_type = CUDA_R_32F;  // the bias is fp32 whatever C is
      ok = ok && lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) == 0;
      ok = ok && lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                sizeof bias_type) == 0;
      // The heuristic reads the bias pointer's alignment (cublasLt.h): give it
      // the real one, not null; the key holds that alignment.
      ok = ok && lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias) == 0;
    }
    ok = ok && lt.cublasLtMatrixLayoutCreate(&p->a, in, tb ? k : m, tb ? m : k, ldb) == 0;
    ok = ok && lt.cublasLtMatrixLayoutCreate(&p->b, in, ta ? n : k, ta ? k : n, lda) == 0;
    ok = ok && lt.cublasLtMatrixLayoutCreate(&p->c, out, m, n, ldc) == 0;
    if (batch > 1) {
      const int32_t count = int32_t(batch);
      const int64_t strides[3] = {stride_b, stride_a, stride_c};
      cublasLtMatrixLayout_t layouts[3] = {p->a, p->b, p->c};
      for (int i = 0; i < 3; ++i) {
        ok = ok && lt.cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                    sizeof count) == 0;
        ok = ok && lt.cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                    &strides[i], sizeof strides[i]) == 0;
      }
    }
    ok = ok && (!bias || alignment(bias) >= 16);  // the epilogue reads the bias in 16-byte vectors
    cublasLtMatmulPreference_t pref = nullptr;
    ok = ok && lt.cublasLtMatmulPreferenceCreate(&pref) == 0;
    if (ok) {
      const uint64_t ws = workspace_bytes_;
      const uint32_t align[4] = {uint32_t(align_b), uint32_t(align_a), uint32_t(align_c), uint32_t(align_c)};
      lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
      lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align[0], 4);
      lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align[1], 4);
      lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align[2], 4);
      lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align[3], 4);
      // Split-K partials reduced in place in the output buffer are left out, to
      // keep every reduction's order fixed.
      const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_MASK & ~uint32_t(CUBLASLT_REDUCTION_SCHEME_INPLACE);
      lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes);
      cublasLtMatmulHeuristicResult_t result{};
      int count = 0;
      auto heuristic = [&] {
        return lt.cublasLtMatmulAlgoGetHeuristic(lt_, p->desc, p->a, p->b, p->c, p->c, pref, 1, &result, &count) == 0 &&
               count > 0;
      };
      p->usable = heuristic();
      if (!p->usable && bias && C.dtype != DType::F32) {  // a 16-bit bias of C's type instead
        const void* bias16 = scratch(kBias16, size_t(N) * 2);
        const cudaDataType_t bias_type = out;
        p->bias16 =
            lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                              sizeof bias_type) == 0 &&
            lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias16, sizeof bias16) == 0;
        p->usable = p->bias16 && heuristic();
      }
      if (p->usable) p->algo = result.algo;
    }
    if (pref) lt.cublasLtMatmulPreferenceDestroy(pref);
    if (!p->usable && std::getenv("CTRL_CUDA_VERBOSE"))
      std::fprintf(stderr, "ctrl: cuda: cuBLASLt has no algorithm for product %s; using the fallback kernel\n", key);
  }
  if (p->usable) {
    if (bias) {
      const void* epilogue_bias = bias;
      if (p->bias16) {
        epilogue_bias = scratch(kBias16, size_t(N) * 2);
        convert(TensorRef(const_cast<void*>(epilogue_bias), C.dtype), TensorRef(const_cast<float*>(bias)), size_t(N));
      }
      CTRL_CUDA(lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &epilogue_bias,
                                                  sizeof epilogue_bias));
    }
    const cublasStatus_t st = lt.cublasLtMatmul(lt_, p->desc, &alpha, B.data, p->a, A.data, p->b, &beta, C.data, p->c,
                                                C.data, p->c, &p->algo, workspace_, workspace_bytes_, stream_);
    if (st != CUBLAS_STATUS_NOT_SUPPORTED) {
      check(st, "cublasLtMatmul");
      return;
    }
    // The heuristic offered an algorithm that the call then refused (e.g. an
    // fp32 bias into a 16-bit C): the paths below take this key from now on.
    p->usable = false;
    if (std::getenv("CTRL_CUDA_VERBOSE"))
      std::fprintf(stderr, "ctrl: cuda: cuBLASLt refused product %s at run time; using the paths without it\n", key);
  }
  if (bias && C.dtype != DType::F32 && lt_) {  // e.g. no fp32-bias epilogue into 16-bit C: fp32, then one rounding
    float* tmp = static_cast<float*>(scratch(kF32Out, size_t(M * N * batch) * sizeof(float)));
    CTRL_ASSERT(batch == 1 && ldc == N);
    gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, 0.0f, tmp, N, bias);
    convert(C, tmp, size_t(M * N));
    return;
  }
  // With cuBLASLt loaded, a large product here (e.g. bf16 on a T4, where it
  // may have no algorithm) costs seconds: say so once, whether or not
  // CTRL_CUDA_VERBOSE is set. Without cuBLASLt, init_gemm has said it.
  if (lt_ && double(M) * double(N) * double(K) * double(batch) >= 1e9) {
    static std::once_flag warned;
    std::call_once(warned, [&] {
      std::fprintf(stderr,
                   "ctrl: cuda: a %lldx%lldx%lld product runs on the slow fallback kernel (cuBLASLt has no algorithm "
                   "for its types or alignment on this GPU); CTRL_CUDA_VERBOSE=1 lists every such product\n",
                   (long long)M, (long long)N, (long long)K);
    });
  }
  gemm_fallback<<<blocks_for(size_t(M * N * batch)), 256, 0, stream_>>>(
      ta, tb, M, N, K, alpha, A.data, kind_of(A.dtype), lda, stride_a, B.data, kind_of(B.dtype), ldb, stride_b, beta,
      C.data, kind_of(C.dtype), ldc, stride_c, bias, batch);
  CTRL_CUDA_LAUNCHED("gemm_fallback");
}

void CudaOps::convert(TensorRef dst, TensorRef src, size_t n) {
  if (n == 0) return;
  if (dst.dtype == src.dtype) {
    CTRL_CUDA(cudaMemcpyAsync(dst.data, src.data, n * dtype_size(src.dtype), cudaMemcpyDeviceToDevice, stream_));
    return;
  }
  convert_kernel<<<blocks_for(n), 256, 0, stream_>>>(dst.data, kind_of(dst.dtype), src.data, kind_of(src.dtype), n);
  CTRL_CUDA_LAUNCHED("convert");
}

void CudaOps::add_column_sums(float* out, TensorRef x, int64_t rows, int64_t cols, int64_t ld) {
  if (rows == 0 || cols == 0) return;
  const int64_t per_chunk = chunk_rows(rows), chunks = (rows + per_chunk - 1) / per_chunk;
  float* partial = static_cast<float*>(scratch(kPartials, size_t(chunks * cols) * sizeof(float)));
  const dim3 grid(unsigned((cols + 127) / 128), unsigned(chunks));
  column_partials<<<grid, 128, 0, stream_>>>(partial, x.data, kind_of(x.dtype), rows, cols, ld, per_chunk);
  CTRL_CUDA_LAUNCHED("column_partials");
  add_partials<<<unsigned((cols + 127) / 128), 128, 0, stream_>>>(out, partial, chunks, cols);
  CTRL_CUDA_LAUNCHED("add_partials");
}

}  // namespace ctrl::cuda
