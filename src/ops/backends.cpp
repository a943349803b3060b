// The backend factory: the one place that knows which backends exist.
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "ops/checked/checked_ops.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/ops.h"
#ifdef CTRL_HAVE_CUDA
#include "ops/cuda/cuda_backend.h"
#endif

namespace ctrl {

std::string Ops::Bf16Choice::describe() const {
  const std::string path = widened ? "widened to fp32" : "native";
  if (no_bf16_kernels) return path + " (oneDNN has no bf16 products for this CPU)";
  if (native_gflops <= 0) return path + " (train.cpu_bf16)";
  char line[200];
  std::snprintf(line, sizeof line,
                " (auto measured oneDNN's bf16 kernels at %.1f GFLOP/s, the widened products at %.1f; "
                "train.cpu_bf16 pins either)",
                native_gflops, widened_gflops);
  return path + line;
}

namespace {

// The rank's index among the ranks on its machine, as the MPI launcher
// (Open MPI, MPICH/Hydra) or Slurm announces it; 0 when not launched by one.
int local_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return 0;
}

// "cuda" is the rank's own GPU (its index on its machine modulo the GPUs: one
// rank per GPU; GPU 0 outside a launcher), "cuda:N" GPU N; -1 when `name` is neither.
int cuda_index(const std::string& name, int gpus, int rank_on_host) {
  if (name == "cuda") return gpus > 0 ? (rank_on_host >= 0 ? rank_on_host : local_rank()) % gpus : 0;
  if (name.rfind("cuda:", 0) != 0 || name.size() == 5 || name.size() > 8) return -1;
  int n = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    n = n * 10 + (name[i] - '0');
  }
  return n;
}

}  // namespace

std::vector<std::string> available_devices() {
  std::vector<std::string> devices = {"cpu", "checked"};
#ifdef CTRL_HAVE_CUDA
  if (cuda::device_count() > 0) devices.push_back("cuda");
#endif
  return devices;
}

std::string cuda_unavailable_reason() {
#ifdef CTRL_HAVE_CUDA
  return cuda::no_device_reason();
#else
  return "this build has no CUDA";
#endif
}

std::unique_ptr<Ops> make_ops(const std::string& device, int threads, int rank_on_host) {
  std::string name = device;
  const char* env = std::getenv("CTRL_DEVICE");
  if (env && *env && (name == "cpu" || name.empty())) name = env;
  const std::string from_env = env && name == env ? " (from CTRL_DEVICE)" : "";
  if (name == "cpu" || name.empty()) return std::make_unique<cpu::CpuOps>(threads);
  if (name == "checked") return make_checked_ops(std::make_unique<cpu::CpuOps>(threads));
#ifdef CTRL_HAVE_CUDA
  const int count = name.rfind("cuda", 0) == 0 ? cuda::device_count() : 0;
#else
  const int count = 0;
#endif
  if (const int gpu = cuda_index(name, count, rank_on_host); gpu >= 0) {
#ifdef CTRL_HAVE_CUDA
    if (count == 0)
      fail("device '" + name + "'" + from_env + ": no CUDA device found (" + cuda_unavailable_reason() + ")");
    if (gpu >= count)
      fail("device '" + name + "'" + from_env + ": this machine has " + std::to_string(count) +
           " CUDA device(s), numbered from 0");
    return cuda::make_cuda_ops(gpu);
#else
    fail("device '" + name + "'" + from_env + ": " + cuda_unavailable_reason() +
         " (rebuild where nvcc is installed; CMake's CTRL_WITH_CUDA)");
#endif
  }
  std::string known;
  for (const auto& d : available_devices()) known += (known.empty() ? "" : ", ") + d;
  fail("unknown device '" + name + "'" + from_env + ": this build has " + known);
}

}  // namespace ctrl
