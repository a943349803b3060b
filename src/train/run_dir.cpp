#include "train/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"

namespace ctrl {

namespace {

// Keeps the metrics lines of steps up to `step`; unreadable lines (cut off by a crash) go too.
void truncate_metrics(const std::string& path, int64_t step) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return;  // absent, or a device such as /dev/null
  std::ifstream in(path);
  std::string line, kept;
  bool changed = false;
  while (std::getline(in, line)) {
    try {
      if (nlohmann::json::parse(line).at("step").get<int64_t>() <= step) {
        kept += line + "\n";
        continue;
      }
    } catch (...) {
    }
    changed = true;
  }
  if (changed || in.bad()) write_file_atomically(path, kept);
}

std::string read_lock_holder(int fd) {
  char buf[32] = {};
  const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  std::string pid = n > 0 ? std::string(buf, size_t(n)) : "";
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid.empty() ? "unknown" : pid;
}

}  // namespace

void RunDir::check_still_ours() const {
  struct stat held {
  }, now{};
  const std::string lock = dir_ + "/train.lock";
  if (fstat(lock_fd_, &held) != 0 || stat(lock.c_str(), &now) != 0 || held.st_dev != now.st_dev ||
      held.st_ino != now.st_ino)
    fail(dir_ + ": the run directory was removed or replaced while this training ran (" + lock +
         " is not its lock any more); stopping without writing there");
}

RunDir::RunDir(const std::string& dir) : dir_(dir) {
  // A directory with files but none of a run's own (an export, a corpus, a project) is not
  // written into: its config.json would be replaced.
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(dir_, ec) && !fs::is_empty(dir_, ec)) {
    bool ours = false;
    for (const char* mark : {"train.lock", "checkpoints", "metrics.jsonl"})
      ours = ours || fs::exists(dir_ + "/" + mark);
    if (!ours) {
      std::string first;
      for (const auto& e : fs::directory_iterator(dir_, ec)) {
        first = e.path().filename().string();
        break;
      }
      fail(dir_ + ": not a ctrl run directory (it holds " + first +
           " and no train.lock, checkpoints/ or metrics.jsonl); choose another --out");
    }
  } else if (fs::exists(dir_, ec) && !fs::is_directory(dir_, ec)) {
    fail(dir_ + ": not a directory; --out names the run directory to create");
  }
  make_directories(dir_ + "/checkpoints");
  const std::string lock = dir_ + "/train.lock";
  lock_fd_ = open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) fail(lock + ": cannot open the run directory's lock: " + std::strerror(errno));
  if (flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    const std::string holder = read_lock_holder(lock_fd_);
    close(lock_fd_);
    lock_fd_ = -1;
    if (e == EWOULDBLOCK)
      fail(dir_ + ": another training is writing this run directory (pid " + holder +
           "); wait for it to end or choose another --out");
    fail(lock + ": cannot lock the run directory: " + std::strerror(e));
  }
  const std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(lock_fd_, 0) != 0 || pwrite(lock_fd_, pid.data(), pid.size(), 0) != ssize_t(pid.size()))
    fail(lock + ": cannot write: " + std::strerror(errno));
  // The directory entries of a new run directory are made durable once, here.
  fsync_directory(dir_);
  fsync_directory(parent_directory(dir_));
  // We hold the lock, so no other training writes here: every temporary is a killed run's.
  Leftovers left = remove_leftovers(dir_, "", ".tmp.", true);
  Leftovers in_checkpoints = remove_leftovers(dir_ + "/checkpoints", "", ".tmp.", true);
  left.paths.insert(left.paths.end(), in_checkpoints.paths.begin(), in_checkpoints.paths.end());
  left.bytes += in_checkpoints.bytes;
  if (!left.paths.empty()) std::fprintf(stderr, "%s\n", left.note().c_str());
}

RunDir::~RunDir() {
  if (metrics_fd_ >= 0) close(metrics_fd_);
  if (lock_fd_ >= 0) close(lock_fd_);  // releases the flock
}

bool RunDir::has_metrics() const {
  struct stat st;
  return stat(metrics_path().c_str(), &st) == 0 && st.st_size > 0;
}

bool RunDir::stop_requested() const {
  struct stat st;
  return stat(stop_path().c_str(), &st) == 0;
}

int64_t RunDir::last_metrics_step() const {
  std::ifstream in(metrics_path());
  std::string line;
  int64_t last = -1;
  while (std::getline(in, line)) {
    try {
      last = std::max(last, nlohmann::json::parse(line).at("step").get<int64_t>());
    } catch (...) {
    }
  }
  return last;
}

void RunDir::open_metrics(int64_t step) {
  truncate_metrics(metrics_path(), step);
  metrics_fd_ = open(metrics_path().c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (metrics_fd_ < 0) fail(metrics_path() + ": cannot open for writing: " + std::strerror(errno));
}

void RunDir::append_metrics(const std::string& line) {
  if (!metrics_error_.empty()) return;
  const std::string text = line + "\n";
  struct stat st;
  const off_t before = fstat(metrics_fd_, &st) == 0 ? st.st_size : -1;
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(metrics_fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      metrics_error_ = metrics_path() + ": write failed: " + (n < 0 ? std::strerror(errno) : "no progress");
      // A part of the line may have gone in: cut it off (shrinking needs no space), so the file ends whole.
      if (done > 0 && before >= 0 && S_ISREG(st.st_mode) && ftruncate(metrics_fd_, before) != 0)
        metrics_error_ += " (and the part of the line written could not be cut off)";
      return;
    }
    done += size_t(n);
  }
}

void RunDir::sync_metrics() {
  if (metrics_error_.empty() && metrics_fd_ >= 0 && fdatasync(metrics_fd_) != 0)
    metrics_error_ = metrics_path() + ": write failed: " + std::strerror(errno);
}

StopRequest agree_on_stop(Communicator& comm, int signal, bool write_failed, bool stop_file) {
  double votes[5] = {0, 0, 0, write_failed ? 1.0 : 0.0, stop_file ? 1.0 : 0.0};
  for (int i = 0; i < 3; ++i) votes[i] = signal == kStopSignals[i] ? 1.0 : 0.0;
  if (comm.size() > 1) comm.all_reduce_sum(votes, 5);
  StopRequest r;
  for (int i = 0; i < 3 && !r.signal; ++i)
    if (votes[i] > 0) r.signal = kStopSignals[i];
  r.write_failed = votes[3] > 0;
  r.stop_file = votes[4] > 0;
  return r;
}

}  // namespace ctrl
