// Optimizer updates over segment lists in one kernel: the segments' element
// counts are concatenated, each thread takes elements of that concatenation
// and finds its segment by binary search in a device table (uploaded again
// only when the list changes). The gradient factor (unscale × clip, from
// clip_factor) is read on the device, so a step never waits for the host.
// The arithmetic is the CPU's (ops/cpu/optimizer.cpp), in fp32.
#include <cmath>
#include <cstring>

#include "ops/cuda/common.cuh"

namespace ctrl::cuda {

namespace {

struct Segment {
  uint64_t param_offset, state_offset, n, first;  // first: its start in the concatenation
  float weight_decay;
};

__device__ const Segment& find(const Segment* table, int count, uint64_t e) {
  int lo = 0, hi = count - 1;  // the last segment whose first <= e
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (table[mid].first <= e) lo = mid;
    else hi = mid - 1;
  }
  return table[lo];
}

__global__ void adamw_kernel(float* params, const float* grads, float* m, float* v, const Segment* table, int count,
                             uint64_t total, float lr, float beta1, float beta2, float eps, float step_size,
                             float bias2_sqrt, const float* grad_factor) {
  const float factor = grad_factor ? *grad_factor : 1.0f;
  for (uint64_t e = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; e < total; e += uint64_t(gridDim.x) * blockDim.x) {
    const Segment& s = find(table, count, e);
    const uint64_t k = e - s.first, pi = s.param_offset + k, si = s.state_offset + k;
    const float gi = grads[si] * factor;
    const float mi = beta1 * m[si] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[si] + (1.0f - beta2) * gi * gi;
    m[si] = mi, v[si] = vi;
    const float denom = sqrtf(vi) / bias2_sqrt + eps;
    params[pi] = params[pi] * (1.0f - lr * s.weight_decay) - step_size * (mi / denom);
  }
}

__global__ void adagrad_kernel(float* params, const float* grads, float* acc, const Segment* table, int count,
                               uint64_t total, float lr, const float* grad_factor) {
  const float factor = grad_factor ? *grad_factor : 1.0f;
  for (uint64_t e = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; e < total; e += uint64_t(gridDim.x) * blockDim.x) {
    const Segment& s = find(table, count, e);
    const uint64_t k = e - s.first, pi = s.param_offset + k, si = s.state_offset + k;
    const float gi = grads[si] * factor;
    const float a = acc[si] + gi * gi;
    acc[si] = a;
    params[pi] -= lr * gi / sqrtf(a);
  }
}

uint64_t total_of(const std::vector<UpdateSegment>& segments) {
  uint64_t total = 0;
  for (const auto& s : segments) total += s.n;
  return total;
}

bool same(const std::vector<UpdateSegment>& a, const std::vector<UpdateSegment>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].param_offset != b[i].param_offset || a[i].state_offset != b[i].state_offset || a[i].n != b[i].n ||
        a[i].weight_decay != b[i].weight_decay)
      return false;
  return true;
}

}  // namespace

const void* CudaOps::segment_table(const std::vector<UpdateSegment>& segments) {
  if (segments_dev_ && same(segments, segments_host_)) return segments_dev_;
  std::vector<Segment> table;
  uint64_t first = 0;
  for (const auto& s : segments) {
    if (s.n == 0) continue;  // empty segments never own an element
    table.push_back({s.param_offset, s.state_offset, s.n, first, s.weight_decay});
    first += s.n;
  }
  if (table.empty()) table.push_back({0, 0, 0, 0, 0.0f});
  const size_t bytes = table.size() * sizeof(Segment);
  CTRL_CUDA(cudaStreamSynchronize(stream_));  // an earlier update may still read the old table
  if (bytes > segments_capacity_) {
    device_free(segments_dev_);
    segments_dev_ = nullptr;
    segments_dev_ = device_malloc(bytes, "the optimizer's segment table");
    segments_capacity_ = bytes;
  }
  upload(segments_dev_, table.data(), bytes);  // on stream_: kernels queued later see the table
  segments_host_ = segments;
  return segments_dev_;
}

namespace {
int table_count(const std::vector<UpdateSegment>& segments) {
  int n = 0;
  for (const auto& s : segments) n += s.n > 0;
  return n > 0 ? n : 1;
}
}  // namespace

void CudaOps::adamw_update(float* params, const float* grads, float* m, float* v,
                           const std::vector<UpdateSegment>& segments, float lr, float beta1, float beta2, float eps,
                           int64_t t, const float* grad_factor) {
  const uint64_t total = total_of(segments);
  if (total == 0) return;
  const Segment* table = static_cast<const Segment*>(segment_table(segments));
  const double bias1 = 1.0 - std::pow(double(beta1), double(t));
  const float step_size = float(double(lr) / bias1);
  const float bias2_sqrt = float(std::sqrt(1.0 - std::pow(double(beta2), double(t))));
  adamw_kernel<<<blocks_for(total), 256, 0, stream_>>>(params, grads, m, v, table, table_count(segments), total, lr,
                                                       beta1, beta2, eps, step_size, bias2_sqrt, grad_factor);
  CTRL_CUDA_LAUNCHED("adamw_update");
}

void CudaOps::adagrad_update(float* params, const float* grads, float* acc, const std::vector<UpdateSegment>& segments,
                             float lr, const float* grad_factor) {
  const uint64_t total = total_of(segments);
  if (total == 0) return;
  const Segment* table = static_cast<const Segment*>(segment_table(segments));
  adagrad_kernel<<<blocks_for(total), 256, 0, stream_>>>(params, grads, acc, table, table_count(segments), total, lr,
                                                         grad_factor);
  CTRL_CUDA_LAUNCHED("adagrad_update");
}

}  // namespace ctrl::cuda
