// ctrl_mpi_probe: a small MPI program that misbehaves on purpose, launched by
// test_launch.cpp under its own mpiexec to observe how the job ends.
//   ctrl_mpi_probe MODE [TIMEOUT_SECONDS]
// MODE: ok       all ranks agree and all-reduce; rank 0 prints "probe ok <sum>"
//       differ   rank 0's config differs from the others' (check_identical)
//       die      rank 1 exits abruptly (std::_Exit(3)) instead of all-reducing
//       hang     rank 1 sleeps instead of all-reducing
//       stop     rank 1 stops itself (SIGSTOP) in the middle of a large all-reduce
//       throw    rank 1 leaves with an exception only it knows of
//       abort    rank 1 calls Communicator::abort
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "dist/communicator.h"

namespace {

void run(const std::string& mode, ctrl::Communicator& comm) {
  const bool odd_one = comm.rank() == 1;
  if (mode == "differ") comm.check_identical("config JSON", odd_one ? "{\"layers\": 4}" : "{\"layers\": 2}");
  if (mode == "ok") comm.check_identical("config JSON", "{\"layers\": 2}");
  if (odd_one) {
    if (mode == "die") std::_Exit(3);
    if (mode == "hang") std::this_thread::sleep_for(std::chrono::seconds(600));
    if (mode == "throw") ctrl::fail("ctrl probe: rank-local failure on rank 1");
    if (mode == "abort") comm.abort("ctrl probe: rank 1 gave up");
  }
  if (mode == "stop") {
    std::vector<float> big(size_t{1} << 26, 1.0f);  // 256 MB: takes a while to all-reduce
    int handle = comm.all_reduce_sum_start(big.data(), big.size());
    if (odd_one) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // inside MPI by now, far from done
      raise(SIGSTOP);
    }
    comm.wait(handle);
  }
  float x[4] = {1, 2, 3, float(comm.rank())};
  comm.all_reduce_sum(x, 4);
  if (comm.rank() == 0) std::printf("probe ok %g\n", x[0]);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: ctrl_mpi_probe ok|differ|die|hang|stop|throw|abort [timeout_seconds]\n");
    return 2;
  }
  try {
    auto comm = ctrl::make_communicator(argc > 2 ? std::atof(argv[2]) : 5);
    run(argv[1], *comm);
  } catch (const ctrl::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
