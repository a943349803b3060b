// The NCCL communicator: the data plane for device memory (the cuda backend),
// one rank per GPU. It wraps a host communicator (MPI, or the single-process
// one), which bootstraps it (rank 0's ncclUniqueId is broadcast over it) and
// keeps the control plane: host buffers, barriers, check_identical, abort.
// Each collective looks at its pointer: device memory goes to NCCL on this
// communicator's own stream, anything else to the host communicator.
//
// Ordering, given the backend's stream: each device collective records an
// event on the backend's stream and NCCL's stream waits for it, so a gradient
// bucket is reduced once the backward kernels queued before it have run, while
// the backward of the next layers is being queued and run (no host fence:
// orders_after_backend()). wait() and the blocking calls return when the
// collective has completed; the backend's later ops are queued after that.
//
// The watchdog: every host wait polls the collective's event, NCCL's
// asynchronous error and the clock. A rank that died or hangs leaves the
// others' NCCL kernels waiting forever; after `timeout` seconds, or at once on
// an NCCL error, the communicator aborts NCCL and ends the job on every rank
// through the host communicator, naming the collective. The communicator is
// created non-blocking (NCCL >= 2.14), so that its initialisation and the
// connection set-up that a first collective may do also return at once and
// are waited for under the same watchdog: a rank that dies between the id's
// broadcast and NCCL's initialisation no longer leaves the others waiting
// inside NCCL. An older libnccl initialises blocking, without that cover.
//
// libnccl.so.2 is opened at run time, as cuBLASLt is (ops/cuda/gemm.cu), so
// that a CUDA build starts on machines without NCCL; only multi-GPU training
// needs it. One rank ran on an H200 (the Nccl.* tests); two or more GPUs never have.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "dist/communicator.h"

