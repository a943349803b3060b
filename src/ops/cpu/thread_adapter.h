// The CPU backend's answer to a shared machine. ctrl's parallel regions split
// their work statically, so every barrier waits for the thread that got the
// least CPU time; when another process keeps a core busy, a different thread
// count can run faster (bench/results/shared-machine-*.md).
//
// Training steps: between optimizer steps, 2 s after the first call and after
// each change of the count, else every `interval` seconds, the adapter reads the kernel's accounting of this
// process's threads (/proc/self/task/*/schedstat: time on a CPU and time
// runnable but waiting for one). When ours waited, the CPU time they did not
// get went to other processes (competing_threads), and a model of a
// statically split step at each count (predicted_speed) picks the count,
// from the usable CPUs up to kMaxThreadsPerCpu per CPU: beside a busy
// process, more threads than CPUs win turns on every CPU, which one thread
// per CPU cannot use when one of them shares its CPU. Above the CPUs the
// matrix products run tiled (gemm.h), so that the threads whose turns come
// less often take fewer tiles. The adapter moves only
// when the model predicts `margin` times the current count's speed. On a
// quiet machine nothing competes, the count stays
// at the usable CPUs and a run stays bit-reproducible; under contention it
// changes, and with it the rounding of the products (results depend on the
// thread count and the tiling), so pin the count (--threads, OMP_NUM_THREADS) for bit-exact
// runs on a busy machine. Where the kernel keeps no such accounting the
// count never changes.
//
// Generated tokens are timed directly instead: decoding one row is dozens of
// tiny parallel regions per token, so a taken core slows it far more than it
// slows a training step (3-6x, bench/results/generate-shared-machine-*.md),
// and a small model may decode faster on fewer threads even on a quiet
// machine. After the first three tokens and then every `interval` seconds of
// decoding, the last few tokens stand for the current count and a few tokens
// run at each other candidate count (all usable CPUs, one fewer, half); the
// fastest (median) wins by kTokenMargin. The decoding ops give the same bits
// at any count, so this never changes what is generated
// (Generator.DecodingGivesTheSameBitsAtAnyThreadCount).
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/sysinfo.h"

namespace ctrl::cpu {

// Seconds this process's threads have spent on a CPU and runnable but
// waiting for one, since a fixed start (sums only grow), and the wall clock
// (steady) when they were read; `idle` and `busy`, the seconds the CPUs this
// process may run on spent idle and running any task since boot, over
// `idle_cpus` of them (0: unknown).
struct RunQueueTimes {
  double running = 0, waiting = 0, wall = 0, idle = 0, busy = 0;
  int idle_cpus = 0;
};

// Reads /proc/self/task/*/schedstat, and the idle and busy time of the CPUs in this
// process's affinity mask from /proc/stat. Threads that exit stop adding, so
// the sums stay monotonic; `available()` is false where the kernel has no
// schedstat file.
class ThreadTimes {
 public:
  bool available() const;
  RunQueueTimes read();

