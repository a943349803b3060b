// Each ctrl_tests process (ctest runs one per test) writes its temporary files
// (test_support::fresh_dir, ::testing::TempDir, and the ctrl processes it
// starts) under a folder of its own, which goes when its tests pass. The tests
// train and export models: without this, every suite run left about 2 GB in
// /tmp. A failed test keeps its folder and names it, for a look at what it
// wrote; CTRL_KEEP_TEST_FILES=1 keeps every folder.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace {

class TemporaryFolderPerProcess : public ::testing::Environment {
 public:
  // In SetUp, not at construction: listing the tests (gtest_discover_tests) makes no folder.
  void SetUp() override {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/ctrl_tests_XXXXXX";
    std::vector<char> name(pattern.begin(), pattern.end());
    name.push_back('\0');
    if (!mkdtemp(name.data())) return;  // the system's folder, as before
    path_ = name.data();
    setenv("TMPDIR", path_.c_str(), 1);       // std::filesystem::temp_directory_path, and child processes
    setenv("TEST_TMPDIR", path_.c_str(), 1);  // ::testing::TempDir
  }

  void TearDown() override {
    if (path_.empty()) return;
    const char* keep = std::getenv("CTRL_KEEP_TEST_FILES");
    if (!::testing::UnitTest::GetInstance()->Passed() || (keep && std::string(keep) == "1")) {
      std::fprintf(stderr, "test files kept in %s\n", path_.c_str());
      return;
    }
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }

 private:
  std::string path_;
};

// Registered before main; its SetUp runs before the first test.
const auto* const registered = ::testing::AddGlobalTestEnvironment(new TemporaryFolderPerProcess);

}  // namespace
