// When CTRL_DEVICE names the CUDA backend (ctest's cuda_suite) on a machine
// without a CUDA device, or in a build without CUDA, every test is skipped
// with one printed reason instead of failing: the suite has nothing to run
// on. ctest reports the entry as skipped (SKIP_REGULAR_EXPRESSION).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "ops/ops.h"

namespace {

class CudaDeviceRequired : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* device = std::getenv("CTRL_DEVICE");
    if (!device || std::strncmp(device, "cuda", 4) != 0) return;
    const auto devices = ctrl::available_devices();
    if (std::find(devices.begin(), devices.end(), "cuda") != devices.end()) return;
#ifdef CTRL_HAVE_CUDA
    GTEST_SKIP() << "CTRL_DEVICE=" << device << ": no CUDA device found; skipping every test";
#else
    GTEST_SKIP() << "CTRL_DEVICE=" << device << ": this build has no CUDA (no CUDA device found); skipping every test";
#endif
  }
};

[[maybe_unused]] ::testing::Environment* const registered =
    ::testing::AddGlobalTestEnvironment(new CudaDeviceRequired);

}  // namespace
