// The backend seam: the factory, the memory calls, and the checked backend
// that makes any host access to backend memory fail loudly.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "core/file_io.h"
#include "ops/decorator.h"
#include "ops/ops.h"
#include "ops/profiled_ops.h"
#include "test_support.h"

namespace ctrl {
namespace {

bool has_cuda_device() {
  const auto d = available_devices();
  return std::find(d.begin(), d.end(), "cuda") != d.end();
}

TEST(Backend, FactoryKnowsCpuAndCheckedAndRejectsOthers) {
  // cpu and checked always; cuda only in a CUDA build on a machine with a CUDA device.
  std::vector<std::string> expected = {"cpu", "checked"};
#ifdef CTRL_HAVE_CUDA
  if (has_cuda_device()) expected.push_back("cuda");
#endif
  EXPECT_EQ(available_devices(), expected);
  EXPECT_STREQ(make_ops("checked")->name(), "checked");
  try {
    make_ops("cuda0");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown device 'cuda0'"), std::string::npos) << e.what();
  }
}

// --device cuda where there is none fails with one line saying which is missing:
// CUDA in the build, or a device on the machine.
TEST(Backend, CudaRequestedButAbsentFailsWithOneClearLine) {
  if (has_cuda_device()) {
    EXPECT_EQ(cuda_unavailable_reason(), "");
    EXPECT_STREQ(make_ops("cuda")->name(), "cuda");
    try {
      make_ops("cuda:99");
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("CUDA device(s), numbered from 0"), std::string::npos) << e.what();
    }
    return;
  }
#ifdef CTRL_HAVE_CUDA
  const std::string why = "no CUDA device found";
#else
  const std::string why = "this build has no CUDA";
#endif
  for (const char* name : {"cuda", "cuda:1"}) {
    try {
      make_ops(name);
      FAIL() << "no error for " << name;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(std::string("device '") + name + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find(why), std::string::npos) << msg;
      // Why: no driver, no GPU, a driver too old for this build, or no CUDA in it.
      const std::string reason = cuda_unavailable_reason();
      EXPECT_FALSE(reason.empty());
      EXPECT_NE(msg.find(reason), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
}

TEST(Backend, CtrlDeviceReplacesTheDefaultCpuBackend) {
  {
    test_support::ScopedEnv device("CTRL_DEVICE", "checked");
    EXPECT_STREQ(make_ops("cpu")->name(), "checked");
  }
  test_support::ScopedEnv device("CTRL_DEVICE", "cpu");
  EXPECT_STREQ(make_ops("checked")->name(), "checked");  // an explicit other backend stays
  EXPECT_STREQ(make_ops("cpu")->name(), "cpu");
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
  DeviceArray<double> sum(*ops, 1, "test.sum");
  ops->sum_squares(a.data() + 10, 5, sum.data());
  ops->sum_squares(a.data() + 10, 1, sum.data());  // adds
  EXPECT_EQ(sum.to_host(), std::vector<double>{54.0});
}

INSTANTIATE_TEST_SUITE_P(Devices, EveryBackend, ::testing::ValuesIn(available_devices()),
                         [](const auto& info) { return info.param; });  // named cpu, checked, cuda

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
  auto cpu = test_support::make_cpu_reference();  // (make_ops("cpu") is checked under CTRL_DEVICE=checked)
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

int run(const std::string& cmd, std::string* out) { return test_support::run_shell(cmd, out); }

// --device reaches the backend in every command that computes: a run trained
// on the checked backend generates on it, and gives the cpu backend's weights.
TEST(CliDevice, TrainAndGenerateOnTheCheckedBackendMatchTheCpu) {
  const std::string bin = test_support::ctrl_binary(), base = test_support::fresh_dir("ctrl_device", "run");
  const std::string common = " train --config tiny --set model.n_layer=1 --set model.n_ctx=16 --set model.vocab_size=50"
                             " --set train.micro_batch=2 --set train.global_batch=4 --set train.steps=2"
                             " --set train.eval_every=0 --quiet";
  std::string out;
  ASSERT_EQ(run(bin + common + " --device checked --out " + base + "_checked 2>&1", &out), 0) << out;
  ASSERT_EQ(run("CTRL_DEVICE= " + bin + common + " --device cpu --out " + base + "_cpu 2>&1", &out), 0) << out;
  const std::string ckpt = "/checkpoints/step-00000002.ckpt";
  std::string a, b;
  const std::string gen = " generate --control Synthetic --max-tokens 8 --ids --model ";
  ASSERT_EQ(run(bin + gen + base + "_checked" + ckpt + " --device checked 2>&1", &a), 0) << a;
  ASSERT_EQ(run("CTRL_DEVICE= " + bin + gen + base + "_cpu" + ckpt + " --device cpu 2>&1", &b), 0) << b;
  EXPECT_EQ(a, b);
  EXPECT_FALSE(a.empty());
  EXPECT_NE(a.find("\n(8 tokens generated under Synthetic)"), std::string::npos) << "the ids end their line: " << a;
  // --threads pins the count in train and generate; decoding gives the same ids at any count.
  ASSERT_EQ(run(bin + common + " --threads 1 --out " + base + "_one 2>&1", &out), 0) << out;
  EXPECT_NE(ctrl::read_file(base + "_one/config.json").find("\"train.threads\": \"1\""), std::string::npos);
  ASSERT_EQ(run("CTRL_DEVICE= " + bin + gen + base + "_cpu" + ckpt + " --threads 1 2>&1", &out), 0) << out;
  EXPECT_EQ(out, b);
  // --model may name the run directory: its newest checkpoint, with a note.
  ASSERT_EQ(run("CTRL_DEVICE= " + bin + gen + base + "_cpu 2>/dev/null", &out), 0) << out;
  EXPECT_EQ(out + "(8 tokens generated under Synthetic)\n", b);
  EXPECT_EQ(run(bin + gen + base + "_cpu 2>&1 >/dev/null", &out), 0);
  EXPECT_NE(out.find("is a run directory; using its newest checkpoint"), std::string::npos) << out;
  EXPECT_EQ(run(bin + gen + base + "_cpu/checkpoints 2>&1", &out), 1);
  EXPECT_NE(out.find("a directory with no checkpoints/step-*.ckpt"), std::string::npos) << out;
  EXPECT_NE(run(bin + common + " --device tpu --out " + base + "_bad 2>&1", &out), 0);
  EXPECT_NE(out.find("train.device must be cpu, checked, cuda or cuda:N, got 'tpu'"), std::string::npos) << out;
}

// A backend with a device clock: every mark is 1 ms after the one before, so
// each op spans 1 ms between its two marks. The reset is counted.
class ClockedOps final : public OpsDecorator {
 public:
  explicit ClockedOps(std::unique_ptr<Ops> inner) : OpsDecorator(std::move(inner)) {}
  int timer_mark() override { return next_++; }
  double timer_seconds(int from, int to) override { return 1e-3 * (to - from); }
  void timer_reset() override { next_ = 0, ++resets; }
  int resets = 0;

 private:
  int next_ = 0;
};

// The profiler reads a backend's device clock (no host wait per op) in
// batches, and every op's span lands in its own row.
TEST(Profiler, ReadsTheDeviceClockOfAnAsynchronousBackend) {
  auto clocked = std::make_unique<ClockedOps>(test_support::make_cpu_reference());
  ClockedOps* clock = clocked.get();
  auto ops = make_profiled_ops(std::move(clocked));
  std::vector<float> x(16, 1.0f);
  for (int i = 0; i < 5000; ++i) ops->scale(x.data(), x.size(), 1.0f);
  ops->fill(x.data(), x.size(), 0.0f);
  EXPECT_EQ(clock->resets, 1);  // one batch read while running (4,096 ops), the rest by the report
  const std::string report = profile_report(profile_times(*ops));
  EXPECT_EQ(clock->resets, 2);
  EXPECT_NE(report.find("scale                    5000      5.000"), std::string::npos) << report;
  EXPECT_NE(report.find("fill                        1      0.001"), std::string::npos) << report;
}

// A backend whose wait reports an error (as a GPU reports an earlier
// kernel's fault at the next wait) stops the op profile's timing: the op
// whose timing met it returns, later ops are counted, and the report throws
// the error, where before the process ended in std::terminate (the timing
// runs in a destructor).
TEST(Profiler, ABackendErrorInTheTimingIsReportedNotFatal) {
  class FailingWait final : public OpsDecorator {
   public:
    using OpsDecorator::OpsDecorator;
    void synchronize() override { throw Error("device fault (stand-in)"); }
  };
  auto ops = make_profiled_ops(std::make_unique<FailingWait>(make_ops("cpu", 1)));
  DeviceArray<float> x(*ops, 16, "x");
  ops->fill(x.data(), 16, 1.0f);  // its timing waits, and the wait throws
  ops->fill(x.data(), 16, 2.0f);
  try {
    profile_times(*ops);
    FAIL() << "the profile report hid the backend's error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("device fault (stand-in)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ctrl
