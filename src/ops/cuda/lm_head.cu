// The output head fused with softmax cross-entropy, on row chunks so the
// [N, V] logits never exist whole (the caller's scratch holds one chunk).
// Rows of the logits (and of their bf16 copy and the teacher's logits) lie
// head_row_stride(V) apart, so the products' leading dimensions stay aligned.
// (On the GPU the chunks are larger than the caller's: see head().)
// Per chunk: one product for the logits (bias in its epilogue), with a
// teacher (distillation) a second for its logits, one row kernel for the
// softmax statistics, the loss, the KL and the logit gradients, then
// db (column sums), dw and dh (two products). Row losses are kept in device
// doubles and summed once at the end, in a fixed tree, into *loss_sum.
// Types follow the CPU (ops/cpu/lm_head.cpp): 16-bit h and w (bf16 or fp16)
// enter products of their type on tensor cores, whose backward takes a copy
// of the logit gradients in that type; logits, softmax, loss and db are fp32
// throughout.
#include <cmath>

#include "ops/cuda/common.cuh"
#include "ops/gpu_scratch.h"

namespace ctrl::cuda {

namespace {

constexpr int kThreads = 256;

// The teacher's side of a chunk's rows, for distillation (null u: none).
struct RowTeacher {
  const float* u = nullptr;  // the teacher's logits, rows like the student's
  double* kls = nullptr;     // per row: KL(p‖q), p = softmax(u/τ), q = softmax(z/τ)
  float inv_t = 1, alpha = 0, temperature = 1;
};

// One block per row r of the chunk: loss = logsumexp − logit[target]
// (0 for ignored rows, target < 0). When training, the row becomes its logit
// gradient grad_scale·(1 − α)·(softmax − one-hot) (α = 0 without a teacher),
// plus grad_scale·α·τ·(q − p) when α > 0, and `low` (if not null) its copy of kind kl.
// α = 0 with a teacher computes exactly what no teacher does, plus the KL.
__global__ void head_rows(float* logits, void* low, int kl, const int32_t* targets, double* losses, int64_t V,
                          int64_t ld, float grad_scale, bool training, RowTeacher t) {
  __shared__ float red_f[32];
  __shared__ double red_d[32];
  const int64_t r = blockIdx.x;
  float* row = logits + r * ld;
  const int32_t target = targets[r];
  float mx = -INFINITY;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, row[v]);
  mx = block_max(mx, red_f);
  double sum = 0;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) sum += double(expf(row[v] - mx));
  sum = block_sum(sum, red_d);
  // The teacher: with zq = (z − max z)/τ and zp = (u − max u)/τ,
  // KL = Σ e^zp (zp − zq) / Σ e^zp − log Σ e^zp + log Σ e^zq.
  const float* u = t.u ? t.u + r * ld : nullptr;
  float tmx = 0;
  double sum_q = 1, sum_p = 1;
  if (u && target >= 0) {  // uniform across the block: one row
    tmx = -INFINITY;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) tmx = fmaxf(tmx, u[v]);
    tmx = block_max(tmx, red_f);
    double q = 0, p = 0, cross = 0;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
      const float zq = (row[v] - mx) * t.inv_t, zp = (u[v] - tmx) * t.inv_t, ep = expf(zp);
      q += double(expf(zq)), p += double(ep), cross += double(ep) * double(zp - zq);
    }
    sum_q = block_sum(q, red_d), sum_p = block_sum(p, red_d), cross = block_sum(cross, red_d);
    if (threadIdx.x == 0) t.kls[r] = cross / sum_p - log(sum_p) + log(sum_q);
  } else if (u && threadIdx.x == 0) {
    t.kls[r] = 0.0;
  }
  const float target_logit = target >= 0 ? row[target] : 0.0f;  // read before any thread rewrites the row
  if (threadIdx.x == 0) losses[r] = target >= 0 ? double(mx) + log(sum) - double(target_logit) : 0.0;
  if (!training) return;
  __syncthreads();
  const double ce_share = u ? 1.0 - double(t.alpha) : 1.0;
  const float factor = target >= 0 ? float(double(grad_scale) * ce_share / sum) : 0.0f;
  const float target_grad = float(double(grad_scale) * ce_share);
  const bool kl_gradient = u && target >= 0 && t.alpha > 0;
  const double k = double(grad_scale) * double(t.alpha) * double(t.temperature);
  const float kq = kl_gradient ? float(k / sum_q) : 0.0f, kp = kl_gradient ? float(k / sum_p) : 0.0f;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
    float g = expf(row[v] - mx) * factor;
    if (v == target) g -= target_grad;
    if (kl_gradient) g += kq * expf((row[v] - mx) * t.inv_t) - kp * expf((u[v] - tmx) * t.inv_t);
    row[v] = g;
    if (low) store(low, kl, size_t(r * ld + v), g);
  }
}

// *sum += Σ values (one block, fixed tree); row_loss[r] += values[r] if not null.
// The bound makes ptxas keep its registers within what a block this wide may
// have on every architecture built (64 per thread), so the launch cannot fail.
constexpr int kTotalThreads = 1024;
__global__ void __launch_bounds__(kTotalThreads)
    head_total(double* sum, float* row_loss, const double* values, int64_t N) {
  __shared__ double red[32];
  double acc = 0;
  for (int64_t r = threadIdx.x; r < N; r += blockDim.x) {
    acc += values[r];
    if (row_loss) row_loss[r] += float(values[r]);
  }
  acc = block_sum(acc, red);
  if (threadIdx.x == 0) *sum += acc;
}

}  // namespace

