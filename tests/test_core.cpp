#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/file_io.h"
#include "core/parse.h"
#include "core/safetensors.h"
#include "core/sysinfo.h"
#include "data/shard.h"
#include "test_support.h"

using namespace ctrl;

static std::string temp_dir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("ctrl_test_" + name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

TEST(Parse, TheWholeTextMustBeTheNumber) {
  EXPECT_EQ(ctrl::parse_whole_int("42"), 42);
  EXPECT_EQ(ctrl::parse_whole_int("+42"), 42);
  EXPECT_EQ(ctrl::parse_whole_int("-7"), -7);
  EXPECT_EQ(ctrl::parse_whole_int("9223372036854775807"), INT64_MAX);
  for (const char* bad : {"", "+", "3u", "3 ", " 3", "+-3", "0x10", "1e3", "9223372036854775808"})
    EXPECT_FALSE(ctrl::parse_whole_int(bad)) << bad;
  EXPECT_EQ(ctrl::parse_whole_double("2.5e-3"), 2.5e-3);
  EXPECT_EQ(ctrl::parse_whole_double("+1"), 1.0);
  for (const char* bad : {"", "1.5x", "1,5", " 1", "+-1", "1e999"}) EXPECT_FALSE(ctrl::parse_whole_double(bad)) << bad;
}

TEST(Sysinfo, CgroupQuotaRoundsUpToWholeCpus) {
  EXPECT_EQ(ctrl::cpus_from_cgroup_quota("200000 100000"), 2);  // v2 cpu.max, docker --cpus 2
  EXPECT_EQ(ctrl::cpus_from_cgroup_quota("150000 100000"), 2);  // 1.5 CPUs: two threads, one half idle
  EXPECT_EQ(ctrl::cpus_from_cgroup_quota("50000 100000"), 1);
  EXPECT_EQ(ctrl::cpus_from_cgroup_quota("max 100000"), 0);     // unlimited
  EXPECT_EQ(ctrl::cpus_from_cgroup_quota("-1 100000"), 0);      // v1 unlimited
  for (const char* bad : {"", "200000", "200000 0", "abc 100000"}) EXPECT_EQ(ctrl::cpus_from_cgroup_quota(bad), 0) << bad;
  EXPECT_GE(ctrl::usable_cpus(), 1);
}

// A probe's freed buffers stop counting as the process's peak once reset.
TEST(Sysinfo, PeakRssResetsToTheCurrentResidentMemory) {
  const size_t bytes = size_t(256) << 20;
  // mmap, not the heap: an allocator (ASan's quarantine) may keep freed memory resident.
  void* big = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(big, MAP_FAILED);
  std::memset(big, 1, bytes);  // touched: resident
  EXPECT_GE(peak_rss_bytes(), bytes);
  munmap(big, bytes);
  const uint64_t before = peak_rss_bytes();
  ASSERT_TRUE(reset_peak_rss()) << "/proc/self/clear_refs refused (Linux 4.0+)";
  EXPECT_LT(peak_rss_bytes() + bytes / 2, before) << "the freed 256 MiB still count";
}

// The memory check counts the threads the backend will start with: OMP_NUM_THREADS
// (a list's first number) when it is a positive number, else the usable CPUs.
TEST(Sysinfo, DefaultCpuThreadsFollowOmpNumThreads) {
  test_support::ScopedEnv threads("OMP_NUM_THREADS", "7");
  EXPECT_EQ(ctrl::default_cpu_threads(), 7);
  setenv("OMP_NUM_THREADS", "3,1", 1);  // nested levels: the outer one
  EXPECT_EQ(ctrl::default_cpu_threads(), 3);
  for (const char* ignored : {"0", "-2", "x", ""}) {
    setenv("OMP_NUM_THREADS", ignored, 1);
    EXPECT_EQ(ctrl::default_cpu_threads(), ctrl::usable_cpus()) << ignored;
  }
  unsetenv("OMP_NUM_THREADS");
  EXPECT_EQ(ctrl::default_cpu_threads(), ctrl::usable_cpus());
}

// A fake cgroup tree: the process's own group and its ancestors are read, v2 and v1 alike.
TEST(Sysinfo, CgroupLimitIsTheTightestQuotaOnThePathToTheRoot) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("ctrl_cgroup_" + std::to_string(getpid()));
  fs::remove_all(root);
  auto put = [&](const std::string& file, const std::string& text) {
    fs::create_directories((root / file).parent_path());
    std::ofstream(root / file) << text << "\n";
  };
  put("user.slice/cpu.max", "400000 100000");           // 4 CPUs for the slice
  put("user.slice/job.scope/cpu.max", "max 100000");   // the job itself unlimited
  put("cpu.max", "max 100000");
  const std::string r = root.string();
  EXPECT_EQ(ctrl::cgroup_cpu_limit(r, "0::/user.slice/job.scope\n"), 4);  // the parent bounds the child
  put("user.slice/job.scope/cpu.max", "150000 100000");
  EXPECT_EQ(ctrl::cgroup_cpu_limit(r, "0::/user.slice/job.scope\n"), 2);
  EXPECT_EQ(ctrl::cgroup_cpu_limit(r, "0::/\n"), 0);  // a container's own namespace: its root, unlimited here
  EXPECT_EQ(ctrl::cgroup_cpu_limit(r, "0::/elsewhere\n"), 0);
  // v1: the cpu controller's hierarchy, mounted as cpu,cpuacct.
  put("cpu,cpuacct/batch/cpu.cfs_quota_us", "300000");
  put("cpu,cpuacct/batch/cpu.cfs_period_us", "100000");
  EXPECT_EQ(ctrl::cgroup_cpu_limit(r, "4:memory:/batch\n3:cpu,cpuacct:/batch\n"), 3);
  EXPECT_EQ(ctrl::cgroup_cpu_limit(r, "4:memory:/batch\n"), 0);  // no cpu controller line
  EXPECT_EQ(ctrl::cgroup_cpu_limit(r, "garbage\n\n"), 0);
  fs::remove_all(root);
}

