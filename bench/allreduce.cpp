// All-reduce bandwidth of the communicator, as NCCL's tests report it (median
// of repeated runs): algorithm bandwidth = bytes / time, bus bandwidth =
// algbw * 2(N-1)/N (what each rank's links carry in a ring all-reduce). With MPI in the build, the
// same all-reduce called directly through MPI_Allreduce is timed beside it,
// to show what the communicator's communication thread costs.
//   mpirun -np 2 build/allreduce [max_megabytes=256]
//   mpirun -np 2 build/allreduce --series MB    times of 20 single all-reduces of MB
//                                               in a row (shows interference)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "dist/communicator.h"
#ifdef CTRL_HAVE_MPI
#include <mpi.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;

// Median seconds per all-reduce over `iters` back-to-back runs after one
// warm-up run, as rank 0 sees them (all ranks start together after a barrier);
// the median keeps other work on a shared machine from skewing the figure.
template <typename AllReduce>
double time_per_op(ctrl::Communicator& comm, AllReduce&& all_reduce, int iters) {
  all_reduce();
  comm.barrier();
  std::vector<double> seconds(iters);
  for (int i = 0; i < iters; ++i) {
    const auto start = Clock::now();
    all_reduce();
    seconds[i] = std::chrono::duration<double>(Clock::now() - start).count();
  }
  std::nth_element(seconds.begin(), seconds.begin() + iters / 2, seconds.end());
  double median = seconds[iters / 2];
  comm.broadcast(&median, sizeof median, 0);
  return median;
}

}  // namespace

int main(int argc, char** argv) {
  const bool series = argc > 2 && std::string(argv[1]) == "--series";
  const size_t max_mb = argc > 1 ? std::strtoul(argv[series ? 2 : 1], nullptr, 10) : 256;
  auto comm = ctrl::make_communicator();
  if (series) {
    std::vector<float> buf(max_mb * (size_t{1} << 20) / sizeof(float), 0.0f);
    comm->barrier();
    for (int i = 0; i < 20; ++i) {
      const auto start = Clock::now();
      comm->all_reduce_sum(buf.data(), buf.size());
      if (comm->rank() == 0)
        std::printf("%.2fms ", std::chrono::duration<double>(Clock::now() - start).count() * 1e3);
    }
    if (comm->rank() == 0) std::printf("\n");
    return 0;
  }
  const int n = comm->size();
  const bool root = comm->rank() == 0;
  const double bus_factor = n > 1 ? 2.0 * (n - 1) / n : 0.0;
  if (root) {
    std::printf("all-reduce (float sum), %s\n", comm->name().c_str());
    std::printf("%10s %10s %12s %12s", "size", "time", "algbw GB/s", "busbw GB/s");
#ifdef CTRL_HAVE_MPI
    std::printf(" %16s", "direct MPI algbw");
#endif
    std::printf("\n");
  }
  std::vector<float> buf(max_mb * (size_t{1} << 20) / sizeof(float), 0.0f);
  for (size_t bytes = size_t{4}; bytes <= max_mb << 20; bytes = bytes == 4 ? size_t{1} << 20 : bytes * 2) {
    const size_t count = bytes / sizeof(float);
    const int iters = bytes == 4 ? 1000 : static_cast<int>(std::clamp<size_t>((size_t{2} << 30) / bytes, 3, 100));
    const double t = time_per_op(*comm, [&] { comm->all_reduce_sum(buf.data(), count); }, iters);
    if (root) {
      if (bytes == 4)
        std::printf("%10s %8.1fus %12s %12s", "4 B", t * 1e6, "-", "-");
      else
        std::printf("%8zuMB %8.2fms %12.2f %12.2f", bytes >> 20, t * 1e3, bytes / t / 1e9, bytes / t / 1e9 * bus_factor);
    }
#ifdef CTRL_HAVE_MPI
    if (n > 1) {
      const double d = time_per_op(
          *comm,
          [&] { MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); },
          iters);
      if (root) {
        if (bytes == 4)
          std::printf(" %14.1fus", d * 1e6);
        else
          std::printf(" %16.2f", bytes / d / 1e9);
      }
    }
#endif
    if (root) std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}
