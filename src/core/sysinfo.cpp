#include "core/sysinfo.h"

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <thread>

namespace ctrl {

uint64_t peak_rss_bytes() {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return uint64_t(u.ru_maxrss) * 1024;
}

uint64_t current_rss_bytes() {
  std::ifstream f("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * uint64_t(sysconf(_SC_PAGESIZE));
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  return "unknown CPU";
}

int hardware_threads() { return int(std::thread::hardware_concurrency()); }

}  // namespace ctrl
