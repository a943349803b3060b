#include "train/evaluation.h"

#include <algorithm>
#include <cmath>

namespace ctrl {

double CodeLoss::perplexity() const { return std::exp(loss); }

LossSum evaluate_windows(Model& model, const int32_t* tokens, const int32_t* targets, int64_t n, int64_t T,
                         int64_t batch) {
  // The loss accumulates in backend memory; the host reads it once.
  DeviceArray<double> loss_sum(model.ops(), 1, "eval.loss_sum");
  LossSum total;
  for (int64_t i = 0; i < n; i += batch) {
    const int64_t b = std::min(batch, n - i);
    total.count += model.evaluate(tokens + i * T, targets + i * T, b, T, nullptr, loss_sum.data()).count;
  }
  loss_sum.download(&total.sum, 1);
  return total;
}

std::vector<CodeLoss> evaluate_held_out(Model& model, const Batches& batches, int64_t batch, int64_t max_sequences,
                                        Communicator* comm) {
  std::vector<CodeLoss> out;
  std::vector<int32_t> tokens, targets;
  const int64_t T = batches.context();
  const int64_t rank = comm ? comm->rank() : 0, size = comm ? comm->size() : 1;
  for (size_t c = 0; c < batches.n_codes(); ++c) {
    const int64_t n = batches.held_out(c, max_sequences, &tokens, &targets);
    if (n == 0) continue;
    // This rank's windows: rank, rank + size, ...; gathered into consecutive micro-batches.
    std::vector<int32_t> mine_tokens, mine_targets;
    for (int64_t i = rank; i < n; i += size) {
      mine_tokens.insert(mine_tokens.end(), tokens.begin() + i * T, tokens.begin() + (i + 1) * T);
      mine_targets.insert(mine_targets.end(), targets.begin() + i * T, targets.begin() + (i + 1) * T);
    }
    const int64_t mine = int64_t(mine_tokens.size()) / T;
    const LossSum l = evaluate_windows(model, mine_tokens.data(), mine_targets.data(), mine, T, batch);
    double sums[2] = {l.sum, double(l.count)};
    if (comm) comm->all_reduce_sum(sums, 2);
    out.push_back({batches.code_name(c), sums[1] > 0 ? sums[0] / sums[1] : 0.0, int64_t(sums[1])});
  }
  return out;
}

}  // namespace ctrl
