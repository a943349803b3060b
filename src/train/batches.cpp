#include "train/batches.h"

#include <algorithm>

#include "core/error.h"
#include "core/rng.h"

namespace ctrl {

namespace {
constexpr uint64_t kSamplingStream = 0x5A4D504C45ull;  // distinguishes sampling from other uses of the seed
}

Batches Batches::from_dataset(std::shared_ptr<const Dataset> data, int64_t T, uint64_t seed) {
  Batches b;
  b.T_ = T;
  b.seed_ = seed;
  uint64_t total = 0;
  for (size_t c = 0; c < data->n_codes(); ++c) {
    b.names_.push_back(data->code(c).name);
    b.code_tokens_.push_back(data->code(c).token_id);
    // A window needs T-1 text tokens plus one more target.
    if (data->train(c).size() >= uint64_t(T)) {
      b.usable_.push_back(c);
      total += data->train(c).size() - uint64_t(T) + 1;
      b.cumulative_.push_back(total);
    } else {
      b.unusable_.push_back(data->code(c).name + " (" + std::to_string(data->train(c).size()) + " tokens)");
    }
  }
  if (b.usable_.empty())
    fail(data->dir() + ": no control code has the " + std::to_string(T) +
         " training tokens one sequence needs; prepare more text or lower model.n_ctx");
  b.data_ = std::move(data);
  return b;
}

std::string held_out_gap_note(const Batches& batches) {
  const Dataset* data = batches.dataset();
  std::string codes;
  for (size_t c = 0; data && c < data->n_codes(); ++c)
    if (const uint64_t n = data->valid(c).size(); n < uint64_t(batches.context()))
      codes += (codes.empty() ? "" : ", ") + data->code(c).name + " (" + std::to_string(n) + " tokens)";
  if (codes.empty()) return "";
  return "no held-out loss for " + codes + ": fewer held-out tokens than the " + std::to_string(batches.context()) +
         " of one window (model.n_ctx)";
}

Batches Batches::synthetic(int64_t vocab_size, int64_t T, uint64_t seed) {
  Batches b;
  b.T_ = T;
  b.seed_ = seed;
  b.synthetic_vocab_ = vocab_size;
  b.names_ = {"Synthetic"};
  b.code_tokens_ = {0};
  b.usable_ = {0};
  b.cumulative_ = {1};
  return b;
}

void Batches::fill(size_t code, const TokenStream* stream, uint64_t offset, int32_t* tokens, int32_t* targets) const {
  // targets = text[offset .. offset+T), tokens = [code, text[offset .. offset+T-1)).
  stream->copy(offset, uint64_t(T_), targets);
  tokens[0] = code_tokens_[code];
  for (int64_t t = 1; t < T_; ++t) tokens[t] = targets[t - 1];
}

void Batches::train(int64_t first, int64_t n, int32_t* tokens, int32_t* targets) const {
  // Sequence g draws from counters g·stride on: a real sequence draws once, a synthetic one T times,
  // so that sequences longer than 256 do not repeat their neighbour's tokens shifted.
  const uint64_t stride = uint64_t(std::max<int64_t>(256, synthetic_vocab_ ? T_ : 1));
  for (int64_t i = 0; i < n; ++i) {
    CounterRng rng{seed_, kSamplingStream, uint64_t(first + i) * stride};
    int32_t* tok = tokens + i * T_;
    int32_t* tgt = targets + i * T_;
    if (synthetic_vocab_) {
      for (int64_t t = 0; t < T_; ++t) tgt[t] = int32_t(rng.below(uint64_t(synthetic_vocab_)));
      tok[0] = 0;
      for (int64_t t = 1; t < T_; ++t) tok[t] = tgt[t - 1];
      continue;
    }
    const uint64_t pick = rng.below(cumulative_.back());
    size_t u = 0;
    while (cumulative_[u] <= pick) ++u;
    const uint64_t offset = pick - (u ? cumulative_[u - 1] : 0);
    fill(usable_[u], &data_->train(usable_[u]), offset, tok, tgt);
  }
}

int64_t Batches::held_out_windows(size_t c, int64_t max_sequences) const {
  if (!data_ || max_sequences < 1) return 0;
  return std::min<int64_t>(max_sequences, int64_t(data_->valid(c).size() / uint64_t(T_)));
}

int64_t Batches::held_out(size_t c, int64_t max_sequences, std::vector<int32_t>* tokens,
                          std::vector<int32_t>* targets) const {
  tokens->clear();
  targets->clear();
  // No window asked for (or none fits) is an empty answer, never a division by zero below.
  const int64_t windows = held_out_windows(c, max_sequences);
  if (windows == 0) return 0;
  const TokenStream& s = data_->valid(c);
  tokens->resize(size_t(windows * T_));
  targets->resize(size_t(windows * T_));
  const uint64_t stride = s.size() / uint64_t(windows);
  for (int64_t i = 0; i < windows; ++i)
    fill(c, &s, uint64_t(i) * stride, tokens->data() + i * T_, targets->data() + i * T_);
  return windows;
}

}  // namespace ctrl