namespace ctrl {
namespace {

struct NcclApi {
  bool loaded = false;
  std::string from;  // the file loaded, or why none was
#define CTRL_NCCL_FN(name) decltype(&::name) name = nullptr;
  CTRL_NCCL_FN(ncclGetVersion)
  CTRL_NCCL_FN(ncclGetUniqueId)
  CTRL_NCCL_FN(ncclCommInitRank)
  CTRL_NCCL_FN(ncclCommInitRankConfig)  // optional (NCCL >= 2.14), as is ncclCommFinalize: null when absent
  CTRL_NCCL_FN(ncclCommFinalize)
  CTRL_NCCL_FN(ncclCommDestroy)
  CTRL_NCCL_FN(ncclCommAbort)
  CTRL_NCCL_FN(ncclCommGetAsyncError)
  CTRL_NCCL_FN(ncclGetErrorString)
  CTRL_NCCL_FN(ncclAllReduce)
  CTRL_NCCL_FN(ncclBroadcast)
  CTRL_NCCL_FN(ncclReduceScatter)
  CTRL_NCCL_FN(ncclAllGather)
#undef CTRL_NCCL_FN
};

const NcclApi& nccl_api() {
  static NcclApi api;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = nullptr;
    for (const char* name : {"libnccl.so.2", "libnccl.so"})
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) {
        api.from = name;
        break;
      }
    if (!lib) {
      api.from = "libnccl.so.2 not found on the library path";
      return;
    }
    bool ok = true;
#define CTRL_NCCL_LOAD(name) \
  ok = ok && (api.name = reinterpret_cast<decltype(api.name)>(dlsym(lib, #name))) != nullptr;
    CTRL_NCCL_LOAD(ncclGetVersion)
    CTRL_NCCL_LOAD(ncclGetUniqueId)
    CTRL_NCCL_LOAD(ncclCommInitRank)
    CTRL_NCCL_LOAD(ncclCommDestroy)
    CTRL_NCCL_LOAD(ncclCommAbort)
    CTRL_NCCL_LOAD(ncclCommGetAsyncError)
    CTRL_NCCL_LOAD(ncclGetErrorString)
    CTRL_NCCL_LOAD(ncclAllReduce)
    CTRL_NCCL_LOAD(ncclBroadcast)
    CTRL_NCCL_LOAD(ncclReduceScatter)
    CTRL_NCCL_LOAD(ncclAllGather)
#undef CTRL_NCCL_LOAD
    api.ncclCommInitRankConfig =
        reinterpret_cast<decltype(api.ncclCommInitRankConfig)>(dlsym(lib, "ncclCommInitRankConfig"));
    api.ncclCommFinalize = reinterpret_cast<decltype(api.ncclCommFinalize)>(dlsym(lib, "ncclCommFinalize"));
    if (!ok) api.from += " lacks an NCCL function";
    api.loaded = ok;
  });
  return api;
}

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(std::string("nccl communicator: ") + what + ": " + cudaGetErrorString(e));
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Communicator& host, int device, void* backend_stream)
      : host_(host), device_(device), backend_(static_cast<cudaStream_t>(backend_stream)), api_(nccl_api()) {
    if (!api_.loaded)
      fail("nccl communicator: " + api_.from + " (multi-GPU training needs NCCL: the toolkit's libnccl2, or "
           "PyTorch's nvidia-nccl wheel on LD_LIBRARY_PATH)");
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    ncclUniqueId id{};
    if (host_.rank() == 0) check(api_.ncclGetUniqueId(&id), "ncclGetUniqueId");
    host_.broadcast(&id, sizeof id, 0);
    if (nonblocking()) {
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      issue(api_.ncclCommInitRankConfig(&comm_, host_.size(), id, host_.rank(), &config), "NCCL's initialisation");
    } else {
      check(api_.ncclCommInitRank(&comm_, host_.size(), id, host_.rank()), "ncclCommInitRank");
    }
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cuda(cudaEventCreateWithFlags(&backend_done_, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventCreateWithFlags(&collective_done_, cudaEventDisableTiming), "cudaEventCreate");
    int version = 0;
    api_.ncclGetVersion(&version);
    // NCCL_VERSION_CODE: X·10000 + Y·100 + Z since 2.9, X·1000 + Y·100 + Z before.
    const int major = version >= 10000 ? version / 10000 : version / 1000,
              minor = version >= 10000 ? version / 100 % 100 : version / 100 % 10;
    name_ = "nccl " + std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(version % 100) +
            " on GPU " + std::to_string(device_) + ", over " + host_.name();
  }
  ~NcclCommunicator() override {
    // No throwing here. Pending collectives are finished so that no buffer is
    // left in flight, within the timeout: a rank unwinding from an error may
    // have a collective that waits for peers that will never join, and then
    // the communicator is aborted instead. A non-blocking communicator is
    // finalized first, also under the timeout (finalizing waits for the peers).
    std::string why;
    const auto finalize = [&] {
      const ncclResult_t r = api_.ncclCommFinalize(comm_);
      return r == ncclSuccess || (r == ncclInProgress && poll(nullptr, &why) == Poll::kDone);
    };
    if (comm_ && (cudaEventRecord(collective_done_, stream_) != cudaSuccess ||
                  poll(collective_done_, &why) != Poll::kDone || (nonblocking() && !finalize()))) {
      api_.ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    for (auto& p : pending_)
      if (p.event) cudaEventDestroy(p.event);
    for (cudaEvent_t e : {backend_done_, collective_done_})
      if (e) cudaEventDestroy(e);
    if (comm_) api_.ncclCommDestroy(comm_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  int ranks_on_host() const override { return host_.ranks_on_host(); }
  int rank_on_host() const override { return host_.rank_on_host(); }
  std::string name() const override { return name_; }
  bool orders_after_backend() const override { return backend_ != nullptr; }
  double timeout_seconds() const override { return host_.timeout_seconds(); }

  void all_reduce_sum(float* data, size_t n) override {
    if (!on_device(data)) return host_.all_reduce_sum(data, n);
    wait(all_reduce_sum_start(data, n));
  }
  void all_reduce_sum(double* data, size_t n) override {
    if (!on_device(data)) return host_.all_reduce_sum(data, n);
    follow_backend();
    issue(api_.ncclAllReduce(data, data, n, ncclDouble, ncclSum, comm_, stream_), "ncclAllReduce");
    finish("an all-reduce of " + std::to_string(n) + " doubles");
  }
  int all_reduce_sum_start(float* data, size_t n) override {
    Pending p;
    if (on_device(data)) {
      follow_backend();
      issue(api_.ncclAllReduce(data, data, n, ncclFloat, ncclSum, comm_, stream_), "ncclAllReduce");
      check_cuda(cudaEventCreateWithFlags(&p.event, cudaEventDisableTiming), "cudaEventCreate");
      check_cuda(cudaEventRecord(p.event, stream_), "cudaEventRecord");
      p.floats = n;
    } else {
      p.host_handle = host_.all_reduce_sum_start(data, n);
    }
    pending_.push_back(p);
    return first_ + int(pending_.size()) - 1;
  }
  // Completes `handle` and every collective started before it (communicator.h).
  void wait(int handle) override {
    for (int h = first_; h <= handle && h - first_ < int(pending_.size()); ++h) {
      Pending& p = pending_[size_t(h - first_)];
      if (p.done) continue;
      if (p.event) {
        watch(p.event, "an all-reduce of " + std::to_string(p.floats) + " floats (handle " + std::to_string(h) + ")");
        cudaEventDestroy(p.event);
        p.event = nullptr;
      } else {
        host_.wait(p.host_handle);
      }
      p.done = true;
    }
    if (!pending_.empty() && pending_.back().done) {  // all complete: handles so far stay done
      first_ += int(pending_.size());
      pending_.clear();
    }
  }
  void broadcast(void* data, size_t bytes, int root) override {
    if (!on_device(data)) return host_.broadcast(data, bytes, root);
    follow_backend();
    issue(api_.ncclBroadcast(data, data, bytes, ncclChar, root, comm_, stream_), "ncclBroadcast");
    finish("a broadcast of " + std::to_string(bytes) + " bytes from rank " + std::to_string(root));
  }
  void barrier() override {
    finish("the collectives before a barrier");
    host_.barrier();
  }
  void reduce_scatter_sum(const float* in, float* out, size_t count_per_rank) override {
    if (!on_device(in)) return host_.reduce_scatter_sum(in, out, count_per_rank);
    follow_backend();
    issue(api_.ncclReduceScatter(in, out, count_per_rank, ncclFloat, ncclSum, comm_, stream_), "ncclReduceScatter");
    finish("a reduce-scatter of " + std::to_string(count_per_rank) + " floats per rank");
  }
  void all_gather(const float* in, float* out, size_t count_per_rank) override {
    if (!on_device(in)) return host_.all_gather(in, out, count_per_rank);
    follow_backend();
    // NCCL's in-place form is exactly communicator.h's: in == out + rank * count.
    issue(api_.ncclAllGather(in, out, count_per_rank, ncclFloat, comm_, stream_), "ncclAllGather");
    finish("an all-gather of " + std::to_string(count_per_rank) + " floats per rank");
  }
  void check_identical(const std::string& what, const std::string& value) override {
    host_.check_identical(what, value);
  }
  [[noreturn]] void abort(const std::string& message) override {
    host_.abort(message);
    std::abort();  // not reached: the host communicator ends the job
  }

 private:
  struct Pending {
    cudaEvent_t event = nullptr;  // a device all-reduce
    size_t floats = 0;            // its length, for the watchdog's message
    int host_handle = -1;         // else the host communicator's handle
    bool done = false;
  };
  // Device (or managed) memory goes to NCCL; host memory, registered or not, to the host communicator.
  static bool on_device(const void* p) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      cudaGetLastError();  // a plain host pointer on older runtimes
      return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
  }
  // NCCL's stream waits for the work queued so far on the backend's stream.
  // One event serves every call: a stream waits for the event's latest record.
  void follow_backend() {
    if (!backend_) return;
    check_cuda(cudaEventRecord(backend_done_, backend_), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(stream_, backend_done_, 0), "cudaStreamWaitEvent");
  }
  // Returns when everything queued on NCCL's stream has run.
  void finish(const std::string& what) {
    check_cuda(cudaEventRecord(collective_done_, stream_), "cudaEventRecord");
    watch(collective_done_, what);
  }
  // The watchdog (top of the file): returns when `event` has completed, or,
  // with no event, when NCCL has finished the non-blocking call before it.
  void watch(cudaEvent_t event, const std::string& what) {
    std::string why;
    switch (poll(event, &why)) {
      case Poll::kDone: return;
      case Poll::kCudaError: fail("nccl communicator: waiting for " + what + ": " + why);
      case Poll::kHung: end_job(what + why);
    }
  }
  // Polls `event` (null: NCCL's own state, which is ncclInProgress while a
  // non-blocking call is under way) until it completes, CUDA reports an error,
  // or NCCL reports an error or the timeout passes (kHung); `why` says which.
  // Never throws.
  enum class Poll { kDone, kCudaError, kHung };
  Poll poll(cudaEvent_t event, std::string* why) const {
    const auto start = std::chrono::steady_clock::now();
    const double timeout = timeout_seconds();
    for (int polls = 0;; ++polls) {
      if (event) {
        const cudaError_t e = cudaEventQuery(event);
        if (e == cudaSuccess) return Poll::kDone;
        if (e != cudaErrorNotReady) return *why = cudaGetErrorString(e), Poll::kCudaError;
      }
      ncclResult_t async = ncclSuccess;
      // A failed query is an error too, not a finished initialisation or collective.
      if (const ncclResult_t asked = api_.ncclCommGetAsyncError(comm_, &async); asked != ncclSuccess) async = asked;
      if (!event && async == ncclSuccess) return Poll::kDone;
      if (async != ncclSuccess && async != ncclInProgress)
        return *why = std::string(" failed in NCCL: ") + api_.ncclGetErrorString(async), Poll::kHung;
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout)
        return *why = " did not complete within " + std::to_string(int64_t(timeout)) +
                      " s: another rank has died, hangs, or is not making the same calls",
               Poll::kHung;
      if (polls < 1000)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  // Frees this rank's NCCL kernels from their wait, then ends every rank.
  [[noreturn]] void end_job(const std::string& why) {
    api_.ncclCommAbort(comm_);
    comm_ = nullptr;
    host_.abort("ctrl: rank " + std::to_string(host_.rank()) + " of " + std::to_string(host_.size()) + " (GPU " +
                std::to_string(device_) + "): " + why + "; ending all ranks");
    std::abort();  // not reached
  }
  // Whether the communicator is (to be) created non-blocking: when libnccl has the calls for it.
  bool nonblocking() const { return api_.ncclCommInitRankConfig && api_.ncclCommFinalize; }
  // A call on the non-blocking communicator may return ncclInProgress: it is
  // then waited for under the watchdog before anything else is issued.
  void issue(ncclResult_t r, const char* what) {
    if (r == ncclInProgress) return watch(nullptr, what);
    check(r, what);
  }
  void check(ncclResult_t r, const char* what) {
    if (r != ncclSuccess)
      fail(std::string("nccl communicator (rank ") + std::to_string(host_.rank()) + "): " + what + ": " +
           api_.ncclGetErrorString(r));
  }

  Communicator& host_;
  int device_;
  cudaStream_t backend_;  // the backend's stream (null: the caller fences)
  const NcclApi& api_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t backend_done_ = nullptr, collective_done_ = nullptr;
  std::vector<Pending> pending_;  // handles first_, first_ + 1, ...; earlier ones are done
  int first_ = 0;
  std::string name_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host, int device, void* backend_stream) {
  return std::make_unique<NcclCommunicator>(host, device, backend_stream);
}

}  // namespace ctrl
