// The CPU backend's thread adaptation to a shared machine
// (ops/cpu/thread_adapter.h): which counts it tries, when it moves, and that
// a pinned count (OMP_NUM_THREADS, as ctest sets) is never touched.
#include <gtest/gtest.h>
#include <omp.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/sysinfo.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/thread_adapter.h"

using namespace ctrl::cpu;

namespace {

// Restores the process's OpenMP thread count and untiled products at the end of a test.
struct KeepThreads {
  int saved = omp_get_max_threads();
  ~KeepThreads() {
    omp_set_num_threads(saved);
    set_gemm_tiled(false);
  }
};

}  // namespace

TEST(ThreadAdapter, TokenCandidatesAreAllOneFewerAndHalf) {
  EXPECT_EQ(ThreadAdapter(8).candidates(), (std::vector<int>{8, 7, 4}));
  EXPECT_EQ(ThreadAdapter(2).candidates(), (std::vector<int>{2, 1}));
  EXPECT_EQ(ThreadAdapter(1).candidates(), (std::vector<int>{1}));
}

// Shares and CPU rates as measured on a 2-core EPYC (tiny, from /proc).
TEST(ThreadAdapter, CompetingThreadsFromWhatOursDidNotGet) {
  EXPECT_EQ(competing_threads(0.998, 1.97, 2, 2), 0);  // quiet, 2 threads
  EXPECT_EQ(competing_threads(0.99, 1.2, 2, 2), 0);    // our own serial work: ours ran whenever ready
  EXPECT_EQ(competing_threads(0.87, 1.61, 2, 2), 0);   // a niced busy loop takes little
  EXPECT_EQ(competing_threads(0.574, 1.04, 2, 2), 1);  // one busy process beside 2 threads
  EXPECT_EQ(competing_threads(0.3, 0.4, 2, 2), 2);     // two of them
  EXPECT_EQ(competing_threads(0.270, 1.29, 8, 2), 1);  // one beside 8 threads
  EXPECT_EQ(competing_threads(0.363, 1.94, 8, 2), 0);  // our own 8 threads on 2 CPUs, nothing else
  EXPECT_EQ(competing_threads(0.5, 12.0, 16, 16), 4);
  // Oversubscribed with the others' CPU time known: it decides, not what ours left.
  EXPECT_EQ(competing_threads(0.2, 1.75, 16, 2, 0.21), 1);  // the loop squeezed beside 16 tiled threads
  EXPECT_EQ(competing_threads(0.2, 1.96, 16, 2, 0.00), 0);  // quiet
  EXPECT_EQ(competing_threads(0.2, 1.75, 16, 2), 0);        // unknown: 0.25 left looks quiet
}

TEST(ThreadAdapter, ModelPicksTheCountForTheCompetitors) {
  EXPECT_EQ(best_thread_count(2, 0), 2);
  EXPECT_EQ(best_thread_count(16, 0), 16);
  EXPECT_EQ(best_thread_count(1, 0), 1);
  // 2 CPUs, one busy process: 2 threads wait for the one that shares a CPU
  // (speed 1, as 1 thread); 8 threads get 8/9 of both CPUs at 0.7, 16 16/17.
  EXPECT_DOUBLE_EQ(predicted_speed(2, 2, 1), 1.0);
  EXPECT_DOUBLE_EQ(predicted_speed(1, 2, 1), 1.0);
  EXPECT_DOUBLE_EQ(predicted_speed(8, 2, 1), 0.7 * 8 * 2 / 9);
  EXPECT_DOUBLE_EQ(predicted_speed(15, 16, 1), 15.0);
  EXPECT_DOUBLE_EQ(predicted_speed(16, 16, 1), 8.0);
  EXPECT_DOUBLE_EQ(predicted_speed(16, 2, 1), 0.7 * 16 * 2 / 17);
  EXPECT_EQ(best_thread_count(2, 1), 16);
  EXPECT_EQ(best_thread_count(4, 1), 32);  // 0.7 · 32 · 4/33 = 2.7 against 4/2
  for (int cpus : {1, 2, 3, 8})
    for (int others = 0; others <= 2 * cpus; ++others) {
      const int best = best_thread_count(cpus, others);
      EXPECT_GE(best, cpus);
      EXPECT_LE(best, ctrl::kMaxThreadsPerCpu * cpus);
    }
}

