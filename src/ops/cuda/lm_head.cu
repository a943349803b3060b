// The output head fused with softmax cross-entropy, on row chunks so the
// [N, V] logits never exist whole (the caller's scratch holds one chunk).
// Per chunk: one product for the logits (bias in its epilogue), one row
// kernel for the softmax statistics, the loss and the logit gradients, then
// db (column sums), dw and dh (two products). Row losses are kept in device
// doubles and summed once at the end, in a fixed tree, into *loss_sum.
// Types follow the CPU (ops/cpu/lm_head.cpp): bf16 h and w enter bf16
// products, whose backward takes a bf16 copy of the logit gradients; fp16 h
// and w are widened to fp32; logits, softmax and loss are fp32 throughout.
#include <cmath>

#include "ops/cuda/common.cuh"

namespace ctrl::cuda {

namespace {

constexpr int kThreads = 256;

// One block per row r of the chunk: loss = logsumexp − logit[target]
// (0 for ignored rows, target < 0). When training, the row becomes its logit
// gradient grad_scale·(softmax − one-hot), and `low` (if not null) its bf16 copy.
__global__ void head_rows(float* logits, uint16_t* low, const int32_t* targets, double* losses, int64_t V,
                          float grad_scale, bool training) {
  __shared__ float red_f[32];
  __shared__ double red_d[32];
  const int64_t r = blockIdx.x;
  float* row = logits + r * V;
  const int32_t target = targets[r];
  float mx = -INFINITY;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, row[v]);
  mx = block_max(mx, red_f);
  double sum = 0;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) sum += double(expf(row[v] - mx));
  sum = block_sum(sum, red_d);
  const float target_logit = target >= 0 ? row[target] : 0.0f;  // read before any thread rewrites the row
  if (threadIdx.x == 0) losses[r] = target >= 0 ? double(mx) + log(sum) - double(target_logit) : 0.0;
  if (!training) return;
  __syncthreads();
  const float factor = target >= 0 ? float(double(grad_scale) / sum) : 0.0f;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
    float g = expf(row[v] - mx) * factor;
    if (v == target) g -= grad_scale;
    row[v] = g;
    if (low) low[r * V + v] = float_to_bf16_bits(g);
  }
}

// *loss_sum += Σ losses (one block, fixed tree); row_loss[r] += losses[r].
__global__ void head_total(double* loss_sum, float* row_loss, const double* losses, int64_t N) {
  __shared__ double red[32];
  double acc = 0;
  for (int64_t r = threadIdx.x; r < N; r += blockDim.x) {
    acc += losses[r];
    if (row_loss) row_loss[r] += float(losses[r]);
  }
  acc = block_sum(acc, red);
  if (threadIdx.x == 0) *loss_sum += acc;
}

}  // namespace

void CudaOps::lm_head_loss(TensorRef h, TensorRef w, const float* b, const int32_t* targets, int64_t N, int64_t D,
                           int64_t V, float grad_scale, float* dh, float* dw, float* db, double* loss_sum,
                           float* row_loss, float* logits, int64_t chunk_rows) {
  CTRL_ASSERT(h.dtype == w.dtype);
  const bool bf16 = h.dtype == DType::BF16, training = dh != nullptr;
  if (h.dtype == DType::F16) {  // fp32 products on widened copies, as the CPU
    float* hw = static_cast<float*>(scratch(kWidenA, size_t(N * D) * 4));
    float* ww = static_cast<float*>(scratch(kWidenB, size_t(V * D) * 4));
    convert(hw, h, size_t(N * D));
    convert(ww, w, size_t(V * D));
    h = hw, w = ww;
  }
  const size_t elem = dtype_size(h.dtype);
  double* losses = static_cast<double*>(scratch(kHeadLoss, size_t(N) * sizeof(double)));
  uint16_t* low = bf16 && training ? static_cast<uint16_t*>(scratch(kHeadLow, size_t(chunk_rows * V) * 2)) : nullptr;
  for (int64_t r0 = 0; r0 < N; r0 += chunk_rows) {
    const int64_t R = std::min(chunk_rows, N - r0);
    const TensorRef hc(static_cast<char*>(h.data) + size_t(r0 * D) * elem, h.dtype);
    gemm(false, true, R, V, D, 1.0f, hc, D, w, D, 0.0f, logits, V, b);
    head_rows<<<unsigned(R), kThreads, 0, stream_>>>(logits, low, targets + r0, losses + r0, V, grad_scale, training);
    CTRL_CUDA_LAUNCHED("head_rows");
    if (!training) continue;
    add_column_sums(db, logits, R, V);
    const TensorRef dl = bf16 ? TensorRef(low, DType::BF16) : TensorRef(logits);
    gemm(true, false, V, D, R, 1.0f, dl, V, hc, D, 1.0f, dw, D);
    gemm(false, false, R, D, V, 1.0f, dl, V, w, D, 0.0f, dh + r0 * D, D);
  }
  head_total<<<1, 1024, 0, stream_>>>(loss_sum, row_loss, losses, N);
  CTRL_CUDA_LAUNCHED("head_total");
}

}  // namespace ctrl::cuda
