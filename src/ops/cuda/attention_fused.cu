// Fused causal attention for bf16 (CTRL_CUDA_ATTENTION=fused), in the manner
// of FlashAttention-2: the T×T scores never leave shared memory. The forward
// keeps each row's log-sum-exp (B·H·T fp32) instead of the softmax; the
// backward recomputes the probabilities from it. Products run on tensor
// cores (WMMA, bf16 with fp32 accumulation, sm_80 and newer) on tiles of 64
// query or key rows; q, k, v, the output and the gradients are read and
// written in the token-major layout [B, T, parts·D] directly.
//
// Determinism: no atomics. The backward runs one kernel for dk and dv (a
// block per key tile, looping over the query tiles that see it) and one for
// dq (a block per query tile, looping over its key tiles), so every sum has
// one fixed order.
//
// Numerics against the CPU's bf16 path (ops/cpu/attention.cpp): the same
// fp32 scores from bf16 q and k; the softmax in fp32 with one running maximum
// per row (online, rescaling the fp32 output accumulator), the unnormalised
// probabilities rounded to bf16 for the product with v and the sum divided
// at the end; dS rounded to bf16 for the products with k and q, as on the CPU.
#include <mma.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/gpu_scratch.h"

namespace ctrl::cuda {

namespace {

using bf16 = __nv_bfloat16;
namespace wmma = nvcuda::wmma;

constexpr int kTile = 64;            // query or key rows per tile; 4 warps of 16 rows
constexpr int kThreads = 128;        // 4 warps
constexpr int kScoreLd = kTile + 4;  // fp32 score tiles [64][68]
constexpr int kProbLd = kTile + 8;   // bf16 probability tiles [64][72]
template <int HD>
constexpr int kLd = HD + 8;  // bf16 q, k, v, dO tiles [64][HD + 8] (the padding spreads shared-memory banks)
template <int HD>
constexpr int kOutLd = HD + 4;  // fp32 output accumulator [64][HD + 4]

// Dynamic shared memory of each kernel (every part a multiple of 128 bytes).
template <int HD>
constexpr size_t forward_shared() {
  return 3 * kTile * kLd<HD> * 2 + kTile * kScoreLd * 4 + kTile * kProbLd * 2 + kTile * kOutLd<HD> * 4;
}
template <int HD>
constexpr size_t backward_shared() {  // either backward kernel: BackwardShared's parts
  return 4 * kTile * kLd<HD> * 2 + 2 * kTile * kScoreLd * 4 + 2 * kTile * kProbLd * 2 + 2 * kTile * 4;
}
// Staging the results of a 16-row warp needs 16 × (HD + 4) fp32 per warp
// within the two fp32 score tiles.
static_assert(4 * 16 * kOutLd<80> <= 2 * kTile * kScoreLd, "staging exceeds the score tiles");

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define CTRL_FUSED_ATTENTION_BODY 1
#endif

// Rows row0 .. row0 + 63 of a [rows, HD] slice whose rows lie `ld` elements
// apart into a [64][HD + 8] tile; rows at or beyond `rows` become zeros.
// 16-byte copies: src and ld keep 8-element alignment.
template <int HD>
__device__ void load_tile(bf16* dst, const uint16_t* src, int64_t row0, int64_t rows, int64_t ld) {
  constexpr int chunks = HD / 8;
  for (int i = threadIdx.x; i < kTile * chunks; i += blockDim.x) {
    const int r = i / chunks, c = i % chunks * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (row0 + r < rows) v = *reinterpret_cast<const uint4*>(src + (row0 + r) * ld + c);
    *reinterpret_cast<uint4*>(dst + r * kLd<HD> + c) = v;
  }
}

#ifdef CTRL_FUSED_ATTENTION_BODY
// Row values (log-sum-exp or dO·O) of rows row0 .. row0 + 63, 0 beyond `rows`.
__device__ void load_rows(float* dst, const float* src, int64_t row0, int64_t rows) {
  for (int i = threadIdx.x; i < kTile; i += blockDim.x) dst[i] = row0 + i < rows ? src[row0 + i] : 0.0f;
}
#endif

// C[16, 64] (ld kScoreLd, fp32) = A[16, HD] · B[64, HD]ᵀ, A and B row-major
// bf16 tiles of leading dimension kLd<HD>: one warp's rows of a score tile.
template <int HD>
__device__ void warp_scores(float* C, const bf16* A, const bf16* B) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
#pragma unroll
  for (int j = 0; j < kTile / 16; ++j) {
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int k = 0; k < HD / 16; ++k) {
      wmma::load_matrix_sync(a, A + 16 * k, kLd<HD>);
      wmma::load_matrix_sync(b, B + 16 * j * kLd<HD> + 16 * k, kLd<HD>);
      wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(C + 16 * j, acc, kScoreLd, wmma::mem_row_major);
  }
}

using Accumulators = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// acc[j] += P[16, 64] · X[64, 16j .. 16j + 15] for every j: P a bf16 tile of
// leading dimension kProbLd, X a [64][HD + 8] tile.
template <int HD>
__device__ void warp_accumulate(Accumulators* acc, const bf16* P, const bf16* X) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b;
#pragma unroll
  for (int k = 0; k < kTile / 16; ++k) {
    wmma::load_matrix_sync(a, P + 16 * k, kProbLd);
#pragma unroll
    for (int j = 0; j < HD / 16; ++j) {
      wmma::load_matrix_sync(b, X + 16 * k * kLd<HD> + 16 * j, kLd<HD>);
      wmma::mma_sync(acc[j], a, b, acc[j]);
    }
  }
}