// Run-queue times stand in for a 2-CPU machine whose second core another
// process takes, then frees: each call adds a second of wall-clock time in
// which ours ran `ran` CPU-seconds and waited `waited`.
TEST(ThreadAdapter, MovesByTheCompetitorsAndComesBack) {
  KeepThreads keep;
  RunQueueTimes total;
  double ran = 1.97, waited = 0.01;  // quiet
  ThreadAdapter a(2, 0.0, 1.1, [&] {
    total.running += ran, total.waiting += waited, total.wall += 1.0;
    return total;
  });
  omp_set_num_threads(2);
  EXPECT_EQ(a.between_steps(), "");  // the first call starts the clock
  EXPECT_EQ(a.between_steps(), "");
  EXPECT_EQ(a.current(), 2);
  EXPECT_EQ(omp_get_max_threads(), 2);
  ran = 1.04, waited = 0.77;  // 2 threads beside one busy process
  const std::string note = a.between_steps();
  EXPECT_NE(note.find("16 threads instead of 2: other processes took 1.0 of the 2 CPUs (ours ran 57%"),
            std::string::npos)
      << note;
  EXPECT_EQ(omp_get_max_threads(), 16);
  EXPECT_TRUE(gemm_tiled());  // more threads than CPUs: the products tiled
  ran = 1.52, waited = 6.1;   // 16 threads beside it: still one competitor (0.48 of the CPUs not ours), stay
  EXPECT_EQ(a.between_steps(), "");
  EXPECT_EQ(a.current(), 16);
  ran = 1.88, waited = 6.3;  // 16 threads alone on 2 CPUs (0.12 not ours): free again
  EXPECT_NE(a.between_steps().find("2 threads instead of 16: the CPUs are free again"), std::string::npos);
  EXPECT_EQ(omp_get_max_threads(), 2);
  EXPECT_FALSE(gemm_tiled());
  ran = 0.001, waited = 0.001;  // too little runnable time to decide
  EXPECT_EQ(a.between_steps(), "");
  EXPECT_EQ(a.current(), 2);
}

// Oversubscribed, with /proc/stat's accounting, the others' own CPU time says
// whether they are still there: beside one busy loop, 16 tiled threads on 2
// CPUs ran 1.75 of them on `base` and the loop 0.21, so the capacity ours
// left (0.25) looked like a quiet machine's (0.04-0.16) while the loop's
// time did not (quiet: 0.00).
TEST(ThreadAdapter, OversubscribedStaysWhileTheOthersStillRun) {
  KeepThreads keep;
  RunQueueTimes total;
  double ran = 1.04, waited = 0.77, busy = 1.96;  // 2 threads beside one busy process
  ThreadAdapter a(2, 0.0, 1.1, [&] {
    total.running += ran, total.waiting += waited, total.wall += 1.0, total.busy += busy, total.idle += 2.0 - busy;
    total.idle_cpus = 2;
    return total;
  });
  omp_set_num_threads(2);
  EXPECT_EQ(a.between_steps(), "");
  EXPECT_NE(a.between_steps().find("16 threads instead of 2"), std::string::npos);
  ran = 1.75, waited = 7.0;  // 16 threads beside it: the loop ran 0.21
  for (int i = 0; i < 3; ++i) EXPECT_EQ(a.between_steps(), "");
  EXPECT_EQ(a.current(), 16);
  EXPECT_TRUE(gemm_tiled());
  ran = 1.96;  // the loop stopped: nothing but ours ran
  const std::string note = a.between_steps();
  EXPECT_NE(note.find("2 threads instead of 16: the CPUs are free again (other processes ran 0.00 of the 2)"),
            std::string::npos)
      << note;
  EXPECT_FALSE(gemm_tiled());
}

// Where the kernel shares the CPUs between sessions (autogroup) and the busy
// process is another session's, more threads win no CPU time from it: ours
// ran 0.99 CPUs at 8 threads on 2 CPUs (1.21 with the loop in our own
// session, 1.52 at 16 with tiled products).
// The adapter then keeps to the free CPU, and comes back when the CPUs' idle
// time shows the competitor gone; without idle accounting it stays
// oversubscribed, and where oversubscribing won CPU time it stays too.
TEST(ThreadAdapter, KeepsToTheFreeCpusWhenOversubscribingWinsNoCpuTime) {
  KeepThreads keep;
  for (const bool idle_known : {true, false})
    for (const double at_sixteen : {0.99, 1.52}) {
      RunQueueTimes total;
      double ran = 1.97, waited = 0.01, idle = 0.0;
      ThreadAdapter a(2, 0.0, 1.1, [&] {
        total.running += ran, total.waiting += waited, total.wall += 1.0, total.idle += idle;
        total.busy += 2.0 - idle;  // every CPU not idle ran ours or the loop
        total.idle_cpus = idle_known ? 2 : 0;
        return total;
      });
      omp_set_num_threads(2);
      EXPECT_EQ(a.between_steps(), "");
      ran = 1.02, waited = 0.78;  // 2 threads beside one busy process
      EXPECT_NE(a.between_steps().find("16 threads instead of 2"), std::string::npos);
      ran = at_sixteen, waited = 6.2;
      const std::string note = a.between_steps();
      if (!idle_known || at_sixteen > 1.1) {
        EXPECT_EQ(note, "") << idle_known << " " << at_sixteen;
        EXPECT_EQ(a.current(), 16);
        continue;
      }
      EXPECT_NE(note.find("1 thread instead of 16: at 16 threads ours ran 0.99 of the 2 CPUs"), std::string::npos)
          << note;
      EXPECT_EQ(omp_get_max_threads(), 1);
      EXPECT_FALSE(gemm_tiled());
      ran = 0.99, waited = 0.01;  // alone on the free CPU: nothing waits, nothing is idle
      EXPECT_EQ(a.between_steps(), "");
      EXPECT_EQ(a.current(), 1);
      idle = 0.98;  // the competitor left its CPU idle
      EXPECT_NE(a.between_steps().find("2 threads instead of 1: the CPUs are free again (1.0 of the 2 idle)"),
                std::string::npos);
      EXPECT_EQ(omp_get_max_threads(), 2);
    }
}

