// What the machine is and what this process uses, for logs and benchmarks.
#pragma once
#include <cstdint>
#include <string>

namespace ctrl {

uint64_t peak_rss_bytes();     // high-water mark of resident memory
uint64_t current_rss_bytes();
// CPU time (user and system) this process's threads have run, in seconds, since it started.
double process_cpu_seconds();
// Lowers the high-water mark to the current resident memory (Linux 4.0+,
// /proc/self/clear_refs), so that a measurement's temporary buffers do not
// count as the run's peak. False where the kernel refuses.
bool reset_peak_rss();
std::string cpu_model();       // e.g. "AMD EPYC 9R14"
// The CPUs this process may run on: its affinity mask (taskset, a batch
// scheduler's cpuset), bounded by the cgroup's CPU quota (docker --cpus,
// systemd CPUQuota) rounded up. The default thread count of the CPU backend.
int usable_cpus();
// The thread count the CPU backend starts with when none is configured:
// OMP_NUM_THREADS (its first number) when set, else usable_cpus().
int default_cpu_threads();
// How far the CPU backend's thread adapter (ops/cpu/thread_adapter.h) may
// raise the count beside busy processes: this many threads per usable CPU.
// Tiled, beside one busy process in the same session on a 2-core Zen 4
// (`tiny`, batch 8, pinned counts, two rounds): 8 threads kept 0.57-0.59 of
// quiet, 12 0.61-0.72, 16 0.73-0.77 (the loop kept 0.34 of a CPU, against
// 0.60 beside 8), 24 0.73-0.75 and 32 0.64-0.69
// (bench/results/shared-machine-tiled-zen4-2026-12-04.md). The gain ends at
// 8 per CPU.
inline constexpr int kMaxThreadsPerCpu = 8;
// The most threads a CPU run may use, which its per-thread memory grows
// with: `pinned` when above 0 (train.threads, --threads), else
// OMP_NUM_THREADS when set (no adapter then), else the adapter's ceiling,
// kMaxThreadsPerCpu x usable_cpus().
int most_cpu_threads(int64_t pinned);
// The GOMP_SPINCOUNT that ctrl runs with when the user sets no OpenMP wait
// policy (cli/main.cpp; measured in bench/shared_machine.sh).
inline constexpr const char* kDefaultSpinCount = "10000";
// How idle OpenMP workers wait in this process, for logs and benchmarks:
// "OMP_WAIT_POLICY=passive", "GOMP_SPINCOUNT=10000", or "libgomp default".
std::string openmp_wait_setting();
// The CPUs a cgroup quota allows, from cgroup v2's cpu.max ("200000 100000":
// 2; "max 100000": no limit) or v1's quota and period; 0 when unlimited or unreadable.
int cpus_from_cgroup_quota(const std::string& cpu_max);
// The CPU limit of the cgroup that /proc/self/cgroup's text names, under the
// cgroup file system at `root` (/sys/fs/cgroup): the smallest quota of that
// group and its ancestors (a parent's quota bounds its children), v2 (the
// "0::/path" line, cpu.max) or v1 (the cpu controller's line,
// cpu.cfs_quota_us and cpu.cfs_period_us); 0 when none. A container with
// its own cgroup namespace sees "0::/", which is the root's cpu.max.
int cgroup_cpu_limit(const std::string& root, const std::string& proc_self_cgroup);

}  // namespace ctrl