// Writes a warp's 16 rows of factor · acc as bf16 into rows row0 .. row0 + 15
// of dst (rows `ld` apart, `rows` valid), through the warp's fp32 staging
// area (16 × (HD + 4)).
template <int HD>
__device__ void warp_store(uint16_t* dst, int64_t ld, int64_t row0, int64_t rows, Accumulators* acc, float factor,
                           float* stage) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int j = 0; j < HD / 16; ++j) wmma::store_matrix_sync(stage + 16 * j, acc[j], kOutLd<HD>, wmma::mem_row_major);
  __syncwarp();
  const int r = lane >> 1, c0 = (lane & 1) * (HD / 2);
  if (row0 + r < rows)
    for (int c = 0; c < HD / 2; ++c)
      dst[(row0 + r) * ld + c0 + c] = float_to_bf16_bits(factor * stage[r * kOutLd<HD> + c0 + c]);
  __syncwarp();
}

// Block (query tile, head, sequence); the tiles with the most key tiles run
// first. lse[B, H, T] gets each row's log-sum-exp of the scaled scores.
template <int HD>
__global__ void __launch_bounds__(kThreads)
    fused_forward_kernel(uint16_t* out, float* lse, const uint16_t* qkv, int64_t T, int64_t H, float scale) {
#ifdef CTRL_FUSED_ATTENTION_BODY
  extern __shared__ __align__(128) unsigned char shared[];
  bf16* Qs = reinterpret_cast<bf16*>(shared);
  bf16* Ks = Qs + kTile * kLd<HD>;
  bf16* Vs = Ks + kTile * kLd<HD>;
  float* S = reinterpret_cast<float*>(Vs + kTile * kLd<HD>);
  bf16* Ps = reinterpret_cast<bf16*>(S + kTile * kScoreLd);
  float* Os = reinterpret_cast<float*>(Ps + kTile * kProbLd);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z, D = H * HD, ld = 3 * D;
  const int64_t q0 = qt * kTile;
  const uint16_t* base = qkv + b * T * ld + h * HD;
  load_tile<HD>(Qs, base, q0, T, ld);
  for (int i = threadIdx.x; i < kTile * kOutLd<HD>; i += blockDim.x) Os[i] = 0.0f;
  // Lanes 2r and 2r + 1 of warp w keep row 16w + r: each half of its columns.
  const int r = 16 * warp + (lane >> 1), half = lane & 1;
  const int64_t i = q0 + r;
  float m = -INFINITY, l = 0.0f;
  Accumulators acc[HD / 16];
  for (int64_t kt = 0; kt <= qt; ++kt) {
    const int64_t k0 = kt * kTile;
    __syncthreads();  // every warp is done with the previous k and v tiles
    load_tile<HD>(Ks, base + D, k0, T, ld);
    load_tile<HD>(Vs, base + 2 * D, k0, T, ld);
    __syncthreads();
    warp_scores<HD>(S + 16 * warp * kScoreLd, Qs + 16 * warp * kLd<HD>, Ks);
    __syncwarp();
    // Online softmax of row i over this tile's keys j <= i (key 0 is in the
    // first tile, so the running maximum is finite from then on).
    float* srow = S + r * kScoreLd + half * 32;
    float mx = -INFINITY;
    for (int c = 0; c < 32; ++c) {
      const int64_t j = k0 + half * 32 + c;
      const float s = j <= i && j < T ? srow[c] * scale : -INFINITY;
      srow[c] = s;
      mx = fmaxf(mx, s);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_new = fmaxf(m, mx), alpha = expf(m - m_new);
    bf16* prow = Ps + r * kProbLd + half * 32;
    float sum = 0.0f;
    for (int c = 0; c < 32; ++c) {
      const float p = expf(srow[c] - m_new);
      sum += p;
      prow[c] = __float2bfloat16_rn(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * alpha + sum;
    m = m_new;
    float* orow = Os + r * kOutLd<HD> + half * (HD / 2);
    for (int c = 0; c < HD / 2; ++c) orow[c] *= alpha;
    __syncwarp();
    float* Ow = Os + 16 * warp * kOutLd<HD>;
#pragma unroll
    for (int j = 0; j < HD / 16; ++j) wmma::load_matrix_sync(acc[j], Ow + 16 * j, kOutLd<HD>, wmma::mem_row_major);
    warp_accumulate<HD>(acc, Ps + 16 * warp * kProbLd, Vs);
#pragma unroll
    for (int j = 0; j < HD / 16; ++j) wmma::store_matrix_sync(Ow + 16 * j, acc[j], kOutLd<HD>, wmma::mem_row_major);
    __syncwarp();
  }
  if (i < T) {
    const float inv = 1.0f / l;
    const float* orow = Os + r * kOutLd<HD> + half * (HD / 2);
    uint16_t* o = out + (b * T + i) * D + h * HD + half * (HD / 2);
    for (int c = 0; c < HD / 2; ++c) o[c] = float_to_bf16_bits(orow[c] * inv);
    if (half == 0) lse[(b * H + h) * T + i] = m + logf(l);
  }
#endif
}

// dot[b, h, t] = Σ_c dO·O over the head's columns (the softmax backward's
// row term); one warp per (token, head), a fixed order.
__global__ void row_dot_kernel(float* dot, const uint16_t* dout, const uint16_t* out, int64_t rows, int64_t T,
                               int64_t H, int64_t hd) {
  const int64_t row = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int64_t token = row / H, h = row % H, b = token / T, t = token % T;
  const size_t at = size_t(token * H * hd + h * hd);
  float s = 0.0f;
  for (int64_t c = lane; c < hd; c += 32) s += bf16_bits_to_float(dout[at + c]) * bf16_bits_to_float(out[at + c]);
  s = warp_sum(s);
  if (lane == 0) dot[(b * H + h) * T + t] = s;
}

// The softmax backward of one warp's 16 rows × 64 columns held in S (scores)
// and dP (dO·vᵀ), rows a and columns c of a score tile: P = exp(s·scale −
// lse), dS = P ⊙ (dP − dot) where `visible(a, c)`; the results go to P16 and
// dS16 (bf16, leading dimension kProbLd; P16 may be null). `row_stat`
// selects whether lse and dot belong to the rows (queries in rows) or to the
// columns (keys in rows).
template <typename Visible>
__device__ void warp_softmax_backward(bf16* P16, bf16* dS16, const float* S, const float* dP, const float* lse,
                                      const float* dot, bool row_stat, float scale, Visible visible) {
  const int lane = threadIdx.x & 31, a = lane >> 1, c0 = (lane & 1) * 32;
  for (int c = c0; c < c0 + 32; ++c) {
    const int stat = row_stat ? 16 * (threadIdx.x >> 5) + a : c;
    const float p = visible(a, c) ? expf(S[a * kScoreLd + c] * scale - lse[stat]) : 0.0f;
    const float ds = p * (dP[a * kScoreLd + c] - dot[stat]);
    if (P16) P16[a * kProbLd + c] = __float2bfloat16_rn(p);
    dS16[a * kProbLd + c] = __float2bfloat16_rn(ds);
  }
}

// The backward kernels' shared memory (backward_shared): four bf16 tiles
// [64][HD + 8], the fp32 score and dP tiles, two bf16 probability tiles and
// the 64 rows' log-sum-exp and dO·O.
template <int HD>
struct BackwardShared {
  bf16* tile[4];
  float *S, *dP;
  bf16* probs[2];
  float *lse, *dot;
  __device__ explicit BackwardShared(unsigned char* base) {
    tile[0] = reinterpret_cast<bf16*>(base);
    for (int i = 1; i < 4; ++i) tile[i] = tile[i - 1] + kTile * kLd<HD>;
    S = reinterpret_cast<float*>(tile[3] + kTile * kLd<HD>);
    dP = S + kTile * kScoreLd;
    probs[0] = reinterpret_cast<bf16*>(dP + kTile * kScoreLd);
    probs[1] = probs[0] + kTile * kProbLd;
    lse = reinterpret_cast<float*>(probs[1] + kTile * kProbLd);
    dot = lse + kTile;
  }
};

// dk and dv: block (key tile, head, sequence), looping over the query tiles
// at or after it; dk = scale · Σ dSᵀ·q, dv = Σ Pᵀ·dO. Rows of the score tiles
// are keys here.
template <int HD>
__global__ void __launch_bounds__(kThreads)
    fused_backward_kv_kernel(uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv, const float* lse,
                             const float* dot, int64_t T, int64_t H, float scale) {
#ifdef CTRL_FUSED_ATTENTION_BODY
  extern __shared__ __align__(128) unsigned char shared[];
  const BackwardShared<HD> sh(shared);
  bf16 *Ks = sh.tile[0], *Vs = sh.tile[1], *Qs = sh.tile[2], *dOs = sh.tile[3], *PT = sh.probs[0], *dST = sh.probs[1];
  float *S = sh.S, *dP = sh.dP, *lse_s = sh.lse, *dot_s = sh.dot;
  const int warp = threadIdx.x >> 5;
  const int64_t kt = blockIdx.x, h = blockIdx.y, b = blockIdx.z, D = H * HD, ld = 3 * D;
  const int64_t k0 = kt * kTile, tiles = (T + kTile - 1) / kTile;
  const uint16_t* base = qkv + b * T * ld + h * HD;
  const uint16_t* dout_base = dout + b * T * D + h * HD;
  const float* lse_bh = lse + (b * H + h) * T;
  const float* dot_bh = dot + (b * H + h) * T;
  load_tile<HD>(Ks, base + D, k0, T, ld);
  load_tile<HD>(Vs, base + 2 * D, k0, T, ld);
  Accumulators dk[HD / 16], dv[HD / 16];
#pragma unroll
  for (int j = 0; j < HD / 16; ++j) wmma::fill_fragment(dk[j], 0.0f), wmma::fill_fragment(dv[j], 0.0f);
  const int64_t key0 = k0 + 16 * warp;  // this warp's first key
  for (int64_t qt = kt; qt < tiles; ++qt) {
    const int64_t q0 = qt * kTile;
    __syncthreads();  // every warp is done with the previous q and dO tiles
    load_tile<HD>(Qs, base, q0, T, ld);
    load_tile<HD>(dOs, dout_base, q0, T, D);
    load_rows(lse_s, lse_bh, q0, T);
    load_rows(dot_s, dot_bh, q0, T);
    __syncthreads();
    float* Sw = S + 16 * warp * kScoreLd;
    float* dPw = dP + 16 * warp * kScoreLd;
    warp_scores<HD>(Sw, Ks + 16 * warp * kLd<HD>, Qs);    // Sᵀ = k·qᵀ
    warp_scores<HD>(dPw, Vs + 16 * warp * kLd<HD>, dOs);  // dPᵀ = v·dOᵀ
    __syncwarp();
    bf16* PTw = PT + 16 * warp * kProbLd;
    bf16* dSTw = dST + 16 * warp * kProbLd;
    warp_softmax_backward(PTw, dSTw, Sw, dPw, lse_s, dot_s, false, scale, [&](int a, int c) {
      const int64_t j = key0 + a, i = q0 + c;
      return j <= i && i < T && j < T;
    });
    __syncwarp();
    warp_accumulate<HD>(dv, PTw, dOs);
    warp_accumulate<HD>(dk, dSTw, Qs);
  }
  __syncthreads();  // the score tiles become every warp's staging area
  float* stage = S + 16 * warp * kOutLd<HD>;
  uint16_t* dst = dqkv + b * T * ld + h * HD;
  warp_store<HD>(dst + D, ld, key0, T, dk, scale, stage);
  warp_store<HD>(dst + 2 * D, ld, key0, T, dv, 1.0f, stage);
#endif
}

// dq: block (query tile, head, sequence), looping over its key tiles;
// dq = scale · Σ dS·k. The tiles with the most key tiles run first.
template <int HD>
__global__ void __launch_bounds__(kThreads)
    fused_backward_q_kernel(uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv, const float* lse,
                            const float* dot, int64_t T, int64_t H, float scale) {
#ifdef CTRL_FUSED_ATTENTION_BODY
  extern __shared__ __align__(128) unsigned char shared[];
  const BackwardShared<HD> sh(shared);
  bf16 *Qs = sh.tile[0], *dOs = sh.tile[1], *Ks = sh.tile[2], *Vs = sh.tile[3], *dS = sh.probs[0];
  float *S = sh.S, *dP = sh.dP, *lse_s = sh.lse, *dot_s = sh.dot;
  const int warp = threadIdx.x >> 5;
  const int64_t qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z, D = H * HD, ld = 3 * D;
  const int64_t q0 = qt * kTile;
  const uint16_t* base = qkv + b * T * ld + h * HD;
  load_tile<HD>(Qs, base, q0, T, ld);
  load_tile<HD>(dOs, dout + b * T * D + h * HD, q0, T, D);
  load_rows(lse_s, lse + (b * H + h) * T, q0, T);
  load_rows(dot_s, dot + (b * H + h) * T, q0, T);
  Accumulators dq[HD / 16];
#pragma unroll
  for (int j = 0; j < HD / 16; ++j) wmma::fill_fragment(dq[j], 0.0f);
  const int64_t query0 = q0 + 16 * warp;  // this warp's first query
  for (int64_t kt = 0; kt <= qt; ++kt) {
    const int64_t k0 = kt * kTile;
    __syncthreads();  // every warp is done with the previous k and v tiles
    load_tile<HD>(Ks, base + D, k0, T, ld);
    load_tile<HD>(Vs, base + 2 * D, k0, T, ld);
    __syncthreads();
    float* Sw = S + 16 * warp * kScoreLd;
    float* dPw = dP + 16 * warp * kScoreLd;
    warp_scores<HD>(Sw, Qs + 16 * warp * kLd<HD>, Ks);    // S = q·kᵀ
    warp_scores<HD>(dPw, dOs + 16 * warp * kLd<HD>, Vs);  // dP = dO·vᵀ
    __syncwarp();
    bf16* dSw = dS + 16 * warp * kProbLd;
    warp_softmax_backward(static_cast<bf16*>(nullptr), dSw, Sw, dPw, lse_s, dot_s, true, scale, [&](int a, int c) {
      const int64_t i = query0 + a, j = k0 + c;
      return j <= i && j < T && i < T;
    });
    __syncwarp();
    warp_accumulate<HD>(dq, dSw, Ks);
  }
  __syncthreads();
  warp_store<HD>(dqkv + b * T * ld + h * HD, ld, query0, T, dq, scale, S + 16 * warp * kOutLd<HD>);
#endif
}

template <int HD>
constexpr size_t fused_shared_bytes() {
  return std::max(forward_shared<HD>(), backward_shared<HD>());
}
// The planner counts these kernels on every GPU with bf16 (gpu_scratch.h's
// cuda_fused_attention_shape): the smallest opt-in shared memory among them
// is sm_86's and sm_89's 99 KiB.
static_assert(fused_shared_bytes<64>() <= 99 * 1024 && fused_shared_bytes<80>() <= 99 * 1024,
              "the fused attention needs more shared memory than sm_86 and sm_89 have");

// The kernels read and write rows in 16-byte pieces.
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Calls f(std::integral_constant<int, HD>) for a head width the kernels are
// built for (64: every preset but `ctrl`; 80: `ctrl`) and returns true; false
// for any other width. 128 would need dk and dv in shared memory: in
// registers they spill on sm_90 (tools/check_cuda_resources.sh).
template <typename F>
bool with_head_width(int64_t hd, F f) {
  if (hd == 64) return f(std::integral_constant<int, 64>{}), true;
  if (hd == 80) return f(std::integral_constant<int, 80>{}), true;
  return false;
}

}  // namespace

bool CudaOps::fused_attention(DType inner, int64_t D, int64_t H) const {
  // The GPU: prepare_fused_attention. The kernels take D as H heads of D / H columns.
  if (!fused_attention_ || !cuda_fused_attention_shape(inner, D, H)) return false;
  size_t shared = 0;
  const bool built = with_head_width(D / H, [&](auto width) { shared = fused_shared_bytes<decltype(width)::value>(); });
  return built && shared <= max_shared_optin_;
}

size_t CudaOps::attention_saved_bytes(int64_t B, int64_t T, int64_t D, int64_t H, DType qkv_type) const {
  return cuda_attention_saved_bytes(B, T, D, H, qkv_type, fused_attention(qkv_type, D, H));
}

namespace {

template <int HD>
void launch_forward(cudaStream_t stream, uint16_t* out, float* lse, const uint16_t* qkv, int64_t B, int64_t T,
                    int64_t H, float scale) {
  for (int64_t b0 = 0; b0 < B; b0 += kMaxGridYZ) {  // at most kMaxGridYZ sequences per grid (its z)
    const int64_t rows = b0 * T, stats = b0 * H * T, D = H * HD;
    const dim3 grid(unsigned((T + kTile - 1) / kTile), unsigned(H), unsigned(std::min(kMaxGridYZ, B - b0)));
    fused_forward_kernel<HD><<<grid, kThreads, forward_shared<HD>(), stream>>>(out + rows * D, lse + stats,
                                                                               qkv + rows * 3 * D, T, H, scale);
    CTRL_CUDA_LAUNCHED("fused_attention_forward");
  }
}

template <int HD>
void launch_backward(cudaStream_t stream, uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv, const float* lse,
                     const float* dot, int64_t B, int64_t T, int64_t H, float scale) {
  const size_t shared = backward_shared<HD>();  // the same layout for both kernels (dq's leaves one tile unused)
  for (int64_t b0 = 0; b0 < B; b0 += kMaxGridYZ) {
    const int64_t rows = b0 * T, stats = b0 * H * T, D = H * HD;
    const dim3 grid(unsigned((T + kTile - 1) / kTile), unsigned(H), unsigned(std::min(kMaxGridYZ, B - b0)));
    uint16_t* dx = dqkv + rows * 3 * D;
    const uint16_t *dy = dout + rows * D, *x = qkv + rows * 3 * D;
    fused_backward_kv_kernel<HD><<<grid, kThreads, shared, stream>>>(dx, dy, x, lse + stats, dot + stats, T, H, scale);
    CTRL_CUDA_LAUNCHED("fused_attention_backward_kv");
    fused_backward_q_kernel<HD><<<grid, kThreads, shared, stream>>>(dx, dy, x, lse + stats, dot + stats, T, H, scale);
    CTRL_CUDA_LAUNCHED("fused_attention_backward_q");
  }
}

}  // namespace

void CudaOps::prepare_fused_attention() {
  // A build for older GPUs only runs on this one from their PTX, in which the kernels' bodies are empty.
  cudaFuncAttributes built{};
  CTRL_CUDA(cudaFuncGetAttributes(&built, fused_forward_kernel<64>));
  if (sm_major_ < 8 || built.ptxVersion < 80) {
    std::fprintf(stderr,
                 "note: CTRL_CUDA_ATTENTION=fused needs sm_80 or newer and code built for it (this GPU is sm_%d%d, "
                 "its code compute_%d); attention runs unfused\n",
                 sm_major_, sm_minor_, built.ptxVersion);
    fused_attention_ = false;
    return;
  }
  for (int64_t hd : {64, 80})
    if (fused_attention(DType::BF16, hd, 1))
      with_head_width(hd, [](auto width) {
        constexpr int HD = decltype(width)::value;
        const int forward = int(forward_shared<HD>()), backward = int(backward_shared<HD>());
        CTRL_CUDA(cudaFuncSetAttribute(fused_forward_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, forward));
        CTRL_CUDA(
            cudaFuncSetAttribute(fused_backward_kv_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, backward));
        CTRL_CUDA(
            cudaFuncSetAttribute(fused_backward_q_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, backward));
      });
}

void CudaOps::fused_attention_forward(TensorRef out, TensorRef saved, TensorRef qkv, int64_t B, int64_t T, int64_t D,
                                      int64_t H) {
  CTRL_ASSERT(qkv.dtype == DType::BF16 && out.dtype == DType::BF16 && H <= kMaxGridYZ);
  CTRL_ASSERT(aligned16(qkv.data) && aligned16(out.data));
  const int64_t hd = D / H;
  const float scale = 1.0f / std::sqrt(float(hd));
  auto* o = static_cast<uint16_t*>(out.data);
  auto* lse = static_cast<float*>(saved.data);
  const auto* in = static_cast<const uint16_t*>(qkv.data);
  const bool launched = with_head_width(
      hd, [&](auto width) { launch_forward<decltype(width)::value>(stream_, o, lse, in, B, T, H, scale); });
  CTRL_ASSERT(launched);  // fused_attention() admitted only the widths built
}

void CudaOps::fused_attention_backward(TensorRef dqkv, TensorRef dout, TensorRef qkv, TensorRef out, TensorRef saved,
                                       int64_t B, int64_t T, int64_t D, int64_t H) {
  CTRL_ASSERT(dqkv.dtype == DType::BF16 && dout.dtype == DType::BF16 && out.dtype == DType::BF16 && H <= kMaxGridYZ);
  CTRL_ASSERT(aligned16(dqkv.data) && aligned16(dout.data) && aligned16(qkv.data) && aligned16(out.data));
  const int64_t hd = D / H, rows = B * T * H;
  const float scale = 1.0f / std::sqrt(float(hd));
  auto* dot = static_cast<float*>(scratch(kRowDot, size_t(rows) * sizeof(float)));
  const auto* d_out = static_cast<const uint16_t*>(dout.data);
  row_dot_kernel<<<unsigned((rows + 7) / 8), 256, 0, stream_>>>(dot, d_out, static_cast<const uint16_t*>(out.data),
                                                                rows, T, H, hd);
  CTRL_CUDA_LAUNCHED("attention_row_dot");
  auto* d = static_cast<uint16_t*>(dqkv.data);
  const auto* in = static_cast<const uint16_t*>(qkv.data);
  const auto* lse = static_cast<const float*>(saved.data);
  const bool launched = with_head_width(hd, [&](auto width) {
    launch_backward<decltype(width)::value>(stream_, d, d_out, in, lse, dot, B, T, H, scale);
  });
  CTRL_ASSERT(launched);
}

}  // namespace ctrl::cuda
