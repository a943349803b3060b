#include "core/sysinfo.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "core/parse.h"

namespace ctrl {

uint64_t peak_rss_bytes() {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return uint64_t(u.ru_maxrss) * 1024;
}

bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.close();
  return bool(f);
}

uint64_t current_rss_bytes() {
  std::ifstream f("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * uint64_t(sysconf(_SC_PAGESIZE));
}

double process_cpu_seconds() {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  auto seconds = [](const timeval& t) { return double(t.tv_sec) + 1e-6 * double(t.tv_usec); };
  return seconds(u.ru_utime) + seconds(u.ru_stime);
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

int cpus_from_cgroup_quota(const std::string& cpu_max) {
  std::istringstream in(cpu_max);
  std::string quota;
  long long period = 0;
  if (!(in >> quota >> period) || period <= 0) return 0;
  const auto q = parse_whole_int(quota);  // "max" (v2) or -1 (v1): unlimited
  if (!q || *q <= 0) return 0;
  return int(std::max<long long>(1, (*q + period - 1) / period));
}

namespace {
std::string read_first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

// The smaller of two limits where 0 means none.
int tighter(int a, int b) { return a == 0 ? b : b == 0 ? a : std::min(a, b); }

// The quota of one cgroup directory, v2 or v1 (0: none or unreadable).
int quota_in(const std::string& dir) {
  const std::string v2 = read_first_line(dir + "/cpu.max");
  if (!v2.empty()) return cpus_from_cgroup_quota(v2);
  const std::string quota = read_first_line(dir + "/cpu.cfs_quota_us");
  const std::string period = read_first_line(dir + "/cpu.cfs_period_us");
  return quota.empty() || period.empty() ? 0 : cpus_from_cgroup_quota(quota + " " + period);
}

// The tightest quota from `mount`/`path` up to `mount` itself.
int quota_up_from(const std::string& mount, std::string path) {
  int limit = 0;
  while (true) {
    limit = tighter(limit, quota_in(mount + path));
    if (path.empty() || path == "/") return limit;
    path = path.substr(0, path.find_last_of('/'));
  }
}
}  // namespace

int cgroup_cpu_limit(const std::string& root, const std::string& proc_self_cgroup) {
  std::istringstream lines(proc_self_cgroup);
  std::string line;
  int limit = 0;
  while (std::getline(lines, line)) {  // "hierarchy:controllers:/path"
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      limit = tighter(limit, quota_up_from(root, path));
    } else {
      std::istringstream names(controllers);
      std::string name;
      while (std::getline(names, name, ','))
        if (name == "cpu") {  // v1: mounted as cpu or cpu,cpuacct
          for (const char* mount : {"/cpu", "/cpu,cpuacct"}) limit = tighter(limit, quota_up_from(root + mount, path));
        }
    }
  }
  return limit;
}

std::string openmp_wait_setting() {
  std::string s;
  for (const char* name : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"})
    if (const char* v = std::getenv(name)) {
      if (!s.empty()) s += ' ';
      s.append(name).append("=").append(v);
    }
  return s.empty() ? "libgomp default" : s;
}

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  if (n <= 0) n = int(std::max(1u, std::thread::hardware_concurrency()));
  std::ifstream f("/proc/self/cgroup");
  const std::string cgroups((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const int quota = cgroup_cpu_limit("/sys/fs/cgroup", cgroups.empty() ? "0::/\n" : cgroups);
  return quota > 0 ? std::min(n, quota) : n;
}

int default_cpu_threads() {
  if (const char* env = std::getenv("OMP_NUM_THREADS")) {
    const std::string first(env, std::strcspn(env, ","));
    if (const auto n = parse_whole_int(first); n && *n > 0) return int(*n);
  }
  return usable_cpus();
}

int most_cpu_threads(int64_t pinned) {
  if (pinned > 0) return int(pinned);
  if (std::getenv("OMP_NUM_THREADS")) return default_cpu_threads();
  return kMaxThreadsPerCpu * usable_cpus();
}

}  // namespace ctrl