 private:
  std::map<long, RunQueueTimes> last_;  // per thread id, as last read
  RunQueueTimes total_;
};

// Other processes' busy threads on our CPUs, from one interval's accounting
// at `threads` threads: `share`, the fraction of the time our threads were
// ready to run that they ran, and `our_cpus`, their CPU time per wall-clock
// second; the CPUs' capacity that ours did not use (cpus - our_cpus), rounded
// to whole threads, stands for the competitors. At most `cpus` threads, that
// capacity may be our own idle time at barriers, so it counts only when ours
// also waited: share below kContendedShare (one busy process beside 2
// threads on 2 CPUs: 0.57; quiet: 0.997; a `nice -n 19` loop: 0.87, which
// takes little and should not make ctrl oversubscribe). Oversubscribed, our
// threads keep the CPUs nearly busy, and competitors remain while the CPU
// time the others ran, `others_cpus` (per wall-clock second, from
// /proc/stat; negative: unknown), is at least kStillBusyCpus: beside one
// busy loop at 16 tiled threads on 2 CPUs the others ran 0.16-0.19 (`base`,
// `small`, `tiny`; `COUNTS=16 SESSIONS="same none" bash
// bench/thread_cpu_share.sh`), quiet -0.02-0.00. Unknown, the capacity ours did not use
// stands for them while it is at least kStillContendedCpus (beside the loop
// 0.7 at 8 threads, but 0.25-0.47 at 16 tiled; quiet 0.04-0.16).
int competing_threads(double share, double our_cpus, int threads, int cpus, double others_cpus = -1);
constexpr double kContendedShare = 0.75;
constexpr double kStillBusyCpus = 0.1;
constexpr double kStillContendedCpus = 0.3;

// The relative speed of a step split statically over `threads` threads on
// `cpus` CPUs beside `competitors` busy threads: each thread alone on a CPU
// while they all fit; when some share a CPU with a competitor but ours do
// not share among themselves, every barrier waits for the thread with the
// smallest share (1 / the most threads on one CPU); with more threads than
// CPUs, ours get their equal share of the CPUs at kOversubscribedEfficiency.
double predicted_speed(int threads, int cpus, int competitors);
// The count in cpus..kMaxThreadsPerCpu·cpus with the highest predicted speed
// (the smallest on a tie). Never fewer threads than CPUs: at fewer, the
// schedstat accounting could not tell when a competitor leaves (ours would
// neither wait nor use its CPU). Fewer come only from the rule below.
int best_thread_count(int cpus, int competitors);
// Oversubscribing wins CPU time only where the kernel shares a CPU between
// threads. With autogroup scheduling (/proc/sys/kernel/sched_autogroup_enabled)
// it shares between sessions, and a competitor started from another login
// keeps its CPU whatever our thread count: beside such a busy loop on 2 CPUs
// ours ran 0.99-1.00 CPUs at 2, 4 and 8 threads, against 1.02 → 1.23 with the
// loop in our own session (bench/thread_cpu_share.sh,
// bench/results/shared-machine-sessions-zen4-2026-12-04.md).
// So when ours, oversubscribed, run less than kWonCpus more than the CPUs the
// competitors leave free, the adapter keeps to those CPUs (one thread each,
// 0.52-0.55 of quiet there against 0.46-0.50 at 8 threads), and returns to
// all usable CPUs when those CPUs' idle time (/proc/stat) shows at least
// kFreedCpus of them free. Only where that idle time covers exactly the usable
// CPUs (no CPU quota below the affinity mask); elsewhere it stays oversubscribed.
constexpr double kWonCpus = 0.1;
constexpr double kFreedCpus = 0.5;
// Measured on a 2-core EPYC beside one busy process: 3 to 8 threads ran at
// 0.67-0.75 of their equal share's speed (time slicing, caches shared in
// turn, and the scheduler leaving the busy loop more than an equal share);
// tiled, 16 threads kept 0.73-0.77 of quiet `tiny`, 0.78-0.82 of their
// equal share (16 of 17 runnable threads: 1.88 of the 2 CPUs).
constexpr double kOversubscribedEfficiency = 0.7;

class ThreadAdapter {
 public:
  // max_threads: the usable CPUs, the count to start with and return to;
  // interval and margin as above. `times` (tests) replaces ThreadTimes.
  explicit ThreadAdapter(int max_threads, double interval_seconds = 20.0, double margin = 1.1,
                         std::function<RunQueueTimes()> times = nullptr);
  // Between optimizer steps: decides when the interval has passed (the first
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
  // Given each token candidate's seconds, moves to the fastest when it beat
  // the current count by kTokenMargin, sets the OpenMP count, and returns the
  // note ("" when unchanged).
  std::string settle_tokens(const std::vector<double>& seconds);
  std::function<RunQueueTimes()> times_;
  ThreadTimes thread_times_;
  RunQueueTimes last_times_;
  std::vector<int> candidates_;
  int max_threads_, current_;
  double interval_, margin_;
  bool accounting_;  // times_ given or the kernel keeps schedstat: checked once, not every step
  // From one interval's accounting (`delta`: the differences of two reads):
  // the model's count, or the free CPUs' count by the rule at kWonCpus, or
  // back to all CPUs by the rule at kFreedCpus; `why` the note's reason.
  int decide(const RunQueueTimes& delta, std::string* why) const;
  bool started_ = false, probed_ = false, changed_ = false;  // changed_: by the last decision
  std::chrono::steady_clock::time_point last_probe_;
  // The position of a count in candidates_.
  size_t index_of(int threads) const;
  // Sets the count for OpenMP, and the products tiled above the CPUs (gemm.h).
  void set_count(int threads);
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
};

}  // namespace ctrl::cpu
