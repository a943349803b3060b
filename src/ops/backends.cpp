// The backend factory: the one place that knows which backends exist.
#include <cstdlib>

#include "core/error.h"
#include "ops/checked/checked_ops.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/ops.h"
#ifdef CTRL_HAVE_CUDA
#include "ops/cuda/cuda_backend.h"
#endif

namespace ctrl {

namespace {

// "cuda" is GPU 0, "cuda:N" GPU N; -1 when `name` is neither.
int cuda_index(const std::string& name) {
  if (name == "cuda") return 0;
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

std::unique_ptr<Ops> make_ops(const std::string& device, int threads) {
  std::string name = device;
  const char* env = std::getenv("CTRL_DEVICE");
  if (env && *env && (name == "cpu" || name.empty())) name = env;
  const std::string from_env = env && name == env ? " (from CTRL_DEVICE)" : "";
  if (name == "cpu" || name.empty()) return std::make_unique<cpu::CpuOps>(threads);
  if (name == "checked") return make_checked_ops(std::make_unique<cpu::CpuOps>(threads));
  if (const int gpu = cuda_index(name); gpu >= 0) {
#ifdef CTRL_HAVE_CUDA
    const int count = cuda::device_count();
    if (count == 0) fail("device '" + name + "'" + from_env + ": no CUDA device found (no GPU, or no NVIDIA driver)");
    if (gpu >= count)
      fail("device '" + name + "'" + from_env + ": this machine has " + std::to_string(count) +
           " CUDA device(s), numbered from 0");
    return cuda::make_cuda_ops(gpu);
#else
    fail("device '" + name + "'" + from_env +
         ": this build has no CUDA (rebuild where nvcc is installed; CMake's CTRL_WITH_CUDA)");
#endif
  }
  std::string known;
  for (const auto& d : available_devices()) known += (known.empty() ? "" : ", ") + d;
  fail("unknown device '" + name + "'" + from_env + ": this build has " + known);
}

}  // namespace ctrl
