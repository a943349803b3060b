// Text generation: incremental decoding with a key/value cache, and CTRL's
// penalized sampling (Keskar et al. 2019, as Hugging Face's repetition
// penalty applies it: logits of tokens already in the sequence are divided by
// θ when positive and multiplied by θ when negative), then temperature, top-k
// and top-p. Temperature 0 is greedy, CTRL's recommended near-greedy setting.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/model.h"

namespace ctrl {

struct SamplingOptions {
  double temperature = 0;  // 0: greedy (argmax)
  double penalty = 1.2;    // θ; 1 disables
  int64_t top_k = 0;       // 0: no limit
  double top_p = 1.0;      // nucleus; 1: no limit
  // Ids at or above this are never chosen: a model whose vocabulary is larger
  // than its tokenizer's (padded, or trained on a smaller corpus) has rows
  // that decode to nothing. 0: every id of the logits.
  int64_t vocabulary = 0;
};

// Incremental decoding through Model::decode (the model's own layer forward
// at T = 1) with a key/value cache in the model's backend; only each step's
// logits come to the host, for sampling.
class Generator {
 public:
  // Uses the model's parameters, ops and activation scratch: a model built
  // only to generate needs max_batch = max_T = 1 and no gradients.
  explicit Generator(Model& model) : model_(model), cache_(model), logits_(size_t(model.config().vocab_size)) {}
  void reset() { cache_.length = 0; }
  int64_t position() const { return cache_.length; }
  // Runs the token at the next position and returns the logits [V] for the
  // following one. The position must stay below n_ctx.
  // Between tokens the backend may adapt (Ops::between_tokens): one-row
  // decoding is all barriers, so a taken core slows it most.
  const std::vector<float>& feed(int32_t token) {
    model_.decode(token, cache_, logits_.data());
    model_.ops().between_tokens();
    return logits_;
  }

 private:
  Model& model_;
  KvCache cache_;
  std::vector<float> logits_;
};

// Chooses the next token from logits given the tokens so far (penalized).
int32_t sample_next(std::vector<float> logits, const std::vector<int32_t>& history, const SamplingOptions& options,
                    CounterRng& rng);

}  // namespace ctrl