// The idle time of this process's CPUs grows with the wall clock when nothing runs.
TEST(ThreadAdapter, ThreadTimesReadTheIdleAndBusyTimeOfOurCpus) {
  ThreadTimes times;
  const RunQueueTimes before = times.read();
  if (before.idle_cpus == 0) GTEST_SKIP() << "no /proc/stat line for every CPU in the affinity mask";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const RunQueueTimes slept = times.read();
  EXPECT_EQ(slept.idle_cpus, before.idle_cpus);
  EXPECT_GE(slept.idle, before.idle);
  // Sleeping, this process used none of its CPUs; others may have (ctest runs jobs side by side).
  const double capacity = double(before.idle_cpus) * (slept.wall - before.wall) + 0.05;
  EXPECT_LE(slept.idle - before.idle, capacity);
  EXPECT_LE(slept.idle - before.idle + slept.busy - before.busy, capacity);
  // Spinning 0.3 s, this thread kept one of them busy (/proc/stat counts in ticks of 10 ms).
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(300)) {
  }
  const RunQueueTimes spun = times.read();
  EXPECT_GE(spun.busy - slept.busy, 0.2);
  EXPECT_LE(spun.busy - slept.busy + spun.idle - slept.idle,
            double(before.idle_cpus) * (spun.wall - slept.wall) + 0.05);
}

TEST(ThreadAdapter, WaitsForTheInterval) {
  KeepThreads keep;
  int reads = 0;
  ThreadAdapter a(2, 3600.0, 1.1, [&] { return ++reads, RunQueueTimes{double(reads), double(reads), double(reads)}; });
  for (int i = 0; i < 5; ++i) EXPECT_EQ(a.between_steps(), "");
  EXPECT_EQ(reads, 1);  // the first call's, which starts the clock
  EXPECT_EQ(a.current(), 2);
}

// A new count is checked 2 s after it is set, however long the interval: a
// short run (ctrl bench) sees the rule at kWonCpus act within seconds.
TEST(ThreadAdapter, ChecksANewCountAfterTwoSecondsNotTheInterval) {
  KeepThreads keep;
  RunQueueTimes total;
  double ran = 1.02, waited = 0.78;  // 2 threads beside another session's busy loop
  int reads = 0;
  ThreadAdapter a(2, 3600.0, 1.1, [&] {
    ++reads;
    total.running += ran, total.waiting += waited, total.wall += 1.0, total.busy += 2.0, total.idle_cpus = 2;
    return total;
  });
  omp_set_num_threads(2);
  EXPECT_EQ(a.between_steps(), "");  // starts the clock
  std::this_thread::sleep_for(std::chrono::milliseconds(2050));
  EXPECT_NE(a.between_steps().find("16 threads instead of 2"), std::string::npos);
  ran = 0.99, waited = 6.2;
  EXPECT_EQ(a.between_steps(), "");  // not 2 s yet
  std::this_thread::sleep_for(std::chrono::milliseconds(2050));
  EXPECT_NE(a.between_steps().find("1 thread instead of 16"), std::string::npos);
  std::this_thread::sleep_for(std::chrono::milliseconds(2050));
  ran = 0.99, waited = 0.01;
  EXPECT_EQ(a.between_steps(), "");  // checked after 2 s: unchanged, so the next waits for the interval
  const int before = reads;
  std::this_thread::sleep_for(std::chrono::milliseconds(2050));
  EXPECT_EQ(a.between_steps(), "");
  EXPECT_EQ(reads, before);
}

