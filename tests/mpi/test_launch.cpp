// How a 2-rank job ends when something goes wrong: each test launches
// ctrl_mpi_probe (tests/mpi/mpi_probe.cpp) under its own mpiexec and checks
// the exit status, the error on stderr and that the job ended in bounded time.
// ctest runs these in a plain process (test mpi_failures), not under mpiexec.
#include <gtest/gtest.h>

#include <string>

#include "../test_support.h"
#include "mpi_test.h"

namespace ctrl::test {
namespace {

// Runs `ctrl_mpi_probe mode timeout` on 2 ranks (mpiexec's exit status, every
// rank's output), killed after 90 s so that a broken job cannot hang the test.
test_support::LimitedRun run_probe(const std::string& mode, double timeout_seconds) {
  return test_support::run_with_limit("mpiexec --oversubscribe -np 2 " + std::string(CTRL_MPI_PROBE) + " " + mode +
                                          " " + std::to_string(timeout_seconds),
                                      90);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

class MpiLaunch : public ::testing::Test {
 protected:
  void SetUp() override {
    if (comm().size() > 1) GTEST_SKIP() << "launches its own mpiexec: run ctrl_mpi_tests without mpiexec";
  }
};

TEST_F(MpiLaunch, HealthyJobSucceeds) {
  const auto r = run_probe("ok", 5);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "probe ok 2\n")) << r.output;
}

TEST_F(MpiLaunch, DifferingConfigFailsWithOneClearMessage) {
  const auto r = run_probe("differ", 5);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output,
                       "ctrl: config JSON differs between ranks (it must be the same on all 2): rank 0 has "
                       "\"{\\\"layers\\\": 2}\" (13 bytes), rank 1 has \"{\\\"layers\\\": 4}\" (13 bytes), "
                       "first difference at byte 11\n"))
      << r.output;
  EXPECT_LT(r.seconds, 30) << r.output;
}

TEST_F(MpiLaunch, RankThatExitsAbruptlyEndsTheJob) {
  const auto r = run_probe("die", 5);
  EXPECT_EQ(r.exit_code, 3) << r.output;  // mpiexec passes on the dead rank's status
  EXPECT_FALSE(contains(r.output, "probe ok")) << r.output;
  EXPECT_LT(r.seconds, 30) << r.output;
}

TEST_F(MpiLaunch, HangingRankIsCaughtByTheTimeout) {
  const auto r = run_probe("hang", 2);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output,
                       "ctrl: all_reduce_sum of 4 floats did not complete within 2 s on rank 0 of 2 (host "))
      << r.output;
  EXPECT_GE(r.seconds, 2) << r.output;
  EXPECT_LT(r.seconds, 30) << r.output;
}

TEST_F(MpiLaunch, RankStoppedInTheMiddleOfACollectiveIsCaughtByTheTimeout) {
  const auto r = run_probe("stop", 2);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "ctrl: all_reduce_sum of 67108864 floats did not complete within 2 s on rank 0 of 2"))
      << r.output;
  EXPECT_LT(r.seconds, 30) << r.output;
}

TEST_F(MpiLaunch, RankLeavingWithAnErrorEndsTheJob) {
  const auto r = run_probe("throw", 5);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "ctrl probe: rank-local failure on rank 1\n")) << r.output;
  EXPECT_FALSE(contains(r.output, "probe ok")) << r.output;
  // Rank 1 skipped MPI_Finalize, so the launcher ended the job before any watchdog fired.
  EXPECT_FALSE(contains(r.output, "did not complete")) << r.output;
  EXPECT_LT(r.seconds, 30) << r.output;
}

TEST_F(MpiLaunch, AbortEndsEveryRankWithTheMessage) {
  const auto r = run_probe("abort", 5);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "ctrl probe: rank 1 gave up [rank 1 of 2 on ")) << r.output;
  EXPECT_FALSE(contains(r.output, "probe ok")) << r.output;
  EXPECT_LT(r.seconds, 30) << r.output;
}

}  // namespace
}  // namespace ctrl::test
