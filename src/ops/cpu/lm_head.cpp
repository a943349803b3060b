// The output head fused with softmax cross-entropy, forward and backward, on
// row chunks so the full [N, V] logits are never materialized.
//
// Within a chunk the work is split by vocabulary blocks, one block per task on
// one thread: a block's logits, its bf16 logit gradients, its share of dw and
// db stay in that thread's cache. One product over the whole vocabulary
// (V = 32000 against 256 rows) splits poorly inside oneDNN: the dw product ran
// at 530 GFLOP/s that way against 790 by blocks. The tasks are handed out
// dynamically, so that a thread whose core another process shares takes fewer
// of them; dh is summed over fixed groups of consecutive blocks (a partial per
// group, then the groups in order), so its bits do not depend on which thread
// ran which block.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/vec_math.h"

namespace ctrl::cpu {

namespace {
// Row stride of a block's bf16 gradients: padded off the power of two, whose
// 4 KiB stride made the dw product 30% slower (cache-set conflicts).
constexpr int64_t kBlockStride = kCpuHeadVocabBlock + 32;
// dh's groups of blocks per thread: enough tasks for the dynamic schedule to
// even out a thread that runs at half speed.
constexpr int64_t kGroupsPerThread = 4;
}  // namespace

void CpuOps::lm_head_loss(TensorRef h, TensorRef w, const float* b, const int32_t* targets, int64_t N, int64_t D,
                          int64_t V, float grad_scale, float* dh, float* dw, float* db, double* loss_sum,
                          float* row_loss, float* scratch, int64_t chunk_rows) {
  head_loss(h, w, b, targets, N, D, V, grad_scale, dh, dw, db, loss_sum, row_loss, scratch, chunk_rows, nullptr, 0, 1,
            nullptr);
}

void CpuOps::lm_head_distill(TensorRef h, TensorRef w, const float* b, const int32_t* targets,
                             const TeacherHead& teacher, int64_t N, int64_t D, int64_t V, float alpha,
                             float temperature, float grad_scale, float* dh, float* dw, float* db, double* loss_sum,
                             double* kl_sum, float* scratch, int64_t chunk_rows) {
  CTRL_ASSERT(teacher.h.dtype == h.dtype && teacher.w.dtype == w.dtype && teacher.scratch && kl_sum);
  CTRL_ASSERT(alpha >= 0 && alpha <= 1 && temperature > 0);
  head_loss(h, w, b, targets, N, D, V, grad_scale, dh, dw, db, loss_sum, nullptr, scratch, chunk_rows, &teacher, alpha,
            temperature, kl_sum);
}

// One path for both: without a teacher it is lm_head_loss exactly. With one,
// the teacher's logits of each vocabulary block are computed beside the
// student's, each row's softened distributions and KL come from two extra
// passes over the row (per-thread rows: q's exponentials, then log p - log q),
// and the KL's logit gradient is added after the cross-entropy's — only when
// α > 0, so that α = 0 leaves lm_head_loss's arithmetic untouched.
void CpuOps::head_loss(TensorRef h_ref, TensorRef w_ref, const float* b, const int32_t* targets, int64_t N, int64_t D,
                       int64_t V, float grad_scale, float* dh, float* dw, float* db, double* loss_sum, float* row_loss,
                       float* scratch, int64_t chunk_rows, const TeacherHead* teacher, float alpha,
                       float temperature, double* kl_sum) {
  // bf16: h and w are bf16; the logits, softmax and loss stay fp32, and the two
  // backward products take a bf16 copy of each block's logit gradients.
  // fp16 widens h and w to fp32 (this CPU has no fp16 products), and its two
  // backward products take the logit gradients' fp16 rounding, as a GPU's fp16
  // products do (db sums them unrounded).
  const bool low = h_ref.dtype == DType::BF16, f16 = h_ref.dtype == DType::F16;
  const float* h = low ? nullptr : widened(h_ref, size_t(N * D), 0);
  const float* w = low ? nullptr : widened(w_ref, size_t(V * D), 1);
  const int64_t Dt = teacher ? teacher->D : 0;
  const float* th = teacher && !low ? widened(teacher->h, size_t(N * Dt), 3) : nullptr;
  const float* tw = teacher && !low ? widened(teacher->w, size_t(V * Dt), 4) : nullptr;
  const int64_t blocks = (V + kCpuHeadVocabBlock - 1) / kCpuHeadVocabBlock;
  const int threads = omp_get_max_threads();
  std::vector<double> losses(size_t(N), 0.0), kls(teacher ? size_t(N) : 0, 0.0);
  // The cross-entropy's share of the logit gradient: exactly grad_scale without a teacher (ce_share 1).
  const double ce_share = teacher ? 1.0 - double(alpha) : 1.0;
  const float target_grad = float(double(grad_scale) * ce_share);
  const bool kl_gradient = teacher && alpha > 0;
  std::vector<float> teacher_max(teacher ? static_cast<size_t>(chunk_rows * blocks) : 0);
  if (teacher) distill_rows_.resize(size_t(threads) * 2 * size_t(V));
  std::vector<float> block_max(static_cast<size_t>(chunk_rows * blocks)), row_factor(static_cast<size_t>(chunk_rows));
  const int64_t groups = std::min<int64_t>(blocks, kGroupsPerThread * threads);
  if (dh) {
    head_dh_partial_.resize(size_t(groups * chunk_rows * D));
    if (low) head_dlogits_.resize(size_t(threads * chunk_rows * kBlockStride));
  }
  for (int64_t r0 = 0; r0 < N; r0 += chunk_rows) {
    const int64_t R = std::min(chunk_rows, N - r0);
    float* logits = scratch;
#pragma omp parallel num_threads(threads)
    {
      // Logits of each block, the bias, and the block's maximum per row.
#pragma omp for schedule(dynamic, 1)
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t v0 = blk * kCpuHeadVocabBlock, bw = std::min(kCpuHeadVocabBlock, V - v0);
        if (low)
          gemm_bf16(false, true, R, bw, D, 1.0f, h_ref.bf16() + r0 * D, D, w_ref.bf16() + v0 * D, D, 0.0f, logits + v0,
                    V);
        else
          gemm_f32(false, true, R, bw, D, 1.0f, h + r0 * D, D, w + v0 * D, D, 0.0f, logits + v0, V);
        for (int64_t r = 0; r < R; ++r) {
          float* row = logits + r * V + v0;
          for (int64_t v = 0; v < bw; ++v) row[v] += b[v0 + v];
          block_max[size_t(r * blocks + blk)] = row_max(row, bw);
        }
        if (teacher) {  // the teacher's logits of the same rows and block
          float* tl = teacher->scratch;
          if (low)
            gemm_bf16(false, true, R, bw, Dt, 1.0f, teacher->h.bf16() + r0 * Dt, Dt, teacher->w.bf16() + v0 * Dt, Dt,
                      0.0f, tl + v0, V);
          else
            gemm_f32(false, true, R, bw, Dt, 1.0f, th + r0 * Dt, Dt, tw + v0 * Dt, Dt, 0.0f, tl + v0, V);
          for (int64_t r = 0; r < R; ++r) {
            float* row = tl + r * V + v0;
            for (int64_t v = 0; v < bw; ++v) row[v] += teacher->b[v0 + v];
            teacher_max[size_t(r * blocks + blk)] = row_max(row, bw);
          }
        }
      }
      // Softmax statistics and the loss per row; the row becomes exp(logit - max).
#pragma omp for schedule(dynamic, 8)
      for (int64_t r = 0; r < R; ++r) {
        float* row = logits + r * V;
        const int32_t target = targets[r0 + r];
        const float target_logit = target >= 0 ? row[target] : 0.0f;
        const float* maxima = block_max.data() + r * blocks;
        const float mx = *std::max_element(maxima, maxima + blocks);
        if (teacher && target >= 0) {
          // With e_q = exp((z − max z)/τ) in a, e_p = exp((u − max u)/τ) in place of u and
          // diff = (u − max u)/τ − (z − max z)/τ: log p − log q = diff − log Σe_p + log Σe_q, so
          // kl = Σ p (log p − log q) = Σ e_p·diff / Σe_p − log Σe_p + log Σe_q.
          const float* tmaxima = teacher_max.data() + r * blocks;
          const float tmx = *std::max_element(tmaxima, tmaxima + blocks);
          float* u = teacher->scratch + r * V;
          float* a = distill_rows_.data() + size_t(omp_get_thread_num()) * 2 * size_t(V);
          float* diff = a + V;
          const float inv = 1.0f / temperature;
          for (int64_t v = 0; v < V; ++v) {
            a[v] = row[v] * inv;
            diff[v] = (u[v] - tmx) * inv - (row[v] - mx) * inv;
            u[v] *= inv;
          }
          const double sum_q = exp_shift_sum(a, V, mx * inv), sum_p = exp_shift_sum(u, V, tmx * inv);
          double cross = 0;
          for (int64_t v = 0; v < V; ++v) cross += double(u[v]) * double(diff[v]);
          kls[size_t(r0 + r)] = cross / sum_p - std::log(sum_p) + std::log(sum_q);
          if (kl_gradient) {  // u becomes the KL's logit gradient, grad_scale·α·τ·(q − p)
            const double k = double(grad_scale) * double(alpha) * double(temperature);
            const float kq = float(k / sum_q), kp = float(k / sum_p);
            for (int64_t v = 0; v < V; ++v) u[v] = kq * a[v] - kp * u[v];
          }
        }
        const double sum = exp_shift_sum(row, V, mx);
        losses[size_t(r0 + r)] = target >= 0 ? double(mx) + std::log(sum) - double(target_logit) : 0.0;
        // softmax · grad_scale (· (1 − α) with a teacher)
        row_factor[size_t(r)] = target >= 0 ? float(double(grad_scale) * ce_share / sum) : 0.0f;
      }
      if (dh) {
        // Per block: logit gradients (softmax − one-hot, scaled), db, dw, and
        // the block's share of its group's partial dh.
        uint16_t* dl_low = low ? head_dlogits_.data() + size_t(omp_get_thread_num() * chunk_rows * kBlockStride)
                               : nullptr;
#pragma omp for schedule(dynamic, 1)
        for (int64_t g = 0; g < groups; ++g) {
          float* dh_part = head_dh_partial_.data() + size_t(g * chunk_rows * D);
          for (int64_t blk = g * blocks / groups; blk < (g + 1) * blocks / groups; ++blk) {
            const int64_t v0 = blk * kCpuHeadVocabBlock, bw = std::min(kCpuHeadVocabBlock, V - v0);
            for (int64_t r = 0; r < R; ++r) {
              float* row = logits + r * V + v0;
              row_scale(row, bw, row_factor[size_t(r)]);
              const int32_t target = targets[r0 + r];
              if (target >= v0 && target < v0 + bw) row[target - v0] -= target_grad;
              if (kl_gradient && target >= 0) {
                const float* kl_grad = teacher->scratch + r * V + v0;
                for (int64_t v = 0; v < bw; ++v) row[v] += kl_grad[v];
              }
              for (int64_t v = 0; v < bw; ++v) db[v0 + v] += row[v];
              if (low) to_bf16(row, dl_low + r * kBlockStride, bw);
              if (f16) round_through_f16(row, row, bw);
            }
            const float beta = blk == g * blocks / groups ? 0.0f : 1.0f;  // the group's first block starts its partial
            if (low) {
              gemm_bf16(true, false, bw, D, R, 1.0f, dl_low, kBlockStride, h_ref.bf16() + r0 * D, D, 1.0f,
                        dw + v0 * D, D);
              gemm_bf16(false, false, R, D, bw, 1.0f, dl_low, kBlockStride, w_ref.bf16() + v0 * D, D, beta, dh_part,
                        D);
            } else {
              gemm_f32(true, false, bw, D, R, 1.0f, logits + v0, V, h + r0 * D, D, 1.0f, dw + v0 * D, D);
              gemm_f32(false, false, R, D, bw, 1.0f, logits + v0, V, w + v0 * D, D, beta, dh_part, D);
            }
          }
        }
        // dh = Σ group partials in group order (the loop's implicit barrier made them complete).
#pragma omp for schedule(dynamic, 8)
        for (int64_t r = 0; r < R; ++r) {
          float* out = dh + (r0 + r) * D;
          std::copy_n(head_dh_partial_.data() + r * D, D, out);
          for (int64_t g = 1; g < groups; ++g) {
            const float* part = head_dh_partial_.data() + size_t(g * chunk_rows * D) + r * D;
            for (int64_t d = 0; d < D; ++d) out[d] += part[d];
          }
        }
      }
    }
  }
  double total = 0;
  for (int64_t r = 0; r < N; ++r) {
    total += losses[size_t(r)];
    if (row_loss) row_loss[r] += float(losses[size_t(r)]);
  }
  *loss_sum += total;
  if (teacher) {
    double kl = 0;
    for (double k : kls) kl += k;
    *kl_sum += kl;
  }
}

}  // namespace ctrl::cpu