// `ctrl --version` says how many threads and which OpenMP wait a run gets.
std::string ctrl_version(const std::string& env) {
  std::string out;
  EXPECT_EQ(test_support::run_shell("env -u OMP_NUM_THREADS -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT " + env + " " +
                                    test_support::ctrl_binary() + " --version 2>&1", &out), 0) << out;
  return out;
}

TEST(Sysinfo, DefaultThreadCountFollowsTheAffinityMask) {
  // One CPU allowed: the CPU backend runs one thread when nothing else says how many.
  EXPECT_NE(ctrl_version("taskset -c 0").find("OpenMP: 1 threads"), std::string::npos) << ctrl_version("taskset -c 0");
  EXPECT_NE(ctrl_version("OMP_NUM_THREADS=3 taskset -c 0").find("OpenMP: 3 threads"), std::string::npos);
}

TEST(Sysinfo, ShortSpinUnlessTheUserChoseAWaitPolicy) {
  EXPECT_NE(ctrl_version("").find(std::string("idle wait GOMP_SPINCOUNT=") + ctrl::kDefaultSpinCount + "\n"),
            std::string::npos) << ctrl_version("");
  EXPECT_NE(ctrl_version("OMP_WAIT_POLICY=active").find("idle wait OMP_WAIT_POLICY=active\n"), std::string::npos);
  EXPECT_NE(ctrl_version("GOMP_SPINCOUNT=5").find("idle wait GOMP_SPINCOUNT=5\n"), std::string::npos);
}

// Files written as a set are replaced together: when one cannot be written, the others keep their
// earlier contents (eval's control-codes.json and its heatmap once became a mismatched pair), and no
// temporary is left.
TEST(FileIo, FilesWrittenTogetherAreReplacedTogetherOrNotAtAll) {
  namespace fs = std::filesystem;
  const std::string dir = test_support::fresh_dir("ctrl_core", "together");
  fs::create_directories(dir);
  write_files_atomically({{dir + "/a.json", "old a"}, {dir + "/b.svg", "old b"}});
  EXPECT_EQ(read_file(dir + "/a.json"), "old a");
  try {
    write_files_atomically({{dir + "/a.json", "new a"}, {dir + "/missing/b.svg", "new b"}});
    FAIL() << "the second file's directory does not exist";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/missing/b.svg: cannot create temporary file"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(read_file(dir + "/a.json"), "old a");
  EXPECT_EQ(read_file(dir + "/b.svg"), "old b");
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(dir)) entries += e.is_regular_file();
  EXPECT_EQ(entries, 2u);  // no a.json.tmp.<pid>
  write_files_atomically({{dir + "/a.json", "new a"}, {dir + "/b.svg", "new b"}});
  EXPECT_EQ(read_file(dir + "/a.json") + read_file(dir + "/b.svg"), "new anew b");
}

