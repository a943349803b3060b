// Progress for long work: a line on stderr with done/total, rate and ETA,
// redrawn at most a few times a second (in place on a terminal, as plain lines
// every few seconds otherwise), so logs stay readable.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace ctrl {

// Prints `line` and a newline on stderr, first clearing a progress line drawn
// in place there, so a warning never runs on after "…, 1125 kept".
void print_line(const std::string& line);

class Progress {
 public:
  // total may be 0 when unknown (then no ETA is shown). unit names what is counted.
  // Lines go to `out` (stderr unless a caller has redirected fd 2 and kept the terminal).
  Progress(std::string label, uint64_t total, std::string unit, std::FILE* out = stderr);
  ~Progress();
  void set_total(uint64_t total) { total_ = total; }
  // Advances to `done` (absolute) and redraws if enough time has passed.
  void update(uint64_t done, const std::string& extra = "");
  void add(uint64_t n, const std::string& extra = "") { update(done_ + n, extra); }
  // Draws the final line with the overall rate.
  void finish(const std::string& extra = "");
  double elapsed_seconds() const;
  static std::string format_duration(double seconds);
  static std::string format_count(double n);

 private:
  void draw(bool final_line, const std::string& extra);
  std::string label_, unit_;
  uint64_t total_, done_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_;
  std::FILE* out_;
  bool tty_, finished_ = false;
};

}  // namespace ctrl
