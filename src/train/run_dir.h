// The run directory of `ctrl train` as its one writer (rank 0) sees it: a
// lock, so that two trainings never write the same directory; the removal of
// temporaries that killed runs left; metrics.jsonl, whose steps never repeat
// and whose failed writes are errors, never dropped lines. And the stop
// requests: SIGINT, SIGTERM and SIGHUP end training at a step boundary, with
// a checkpoint, on every rank at the same step.
#pragma once
#include <cstdint>
#include <string>

#include "core/signals.h"
#include "dist/communicator.h"

namespace ctrl {

class RunDir {
 public:
  // Refuses a directory that holds files but none of a run's (train.lock,
  // checkpoints/, metrics.jsonl): an export or a corpus is never written into.
  // Creates dir and dir/checkpoints, takes an exclusive lock on dir/train.lock
  // (flock, released when this object goes or the process dies) and writes
  // this pid into it; a directory locked by another training throws
  // ctrl::Error naming that training's pid. Then removes the "*.tmp.<pid>"
  // files that killed runs left in dir and dir/checkpoints (one note on stderr).
  explicit RunDir(const std::string& dir);
  ~RunDir();
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  const std::string& path() const { return dir_; }
  // Fails when dir/train.lock is no longer the file this run locked: the
  // directory was removed (and perhaps a new run started at its path) while
  // training, so nothing more may be written there.
  void check_still_ours() const;
  std::string metrics_path() const { return dir_ + "/metrics.jsonl"; }
  // metrics.jsonl exists and is not empty: an earlier run logged steps here.
  bool has_metrics() const;
  // The highest step metrics.jsonl records, or -1 (no file, no readable line).
  int64_t last_metrics_step() const;
  // Opens metrics.jsonl for appending after dropping every line of a step
  // after `step` (the lines of an interrupted run that are about to be
  // redone, and a line cut off by a crash), so no step appears twice.
  void open_metrics(int64_t step);
  // Appends one line (a newline is added). A failed write (disk full) is kept
  // in metrics_error(), the part of the line that went in is cut off, and no
  // later line is written, so the file never has a gap or a torn end; the
  // trainer stops on it.
  void append_metrics(const std::string& line);
  // fdatasync of metrics.jsonl, so the lines up to a checkpoint outlive a power loss.
  void sync_metrics();
  // <dir>/stop: a file anyone may create to stop training after the current
  // step with a checkpoint, the way to stop a job whose launcher kills its
  // ranks soon after passing a signal on (mpirun: 1 s). Removed once obeyed.
  std::string stop_path() const { return dir_ + "/stop"; }
  bool stop_requested() const;
  // "" or one line: "<dir>/metrics.jsonl: write failed: <reason>".
  const std::string& metrics_error() const { return metrics_error_; }

 private:
  std::string dir_;
  int lock_fd_ = -1;
  int metrics_fd_ = -1;
  std::string metrics_error_;
};

// Why training stops after a step, agreed by every rank.
struct StopRequest {
  int signal = 0;             // SIGINT, SIGTERM or SIGHUP received by some rank (the first of them in that order)
  bool write_failed = false;  // the writer could not write metrics.jsonl
  bool stop_file = false;     // the writer found RunDir::stop_path()
  bool any() const { return signal != 0 || write_failed || stop_file; }
};

// Combines each rank's view (its received signal, and on the writer a failed
// metrics write) with one small all-reduce, so all ranks stop after the same
// step. Call it on every rank at the same point of every step.
StopRequest agree_on_stop(Communicator& comm, int signal, bool write_failed, bool stop_file);

}  // namespace ctrl
