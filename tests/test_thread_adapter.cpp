// The CPU backend's thread adaptation to a shared machine
// (ops/cpu/thread_adapter.h): which counts it tries, when it moves, and that
// a pinned count (OMP_NUM_THREADS, as ctest sets) is never touched.
#include <gtest/gtest.h>
#include <omp.h>

#include <map>

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

// ctest pins OMP_NUM_THREADS; a backend made then never changes the count.
TEST(ThreadAdapter, PinnedCountIsLeftAlone) {
  KeepThreads keep;
  setenv("OMP_NUM_THREADS", "2", 0);
  CpuOps ops;
  const int before = omp_get_max_threads();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ops.between_steps(), "");
  EXPECT_EQ(omp_get_max_threads(), before);
}