TEST(Safetensors, RoundTripAndValidation) {
  const std::string dir = temp_dir("st");
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<int64_t> b = {7, -8};
  SafetensorsWriter w;
  w.add("a", DType::F32, {2, 3}, a.data());
  w.add("b", DType::I64, {2}, b.data());
  w.set_metadata("k", "v");
  w.write(dir + "/x.safetensors");
  SafetensorsReader r(dir + "/x.safetensors");
  EXPECT_EQ(r.read_floats("a", {2, 3}), a);
  EXPECT_EQ(r.read_ints("b"), b);
  EXPECT_EQ(r.metadata().at("k"), "v");
  EXPECT_THROW(r.read_floats("a", {3, 2}), Error);
  EXPECT_THROW(r.get("missing"), Error);
  // A truncated file is rejected with a message naming it.
  std::string bytes = read_file(dir + "/x.safetensors");
  write_file_atomically(dir + "/bad.safetensors", bytes.substr(0, bytes.size() - 4));
  try {
    SafetensorsReader bad(dir + "/bad.safetensors");
    FAIL() << "truncated file accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.safetensors"), std::string::npos);
  }
  // A shape whose element count wraps around 2^64 ([2^62, 4] is 0 elements modulo 2^64) is refused,
  // not taken for an empty tensor.
  const std::string header = R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})";
  std::string crafted(8, '\0');
  const uint64_t length = header.size();
  std::memcpy(crafted.data(), &length, 8);
  write_file_atomically(dir + "/wrap.safetensors", crafted + header);
  try {
    SafetensorsReader wrap(dir + "/wrap.safetensors");
    FAIL() << "a wrapping shape was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more elements than"), std::string::npos) << e.what();
  }
}

// A mapped file read once (a checkpoint verified or loaded) leaves the
// process's resident memory as it goes: released pages stop counting, and
// reading them again gives the same bytes; the checksum, computed piece by
// piece with releases, equals the whole data's.
TEST(Safetensors, ReadPagesAreReleasedAndReadBackTheSame) {
  const std::string dir = temp_dir("release");
  const size_t n = size_t(48) << 20 >> 2;  // 48 MiB of floats
  std::vector<float> a(n);
  for (size_t i = 0; i < n; ++i) a[i] = float(i % 1000003);
  SafetensorsWriter w;
  w.add("a", DType::F32, {int64_t(n)}, a.data());
  w.write(dir + "/big.safetensors");
  const uint32_t whole = crc32_of(a.data(), n * sizeof(float));
  a = {};
  SafetensorsReader r(dir + "/big.safetensors");
  const auto* bytes = r.get("a").data;
  const uint64_t before = current_rss_bytes();
  uint64_t sum = 0;
  for (size_t i = 0; i < n * sizeof(float); i += 4096) sum += bytes[i];  // every page resident
  const uint64_t touched = current_rss_bytes();
  EXPECT_GT(touched, before + (size_t(40) << 20)) << "reading the mapping did not raise the resident memory";
  r.release(bytes, n * sizeof(float));
  EXPECT_LT(current_rss_bytes(), touched - (size_t(40) << 20)) << "the released pages still count";
  uint64_t again = 0;
  for (size_t i = 0; i < n * sizeof(float); i += 4096) again += bytes[i];
  EXPECT_EQ(again, sum);
  r.release(bytes, n * sizeof(float));
  EXPECT_EQ(r.data_crc32(), whole);
  EXPECT_LT(current_rss_bytes(), touched - (size_t(40) << 20)) << "the checksum kept the file resident";
}

