// The NCCL communicator: the data plane for device memory (the cuda backend),
// one rank per GPU. It wraps a host communicator (MPI, or the single-process
// one), which bootstraps it (rank 0's ncclUniqueId is broadcast over it) and
// keeps the control plane: host buffers, barriers, check_identical, abort.
// Each collective looks at its pointer: device memory goes to NCCL on this
// communicator's own stream, anything else to the host communicator.
//
// Ordering follows communicator.h: the trainer fences the backend's stream
// (Ops::synchronize) before it hands a buffer over, so NCCL's stream needs no
// event from the compute stream; blocking calls wait for NCCL's stream, and
// all_reduce_sum_start records an event that wait() synchronizes on.
//
// libnccl.so.2 is opened at run time, as cuBLASLt is (ops/cuda/gemm.cu), so
// that a CUDA build starts on machines without NCCL; only multi-GPU training
// needs it. Unverified: no session has run this on a GPU yet.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
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
  CTRL_NCCL_FN(ncclCommDestroy)
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
    CTRL_NCCL_LOAD(ncclGetErrorString)
    CTRL_NCCL_LOAD(ncclAllReduce)
    CTRL_NCCL_LOAD(ncclBroadcast)
    CTRL_NCCL_LOAD(ncclReduceScatter)
    CTRL_NCCL_LOAD(ncclAllGather)
#undef CTRL_NCCL_LOAD
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
  NcclCommunicator(Communicator& host, int device) : host_(host), device_(device), api_(nccl_api()) {
    if (!api_.loaded)
      fail("nccl communicator: " + api_.from + " (multi-GPU training needs NCCL: the toolkit's libnccl2, or "
           "PyTorch's nvidia-nccl wheel on LD_LIBRARY_PATH)");
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    ncclUniqueId id{};
    if (host_.rank() == 0) check(api_.ncclGetUniqueId(&id), "ncclGetUniqueId");
    host_.broadcast(&id, sizeof id, 0);
    check(api_.ncclCommInitRank(&comm_, host_.size(), id, host_.rank()), "ncclCommInitRank");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    int version = 0;
    api_.ncclGetVersion(&version);
    name_ = "nccl " + std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
            std::to_string(version % 100) + " on GPU " + std::to_string(device_) + ", over " + host_.name();
  }
  ~NcclCommunicator() override {
    // No throwing here; pending handles are finished so that no buffer is left in flight.
    if (stream_) cudaStreamSynchronize(stream_);
    for (auto& p : pending_)
      if (p.event) cudaEventDestroy(p.event);
    if (comm_) api_.ncclCommDestroy(comm_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  std::string name() const override { return name_; }

  void all_reduce_sum(float* data, size_t n) override {
    if (!on_device(data)) return host_.all_reduce_sum(data, n);
    wait(all_reduce_sum_start(data, n));
  }
  void all_reduce_sum(double* data, size_t n) override {
    if (!on_device(data)) return host_.all_reduce_sum(data, n);
    check(api_.ncclAllReduce(data, data, n, ncclDouble, ncclSum, comm_, stream_), "ncclAllReduce");
    finish();
  }
  int all_reduce_sum_start(float* data, size_t n) override {
    Pending p;
    if (on_device(data)) {
      check(api_.ncclAllReduce(data, data, n, ncclFloat, ncclSum, comm_, stream_), "ncclAllReduce");
      check_cuda(cudaEventCreateWithFlags(&p.event, cudaEventDisableTiming), "cudaEventCreate");
      check_cuda(cudaEventRecord(p.event, stream_), "cudaEventRecord");
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
        check_cuda(cudaEventSynchronize(p.event), "waiting for an all-reduce");
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
    check(api_.ncclBroadcast(data, data, bytes, ncclChar, root, comm_, stream_), "ncclBroadcast");
    finish();
  }
  void barrier() override {
    finish();
    host_.barrier();
  }
  void reduce_scatter_sum(const float* in, float* out, size_t count_per_rank) override {
    if (!on_device(in)) return host_.reduce_scatter_sum(in, out, count_per_rank);
    check(api_.ncclReduceScatter(in, out, count_per_rank, ncclFloat, ncclSum, comm_, stream_), "ncclReduceScatter");
    finish();
  }
  void all_gather(const float* in, float* out, size_t count_per_rank) override {
    if (!on_device(in)) return host_.all_gather(in, out, count_per_rank);
    // NCCL's in-place form is exactly communicator.h's: in == out + rank * count.
    check(api_.ncclAllGather(in, out, count_per_rank, ncclFloat, comm_, stream_), "ncclAllGather");
    finish();
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
  void finish() { check_cuda(cudaStreamSynchronize(stream_), "waiting for an NCCL collective"); }
  void check(ncclResult_t r, const char* what) {
    if (r != ncclSuccess)
      fail(std::string("nccl communicator (rank ") + std::to_string(host_.rank()) + "): " + what + ": " +
           api_.ncclGetErrorString(r));
  }

  Communicator& host_;
  int device_;
  const NcclApi& api_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::vector<Pending> pending_;  // handles first_, first_ + 1, ...; earlier ones are done
  int first_ = 0;
  std::string name_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host, int device) {
  return std::make_unique<NcclCommunicator>(host, device);
}

}  // namespace ctrl
