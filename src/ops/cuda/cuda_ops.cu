// The CUDA backend's device, stream, memory, scratch and reports; the ops
// live in the other files of this folder, one per op group.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ops/cuda/common.cuh"
#include "ops/gpu_scratch.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/positions.h"

namespace ctrl::cuda {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(std::string("cuda: ") + what + " failed: " + cudaGetErrorString(e));
}

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) fail(std::string("cuda: ") + what + " failed: cuBLAS status " + std::to_string(int(s)));
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" / "no device" error
    return 0;
  }
  return n;
}

int compute_capability(int device) {
  cudaDeviceProp prop{};
  if (device < 0 || device >= device_count() || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return prop.major * 10 + prop.minor;
}

std::string no_device_reason() {
  int driver = 0, n = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) return "no NVIDIA driver";
  const cudaError_t e = cudaGetDeviceCount(&n);
  cudaGetLastError();
  if (e == cudaSuccess) return n > 0 ? "" : "no GPU";
  if (e == cudaErrorNoDevice) return "no GPU";
  auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  return std::string(cudaGetErrorString(e)) + ": driver supports CUDA " + version(driver) + ", this build needs " +
         version(CUDART_VERSION);
}

std::unique_ptr<Ops> make_cuda_ops(int device) { return std::make_unique<CudaOps>(device); }

CudaOps::CudaOps(int device) : device_(device) {
  const int count = device_count();
  if (device < 0 || device >= count)
    fail("cuda:" + std::to_string(device) + ": this machine has " + std::to_string(count) + " CUDA device(s)");
  CTRL_CUDA(cudaSetDevice(device));
  cudaDeviceProp prop{};
  CTRL_CUDA(cudaGetDeviceProperties(&prop, device));
  sm_major_ = prop.major, sm_minor_ = prop.minor;
  gpu_name_ = prop.name;
  gpu_uuid_ = "GPU";
  for (int i = 0; i < 16; ++i) {
    char hex[4];
    std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned char>(prop.uuid.bytes[i]));
    gpu_uuid_ += (i == 0 || i == 4 || i == 6 || i == 8 || i == 10 ? "-" : "") + std::string(hex);
  }
  if (sm_major_ * 10 + sm_minor_ < kCudaMinComputeCapability)
    fail(std::string("cuda: ") + prop.name + " is sm_" + std::to_string(sm_major_) + std::to_string(sm_minor_) +
         "; this build needs sm_" + std::to_string(kCudaMinComputeCapability) + " (Turing) or newer");
  const char* tf32 = std::getenv("CTRL_CUDA_TF32");
  tf32_ = tf32 && std::strcmp(tf32, "1") == 0;
  fused_attention_ = cuda_fused_attention_requested();
  int optin = 0;
  CTRL_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  max_shared_optin_ = size_t(optin);
  if (fused_attention_) prepare_fused_attention();
  CTRL_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  init_gemm();
  workspace_bytes_ = size_t(kGpuGemmWorkspaceBytes);
  workspace_ = device_malloc(workspace_bytes_, "the cuBLASLt workspace");
}

double CudaOps::measure_peak_gflops(bool bf16, double seconds) {
  // A large square product in the type the engine uses, timed with events
  // after one warm-up; repeated until about `seconds` of GPU time.
  const int64_t n = 4096;
  const DType t = bf16 ? DType::BF16 : DType::F32;
  const size_t bytes = size_t(n * n) * (bf16 ? 2 : 4);
  void* a = allocate(bytes, "peak.a");
  void* b = allocate(bytes, "peak.b");
  void* c = allocate(bytes, "peak.c");
  auto run = [&] { gemm(false, true, n, n, n, 1.0f, {a, t}, n, {b, t}, n, 0.0f, {c, t}, n); };
  run();
  cudaEvent_t start, stop;
  CTRL_CUDA(cudaEventCreate(&start));
  CTRL_CUDA(cudaEventCreate(&stop));
  int reps = 1;
  double elapsed = 0;
  for (;;) {
    CTRL_CUDA(cudaEventRecord(start, stream_));
    for (int i = 0; i < reps; ++i) run();
    CTRL_CUDA(cudaEventRecord(stop, stream_));
    CTRL_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CTRL_CUDA(cudaEventElapsedTime(&ms, start, stop));
    elapsed = ms / 1000.0;
    if (elapsed >= seconds || reps >= (1 << 16)) break;
    reps = elapsed > 0 ? std::max(reps * 2, int(double(reps) * seconds / elapsed * 1.1) + 1) : reps * 2;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  release(a), release(b), release(c);
  return 2.0 * double(n) * double(n) * double(n) * reps / elapsed / 1e9;
}

int CudaOps::timer_mark() {
  if (timer_next_ == timer_events_.size()) {
    cudaEvent_t e = nullptr;
    CTRL_CUDA(cudaSetDevice(device_));  // an event belongs to the device current at its creation: stream_'s
    CTRL_CUDA(cudaEventCreate(&e));
    timer_events_.push_back(e);
  }
  CTRL_CUDA(cudaEventRecord(timer_events_[timer_next_], stream_));
  return int(timer_next_++);
}

double CudaOps::timer_seconds(int from, int to) {
  CTRL_CUDA(cudaEventSynchronize(timer_events_[size_t(to)]));
  float ms = 0;
  CTRL_CUDA(cudaEventElapsedTime(&ms, timer_events_[size_t(from)], timer_events_[size_t(to)]));
  return ms / 1e3;
}

CudaOps::~CudaOps() {
  // No throwing here: errors at teardown (e.g. after a device fault) are ignored.
  cudaSetDevice(device_);
  if (stream_) cudaStreamSynchronize(stream_);
  for (cudaEvent_t e : timer_events_) cudaEventDestroy(e);
  for (void* p : slots_) cudaFree(p);
  for (auto& [width, table] : positions_) cudaFree(table.data);
  cudaFree(segments_dev_);
  cudaFree(workspace_);
  release_gemm();
  if (stream_) cudaStreamDestroy(stream_);
}

void* CudaOps::device_malloc(size_t bytes, const std::string& what) {
  CTRL_CUDA(cudaSetDevice(device_));
  void* p = nullptr;  // cudaMalloc aligns to at least 256 bytes
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    cudaGetLastError();
    size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    fail("cuda: out of device memory allocating " + what + " (" + std::to_string(bytes >> 20) + " MiB; " +
         std::to_string(free_bytes >> 20) + " of " + std::to_string(total >> 20) + " MiB free)");
  }
  sizes_[p] = bytes;
  live_bytes_ += bytes;
  peak_bytes_ = std::max(peak_bytes_, live_bytes_);
  return p;
}

