// How a 2-rank job ends when something goes wrong: each test launches
// ctrl_mpi_probe (tests/mpi/mpi_probe.cpp) under its own mpiexec and checks
// the exit status, the error on stderr and that the job ended in bounded time.
// ctest runs these in a plain process (test mpi_failures), not under mpiexec.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "mpi_test.h"

namespace ctrl::test {
namespace {

struct JobResult {
  int exit_code;  // mpiexec's exit status; -1 when it did not exit normally
  std::string output;  // stdout and stderr of all ranks and of mpiexec
  double seconds;
};

// Runs `ctrl_mpi_probe mode timeout` on 2 ranks; a hard limit of 90 s keeps a
// broken job from hanging the test itself.
JobResult run_probe(const std::string& mode, double timeout_seconds) {
  const std::string cmd = "timeout -s KILL 90 mpiexec --oversubscribe -np 2 " + std::string(CTRL_MPI_PROBE) + " " +
                          mode + " " + std::to_string(timeout_seconds) + " 2>&1";
  const auto start = std::chrono::steady_clock::now();
  FILE* pipe = popen(cmd.c_str(), "r");
  EXPECT_NE(pipe, nullptr) << cmd;
  JobResult r{-1, "", 0};
  if (!pipe) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  return r;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

class MpiLaunch : public ::testing::Test {
 protected:
  void SetUp() override {
    if (comm().size() > 1) GTEST_SKIP() << "launches its own mpiexec: run ctrl_mpi_tests without mpiexec";
  }
};

TEST_F(MpiLaunch, HealthyJobSucceeds) {
  JobResult r = run_probe("ok", 5);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "probe ok 2\n")) << r.output;
}

TEST_F(MpiLaunch, DifferingConfigFailsWithOneClearMessage) {
  JobResult r = run_probe("differ", 5);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output,
                       "ctrl: config JSON differs between ranks (it must be the same on all 2): rank 0 has "
                       "\"{\\\"layers\\\": 2}\" (13 bytes), rank 1 has \"{\\\"layers\\\": 4}\" (13 bytes), "
                       "first difference at byte 11\n"))
      << r.output;
  EXPECT_LT(r.seconds, 30) << r.output;
}

TEST_F(MpiLaunch, RankThatExitsAbruptlyEndsTheJob) {
  JobResult r = run_probe("die", 5);
  EXPECT_EQ(r.exit_code, 3) << r.output;  // mpiexec passes on the dead rank's status
  EXPECT_FALSE(contains(r.output, "probe ok")) << r.output;
  EXPECT_LT(r.seconds, 30) << r.output;
}

TEST_F(MpiLaunch, HangingRankIsCaughtByTheTimeout) {
  JobResult r = run_probe("hang", 2);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output,
                       "ctrl: all_reduce_sum of 4 floats did not complete within 2 s on rank 0 of 2 (host "))
      << r.output;
  EXPECT_GE(r.seconds, 2) << r.output;
  EXPECT_LT(r.seconds, 30) << r.output;
}

TEST_F(MpiLaunch, RankStoppedInTheMiddleOfACollectiveIsCaughtByTheTimeout) {
  JobResult r = run_probe("stop", 2);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "ctrl: all_reduce_sum of 67108864 floats did not complete within 2 s on rank 0 of 2"))
      << r.output;
  EXPECT_LT(r.seconds, 30) << r.output;
}

TEST_F(MpiLaunch, RankLeavingWithAnErrorEndsTheJob) {
  JobResult r = run_probe("throw", 5);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "ctrl probe: rank-local failure on rank 1\n")) << r.output;
  EXPECT_FALSE(contains(r.output, "probe ok")) << r.output;
  // Rank 1 skipped MPI_Finalize, so the launcher ended the job before any watchdog fired.
  EXPECT_FALSE(contains(r.output, "did not complete")) << r.output;
  EXPECT_LT(r.seconds, 30) << r.output;
}

TEST_F(MpiLaunch, AbortEndsEveryRankWithTheMessage) {
  JobResult r = run_probe("abort", 5);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "ctrl probe: rank 1 gave up [rank 1 of 2 on ")) << r.output;
  EXPECT_FALSE(contains(r.output, "probe ok")) << r.output;
  EXPECT_LT(r.seconds, 30) << r.output;
}

}  // namespace
}  // namespace ctrl::test
