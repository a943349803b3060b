// Errors. A user-caused problem (bad flag, missing or corrupt file, malformed
// input) is thrown as ctrl::Error carrying one line that names the file, the
// place and what was expected; the CLI prints it and exits non-zero.
// Internal invariants use CTRL_ASSERT, which stays on in release builds.
#pragma once
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace ctrl {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void fail(const std::string& message) { throw Error(message); }

// A file that could not be opened or mapped (too many open files, no
// permission, out of memory): a fact about this moment, not about the file's
// contents, so a caller that would set damaged files aside must not do so.
struct FileUnreadable : Error {
  using Error::Error;
};

// A failed write to `path`, with the system's reason (errno, as the failing
// fwrite/fclose left it): "No space left on device", "File too large", ...
[[noreturn]] inline void fail_write(const std::string& path) {
  const int e = errno;
  fail(path + ": write failed: " + (e ? std::strerror(e) : "unknown error (disk full?)"));
}

}  // namespace ctrl

#define CTRL_ASSERT(cond)                                                          \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::fprintf(stderr, "ctrl: internal error: %s at %s:%d\n", #cond, __FILE__, \
                   __LINE__);                                                      \
      std::abort();                                                                \
    }                                                                              \
  } while (0)
