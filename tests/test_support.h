// Helpers shared by the engine tests.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>

namespace test_support {

// An empty path under the system's temporary folder, unique to this process
// (the directory itself is not created: the trainer makes its run directory).
inline std::string fresh_dir(const std::string& prefix, const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / (prefix + "_" + name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(p);
  return p.string();
}

}  // namespace test_support
