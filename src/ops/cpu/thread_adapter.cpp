#include "ops/cpu/thread_adapter.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "ops/cpu/gemm.h"

namespace ctrl::cpu {

namespace {
// The burst: products of a small model's shape ([256, 384] · [384, 384]), a
// few parallel regions long, so barrier waits weigh as they do in training.
constexpr int64_t kRows = 256, kWidth = 384, kProducts = 2;
constexpr double kFirstProbeSeconds = 2.0;
}  // namespace

ThreadAdapter::ThreadAdapter(int max_threads, double interval_seconds, double margin,
                             std::function<double(int)> burst)
    : burst_(std::move(burst)),
      max_threads_(std::max(1, max_threads)),
      current_(max_threads_),
      interval_(interval_seconds),
      margin_(margin) {
  for (int n : {max_threads_, max_threads_ - 1, max_threads_ / 2})
    if (n >= 1 && std::find(candidates_.begin(), candidates_.end(), n) == candidates_.end()) candidates_.push_back(n);
  if (burst_) return;
  a_.assign(size_t(kRows * kWidth), 0.01f);
  b_.assign(size_t(kWidth * kWidth), 0.02f);
  c_.assign(size_t(kRows * kWidth), 0.0f);
}

double ThreadAdapter::burst_seconds(int threads) {
  omp_set_num_threads(threads);
  if (burst_) return burst_(threads);
  double best = 1e30;
  for (int run = 0; run < 3; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < kProducts; ++i)
      gemm_f32(false, false, kRows, kWidth, kWidth, 1.0f, a_.data(), kWidth, b_.data(), kWidth, 0.0f, c_.data(),
               kWidth);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

std::string ThreadAdapter::between_steps() {
  const auto now = std::chrono::steady_clock::now();
  if (candidates_.size() < 2) return "";
  // The first probe comes early (a short `ctrl generate` lasts seconds), then one per interval.
  const double wait = probed_ ? interval_ : std::min(interval_, kFirstProbeSeconds);
  if (!started_ || std::chrono::duration<double>(now - last_probe_).count() < wait) {
    if (!started_) started_ = true, last_probe_ = now;
    return "";
  }
  std::vector<double> seconds(candidates_.size());
  for (size_t i = 0; i < candidates_.size(); ++i) seconds[i] = burst_seconds(candidates_[i]);
  const size_t at = size_t(std::find(candidates_.begin(), candidates_.end(), current_) - candidates_.begin());
  const size_t fastest = size_t(std::min_element(seconds.begin(), seconds.end()) - seconds.begin());
  const int before = current_;
  if (fastest != at && seconds[at] >= margin_ * seconds[fastest]) current_ = candidates_[fastest];
  omp_set_num_threads(current_);
  probed_ = true;
  last_probe_ = std::chrono::steady_clock::now();
  if (current_ == before) return "";
  char line[200];
  std::snprintf(line, sizeof line, "%d threads instead of %d: their products ran %.1fx faster just now (%s)",
                current_, before, seconds[at] / seconds[fastest],
                current_ < max_threads_ ? "another process is using the CPUs" : "the CPUs are free again");
  return line;
}

}  // namespace ctrl::cpu
