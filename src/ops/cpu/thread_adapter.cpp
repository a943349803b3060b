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
// Token mode: the first probe after this many tokens (the first token's time
// is not a sample: it follows the prompt); timed tokens per count (median),
// the other counts' after one warm-up token; the margin a count must win by.
constexpr int64_t kTokensBeforeFirstProbe = 3;
constexpr size_t kTrialTokens = 3;
constexpr double kTokenMargin = 1.1;
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
  // The first probe comes early (a short run, e.g. `ctrl bench`, lasts seconds), then one per interval.
  const double wait = probed_ ? interval_ : std::min(interval_, kFirstProbeSeconds);
  if (!started_ || std::chrono::duration<double>(now - last_probe_).count() < wait) {
    if (!started_) started_ = true, last_probe_ = now;
    return "";
  }
  std::vector<double> seconds(candidates_.size());
  for (size_t i = 0; i < candidates_.size(); ++i) seconds[i] = burst_seconds(candidates_[i]);
  probed_ = true;
  last_probe_ = std::chrono::steady_clock::now();
  return settle(seconds, margin_, "products", true);
}

std::string ThreadAdapter::settle(const std::vector<double>& seconds, double margin, const char* what,
                                  bool say_why) {
  const size_t at = index_of(current_);
  const size_t fastest = size_t(std::min_element(seconds.begin(), seconds.end()) - seconds.begin());
  const int before = current_;
  if (fastest != at && seconds[at] >= margin * seconds[fastest]) current_ = candidates_[fastest];
  omp_set_num_threads(current_);
  if (current_ == before) return "";
  const char* why = !say_why                    ? ""
                    : current_ < max_threads_ ? " (another process is using the CPUs)"
                                              : " (the CPUs are free again)";
  char line[200];
  std::snprintf(line, sizeof line, "%d threads instead of %d: their %s ran %.1fx faster just now%s", current_, before,
                what, seconds[at] / seconds[fastest], why);
  return line;
}

std::string ThreadAdapter::between_tokens() {
  const auto now = std::chrono::steady_clock::now();
  const double seconds = tokens_ > 0 ? std::chrono::duration<double>(now - last_token_).count() : 0.0;
  last_token_ = now;
  return after_token(seconds);
}

std::string ThreadAdapter::after_token(double seconds) {
  if (candidates_.size() < 2) return "";
  ++tokens_;
  if (trial_ < 0) {
    // The current count's samples are the tokens just decoded, so a probe
    // runs only the other counts: on a busy machine, no extra token at a slow count.
    if (tokens_ > 1) {
      recent_.push_back(seconds);
      if (recent_.size() > kTrialTokens) recent_.erase(recent_.begin());
    }
    since_probe_ += seconds;
    const bool due = probed_ ? since_probe_ >= interval_ && !recent_.empty() : tokens_ >= kTokensBeforeFirstProbe;
    if (!due) return "";
    token_seconds_.assign(candidates_.size(), {});
    token_seconds_[index_of(current_)] = recent_;
    others_.clear();
    for (int n : candidates_)
      if (n != current_) others_.push_back(n);
    trial_ = 0, trial_tokens_ = 0;
    omp_set_num_threads(others_[0]);
    return "";
  }
  if (trial_tokens_++ > 0) token_seconds_[index_of(others_[size_t(trial_)])].push_back(seconds);  // the first: warm-up
  if (size_t(trial_tokens_) <= kTrialTokens) return "";
  if (++trial_ < int(others_.size())) {
    trial_tokens_ = 0;
    omp_set_num_threads(others_[size_t(trial_)]);
    return "";
  }
  std::vector<double> median;
  for (auto& times : token_seconds_) {
    std::nth_element(times.begin(), times.begin() + long(times.size() / 2), times.end());
    median.push_back(times[times.size() / 2]);
  }
  trial_ = -1, since_probe_ = 0, probed_ = true;
  recent_.clear();
  return settle(median, kTokenMargin, "tokens", false);
}

size_t ThreadAdapter::index_of(int threads) const {
  return size_t(std::find(candidates_.begin(), candidates_.end(), threads) - candidates_.begin());
}

}  // namespace ctrl::cpu
