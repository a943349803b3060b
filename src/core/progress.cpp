#include "core/progress.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>

namespace ctrl {

namespace {
std::atomic<bool> g_stderr_line_open{false};  // a progress line drawn in place on stderr, not yet ended
}

void print_line(const std::string& line) {
  if (g_stderr_line_open.exchange(false)) std::fputs("\r\033[K", stderr);
  std::fprintf(stderr, "%s\n", line.c_str());
}

Progress::Progress(std::string label, uint64_t total, std::string unit, std::FILE* out)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total),
      start_(std::chrono::steady_clock::now()), last_draw_(start_), out_(out), tty_(isatty(fileno(out))) {}

Progress::~Progress() {
  if (!finished_ && tty_ && done_ > 0) std::fputc('\n', out_);
  if (out_ == stderr) g_stderr_line_open = false;
}

double Progress::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string Progress::format_duration(double s) {
  char buf[32];
  if (s < 0 || s != s) return "?";
  const long t = static_cast<long>(s + 0.5);
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else if (t >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

std::string Progress::format_count(double n) {
  char buf[32];
  if (n >= 1e9) std::snprintf(buf, sizeof buf, "%.2fG", n / 1e9);
  else if (n >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  else if (n >= 1e4) std::snprintf(buf, sizeof buf, "%.1fk", n / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", n);
  return buf;
}

void Progress::update(uint64_t done, const std::string& extra) {
  done_ = done;
  const auto now = std::chrono::steady_clock::now();
  const double since = std::chrono::duration<double>(now - last_draw_).count();
  if (since < (tty_ ? 0.25 : 5.0)) return;
  last_draw_ = now;
  draw(false, extra);
}

void Progress::finish(const std::string& extra) {
  if (finished_) return;
  finished_ = true;
  draw(true, extra);
}

void Progress::draw(bool final_line, const std::string& extra) {
  const double t = elapsed_seconds();
  const double rate = t > 0 ? done_ / t : 0;
  std::string line = label_ + ": " + format_count(double(done_));
  if (total_ > 0) {
    char pct[32];
    std::snprintf(pct, sizeof pct, "/%s (%.1f%%)", format_count(double(total_)).c_str(),
                  100.0 * double(done_) / double(total_));
    line += pct;
  }
  char slow[32];  // a rate under 10 per second keeps two digits: "0.12 EM steps/s", not "0"
  std::snprintf(slow, sizeof slow, "%.2g", rate);
  line += " " + unit_ + ", " + (rate < 10 ? std::string(slow) : format_count(rate)) + " " + unit_ + "/s";
  if (final_line) line += ", took " + format_duration(t);
  else if (total_ > 0 && rate > 0) line += ", ETA " + format_duration((double(total_) - double(done_)) / rate);
  if (!extra.empty()) line += ", " + extra;
  if (tty_) std::fprintf(out_, "\r\033[K%s%s", line.c_str(), final_line ? "\n" : "");
  else std::fprintf(out_, "%s\n", line.c_str());
  if (out_ == stderr) g_stderr_line_open = tty_ && !final_line;
  std::fflush(out_);
}

}  // namespace ctrl
