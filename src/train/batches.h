// Training and held-out sequences, laid out as CTRL's own data was: each
// sequence is [control code] followed by T-1 tokens of that code's text, and
// the targets are the text shifted by one, so position 0 predicts the first
// text token.
//
// Sampling is a pure function of (seed, sequence index): sequence g of the run
// picks a window uniformly among every code's training windows (a code of S
// tokens has S - T + 1 of them), so a code's share is about its share of the
// training tokens; a code with fewer than T training tokens has no window and
// is never trained on (unusable_codes). The data position to save is
// therefore just the next sequence index, and any split of a global batch
// across micro-batches or ranks sees the same sequences.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/shard.h"

namespace ctrl {

class Batches {
 public:
  // A prepared corpus (`ctrl prepare` output); T is the context length.
  static Batches from_dataset(std::shared_ptr<const Dataset> data, int64_t T, uint64_t seed);
  // Random tokens under one control code "Synthetic" (id 0), for benchmarks.
  static Batches synthetic(int64_t vocab_size, int64_t T, uint64_t seed);

  int64_t context() const { return T_; }
  size_t n_codes() const { return names_.size(); }
  const std::string& code_name(size_t c) const { return names_[c]; }
  int32_t code_token(size_t c) const { return code_tokens_[c]; }
  const Dataset* dataset() const { return data_.get(); }
  // "name (N tokens)" of each code too short for one training sequence.
  const std::vector<std::string>& unusable_codes() const { return unusable_; }

  // Fills n sequences starting at global sequence index `first`:
  // tokens and targets are [n, T].
  void train(int64_t first, int64_t n, int32_t* tokens, int32_t* targets) const;
  // Held-out sequences of code c: up to `max_sequences` non-overlapping windows
  // spread evenly over its held-out stream (the same every time). Returns how
  // many: 0 when max_sequences < 1 or the stream is shorter than T.
  int64_t held_out(size_t c, int64_t max_sequences, std::vector<int32_t>* tokens, std::vector<int32_t>* targets) const;
  // How many windows held_out gives, without making them.
  int64_t held_out_windows(size_t c, int64_t max_sequences) const;

 private:
  void fill(size_t code, const TokenStream* stream, uint64_t offset, int32_t* tokens, int32_t* targets) const;
  std::shared_ptr<const Dataset> data_;
  int64_t T_ = 0;
  uint64_t seed_ = 0;
  int64_t synthetic_vocab_ = 0;
  std::vector<std::string> names_;
  std::vector<int32_t> code_tokens_;
  std::vector<size_t> usable_;           // codes with at least T training tokens
  std::vector<uint64_t> cumulative_;     // cumulative training windows over usable_
  std::vector<std::string> unusable_;
};

// "no held-out loss for CODE (N tokens), ...: fewer held-out tokens than ..." naming the codes
// without a held-out window, or "" when every code has one.
std::string held_out_gap_note(const Batches& batches);

}  // namespace ctrl
