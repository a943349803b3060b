// main() for ctrl_mpi_tests: makes the communicator, runs the tests, and exits
// on every rank with the same status (failed if any rank failed). Only rank 0
// prints GoogleTest's report; other ranks print their failures, prefixed.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include "mpi_test.h"

namespace ctrl::test {
namespace {
std::unique_ptr<Communicator> g_comm;

class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }

 private:
  int rank_;
};
}  // namespace

Communicator& comm() { return *g_comm; }
}  // namespace ctrl::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ctrl::test::g_comm = ctrl::make_communicator(/*timeout_seconds=*/30);
  const int rank = ctrl::test::g_comm->rank();
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new ctrl::test::FailurePrinter(rank));
  }
  double failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  ctrl::test::g_comm->all_reduce_sum(&failed, 1);
  ctrl::test::g_comm.reset();
  return failed > 0 ? 1 : 0;
}
