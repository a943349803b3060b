#include "generate/generator.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_set>

#include "core/error.h"

namespace ctrl {

int32_t sample_next(std::vector<float> logits, const std::vector<int32_t>& history, const SamplingOptions& o,
                    CounterRng& rng) {
  if (o.vocabulary > 0 && size_t(o.vocabulary) < logits.size()) logits.resize(size_t(o.vocabulary));
  if (o.penalty != 1.0) {
    std::unordered_set<int32_t> seen(history.begin(), history.end());
    for (int32_t t : seen) {
      if (t < 0 || size_t(t) >= logits.size()) continue;
      float& l = logits[size_t(t)];
      l = l > 0 ? l / float(o.penalty) : l * float(o.penalty);
    }
  }
  if (o.temperature <= 0) return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] != logits[size_t(b)] ? logits[size_t(a)] > logits[size_t(b)] : a < b;
  });
  size_t keep = order.size();
  if (o.top_k > 0) keep = std::min(keep, size_t(o.top_k));
  std::vector<double> p(keep);
  const double mx = logits[size_t(order[0])];
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += (p[i] = std::exp((logits[size_t(order[i])] - mx) / o.temperature));
  if (o.top_p < 1.0) {  // smallest prefix whose probability reaches top_p
    double cum = 0;
    for (size_t i = 0; i < keep; ++i) {
      cum += p[i] / sum;
      if (cum >= o.top_p) {
        keep = i + 1;
        break;
      }
    }
    sum = 0;
    for (size_t i = 0; i < keep; ++i) sum += p[i];
  }
  double u = rng.uniform() * sum;
  for (size_t i = 0; i < keep; ++i) {
    u -= p[i];
    if (u <= 0) return order[i];
  }
  return order[keep - 1];
}

}  // namespace ctrl
