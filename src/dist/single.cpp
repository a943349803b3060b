// The single-process communicator (every collective over one rank is an
// identity or a copy), make_communicator, which picks MPI when launched by
// mpirun and the build has it, and check_distinct, written over any of them.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "dist/communicator.h"

namespace ctrl {
namespace {

class SingleCommunicator final : public Communicator {
 public:
  explicit SingleCommunicator(double timeout_seconds) : timeout_(timeout_seconds) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "single"; }
  double timeout_seconds() const override { return timeout_; }
  void all_reduce_sum(float*, size_t) override {}
  void all_reduce_sum(double*, size_t) override {}
  int all_reduce_sum_start(float*, size_t) override { return ++last_handle_; }
  void wait(int handle) override { CTRL_ASSERT(handle > 0 && handle <= last_handle_); }
  void broadcast(void*, size_t, int root) override { CTRL_ASSERT(root == 0); }
  void barrier() override {}
  void reduce_scatter_sum(const float* in, float* out, size_t count) override {
    if (count > 0 && in != out) std::memmove(out, in, count * sizeof(float));
  }
  void all_gather(const float* in, float* out, size_t count) override {
    if (count > 0 && in != out) std::memmove(out, in, count * sizeof(float));
  }
  void check_identical(const std::string&, const std::string&) override {}
  [[noreturn]] void abort(const std::string& message) override {
    std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
    std::_Exit(1);
  }

 private:
  double timeout_;
  int last_handle_ = 0;
};

// The number of ranks a known MPI launcher announced, or 0 when not launched by one.
int launcher_world_size() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return 0;
}

}  // namespace

std::unique_ptr<Communicator> make_single_communicator(double timeout_seconds) {
  return std::make_unique<SingleCommunicator>(timeout_seconds);
}

std::unique_ptr<Communicator> make_communicator(double timeout_seconds) {
  if (!(timeout_seconds > 0))
    fail("ctrl: communicator timeout " + std::to_string(timeout_seconds) + " s, expected a positive number");
  const int world = launcher_world_size();
#ifdef CTRL_HAVE_MPI
  if (world > 0) return make_mpi_communicator(timeout_seconds);
#else
  if (world > 1)
    fail("ctrl: started by mpirun with " + std::to_string(world) +
         " ranks, but this ctrl was built without MPI (install libopenmpi-dev and rebuild with -DCTRL_WITH_MPI=ON)");
#endif
  return make_single_communicator(timeout_seconds);
}

void check_distinct(Communicator& comm, const std::string& what, const std::string& value, const std::string& advice) {
  if (comm.size() == 1) return;
  // Each rank's 52-bit FNV-1a hash of its value, exact in a double, in its own
  // slot: one sum gives every rank every rank's hash.
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : value) hash = (hash ^ c) * 1099511628211ull;
  std::vector<double> hashes(size_t(comm.size()), 0.0);
  hashes[size_t(comm.rank())] = double(hash >> 12) + 1.0;
  comm.all_reduce_sum(hashes.data(), hashes.size());
  for (size_t a = 0; a < hashes.size(); ++a)
    for (size_t b = a + 1; b < hashes.size(); ++b)
      if (hashes[a] == hashes[b])
        fail("ctrl: ranks " + std::to_string(a) + " and " + std::to_string(b) + " have the same " + what +
             (comm.rank() == int(a) || comm.rank() == int(b) ? " (" + value + ")" : "") + "; " + advice);
}

}  // namespace ctrl