// The kernel's accounting: a thread that spins for 0.3 s adds about that
// much running time (and, on a loaded machine, waiting time).
TEST(ThreadAdapter, ThreadTimesFollowTheCpuTimeSpent) {
  ThreadTimes times;
  if (!times.available()) GTEST_SKIP() << "no /proc/self/task/*/schedstat on this kernel";
  const RunQueueTimes before = times.read();
  const auto start = std::chrono::steady_clock::now();
  volatile double sink = 0;
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 0.3) sink = sink + 1;
  const RunQueueTimes after = times.read();
  const double runnable = (after.running - before.running) + (after.waiting - before.waiting);
  EXPECT_GE(runnable, 0.25);
  EXPECT_LE(runnable, 0.35 + 0.1 * omp_get_max_threads());  // other threads of this test process may add a little
  EXPECT_GE(after.running, before.running);
  EXPECT_GE(after.waiting, before.waiting);
}

// Tokens are timed as they run: `machine` gives a token's seconds at the
// count it ran at (the one set before it); returns the notes.
std::vector<std::string> decode(ThreadAdapter& a, const std::map<int, double>& machine, int tokens) {
  std::vector<std::string> notes;
  for (int i = 0; i < tokens; ++i) {
    const std::string note = a.after_token(machine.at(omp_get_max_threads()));
    if (!note.empty()) notes.push_back(note);
  }
  return notes;
}

TEST(ThreadAdapter, TokensMoveByTheirOwnTimesAndComeBack) {
  KeepThreads keep;
  ThreadAdapter a(2, 0.5);
  omp_set_num_threads(2);
  // Quiet, 2 threads a little faster: no move, and the count is back at 2 after each probe.
  EXPECT_TRUE(decode(a, {{2, 0.010}, {1, 0.012}}, 200).empty());
  EXPECT_EQ(a.current(), 2);
  // 1 thread only 1.05x faster: under the 1.1x margin.
  EXPECT_TRUE(decode(a, {{2, 0.0105}, {1, 0.010}}, 200).empty());
  EXPECT_EQ(a.current(), 2);
  // A taken core: one-row decoding at 2 threads 10x slower.
  auto notes = decode(a, {{2, 0.100}, {1, 0.010}}, 200);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("1 thread instead of 2: their tokens ran 10.0x faster"), std::string::npos) << notes[0];
  EXPECT_EQ(a.current(), 1);
  // Free again: back to 2 at the next probe, and the count outside a probe is the chosen one.
  notes = decode(a, {{2, 0.005}, {1, 0.010}}, 200);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("2 threads instead of 1"), std::string::npos) << notes[0];
  EXPECT_EQ(a.current(), 2);
}

TEST(ThreadAdapter, FirstTokenProbeComesAfterThreeTokensThenByDecodingTime) {
  KeepThreads keep;
  ThreadAdapter a(2, 1.0);
  omp_set_num_threads(2);
  std::vector<int> counts;  // the count each token runs at
  for (int i = 0; i < 40; ++i) {
    counts.push_back(omp_get_max_threads());
    a.after_token(0.125);
  }
  // Tokens 0-2 at 2 (the current count's samples are its own last tokens);
  // the probe: 4 at the other count, 1 (the first a warm-up); the same again
  // each time 1 s of tokens (8) has passed since the last probe.
  const std::vector<int> expected = {2, 2, 2, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 2,
                                     2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 1};
  EXPECT_EQ(counts, expected);
}

// Decoding's candidates do not include a count training chose beyond the
// CPUs: the first token moves back to the CPUs, and probes work from there.
TEST(ThreadAdapter, TokensStartFromTheCpusAfterTrainingOversubscribed) {
  KeepThreads keep;
  RunQueueTimes total;
  ThreadAdapter a(2, 0.0, 1.1, [&] {
    total.running += 1.04, total.waiting += 0.77, total.wall += 1.0;  // beside one busy process
    return total;
  });
  a.between_steps();
  EXPECT_NE(a.between_steps(), "");
  ASSERT_EQ(a.current(), 16);
  EXPECT_TRUE(gemm_tiled());
  a.after_token(0.01);
  EXPECT_EQ(a.current(), 2);
  EXPECT_EQ(omp_get_max_threads(), 2);
  EXPECT_FALSE(gemm_tiled());
  EXPECT_TRUE(decode(a, {{2, 0.010}, {1, 0.012}}, 50).empty());
}

// ctest pins OMP_NUM_THREADS; a backend made then never changes the count.
TEST(ThreadAdapter, PinnedCountIsLeftAlone) {
  KeepThreads keep;
  setenv("OMP_NUM_THREADS", "2", 0);
  CpuOps ops;
  const int before = omp_get_max_threads();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ops.between_steps(), "");
  EXPECT_EQ(omp_get_max_threads(), before);
}

// A count above the usable CPUs, pinned or adapted, runs the products tiled;
// one thread per CPU does not.
TEST(ThreadAdapter, PinnedCountAboveTheCpusTilesTheProducts) {
  KeepThreads keep;
  {
    CpuOps ops(ctrl::usable_cpus() + 1);
    EXPECT_TRUE(gemm_tiled());
  }
  CpuOps ops(ctrl::usable_cpus());
  EXPECT_FALSE(gemm_tiled());
}
