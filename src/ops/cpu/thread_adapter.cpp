#include "ops/cpu/thread_adapter.h"

#include <dirent.h>
#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "ops/cpu/gemm.h"

namespace ctrl::cpu {

namespace {
constexpr double kFirstProbeSeconds = 2.0;
// Less runnable time than this since the last decision says nothing.
constexpr double kMinRunnableSeconds = 0.2;
// Token mode: the first probe after this many tokens (the first token's time
// is not a sample: it follows the prompt); timed tokens per count (median),
// the other counts' after one warm-up token; the margin a count must win by.
constexpr int64_t kTokensBeforeFirstProbe = 3;
constexpr size_t kTrialTokens = 3;
constexpr double kTokenMargin = 1.1;

// Seconds the CPUs in this process's affinity mask have been idle since boot
// (idle and iowait of their /proc/stat lines), and *busy the seconds they ran
// any task (user, nice, system, irq, softirq; guest time is in user); *cpus,
// how many of them were read (0 when /proc/stat or the mask cannot be read).
double affinity_cpus_idle(int* cpus, double* busy) {
  *cpus = 0, *busy = 0;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) != 0) return 0;
  FILE* f = std::fopen("/proc/stat", "r");
  if (!f) return 0;
  const double tick = double(sysconf(_SC_CLK_TCK));
  double idle = 0;
  int read = 0;
  char line[512];
  while (std::fgets(line, sizeof line, f)) {
    int cpu = -1;
    unsigned long long user, nice, system, idle_ticks, iowait, irq, softirq;
    // One CPU's line ("cpu3 ..."), not the total ("cpu  ...", whose first number %d would take) or another record.
    if (std::strncmp(line, "cpu", 3) != 0 || !std::isdigit(static_cast<unsigned char>(line[3])) ||
        std::sscanf(line, "cpu%d %llu %llu %llu %llu %llu %llu %llu", &cpu, &user, &nice, &system, &idle_ticks, &iowait,
                    &irq, &softirq) != 8)
      continue;
    if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &mask)) continue;
    idle += double(idle_ticks + iowait) / tick;
    *busy += double(user + nice + system + irq + softirq) / tick;
    ++read;
  }
  std::fclose(f);
  *cpus = read == CPU_COUNT(&mask) ? read : 0;
  return idle;
}
}  // namespace

bool ThreadTimes::available() const {
  return access("/proc/self/task", R_OK) == 0 && access("/proc/self/schedstat", R_OK) == 0;
}

RunQueueTimes ThreadTimes::read() {
  DIR* dir = opendir("/proc/self/task");
  if (!dir) return total_;  // no accounting: nothing changes
  std::map<long, RunQueueTimes> now;
  while (const dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long tid = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0') continue;
    const std::string path = std::string("/proc/self/task/") + entry->d_name + "/schedstat";
    FILE* f = std::fopen(path.c_str(), "r");
    if (!f) continue;  // the thread just exited
    unsigned long long run_ns = 0, wait_ns = 0;
    if (std::fscanf(f, "%llu %llu", &run_ns, &wait_ns) == 2) now[tid] = {double(run_ns) * 1e-9, double(wait_ns) * 1e-9};
    std::fclose(f);
  }
  closedir(dir);
  total_.wall = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  for (const auto& [tid, t] : now) {
    const auto seen = last_.find(tid);
    const RunQueueTimes before = seen == last_.end() ? RunQueueTimes{} : seen->second;
    total_.running += t.running - before.running;
    total_.waiting += t.waiting - before.waiting;
  }
  last_ = std::move(now);
  total_.idle = affinity_cpus_idle(&total_.idle_cpus, &total_.busy);
  return total_;
}

int competing_threads(double share, double our_cpus, int threads, int cpus, double others_cpus) {
  const double others = std::max(0.0, double(cpus) - our_cpus);
  if (threads <= cpus) return share < kContendedShare ? std::max(1, int(std::lround(others))) : 0;
  if (others_cpus >= 0) return others_cpus < kStillBusyCpus ? 0 : std::max(1, int(std::lround(others_cpus)));
  return others < kStillContendedCpus ? 0 : std::max(1, int(std::lround(others)));
}

