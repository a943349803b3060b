// The CPU backend's thread adaptation to a shared machine
// (ops/cpu/thread_adapter.h): which counts it tries, when it moves, and that
// a pinned count (OMP_NUM_THREADS, as ctest sets) is never touched.
#include <gtest/gtest.h>
#include <omp.h>

#include <map>
#include <string>
#include <vector>

#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/thread_adapter.h"

using namespace ctrl::cpu;

namespace {

// Restores the process's OpenMP thread count at the end of a test.
struct KeepThreads {
  int saved = omp_get_max_threads();
  ~KeepThreads() { omp_set_num_threads(saved); }
};

}  // namespace

TEST(ThreadAdapter, TriesAllOneFewerAndHalf) {
  EXPECT_EQ(ThreadAdapter(8, 0, 1.25, [](int) { return 1.0; }).candidates(), (std::vector<int>{8, 7, 4}));
  EXPECT_EQ(ThreadAdapter(2, 0, 1.25, [](int) { return 1.0; }).candidates(), (std::vector<int>{2, 1}));
  EXPECT_EQ(ThreadAdapter(1, 0, 1.25, [](int) { return 1.0; }).candidates(), (std::vector<int>{1}));
}

// Burst times stand in for a machine whose second core another process takes, then frees.
TEST(ThreadAdapter, MovesOnlyByTheMarginAndComesBack) {
  KeepThreads keep;
  std::map<int, double> seconds = {{2, 0.010}, {1, 0.018}};  // quiet: 2 threads nearly twice as fast
  ThreadAdapter a(2, 0.0, 1.25, [&](int n) {
    EXPECT_EQ(omp_get_max_threads(), n) << "the burst runs at the count it times";
    return seconds.at(n);
  });
  EXPECT_EQ(a.between_steps(), "");  // the first call starts the clock
  EXPECT_EQ(a.between_steps(), "");
  EXPECT_EQ(a.current(), 2);
  EXPECT_EQ(omp_get_max_threads(), 2);
  seconds = {{2, 0.021}, {1, 0.018}};  // busy, but 1 thread is not 1.25x faster: stay
  EXPECT_EQ(a.between_steps(), "");
  EXPECT_EQ(a.current(), 2);
  seconds = {{2, 0.040}, {1, 0.018}};  // a busy core stalls every barrier
  const std::string note = a.between_steps();
  EXPECT_NE(note.find("1 threads instead of 2"), std::string::npos) << note;
  EXPECT_NE(note.find("another process"), std::string::npos) << note;
  EXPECT_EQ(a.current(), 1);
  EXPECT_EQ(omp_get_max_threads(), 1);
  seconds = {{2, 0.010}, {1, 0.018}};  // free again
  EXPECT_NE(a.between_steps().find("free again"), std::string::npos);
  EXPECT_EQ(omp_get_max_threads(), 2);
}

TEST(ThreadAdapter, WaitsForTheInterval) {
  KeepThreads keep;
  int bursts = 0;
  ThreadAdapter a(2, 3600.0, 1.25, [&](int) { return ++bursts, 1.0; });
  for (int i = 0; i < 5; ++i) a.between_steps();
  EXPECT_EQ(bursts, 0);
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
  ThreadAdapter a(2, 0.5, 1.25, [](int) -> double { ADD_FAILURE() << "tokens are not timed by a burst"; return 1; });
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
  EXPECT_NE(notes[0].find("1 threads instead of 2: their tokens ran 10.0x faster"), std::string::npos) << notes[0];
  EXPECT_EQ(a.current(), 1);
  // Free again: back to 2 at the next probe, and the count outside a probe is the chosen one.
  notes = decode(a, {{2, 0.005}, {1, 0.010}}, 200);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("2 threads instead of 1"), std::string::npos) << notes[0];
  EXPECT_EQ(a.current(), 2);
}

TEST(ThreadAdapter, FirstTokenProbeComesAfterThreeTokensThenByDecodingTime) {
  KeepThreads keep;
  ThreadAdapter a(2, 1.0, 1.25, [](int) { return 1.0; });
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

// ctest pins OMP_NUM_THREADS; a backend made then never changes the count.
TEST(ThreadAdapter, PinnedCountIsLeftAlone) {
  KeepThreads keep;
  setenv("OMP_NUM_THREADS", "2", 0);
  CpuOps ops;
  const int before = omp_get_max_threads();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ops.between_steps(), "");
  EXPECT_EQ(omp_get_max_threads(), before);
}
