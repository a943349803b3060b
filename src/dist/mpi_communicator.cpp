// The MPI communicator. Built only when CMake finds MPI (CTRL_HAVE_MPI).
//
// Threads and MPI: one communication thread initialises MPI, runs every
// collective in the order the trainer issued it, and finalises MPI; it is the
// MPI "main thread", so the MPI_THREAD_FUNNELED level would already make all
// of that legal. A watchdog thread ends the job when a collective has not
// completed within the timeout; MPI_Abort from a thread other than the main
// one is legal only under MPI_THREAD_MULTIPLE, so that level is requested
// (Open MPI 4.1 provides it); where a library provides less, the watchdog and
// abort() print their message and _exit(1) instead, which makes the launcher
// end the job just the same (a rank that leaves without MPI_Finalize).
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <new>
#include <thread>

#include "core/error.h"
#include "dist/communicator.h"

namespace ctrl {
namespace {

// MPI counts are ints: longer buffers go in pieces of this many elements.
constexpr size_t kMaxChunk = size_t{1} << 30;
constexpr size_t kReducePieceFloats = size_t{1} << 20;     // 4 MiB
constexpr size_t kAllReducePieceFloats = size_t{1} << 23;  // 32 MiB

std::atomic<bool> g_mpi_made{false};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

// A short, printable view of `v` around byte `at` (where two values first differ).
std::string excerpt(const std::string& v, size_t at) {
  constexpr size_t kWidth = 60;
  size_t begin = v.size() <= kWidth ? 0 : std::min(at > kWidth / 2 ? at - kWidth / 2 : 0, v.size() - kWidth);
  std::string out = begin > 0 ? "..." : "";
  for (size_t i = begin; i < v.size() && i < begin + kWidth; ++i) {
    unsigned char c = v[i];
    if (c == '"' || c == '\\') out += '\\';
    if (c >= 0x20 && c != 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  if (begin + kWidth < v.size()) out += "...";
  return "\"" + out + "\" (" + std::to_string(v.size()) + " bytes)";
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(double timeout_seconds) : timeout_(timeout_seconds) {
    comm_thread_ = std::thread([this] { comm_main(); });
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return ready_; });
    lock.unlock();
    watchdog_ = std::thread([this] { watchdog_main(); });
  }

  // Normal end: finishes the queued collectives, then MPI_Finalize (watched).
  ~MpiCommunicator() override {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    comm_thread_.join();
    {
      std::lock_guard lock(mu_);
      watchdog_stop_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
  }

  // Deleted while an exception that only this rank may know of is in flight:
  // MPI_Finalize would wait for ranks still in a collective, so skip it and
  // let the process exit; the launcher then ends the whole job (a rank that
  // leaves without MPI_Finalize counts as failed). The object is left behind
  // on purpose, as the communication thread may be inside MPI and uses it.
  static void operator delete(MpiCommunicator* p, std::destroying_delete_t) {
    if (std::uncaught_exceptions() > 0 && !p->consistent_failure_) {
      {
        std::lock_guard lock(p->mu_);
        p->watchdog_stop_ = true;
      }
      p->cv_.notify_all();
      p->watchdog_.join();
      p->comm_thread_.detach();
      return;
    }
    p->~MpiCommunicator();
    ::operator delete(p);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int ranks_on_host() const override { return ranks_on_host_; }
  int rank_on_host() const override { return rank_on_host_; }
  double timeout_seconds() const override { return timeout_; }
  std::string name() const override {
    return "mpi (" + library_ + ", " + std::to_string(size_) + (size_ == 1 ? " rank" : " ranks") + " on " +
           std::to_string(hosts_) + (hosts_ == 1 ? " host)" : " hosts)");
  }

  void all_reduce_sum(float* data, size_t n) override { wait(all_reduce_start(data, n, MPI_FLOAT, "floats")); }
  void all_reduce_sum(double* data, size_t n) override { wait(all_reduce_start(data, n, MPI_DOUBLE, "doubles")); }
  int all_reduce_sum_start(float* data, size_t n) override { return all_reduce_start(data, n, MPI_FLOAT, "floats"); }

  void wait(int handle) override {
    std::unique_lock lock(mu_);
    CTRL_ASSERT(handle > 0 && handle <= issued_);
    cv_.wait(lock, [&] { return done_ >= handle; });
  }

  void broadcast(void* data, size_t bytes, int root) override {
    CTRL_ASSERT(root >= 0 && root < size_);
    auto* p = static_cast<char*>(data);
    wait(submit("broadcast of " + std::to_string(bytes) + " bytes from rank " + std::to_string(root), [=] {
      for (size_t off = 0; off < bytes; off += kMaxChunk)
        MPI_Bcast(p + off, static_cast<int>(std::min(kMaxChunk, bytes - off)), MPI_BYTE, root, MPI_COMM_WORLD);
    }));
  }

  void barrier() override {
    wait(submit("barrier", [] { MPI_Barrier(MPI_COMM_WORLD); }));
  }

  // One rooted reduce per rank's block, a piece at a time, rather than
  // MPI_Reduce_scatter_block: Open MPI's default algorithm for it reduces the
  // whole buffer into a temporary on rank 0, which put ZeRO-1's rank 0 above
  // ZeRO-0's peak. A piece bounds what any algorithm may stage; with 2 ranks
  // on one host the step also ran 1.11-1.5x faster (bench/results/zero1-memory.md;
  // more ranks and several hosts are not measured).
  void reduce_scatter_sum(const float* in, float* out, size_t count) override {
    check_count("reduce_scatter_sum", count);
    wait(submit("reduce_scatter_sum of " + std::to_string(count) + " floats per rank", [=, this] {
      for (int root = 0; root < size_; ++root)
        for (size_t off = 0; off < count; off += kReducePieceFloats) {
          const int n = static_cast<int>(std::min(kReducePieceFloats, count - off));
          MPI_Reduce(in + size_t(root) * count + off, root == rank_ ? out + off : nullptr, n, MPI_FLOAT, MPI_SUM, root,
                     MPI_COMM_WORLD);
        }
    }));
  }

  void all_gather(const float* in, float* out, size_t count) override {
    check_count("all_gather", count);
    const void* send = in == out + rank_ * count ? MPI_IN_PLACE : in;
    wait(submit("all_gather of " + std::to_string(count) + " floats per rank", [=] {
      MPI_Allgather(send, static_cast<int>(count), MPI_FLOAT, out, static_cast<int>(count), MPI_FLOAT, MPI_COMM_WORLD);
    }));
  }

  void check_identical(const std::string& what, const std::string& value) override {
    int first_differing = size_;
    std::string reference, differing;
    wait(submit("check_identical of " + what, [&] {
      reference = value;
      bcast_string(reference, 0);
      int mine = reference == value ? size_ : rank_;
      MPI_Allreduce(&mine, &first_differing, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      if (first_differing < size_) {
        differing = value;
        bcast_string(differing, first_differing);
      }
    }));
    if (first_differing == size_) return;
    size_t at = 0;
    while (at < reference.size() && at < differing.size() && reference[at] == differing[at]) ++at;
    consistent_failure_ = true;  // every rank throws this same error: MPI_Finalize stays safe
    fail("ctrl: " + what + " differs between ranks (it must be the same on all " + std::to_string(size_) +
         "): rank 0 has " + excerpt(reference, at) + ", rank " + std::to_string(first_differing) + " has " +
         excerpt(differing, at) + ", first difference at byte " + std::to_string(at));
  }

  [[noreturn]] void abort(const std::string& message) override {
    end_job(message + " [rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " on " + host_ +
            "; ending all ranks]");
  }

 private:
  struct Op {
    int id;
    std::string what;
    std::function<void()> run;
  };

  // In pieces of 32 MiB: Open MPI's all-reduce stages a temporary that grows
  // with the buffer it is given, and the tied embedding's gradient is 94 MiB
  // on `base`. Whole, it put a rank of `base` 52 MiB above the same run in
  // one process; in these pieces 22 MiB, at the same speed. Pieces of 4 MiB
  // (9 MiB) cost 3-10% of the step with 2 ranks on 2 cores
  // (bench/results/mpi-memory-zen4-2026-12-06.md). plan::kMpiRankBytes counts it.
  int all_reduce_start(void* data, size_t n, MPI_Datatype type, const char* unit) {
    const size_t elem = type == MPI_FLOAT ? sizeof(float) : sizeof(double);
    const size_t piece = kAllReducePieceFloats * sizeof(float) / elem;
    auto* p = static_cast<char*>(data);
    return submit("all_reduce_sum of " + std::to_string(n) + " " + unit, [=] {
      for (size_t off = 0; off < n; off += piece)
        MPI_Allreduce(MPI_IN_PLACE, p + off * elem, static_cast<int>(std::min(piece, n - off)), type, MPI_SUM,
                      MPI_COMM_WORLD);
    });
  }

  void check_count(const char* op, size_t count) const {
    if (count > static_cast<size_t>(INT_MAX))
      fail(std::string("ctrl: ") + op + " of " + std::to_string(count) + " floats per rank, expected at most " +
           std::to_string(INT_MAX));
  }

  // Sends rank `root`'s `s` to every rank (runs on the communication thread).
  void bcast_string(std::string& s, int root) {
    uint64_t len = s.size();
    MPI_Bcast(&len, 1, MPI_UINT64_T, root, MPI_COMM_WORLD);
    s.resize(len);
    for (size_t off = 0; off < len; off += kMaxChunk)
      MPI_Bcast(s.data() + off, static_cast<int>(std::min<size_t>(kMaxChunk, len - off)), MPI_BYTE, root,
                MPI_COMM_WORLD);
  }

  // Queues `run` for the communication thread; returns its handle.
  int submit(std::string what, std::function<void()> run) {
    int id;
    {
      std::lock_guard lock(mu_);
      id = ++issued_;
      queue_.push_back(Op{id, std::move(what), std::move(run)});
      consistent_failure_ = false;
    }
    cv_.notify_all();
    return id;
  }

  // The communication thread: MPI_Init_thread, the queued collectives in order, MPI_Finalize.
  void comm_main() {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    multiple_ = provided >= MPI_THREAD_MULTIPLE;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    char buf[MPI_MAX_LIBRARY_VERSION_STRING > MPI_MAX_PROCESSOR_NAME ? MPI_MAX_LIBRARY_VERSION_STRING
                                                                      : MPI_MAX_PROCESSOR_NAME];
    int len = 0;
    MPI_Get_processor_name(buf, &len);
    host_.assign(buf, len);
    MPI_Get_library_version(buf, &len);
    library_.assign(buf, len);
    library_ = library_.substr(0, library_.find_first_of(",\n"));
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &rank_on_host_);
    MPI_Comm_size(local, &ranks_on_host_);
    int first_on_host = rank_on_host_ == 0;
    MPI_Allreduce(&first_on_host, &hosts_, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Comm_free(&local);
    {
      std::lock_guard lock(mu_);
      ready_ = true;
    }
    cv_.notify_all();

    for (;;) {
      Op op;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) break;  // stopping and drained
        op = std::move(queue_.front());
        queue_.pop_front();
        busy_what_ = op.what;
        busy_since_ = std::chrono::steady_clock::now();
        busy_ = true;
      }
      op.run();
      {
        std::lock_guard lock(mu_);
        busy_ = false;
        done_ = op.id;
      }
      cv_.notify_all();
    }
    {
      std::lock_guard lock(mu_);
      busy_what_ = "MPI_Finalize (another rank has not finished)";
      busy_since_ = std::chrono::steady_clock::now();
      busy_ = true;
    }
    MPI_Finalize();
    std::lock_guard lock(mu_);
    busy_ = false;
  }

  // The watchdog: ends the job when one collective has run longer than the timeout.
  void watchdog_main() {
    const auto tick = std::chrono::duration<double>(std::clamp(timeout_ / 10, 0.01, 1.0));
    std::unique_lock lock(mu_);
    while (!watchdog_stop_) {
      cv_.wait_for(lock, tick);
      if (busy_ && seconds_since(busy_since_) > timeout_) {
        std::string what = busy_what_;
        lock.unlock();
        end_job("ctrl: " + what + " did not complete within " + format_seconds(timeout_) + " s on rank " +
                std::to_string(rank_) + " of " + std::to_string(size_) + " (host " + host_ +
                "): another rank has died, hangs, or is not making the same calls; ending all ranks");
      }
    }
  }

  [[noreturn]] void end_job(const std::string& message) {
    std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
    if (multiple_) MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
  }

  const double timeout_;
  int rank_ = 0, size_ = 1, hosts_ = 1, ranks_on_host_ = 1, rank_on_host_ = 0;
  bool multiple_ = false;
  std::string host_, library_;

  std::mutex mu_;
  std::condition_variable cv_;  // one variable for every state change below; all wait on predicates
  bool ready_ = false, stopping_ = false, watchdog_stop_ = false, busy_ = false;
  std::deque<Op> queue_;
  int issued_ = 0, done_ = 0;
  std::string busy_what_;
  std::chrono::steady_clock::time_point busy_since_;
  bool consistent_failure_ = false;  // the last collective was a check_identical that failed on every rank
  std::thread comm_thread_, watchdog_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(double timeout_seconds) {
  if (g_mpi_made.exchange(true))
    fail("ctrl: an MPI communicator was already made in this process (MPI can be initialised only once)");
  return std::make_unique<MpiCommunicator>(timeout_seconds);
}

}  // namespace ctrl
