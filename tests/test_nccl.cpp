// The NCCL communicator (src/dist/nccl_communicator.cpp) with one rank, on the
// first GPU: device buffers go through NCCL, host buffers to the host
// communicator, and with one rank every collective leaves the data as the
// single-process communicator would; a collective handed a buffer without a
// fence runs after the ops queued on the backend's stream. Skipped, with the
// reason, where there is no GPU or no NCCL in the build. The ≥ 2-GPU equivalence (N ranks × b =
// 1 rank × N·b) is the MPI trainer test run with --device cuda on such a machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "dist/communicator.h"
#include "ops/ops.h"

namespace {

using ctrl::Communicator;

TEST(Nccl, OneRankCollectivesOnDeviceAndHostMemory) {
#ifndef CTRL_HAVE_NCCL
  GTEST_SKIP() << "this build has no NCCL communicator (no CUDA, or no nccl.h)";
#else
  const auto devices = ctrl::available_devices();
  if (std::find(devices.begin(), devices.end(), "cuda") == devices.end()) GTEST_SKIP() << "no CUDA device found";
  auto ops = ctrl::make_ops("cuda:0");
  auto host = ctrl::make_single_communicator();
  auto comm = ctrl::make_nccl_communicator(*host, ops->gpu(), ops->work_queue());
  EXPECT_TRUE(comm->orders_after_backend());
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_NE(comm->name().find("nccl"), std::string::npos) << comm->name();

  const size_t n = 1000;
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = float(i) * 0.25f - 7.0f;
  auto* a = static_cast<float*>(ops->allocate(n * sizeof(float), "nccl.a"));
  auto* b = static_cast<float*>(ops->allocate(n * sizeof(float), "nccl.b"));
  ops->upload(a, values.data(), n * sizeof(float));
  ops->synchronize();
  std::vector<float> back(n);
  auto device_values = [&](const float* p) {
    ops->download(back.data(), p, n * sizeof(float));
    return back;
  };

  comm->all_reduce_sum(a, n);  // one rank: the sum is the value
  EXPECT_EQ(device_values(a), values);
  const int h1 = comm->all_reduce_sum_start(a, n / 2), h2 = comm->all_reduce_sum_start(a + n / 2, n / 2);
  comm->wait(h2);  // completes h1 too
  comm->wait(h1);  // already complete: returns at once
  EXPECT_EQ(device_values(a), values);
  comm->reduce_scatter_sum(a, b, n);  // one rank: a copy
  EXPECT_EQ(device_values(b), values);
  ops->upload(b, std::vector<float>(n, 0.0f).data(), n * sizeof(float));
  comm->all_gather(a, b, n);
  EXPECT_EQ(device_values(b), values);
  comm->all_gather(b, b, n);  // in place: in == out + rank * count
  EXPECT_EQ(device_values(b), values);
  comm->broadcast(a, n * sizeof(float), 0);
  EXPECT_EQ(device_values(a), values);

  // No fence: the collective is ordered after the fill still queued on the
  // backend's stream. Out of place (one rank's reduce-scatter copies c into
  // the zero-filled d), so a copy that ran early would leave zeros.
  const size_t big = size_t(1) << 24;
  auto* c = static_cast<float*>(ops->allocate(big * sizeof(float), "nccl.c"));
  auto* d = static_cast<float*>(ops->allocate(big * sizeof(float), "nccl.d"));
  ops->fill(c, big, 3.0f);
  comm->reduce_scatter_sum(c, d, big);
  std::vector<float> copied(big);
  ops->download(copied.data(), d, big * sizeof(float));
  EXPECT_EQ(std::count(copied.begin(), copied.end(), 3.0f), ptrdiff_t(big));
  ops->release(c);
  ops->release(d);

  std::vector<double> host_sums = {1.5, -2.0};  // host memory: the host communicator's
  comm->all_reduce_sum(host_sums.data(), host_sums.size());
  EXPECT_EQ(host_sums, (std::vector<double>{1.5, -2.0}));
  int flag = 7;
  comm->broadcast(&flag, sizeof flag, 0);
  EXPECT_EQ(flag, 7);
  comm->barrier();
  comm->check_identical("a test value", "same");
  ops->release(a);
  ops->release(b);
#endif
}

}  // namespace
