// The CPU backend's answer to a shared machine. When another process keeps a
// core busy, every OpenMP barrier waits for the thread whose core was taken,
// and fewer threads can run faster (bench/results/shared-machine-*.md).
// Between optimizer steps, 2 s after the first call
// and then every `interval` seconds, the adapter times a short burst of
// matrix products (best of 3 runs of a few ms) at each candidate thread count
// (all usable CPUs, one fewer, half) and moves to a count only when its burst
// ran at least `margin` times faster than the current count's. On a quiet
// machine the full count always wins by far, so the count never changes and
// a run stays bit-reproducible; under contention it changes, and with it the
// rounding of the products (results depend on the thread count), so pin the
// count (--threads, OMP_NUM_THREADS) for bit-exact runs on a busy machine.
//
// Generated tokens are timed directly instead: decoding one row is dozens of
// tiny parallel regions per token, so a taken core slows it far more than it
// slows the burst (3-6x, bench/results/generate-shared-machine-*.md), and a small model may decode
// faster on fewer threads even on a quiet machine. After the first three
// tokens and then every `interval` seconds of decoding, the last few tokens
// stand for the current count and a few tokens run at each other candidate
// count; the fastest (median) wins by kTokenMargin. The
// decoding ops give the same bits at any count, so this never changes what
// is generated (Generator.DecodingGivesTheSameBitsAtAnyThreadCount).
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ctrl::cpu {

class ThreadAdapter {
 public:
  // max_threads: the count to start with and return to; interval and margin
  // as above. `burst` (tests) replaces the timed products: seconds at a count.
  explicit ThreadAdapter(int max_threads, double interval_seconds = 20.0, double margin = 1.25,
                         std::function<double(int threads)> burst = nullptr);
  // Between optimizer steps: probes when the interval has passed (the first
  // call only starts the clock) and sets the OpenMP thread count. Returns a
  // one-line note when the count changed, else "".
  std::string between_steps();
  // Between generated tokens: `after_token(seconds the last token took)`
  // (between_tokens() reads the clock), as above; returns a note or "".
  std::string between_tokens();
  std::string after_token(double seconds);
  const std::vector<int>& candidates() const { return candidates_; }
  int current() const { return current_; }

 private:
  // Seconds for the burst of products at `threads` threads (the best of three runs).
  double burst_seconds(int threads);
  // Given each candidate's seconds, moves to the fastest when it beat the
  // current count by `margin`, sets the OpenMP count, and returns the note
  // ("" when unchanged): how much faster its `what` ran, and with `say_why`
  // whether the CPUs look taken or free.
  std::string settle(const std::vector<double>& seconds, double margin, const char* what, bool say_why);
  std::function<double(int)> burst_;
  std::vector<int> candidates_;
  int max_threads_, current_;
  double interval_, margin_;
  bool started_ = false, probed_ = false;
  std::chrono::steady_clock::time_point last_probe_;
  // The position of a count in candidates_.
  size_t index_of(int threads) const;
  // Token mode: the last tokens' seconds at the current count; during a
  // probe, the other counts, the one being timed (-1 between probes) and its
  // tokens so far (the first after a change is dropped: warm-up), and each
  // candidate's timed tokens; decoding seconds and tokens since the last probe.
  std::vector<double> recent_;
  std::vector<int> others_;
  int trial_ = -1, trial_tokens_ = 0;
  std::vector<std::vector<double>> token_seconds_;
  double since_probe_ = 0;
  int64_t tokens_ = 0;
  std::chrono::steady_clock::time_point last_token_;
  std::vector<float> a_, b_, c_;
};

}  // namespace ctrl::cpu
