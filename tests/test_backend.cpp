// The backend seam: the factory, the memory calls, and the checked backend
// that makes any host access to backend memory fail loudly.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "ops/ops.h"

namespace ctrl {
namespace {

TEST(Backend, FactoryKnowsCpuAndCheckedAndRejectsOthers) {
  EXPECT_EQ(available_devices(), (std::vector<std::string>{"cpu", "checked"}));
  EXPECT_STREQ(make_ops("checked")->name(), "checked");
  try {
    make_ops("cuda0");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown device 'cuda0'"), std::string::npos) << e.what();
  }
}

TEST(Backend, CtrlDeviceReplacesTheDefaultCpuBackend) {
  const char* saved = std::getenv("CTRL_DEVICE");
  const std::string before = saved ? saved : "";
  setenv("CTRL_DEVICE", "checked", 1);
  EXPECT_STREQ(make_ops("cpu")->name(), "checked");
  setenv("CTRL_DEVICE", "cpu", 1);
  EXPECT_STREQ(make_ops("checked")->name(), "checked");  // an explicit other backend stays
  EXPECT_STREQ(make_ops("cpu")->name(), "cpu");
  if (saved) setenv("CTRL_DEVICE", before.c_str(), 1);
  else unsetenv("CTRL_DEVICE");
}

class EveryBackend : public ::testing::TestWithParam<std::string> {};

// Upload, fill, an op and download give the same bytes on every backend.
TEST_P(EveryBackend, MemoryRoundTripsThroughUploadAndDownload) {
  auto ops = make_ops(GetParam());
  DeviceArray<float> a(*ops, 1000, "test.a");
  EXPECT_EQ(a.to_host(), std::vector<float>(1000, 0.0f));  // zero-filled
  std::vector<float> host(1000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = float(i) * 0.5f - 7.0f;
  a.from_host(host);
  EXPECT_EQ(a.to_host(), host);
  ops->scale(a.data(), 1000, 2.0f);
  ops->fill(a.data() + 10, 5, 3.0f);
  ops->synchronize();
  for (size_t i = 0; i < host.size(); ++i) host[i] = i >= 10 && i < 15 ? 3.0f : host[i] * 2.0f;
  EXPECT_EQ(a.to_host(), host);
  std::vector<float> part(3);
  a.download(part.data(), 3, 12);
  EXPECT_EQ(part, std::vector<float>(3, 3.0f));
  EXPECT_DOUBLE_EQ(ops->sum_squares(a.data() + 10, 5), 45.0);
}

INSTANTIATE_TEST_SUITE_P(Devices, EveryBackend, ::testing::ValuesIn(available_devices()));

TEST(CheckedBackend, HostReadOrWriteOfBackendMemoryDiesNamingTheBuffer) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto ops = make_ops("checked");
        DeviceArray<float> a(*ops, 64, "model.params");
        volatile float x = a.data()[5];
        (void)x;
      },
      "host code touched backend buffer 'model.params' \\(byte 20 of 256\\)");
  EXPECT_DEATH(
      {
        auto ops = make_ops("checked");
        DeviceArray<int32_t> t(*ops, 10, "model.tokens");
        t.data()[0] = 1;
      },
      "'model.tokens'");
  // On the cpu backend the same read is allowed (it is host memory): the check is the checked backend's.
  auto cpu = make_ops("cpu");
  DeviceArray<float> b(*cpu, 64, "x");
  EXPECT_EQ(b.data()[5], 0.0f);
}

TEST(CheckedBackend, OpsRejectHostPointersNamingTheArgument) {
  auto ops = make_ops("checked");
  DeviceArray<float> x(*ops, 16, "x");
  std::vector<int32_t> host_tokens(4, 1);
  DeviceArray<float> w(*ops, 16 * 4, "w");
  try {
    ops->embedding_forward(x.data(), host_tokens.data(), w.data(), 1, 4, 4, 1.0f);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("embedding_forward: argument 'tokens' is host memory"), std::string::npos)
        << e.what();
  }
  DeviceArray<int32_t> tokens(*ops, 4, "tokens");
  tokens.from_host(host_tokens);
  ops->embedding_forward(x.data(), tokens.data(), w.data(), 1, 4, 4, 1.0f);  // all backend memory: runs
}

TEST(CheckedBackend, HostAccessWindowOpensOneBufferUntilItEnds) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto ops = make_ops("checked");
  DeviceArray<float> a(*ops, 8, "grads");
  ops->fill(a.data(), 8, 2.0f);
  {
    HostAccess lend(*ops, a.data());  // as the MPI communicator's data plane uses it
    a.data()[1] += 1.0f;
    EXPECT_EQ(a.data()[1], 3.0f);
  }
  EXPECT_EQ(a.to_host()[1], 3.0f);
  EXPECT_DEATH(
      {
        volatile float y = a.data()[1];
        (void)y;
      },
      "'grads'");
}

}  // namespace
}  // namespace ctrl