double predicted_speed(int threads, int cpus, int competitors) {
  const int runnable = threads + competitors;
  if (runnable <= cpus) return threads;
  if (threads <= cpus) return double(threads) / double((runnable + cpus - 1) / cpus);
  return kOversubscribedEfficiency * double(threads) * double(cpus) / double(runnable);
}

int best_thread_count(int cpus, int competitors) {
  int best = cpus;
  for (int n = cpus + 1; n <= kMaxThreadsPerCpu * cpus; ++n)
    if (predicted_speed(n, cpus, competitors) > predicted_speed(best, cpus, competitors)) best = n;
  return best;
}

ThreadAdapter::ThreadAdapter(int max_threads, double interval_seconds, double margin,
                             std::function<RunQueueTimes()> times)
    : times_(std::move(times)),
      max_threads_(std::max(1, max_threads)),
      current_(max_threads_),
      interval_(interval_seconds),
      margin_(margin),
      accounting_(times_ || thread_times_.available()) {
  for (int n : {max_threads_, max_threads_ - 1, max_threads_ / 2})
    if (n >= 1 && std::find(candidates_.begin(), candidates_.end(), n) == candidates_.end()) candidates_.push_back(n);
}

std::string ThreadAdapter::between_steps() {
  if (!accounting_) return "";
  const auto now = std::chrono::steady_clock::now();
  // The first decision comes early (a short run, e.g. `ctrl bench`, lasts seconds), and so does the
  // check of a new count; then one per interval.
  const double wait = probed_ && !changed_ ? interval_ : std::min(interval_, kFirstProbeSeconds);
  if (started_ && std::chrono::duration<double>(now - last_probe_).count() < wait) return "";
  const RunQueueTimes times = times_ ? times_() : thread_times_.read();
  const double running = times.running - last_times_.running, waiting = times.waiting - last_times_.waiting;
  const double wall = times.wall - last_times_.wall;
  if (!started_ || running + waiting < kMinRunnableSeconds) {
    if (!started_) started_ = true, last_probe_ = now, last_times_ = times;
    return "";
  }
  RunQueueTimes delta{running, waiting, wall, times.idle - last_times_.idle, times.busy - last_times_.busy, 0};
  if (times.idle_cpus == last_times_.idle_cpus) delta.idle_cpus = times.idle_cpus;
  probed_ = true;
  last_probe_ = now, last_times_ = times;
  const int before = current_;
  std::string why;
  set_count(decide(delta, &why));
  changed_ = current_ != before;
  if (!changed_) return "";
  return std::to_string(current_) + (current_ == 1 ? " thread" : " threads") + " instead of " + std::to_string(before) +
         ": " + why;
}

int ThreadAdapter::decide(const RunQueueTimes& delta, std::string* why) const {
  const double share = delta.running / (delta.running + delta.waiting);
  const double our_cpus = delta.wall > 0 ? delta.running / delta.wall : double(max_threads_);
  const bool idle_known = delta.idle_cpus == max_threads_ && delta.wall > 0;
  const double others_cpus = idle_known ? std::max(0.0, delta.busy / delta.wall - our_cpus) : -1.0;
  const int competitors = competing_threads(share, our_cpus, current_, max_threads_, others_cpus);
  char text[240];
  const int percent = int(std::lround(100 * share));
  if (current_ < max_threads_) {  // on the free CPUs alone: only their idle time tells that the competitors left
    const double idle = idle_known ? delta.idle / delta.wall : 0.0;
    if (idle < kFreedCpus) return current_;
    std::snprintf(text, sizeof text, "the CPUs are free again (%.1f of the %d idle)", idle, max_threads_);
    *why = text;
    return max_threads_;
  }
  if (current_ > max_threads_ && competitors > 0 && competitors < max_threads_ && idle_known &&
      our_cpus < double(max_threads_ - competitors) + kWonCpus) {
    std::snprintf(text, sizeof text,
                  "at %d threads ours ran %.2f of the %d CPUs, no more than the other processes leave free (the "
                  "kernel shares the CPUs between sessions or groups here, not between threads)",
                  current_, our_cpus, max_threads_);
    *why = text;
    return max_threads_ - competitors;
  }
  const int best = best_thread_count(max_threads_, competitors);
  const double gain =
      predicted_speed(best, max_threads_, competitors) / predicted_speed(current_, max_threads_, competitors);
  if (gain < margin_) return current_;
  if (competitors > 0)
    std::snprintf(text, sizeof text,
                  "other processes took %.1f of the %d CPUs (ours ran %d%% of the time they were ready)",
                  double(max_threads_) - our_cpus, max_threads_, percent);
  else if (others_cpus >= 0 && current_ > max_threads_)
    std::snprintf(text, sizeof text, "the CPUs are free again (other processes ran %.2f of the %d)", others_cpus,
                  max_threads_);
  else
    std::snprintf(text, sizeof text, "the CPUs are free again (ours ran %d%% of the time they were ready)", percent);
  *why = text;
  return best;
}