void CudaOps::lm_head_loss(TensorRef h, TensorRef w, const float* b, const int32_t* targets, int64_t N, int64_t D,
                           int64_t V, float grad_scale, float* dh, float* dw, float* db, double* loss_sum,
                           float* row_loss, float* logits, int64_t chunk_rows) {
  head(h, w, b, targets, N, D, V, grad_scale, dh, dw, db, loss_sum, row_loss, logits, chunk_rows, nullptr, 0.0f, 1.0f,
       nullptr);
}

void CudaOps::lm_head_distill(TensorRef h, TensorRef w, const float* b, const int32_t* targets,
                              const TeacherHead& teacher, int64_t N, int64_t D, int64_t V, float alpha,
                              float temperature, float grad_scale, float* dh, float* dw, float* db, double* loss_sum,
                              double* kl_sum, float* logits, int64_t chunk_rows) {
  CTRL_ASSERT(teacher.h.dtype == h.dtype && teacher.w.dtype == w.dtype && teacher.scratch && kl_sum);
  CTRL_ASSERT(alpha >= 0 && alpha <= 1 && temperature > 0);
  head(h, w, b, targets, N, D, V, grad_scale, dh, dw, db, loss_sum, nullptr, logits, chunk_rows, &teacher, alpha,
       temperature, kl_sum);
}

void CudaOps::head(TensorRef h, TensorRef w, const float* b, const int32_t* targets, int64_t N, int64_t D, int64_t V,
                   float grad_scale, float* dh, float* dw, float* db, double* loss_sum, float* row_loss, float* logits,
                   int64_t chunk_rows, const TeacherHead* teacher, float alpha, float temperature, double* kl_sum) {
  CTRL_ASSERT(h.dtype == w.dtype);
  const bool sixteen = h.dtype != DType::F32, training = dh != nullptr;
  const int64_t Dt = teacher ? teacher->D : 0;
  const TensorRef th = teacher ? teacher->h : TensorRef(), tw = teacher ? teacher->w : TensorRef();
  const size_t elem = dtype_size(h.dtype);
  double* losses = static_cast<double*>(scratch(kHeadLoss, size_t(N) * sizeof(double)));
  const int64_t ld = head_row_stride(V);
  // Without a teacher, larger chunks than the caller's in the backend's own
  // scratch (gpu_head_chunk_rows): at 256 rows rewriting dw cost more than the products.
  if (!teacher) {
    const int64_t rows = gpu_head_chunk_rows(N, V, chunk_rows);
    if (rows > chunk_rows) {
      chunk_rows = rows;
      logits = static_cast<float*>(scratch(kHeadLogits, size_t(rows * ld) * sizeof(float)));
    }
  }
  void* low = sixteen && training ? scratch(kHeadLow, size_t(chunk_rows * ld) * 2) : nullptr;
  RowTeacher rt;
  if (teacher) {
    rt.u = teacher->scratch;
    rt.kls = static_cast<double*>(scratch(kHeadKl, size_t(N) * sizeof(double)));
    rt.inv_t = 1.0f / temperature, rt.alpha = alpha, rt.temperature = temperature;
  }
  for (int64_t r0 = 0; r0 < N; r0 += chunk_rows) {
    const int64_t R = std::min(chunk_rows, N - r0);
    const TensorRef hc(static_cast<char*>(h.data) + size_t(r0 * D) * elem, h.dtype);
    gemm(false, true, R, V, D, 1.0f, hc, D, w, D, 0.0f, logits, ld, b);
    if (teacher) {  // the teacher's logits of the same rows; nothing flows back to it
      const TensorRef thc(static_cast<char*>(th.data) + size_t(r0 * Dt) * elem, th.dtype);
      gemm(false, true, R, V, Dt, 1.0f, thc, Dt, tw, Dt, 0.0f, teacher->scratch, ld, teacher->b);
    }
    RowTeacher chunk = rt;
    if (teacher) chunk.kls = rt.kls + r0;
    head_rows<<<unsigned(R), kThreads, 0, stream_>>>(logits, low, kind_of(h.dtype), targets + r0, losses + r0, V, ld,
                                                     grad_scale, training, chunk);
    CTRL_CUDA_LAUNCHED("head_rows");
    if (!training) continue;
    add_column_sums(db, logits, R, V, ld);
    const TensorRef dl = sixteen ? TensorRef(low, h.dtype) : TensorRef(logits);
    gemm(true, false, V, D, R, 1.0f, dl, ld, hc, D, 1.0f, dw, D);
    gemm(false, false, R, D, V, 1.0f, dl, ld, w, D, 0.0f, dh + r0 * D, D);
  }
  head_total<<<1, kTotalThreads, 0, stream_>>>(loss_sum, row_loss, losses, N);
  CTRL_CUDA_LAUNCHED("head_total");
  if (teacher) {
    head_total<<<1, kTotalThreads, 0, stream_>>>(kl_sum, nullptr, rt.kls, N);
    CTRL_CUDA_LAUNCHED("head_total (kl)");
  }
}

}  // namespace ctrl::cuda
