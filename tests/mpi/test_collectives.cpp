// Collectives checked against values computed locally, for any number of ranks
// (ctest runs them on 2; run directly they check the single-process
// communicator). Values are small integers, so float sums are exact in any
// order. A failed EXPECT never skips a collective, so ranks stay in step.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "mpi_test.h"

namespace ctrl::test {
namespace {

// Rank r's i-th contribution; sum_over_ranks(i) is the expected sum.
float value(int r, size_t i) { return static_cast<float>((r + 1) * static_cast<int>(i % 1000) + r); }
float sum_over_ranks(size_t i, int n) {
  float s = 0;
  for (int r = 0; r < n; ++r) s += value(r, i);
  return s;
}

// The first index where `got` differs from the expected sums, or got.size().
template <typename T>
size_t first_wrong_sum(const std::vector<T>& got, int n) {
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != static_cast<T>(sum_over_ranks(i, n))) return i;
  return got.size();
}

const size_t kSizes[] = {0, 1, 7, 1001, (size_t{1} << 20) + 3, size_t{1} << 24};  // up to 64 MB of floats

TEST(Collectives, NameSaysWhatItIs) {
  const std::string name = comm().name();
  EXPECT_EQ(comm().ranks_on_host(), comm().size()) << "every rank of this test runs on this host";
  if (comm().size() == 1 && name == "single") {
    EXPECT_EQ(comm().rank_on_host(), -1);  // the launcher's environment decides
    return;
  }
  EXPECT_EQ(comm().rank_on_host(), comm().rank()) << "one host: the index on it is the rank";
  EXPECT_EQ(name.rfind("mpi (Open MPI v", 0), 0u) << name;
  EXPECT_NE(name.find(std::to_string(comm().size()) + " ranks on 1 host)"), std::string::npos) << name;
  EXPECT_GE(comm().rank(), 0);
  EXPECT_LT(comm().rank(), comm().size());
}

// The trainer's one-rank-per-GPU check: distinct values pass; a value that
// two ranks share stops every rank with the same first words.
TEST(Collectives, CheckDistinctStopsEveryRankWhenTwoShareAValue) {
  const int r = comm().rank();
  EXPECT_NO_THROW(check_distinct(comm(), "GPU", "GPU-" + std::to_string(r), "advice"));
  if (comm().size() == 1) {
    EXPECT_NO_THROW(check_distinct(comm(), "GPU", "GPU-x", "advice"));  // one rank cannot collide
    return;
  }
  try {
    check_distinct(comm(), "GPU", r == comm().size() - 1 ? "GPU-0" : "GPU-" + std::to_string(r), "one rank per GPU");
    FAIL() << "no error on rank " << r;
  } catch (const Error& e) {
    const std::string expected = "ctrl: ranks 0 and " + std::to_string(comm().size() - 1) + " have the same GPU";
    EXPECT_EQ(std::string(e.what()).rfind(expected, 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find("; one rank per GPU"), std::string::npos) << e.what();
    if (r == 0) EXPECT_NE(std::string(e.what()).find("(GPU-0)"), std::string::npos) << e.what();
  }
}

TEST(Collectives, AllReduceFloatSumsEveryElement) {
  const int r = comm().rank(), n = comm().size();
  for (size_t count : kSizes) {
    std::vector<float> x(count);
    for (size_t i = 0; i < count; ++i) x[i] = value(r, i);
    comm().all_reduce_sum(x.data(), count);
    EXPECT_EQ(first_wrong_sum(x, n), count) << "count " << count;
  }
}

TEST(Collectives, AllReduceDoubleKeepsDoublePrecision) {
  const int r = comm().rank(), n = comm().size();
  // 2^40 + small parts: a float sum would lose the small parts.
  std::vector<double> x(1003);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 1099511627776.0 + value(r, i);
  comm().all_reduce_sum(x.data(), x.size());
  size_t wrong = x.size();
  for (size_t i = 0; i < x.size() && wrong == x.size(); ++i)
    if (x[i] != n * 1099511627776.0 + sum_over_ranks(i, n)) wrong = i;
  EXPECT_EQ(wrong, x.size());
  double nothing = 5;
  comm().all_reduce_sum(&nothing, 0);
  EXPECT_EQ(nothing, 5);
}

TEST(Collectives, AsyncAllReducesWithSeveralOutstandingHandles) {
  const int r = comm().rank(), n = comm().size();
  const size_t counts[] = {5, 0, 300000, 17, 1 << 16};
  std::vector<std::vector<float>> bufs;
  for (size_t count : counts) {
    bufs.emplace_back(count);
    for (size_t i = 0; i < count; ++i) bufs.back()[i] = value(r, i);
  }
  std::vector<int> handles;
  for (auto& b : bufs) handles.push_back(comm().all_reduce_sum_start(b.data(), b.size()));
  for (size_t k = 1; k < handles.size(); ++k) EXPECT_NE(handles[k], handles[k - 1]);
  // A blocking collective issued while others are outstanding runs after them.
  std::vector<float> blocking = {value(r, 0), value(r, 1)};
  comm().all_reduce_sum(blocking.data(), blocking.size());
  EXPECT_EQ(first_wrong_sum(blocking, n), 2u);
  // Out of order: waiting for a later handle completes the earlier ones too.
  comm().wait(handles[3]);
  for (size_t k = 0; k <= 3; ++k) EXPECT_EQ(first_wrong_sum(bufs[k], n), bufs[k].size()) << "buffer " << k;
  comm().wait(handles[4]);
  comm().wait(handles[0]);  // already complete: returns at once
  EXPECT_EQ(first_wrong_sum(bufs[4], n), bufs[4].size());
}

TEST(Collectives, BroadcastCopiesTheRootsBytes) {
  const int r = comm().rank(), n = comm().size();
  for (int root = 0; root < n; ++root) {
    for (size_t bytes : {size_t{0}, size_t{13}, size_t{1} << 22}) {
      std::vector<uint8_t> b(bytes);
      for (size_t i = 0; i < bytes; ++i) b[i] = static_cast<uint8_t>(r == root ? (i * 7 + root) : 0xEE);
      comm().broadcast(b.data(), bytes, root);
      size_t wrong = bytes;
      for (size_t i = 0; i < bytes && wrong == bytes; ++i)
        if (b[i] != static_cast<uint8_t>(i * 7 + root)) wrong = i;
      EXPECT_EQ(wrong, bytes) << "root " << root << ", " << bytes << " bytes";
    }
  }
}

TEST(Collectives, BarrierOrdersWorkAcrossRanks) {
  // The last rank writes a file before the barrier; rank 0 must see it after.
  uint64_t tag = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  comm().broadcast(&tag, sizeof tag, 0);
  const auto path = std::filesystem::temp_directory_path() / ("ctrl_mpi_barrier_" + std::to_string(tag));
  if (comm().rank() == comm().size() - 1) std::ofstream(path) << "written before the barrier";
  comm().barrier();
  if (comm().rank() == 0) {
    EXPECT_TRUE(std::filesystem::exists(path));
  }
  comm().barrier();
  if (comm().rank() == comm().size() - 1) std::filesystem::remove(path);
}

TEST(Collectives, ReduceScatterGivesEachRankItsSummedSlice) {
  const int r = comm().rank(), n = comm().size();
  for (size_t count : {size_t{0}, size_t{1}, size_t{5}, (size_t{1} << 20) + 1}) {
    std::vector<float> in(n * count), out(count, -1.0f);
    for (size_t i = 0; i < in.size(); ++i) in[i] = value(r, i);
    comm().reduce_scatter_sum(in.data(), out.data(), count);
    size_t wrong = count;
    for (size_t i = 0; i < count && wrong == count; ++i)
      if (out[i] != sum_over_ranks(r * count + i, n)) wrong = i;
    EXPECT_EQ(wrong, count) << "count " << count;
  }
}

TEST(Collectives, AllGatherPlacesEachRanksPart) {
  const int r = comm().rank(), n = comm().size();
  for (size_t count : {size_t{0}, size_t{1}, size_t{5}, (size_t{1} << 20) + 1}) {
    for (bool in_place : {false, true}) {
      std::vector<float> in(count), out(n * count, -1.0f);
      float* src = in_place ? out.data() + r * count : in.data();
      for (size_t i = 0; i < count; ++i) src[i] = value(r, i);
      comm().all_gather(src, out.data(), count);
      size_t wrong = out.size();
      for (size_t i = 0; i < out.size() && wrong == out.size(); ++i)
        if (out[i] != value(static_cast<int>(i / count), i % count)) wrong = i;
      EXPECT_EQ(wrong, out.size()) << "count " << count << (in_place ? " in place" : "");
    }
  }
}

TEST(Collectives, CheckIdenticalPassesForEqualValues) {
  EXPECT_NO_THROW(comm().check_identical("config", std::string(100000, 'x') + "{\"layers\": 2}"));
  EXPECT_NO_THROW(comm().check_identical("empty", ""));
}

TEST(Collectives, CheckIdenticalFailsOnEveryRankNamingTheFirstDifferingRank) {
  const int r = comm().rank(), n = comm().size();
  if (n == 1) GTEST_SKIP() << "needs 2 ranks";
  // Ranks >= 1 differ from rank 0; the first of them is rank 1.
  const std::string value = "{\"d_model\": " + std::string(r == 0 ? "256" : "512") + ", \"layers\": 4}";
  try {
    comm().check_identical("config JSON", value);
    ADD_FAILURE() << "no error on rank " << r;
  } catch (const ctrl::Error& e) {
    EXPECT_STREQ(e.what(),
                 ("ctrl: config JSON differs between ranks (it must be the same on all " + std::to_string(n) +
                  "): rank 0 has \"{\\\"d_model\\\": 256, \\\"layers\\\": 4}\" (29 bytes), rank 1 has "
                  "\"{\\\"d_model\\\": 512, \\\"layers\\\": 4}\" (29 bytes), first difference at byte 12")
                     .c_str());
  }
  // Only the last rank differs: the message names it.
  try {
    comm().check_identical("manifest checksum", r == n - 1 ? "crc 0000beef" : "crc 0000dead");
    ADD_FAILURE() << "no error on rank " << r;
  } catch (const ctrl::Error& e) {
    EXPECT_NE(std::string(e.what()).find(", rank " + std::to_string(n - 1) + " has \"crc 0000beef\""),
              std::string::npos)
        << e.what();
  }
  // The communicator still works afterwards.
  float one = 1;
  comm().all_reduce_sum(&one, 1);
  EXPECT_EQ(one, n);
}

}  // namespace
}  // namespace ctrl::test