TEST(Safetensors, HalfConversions) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 1e-3f}) {
    EXPECT_NEAR(f16_to_float(float_to_f16(f)), f, std::abs(f) * 1e-3);
    EXPECT_NEAR(bf16_to_float(float_to_bf16(f)), f, std::abs(f) * 1e-2);
  }
  EXPECT_EQ(float_to_bf16(1.00390625f), 0x3f80);  // ties round to even
  // Every half value survives the round trip, and the special values map as IEEE says.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaN payloads
    ASSERT_EQ(float_to_f16(f16_to_float(uint16_t(h))), h) << h;
  }
  EXPECT_EQ(float_to_f16(1e6f), 0x7c00);
  EXPECT_EQ(float_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f16_to_float(0x0001), 5.9604644775390625e-8f);
  EXPECT_EQ(float_to_f16(1.0f + 1.0f / 2048), 0x3c00);  // halfway to the next half: ties to even
}

TEST(Shards, WriteReadAndDetectCorruption) {
  const std::string dir = temp_dir("shard");
  write_shard(dir + "/train-A-00000.tok", {5, 6, 7, 2, 8, 9, 2}, 2, 100);
  write_shard(dir + "/train-A-00001.tok", {10, 11, 2}, 1, 100);
  write_shard(dir + "/valid-A-00000.tok", {12, 13, 2}, 1, 100);
  Manifest m;
  m.vocab_size = 100;
  m.eos_id = 2;
  ControlCode c;
  c.name = "A";
  c.token_id = 4;
  c.documents_train = 3;
  c.documents_valid = 1;
  c.shards_train = {"train-A-00000.tok", "train-A-00001.tok"};
  c.shards_valid = {"valid-A-00000.tok"};
  m.codes.push_back(c);
  m.write(dir);
  Dataset d = Dataset::open(dir);
  ASSERT_EQ(d.n_codes(), 1u);
  EXPECT_EQ(d.train(0).size(), 10u);
  EXPECT_EQ(d.train(0).documents(), 3u);
  std::vector<int32_t> got(4);
  d.train(0).copy(5, 4, got.data());  // spans both shards
  EXPECT_EQ(got, (std::vector<int32_t>{9, 2, 10, 11}));
  // Flip a token byte: the checksum catches it.
  std::string bytes = read_file(dir + "/train-A-00001.tok");
  bytes[64] ^= 1;
  write_file_atomically(dir + "/train-A-00001.tok", bytes);
  EXPECT_THROW(Dataset::open(dir), Error);
  // Tokens outside the vocabulary are refused at write time.
  EXPECT_THROW(write_shard(dir + "/x.tok", {100}, 1, 100), Error);
}

// A shard written piece by piece (as prepare streams it, never holding it) is the
// same file as one written whole, at both token widths; one never finished leaves nothing.
TEST(Shards, StreamedShardsAreTheSameFiles) {
  const std::string dir = temp_dir("streamed");
  for (const uint32_t vocab : {100u, 70000u}) {
    std::vector<uint32_t> tokens;
    for (uint32_t i = 0; i < 5000; ++i) tokens.push_back((i * 7919u) % vocab);
    write_shard(dir + "/whole.bin", tokens, 3, vocab);
    std::filesystem::remove(dir + "/pieces.bin");
    {
      ShardFileWriter w(dir + "/pieces.bin", vocab);
      for (size_t at = 0; at < tokens.size(); at += 777)
        w.append(tokens.data() + at, std::min<size_t>(777, tokens.size() - at));
      EXPECT_EQ(w.tokens(), tokens.size());
      EXPECT_FALSE(file_exists(dir + "/pieces.bin")) << "only finish() puts it in place";
      w.finish(3);
    }
    EXPECT_EQ(read_file(dir + "/pieces.bin"), read_file(dir + "/whole.bin")) << vocab;
    const Shard s(dir + "/pieces.bin", vocab);
    EXPECT_EQ(s.size(), tokens.size());
    EXPECT_EQ(s.documents(), 3u);
    EXPECT_EQ(s.at(4999), tokens[4999]);
  }
  {
    ShardFileWriter unfinished(dir + "/never.bin", 100);
    const uint32_t t = 5;
    unfinished.append(&t, 1);
  }
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files += e.path().filename() != "";
  EXPECT_EQ(files, 2u) << "whole.bin and pieces.bin only: no temporary left";
  std::filesystem::remove_all(dir);
}