uint64_t CudaOps::device_room_bytes() const {
  CTRL_CUDA(cudaSetDevice(device_));
  size_t free_bytes = 0, total = 0;
  CTRL_CUDA(cudaMemGetInfo(&free_bytes, &total));
  return uint64_t(free_bytes) + live_bytes_;
}

void CudaOps::device_free(void* p) {
  if (!p) return;
  CTRL_CUDA(cudaFree(p));
  forget(p);
}

void CudaOps::forget(void* p) {
  const auto it = sizes_.find(p);
  if (it != sizes_.end()) live_bytes_ -= it->second, sizes_.erase(it);
}

void* CudaOps::allocate(size_t bytes, const char* name) {
  if (bytes == 0) return nullptr;
  void* p = device_malloc(bytes, std::string("'") + name + "'");
  CTRL_CUDA(cudaMemsetAsync(p, 0, bytes, stream_));  // ordered before every later op on the stream
  return p;
}

void CudaOps::release(void* p) {
  if (!p) return;
  // Runs in destructors, during unwinding too: a failure here is a device
  // fault that an earlier call has reported, so it is not thrown again.
  cudaSetDevice(device_);
  cudaStreamSynchronize(stream_);  // no queued op may still use it
  cudaFree(p);
  forget(p);
}

void CudaOps::upload(void* dst, const void* host_src, size_t bytes) {
  CTRL_CUDA(cudaSetDevice(device_));
  CTRL_CUDA(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
  CTRL_CUDA(cudaStreamSynchronize(stream_));  // the host buffer may be reused on return
}

void CudaOps::download(void* host_dst, const void* src, size_t bytes) {
  CTRL_CUDA(cudaSetDevice(device_));
  CTRL_CUDA(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_));  // after every queued op
  CTRL_CUDA(cudaStreamSynchronize(stream_));
}

void CudaOps::synchronize() { CTRL_CUDA(cudaStreamSynchronize(stream_)); }

std::string CudaOps::precision_note(DType low) const {
  if (low == DType::BF16 && sm_major_ < 8)
    return "this GPU (sm_" + std::to_string(sm_major_) + std::to_string(sm_minor_) +
           ") has no bf16 tensor cores: bf16 products run without them, slower than fp16; "
           "--set train.precision=fp16 (with loss scaling) is the fast choice here";
  return "";
}

void* CudaOps::scratch(Slot slot, size_t bytes) {
  if (bytes <= slot_bytes_[slot]) return slots_[slot];
  CTRL_CUDA(cudaStreamSynchronize(stream_));  // earlier ops may still read the old buffer
  device_free(slots_[slot]);
  slots_[slot] = nullptr, slot_bytes_[slot] = 0;
  const size_t rounded = (bytes + 255) / 256 * 256;
  slots_[slot] = device_malloc(rounded, "op scratch");
  slot_bytes_[slot] = rounded;
  return slots_[slot];
}

const float* CudaOps::positions(int64_t T, int64_t D) {
  PositionTable& table = positions_[D];
  if (table.data && table.rows >= T) return table.data;
  const int64_t rows = std::max<int64_t>(T, 2 * table.rows);
  std::vector<float> host(size_t(rows * D));
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t c = 0; c < D; ++c) host[size_t(t * D + c)] = sinusoid(t, c, D);
  CTRL_CUDA(cudaStreamSynchronize(stream_));  // earlier kernels may still read the old table
  device_free(table.data);
  table = {};
  table.data = static_cast<float*>(device_malloc(host.size() * sizeof(float), "the position table"));
  upload(table.data, host.data(), host.size() * sizeof(float));  // on stream_: kernels queued later see the table
  table.rows = rows;
  return table.data;
}

}  // namespace ctrl::cuda
