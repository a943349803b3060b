// The communicator: collectives for data-parallel training across processes
// and machines. One process per rank; the trainer calls these in the same
// order on every rank (the usual MPI rule). Three implementations: a single
// process (every collective is an identity), MPI (mpi_communicator.cpp,
// built when CMake finds MPI and then CTRL_HAVE_MPI is defined), and NCCL for
// device memory over either of them (nccl_communicator.cpp, CTRL_HAVE_NCCL).
//
// Threading: the MPI communicator runs every MPI call on one communication
// thread of its own, in the order the calls were issued, so an all-reduce
// started with all_reduce_sum_start proceeds while the caller computes. The
// methods may be called from one trainer thread at a time (not concurrently).
// Destroy the communicator before the process exits: that runs MPI_Finalize
// (or, while an exception is leaving, deliberately skips it; see the .cpp).
//
// Control plane and data plane. The methods are the host's control plane:
// the trainer decides what to reduce and when. The float pointers are the
// data plane: backend memory (ops/ops.h) that the backend's ops write. The
// contract, which the NCCL communicator keeps with its stream:
//  - A buffer is handed to a collective only after a fence says the ops that
//    wrote it have finished: the trainer calls Ops::synchronize() before
//    all_reduce_sum_start on a gradient bucket, before reduce_scatter_sum and
//    before all_gather (on the CPU backends every op has finished when it
//    returns, so the fence is free). A communicator that orders_after_backend()
//    (NCCL) records an event on the backend's stream instead, which its own
//    stream waits on; the trainer then skips the fence for gradient buckets.
//  - Until wait() (or the blocking call) returns, no op may read or write
//    the buffer's range.
//  - This MPI communicator reads and writes the memory on the host, which is
//    right for backends whose memory is host memory (cpu, checked), and only
//    inside Ops::begin_host_access / end_host_access of the buffer (the
//    trainer opens them; the checked backend enforces it).
// Host scalars (double sums, flags, check_identical) are control plane.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

namespace ctrl {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Ranks of this job on this rank's machine, this one included: they share
  // its memory, which the trainer's memory check counts (plan::check_memory).
  virtual int ranks_on_host() const { return 1; }
  // This rank's index among those ranks (0-based), which picks its GPU under
  // --device cuda (make_ops); -1 where the communicator cannot tell.
  virtual int rank_on_host() const { return -1; }
  // "single" or e.g. "mpi (Open MPI v4.1.4, 2 ranks on 1 host)".
  virtual std::string name() const = 0;

  // Sums `data` element-wise over all ranks, in place; every rank ends with the sum.
  virtual void all_reduce_sum(float* data, size_t n) = 0;
  virtual void all_reduce_sum(double* data, size_t n) = 0;
  // Non-blocking all-reduce, so gradient buckets overlap the backward pass:
  // returns a handle; `data` must stay untouched until wait(handle) returns.
  // Collectives complete in the order they were issued, so waiting for a
  // handle also completes every one started before it; waiting again for a
  // completed handle returns at once.
  virtual int all_reduce_sum_start(float* data, size_t n) = 0;
  virtual void wait(int handle) = 0;
  // True when collectives on backend memory need no fence: the communicator
  // itself orders each one after the ops already queued on the backend (NCCL
  // given the backend's stream), so the trainer may hand over a gradient
  // bucket the moment its backward ops are queued.
  virtual bool orders_after_backend() const { return false; }
  // Seconds a collective may take before the job is ended (make_communicator's timeout).
  virtual double timeout_seconds() const = 0;
  // Copies `bytes` bytes from `root`'s buffer into every other rank's.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // in: size()*count_per_rank floats on every rank; out: count_per_rank floats,
  // rank r gets the sum over ranks of in[r*count_per_rank, (r+1)*count_per_rank).
  // in and out must not overlap.
  virtual void reduce_scatter_sum(const float* in, float* out, size_t count_per_rank) = 0;
  // in: count_per_rank floats; out: size()*count_per_rank floats, rank r's
  // `in` lands at out + r*count_per_rank. in may equal out + rank()*count_per_rank.
  virtual void all_gather(const float* in, float* out, size_t count_per_rank) = 0;
  // Returns when `value` is identical on all ranks (e.g. config JSON, binary
  // version, data manifest checksum); otherwise throws ctrl::Error on every
  // rank with the same message naming `what` and the first differing rank.
  virtual void check_identical(const std::string& what, const std::string& value) = 0;
  // Ends the whole job (all ranks) after printing `message` with this rank's
  // number on stderr, e.g. when this rank hit an error the others cannot know.
  // Safe from any thread.
  [[noreturn]] virtual void abort(const std::string& message) = 0;
};

// An MPI communicator when the process was started by mpirun/mpiexec
// (OMPI_COMM_WORLD_SIZE or PMI_SIZE set) and the build has MPI (CTRL_HAVE_MPI),
// else the single-process one. Started by a launcher with more than one rank
// but built without MPI: throws ctrl::Error saying so. MPI can be initialised
// once per process, so at most one MPI communicator may ever be made.
// timeout_seconds: a collective that has not completed within it (a rank died
// or hangs) ends the job on all ranks with an error naming the operation
// (a watchdog thread calls MPI_Abort), so a broken job never hangs forever.
std::unique_ptr<Communicator> make_communicator(double timeout_seconds = 300);

// The single-process communicator, whatever the environment (for tools and tests).
std::unique_ptr<Communicator> make_single_communicator(double timeout_seconds = 300);

// Every rank passes its own `value` (e.g. its GPU's UUID); when two ranks
// pass the same one, every rank throws a one-line ctrl::Error, "ctrl: ranks
// A and B have the same <what>; <advice>" (ranks A and B also name the value
// after <what>), so that all stop together. A collective: every rank calls it.
void check_distinct(Communicator& comm, const std::string& what, const std::string& value, const std::string& advice);

#ifdef CTRL_HAVE_NCCL
// The device data plane for the cuda backend, one rank per GPU (nccl_communicator.cpp):
// collectives on device memory run through NCCL on GPU `device`; host memory
// and the control plane go to `host`, which also bootstraps NCCL and must
// outlive the result. With `backend_stream` (Ops::work_queue()) each
// collective is ordered after the ops queued on it (orders_after_backend);
// a collective not complete within host.timeout_seconds() ends the job on
// every rank. Throws ctrl::Error when libnccl.so.2 cannot be opened.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host, int device, void* backend_stream = nullptr);
#endif

#ifdef CTRL_HAVE_MPI
// Defined in mpi_communicator.cpp; used by make_communicator.
std::unique_ptr<Communicator> make_mpi_communicator(double timeout_seconds);
#endif

}  // namespace ctrl
