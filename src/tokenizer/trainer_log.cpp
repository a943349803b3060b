#include "tokenizer/trainer_log.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "core/error.h"

namespace ctrl {

namespace {

// The number that follows `key` in `line`, or -1.
long long number_after(const std::string& line, const char* key) {
  const size_t at = line.find(key);
  if (at == std::string::npos) return -1;
  return std::strtoll(line.c_str() + at + std::strlen(key), nullptr, 10);
}

}  // namespace

bool UnigramLogParser::feed(const std::string& line) {
  const std::string before = phase_;
  const uint64_t done_before = steps_done_;
  if (line.find("Normalizing sentences") != std::string::npos) phase_ = "normalizing";
  else if (line.find("Making suffix array") != std::string::npos) phase_ = "suffix array";
  else if (line.find("Extracting frequent sub strings") != std::string::npos) phase_ = "seed pieces";
  else if (line.find("Saving model") != std::string::npos) phase_ = "saving";
  else if (const long long seeds = number_after(line, "Initialized "); seeds > 0) pieces_ = uint64_t(seeds);
  else if (const long long sub = number_after(line, "EM sub_iter="); sub >= 0) {
    const long long size = number_after(line, " size=");
    if (size > 0) pieces_ = uint64_t(size);
    if (sub == 0) ++rounds_started_;
    sub_iterations_ = std::max(sub_iterations_, int(sub) + 1);
    ++steps_done_;
    // Rounds still to come after this one: each prunes to 3/4 of the pieces.
    uint64_t rounds_left = 0;
    if (double(pieces_) > target_pieces_)
      rounds_left = uint64_t(std::ceil(std::log(target_pieces_ / double(pieces_)) / std::log(0.75)));
    steps_total_ = std::max(steps_done_, (rounds_started_ + rounds_left) * uint64_t(sub_iterations_));
    phase_ = "EM, " + std::to_string(pieces_) + " pieces";
  }
  return phase_ != before || steps_done_ != done_before;
}

TrainerLog::TrainerLog(const std::string& label, uint32_t vocab_size) : parser_(vocab_size) {
  std::fflush(stderr);
  std::cerr.flush();
  const int saved = dup(2);
  int fds[2];
  if (saved < 0 || pipe(fds) != 0) fail("tokenizer: cannot capture SentencePiece's log: " + std::string(strerror(errno)));
  terminal_ = fdopen(saved, "w");
  if (!terminal_) fail("tokenizer: cannot capture SentencePiece's log: " + std::string(strerror(errno)));
  dup2(fds[1], 2);
  close(fds[1]);
  read_fd_ = fds[0];
  progress_ = std::make_unique<Progress>(label, 0, "EM steps", terminal_);
  reader_ = std::thread([this] { read_log(); });
}

TrainerLog::~TrainerLog() {
  std::fflush(stderr);
  std::cerr.flush();
  dup2(fileno(terminal_), 2);  // closes the pipe's last write end: the reader sees EOF
  reader_.join();
  close(read_fd_);
  progress_->finish(std::to_string(parser_.pieces()) + " pieces");
  progress_.reset();
  std::fclose(terminal_);
}

void TrainerLog::read_log() {
  std::string pending;
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(read_fd_, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buffer, size_t(n));
    size_t end;
    while ((end = pending.find('\n')) != std::string::npos) {
      const std::string line = pending.substr(0, end);
      pending.erase(0, end + 1);
      if (line.find("LOG(WARNING)") != std::string::npos || line.find("LOG(ERROR)") != std::string::npos) {
        std::fprintf(terminal_, "sentencepiece: %s\n", line.c_str());
      } else if (parser_.feed(line)) {
        progress_->set_total(parser_.steps_total());
        progress_->update(parser_.steps_done(), parser_.phase());
      }
    }
  }
}

}  // namespace ctrl
