// GradientSync, the trainer's data plane, against a recording two-rank
// communicator: every gradient element is reduced exactly once per step, layer
// buckets start during the backward (last layer first) and the rest after it,
// the sum is what the optimizer reads, and the host fence before each bucket
// is skipped exactly when the communicator orders itself after the backend's
// queue (NCCL given the cuda backend's stream).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "dist/communicator.h"
#include "model/model.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/decorator.h"
#include "train/grad_sync.h"

namespace {

using namespace ctrl;

// Rank 0 of two, whose partner holds the same gradients: a sum doubles them.
class TwoRankRecorder final : public Communicator {
 public:
  TwoRankRecorder(const float* grads, bool orders) : grads_(grads), orders_(orders) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string name() const override { return "two-rank recorder"; }
  double timeout_seconds() const override { return 60; }
  bool orders_after_backend() const override { return orders_; }
  void all_reduce_sum(float* data, size_t n) override { wait(all_reduce_sum_start(data, n)); }
  void all_reduce_sum(double* data, size_t n) override {
    for (size_t i = 0; i < n; ++i) data[i] *= 2;
  }
  int all_reduce_sum_start(float* data, size_t n) override {
    buckets.emplace_back(size_t(data - grads_), n);
    for (size_t i = 0; i < n; ++i) data[i] *= 2;
    return int(buckets.size()) - 1;
  }
  void wait(int handle) override { waited = std::max(waited, handle); }
  void broadcast(void*, size_t, int) override {}
  void barrier() override {}
  void reduce_scatter_sum(const float*, float*, size_t) override { throw std::logic_error("not used"); }
  void all_gather(const float*, float*, size_t) override { throw std::logic_error("not used"); }
  void check_identical(const std::string&, const std::string&) override {}
  [[noreturn]] void abort(const std::string& message) override { throw std::runtime_error(message); }

  std::vector<std::pair<size_t, size_t>> buckets;  // (offset into the gradients, length), in order of start
  int waited = -1;

 private:
  const float* grads_;
  bool orders_;
};

struct FenceCounter final : OpsDecorator {
  FenceCounter() : OpsDecorator(std::make_unique<cpu::CpuOps>()) {}
  void synchronize() override { ++fences; }
  int fences = 0;
};

ModelConfig three_layers() {
  ModelConfig c;
  c.vocab_size = 13, c.n_layer = 3, c.d_model = 8, c.n_head = 2, c.d_ff = 12, c.n_ctx = 6;
  c.embd_pdrop = c.resid_pdrop = 0.0;
  return c;
}

struct Step {
  std::vector<std::pair<size_t, size_t>> buckets;
  int waited, fences;
  std::vector<std::pair<size_t, size_t>> tensors;  // the layout's (offset, numel); aligned, so with gaps
  std::vector<float> summed, plain;  // the summed gradients, and one rank's
};

Step one_step(bool orders) {
  FenceCounter ops;
  const int64_t B = 2, T = 6;
  Model model(three_layers(), ops, B);
  model.init_weights();
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int64_t i = 0; i < B * T; ++i) tokens[size_t(i)] = int32_t(i * 5 % 13), targets[size_t(i)] = int32_t(i * 7 % 13);
  model.zero_grads();
  model.forward_backward(tokens.data(), targets.data(), B, T, 1.0f, 0);
  Step s;
  s.plain = model.grads.to_host();

  TwoRankRecorder comm(model.grads.data(), orders);
  GradientSync sync(model, ops, comm, 0);
  model.zero_grads();
  const int fences_before = ops.fences;
  sync.begin_micro_batch(true);
  model.forward_backward(tokens.data(), targets.data(), B, T, 1.0f, 0);
  sync.end_micro_batch();
  s.summed = sync.summed_gradients().to_host();
  s.fences = ops.fences - fences_before;
  s.buckets = comm.buckets;
  s.waited = comm.waited;
  for (const auto& p : model.layout().tensors) s.tensors.emplace_back(p.offset, p.numel);
  return s;
}

TEST(GradientSync, EveryGradientIsSummedOnceLayerBucketsFirst) {
  const Step s = one_step(false);
  const ModelConfig c = three_layers();
  // The first n_layer buckets are the layers, in backward order (last layer first).
  ASSERT_GT(s.buckets.size(), size_t(c.n_layer));
  for (size_t k = 1; k < size_t(c.n_layer); ++k) EXPECT_LT(s.buckets[k].first, s.buckets[k - 1].first) << k;
  // The buckets do not overlap, and each parameter tensor lies inside exactly one.
  auto sorted = s.buckets;
  std::sort(sorted.begin(), sorted.end());
  for (size_t k = 1; k < sorted.size(); ++k) EXPECT_LE(sorted[k - 1].first + sorted[k - 1].second, sorted[k].first);
  for (const auto& [offset, n] : s.tensors) {
    const auto holds = [&](const std::pair<size_t, size_t>& b) {
      return b.first <= offset && offset + n <= b.first + b.second;
    };
    EXPECT_EQ(std::count_if(sorted.begin(), sorted.end(), holds), 1) << "tensor at " << offset;
  }
  EXPECT_EQ(s.waited, int(s.buckets.size()) - 1);  // the last handle: every bucket completed
  ASSERT_EQ(s.summed.size(), s.plain.size());
  for (size_t i = 0; i < s.plain.size(); ++i) ASSERT_EQ(s.summed[i], 2 * s.plain[i]) << i;
}

TEST(GradientSync, FencesEachLayerBucketUnlessTheCommunicatorOrdersItself) {
  const Step fenced = one_step(false), ordered = one_step(true);
  EXPECT_EQ(fenced.buckets, ordered.buckets);
  EXPECT_EQ(fenced.summed, ordered.summed);
  // One fence per bucket started during or after the backward, and none when the communicator orders itself.
  EXPECT_EQ(fenced.fences - ordered.fences, int(fenced.buckets.size()));
}

}  // namespace