std::string ThreadAdapter::settle_tokens(const std::vector<double>& seconds) {
  const size_t at = index_of(current_);
  const size_t fastest = size_t(std::min_element(seconds.begin(), seconds.end()) - seconds.begin());
  const int before = current_;
  set_count(fastest != at && seconds[at] >= kTokenMargin * seconds[fastest] ? candidates_[fastest] : current_);
  if (current_ == before) return "";
  char line[200];
  std::snprintf(line, sizeof line, "%d %s instead of %d: their tokens ran %.1fx faster just now", current_,
                current_ == 1 ? "thread" : "threads", before, seconds[at] / seconds[fastest]);
  return line;
}

std::string ThreadAdapter::between_tokens() {
  const auto now = std::chrono::steady_clock::now();
  const double seconds = tokens_ > 0 ? std::chrono::duration<double>(now - last_token_).count() : 0.0;
  last_token_ = now;
  return after_token(seconds);
}

std::string ThreadAdapter::after_token(double seconds) {
  if (candidates_.size() < 2) return "";
  if (trial_ < 0 && index_of(current_) == candidates_.size()) {
    set_count(max_threads_);  // a count training chose beyond the CPUs: decoding starts from the CPUs
  }
  ++tokens_;
  if (trial_ < 0) {
    // The current count's samples are the tokens just decoded, so a probe
    // runs only the other counts: on a busy machine, no extra token at a slow count.
    if (tokens_ > 1) {
      recent_.push_back(seconds);
      if (recent_.size() > kTrialTokens) recent_.erase(recent_.begin());
    }
    since_probe_ += seconds;
    const bool due = probed_ ? since_probe_ >= interval_ && !recent_.empty() : tokens_ >= kTokensBeforeFirstProbe;
    if (!due) return "";
    token_seconds_.assign(candidates_.size(), {});
    token_seconds_[index_of(current_)] = recent_;
    others_.clear();
    for (int n : candidates_)
      if (n != current_) others_.push_back(n);
    trial_ = 0, trial_tokens_ = 0;
    omp_set_num_threads(others_[0]);
    return "";
  }
  if (trial_tokens_++ > 0) token_seconds_[index_of(others_[size_t(trial_)])].push_back(seconds);  // the first: warm-up
  if (size_t(trial_tokens_) <= kTrialTokens) return "";
  if (++trial_ < int(others_.size())) {
    trial_tokens_ = 0;
    omp_set_num_threads(others_[size_t(trial_)]);
    return "";
  }
  std::vector<double> median;
  for (auto& times : token_seconds_) {
    std::nth_element(times.begin(), times.begin() + long(times.size() / 2), times.end());
    median.push_back(times[times.size() / 2]);
  }
  trial_ = -1, since_probe_ = 0, probed_ = true;
  recent_.clear();
  return settle_tokens(median);
}

void ThreadAdapter::set_count(int threads) {
  current_ = threads;
  omp_set_num_threads(threads);
  set_gemm_tiled(threads > max_threads_);
}

size_t ThreadAdapter::index_of(int threads) const {
  return size_t(std::find(candidates_.begin(), candidates_.end(), threads) - candidates_.begin());
}

}  // namespace ctrl::cpu
