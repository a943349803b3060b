// SentencePiece's trainer tells how far it has come only through its log on
// stderr. TrainerLog captures that log while a training runs and turns it into
// ctrl's progress line (phase, EM steps, rate, ETA) on the real stderr, so a
// tokenizer training of minutes never sits silent or claims 100% at its start.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "core/progress.h"

namespace ctrl {

// Reads SentencePiece's unigram-trainer log one line at a time and estimates
// the work left. Unigram training runs EM rounds (num_sub_iterations EM steps
// each), pruning the pieces by about a quarter after every round until at
// most 1.1 × the vocabulary size remain; the remaining rounds follow from the
// current piece count, re-estimated after each step.
class UnigramLogParser {
 public:
  explicit UnigramLogParser(uint32_t vocab_size) : target_pieces_(vocab_size * 1.1) {}
  // Returns true when the line changed the phase or the step count.
  bool feed(const std::string& line);
  const std::string& phase() const { return phase_; }
  uint64_t steps_done() const { return steps_done_; }
  // 0 while the total is not yet known (before the first EM step).
  uint64_t steps_total() const { return steps_total_; }
  uint64_t pieces() const { return pieces_; }

 private:
  double target_pieces_;
  std::string phase_ = "reading sentences";
  uint64_t steps_done_ = 0, steps_total_ = 0, pieces_ = 0, rounds_started_ = 0;
  int sub_iterations_ = 1;
};

// While alive, fd 2 is a pipe read by a thread that feeds UnigramLogParser and
// draws progress on the original stderr; SentencePiece's warnings and errors
// are passed through with a "sentencepiece:" prefix, its informational lines
// dropped. The destructor restores fd 2 and draws the final line.
class TrainerLog {
 public:
  TrainerLog(const std::string& label, uint32_t vocab_size);
  ~TrainerLog();
  TrainerLog(const TrainerLog&) = delete;
  TrainerLog& operator=(const TrainerLog&) = delete;
  // The original stderr, for other progress lines drawn while training runs.
  std::FILE* terminal() const { return terminal_; }

 private:
  void read_log();
  UnigramLogParser parser_;
  std::FILE* terminal_ = nullptr;
  int read_fd_ = -1;
  std::unique_ptr<Progress> progress_;
  std::thread reader_;
};

}  // namespace ctrl
