// Text generation: incremental decoding with a key/value cache, and CTRL's
// penalized sampling (Keskar et al. 2019, as Hugging Face's repetition
// penalty applies it: logits of tokens already in the sequence are divided by
// θ when positive and multiplied by θ when negative), then temperature, top-k
// and top-p. Temperature 0 is greedy, CTRL's recommended near-greedy setting.
#pragma once
#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "model/model.h"

namespace ctrl {

struct SamplingOptions {
  double temperature = 0;  // 0: greedy (argmax)
  double penalty = 1.2;    // θ; 1 disables
  int64_t top_k = 0;       // 0: no limit
  double top_p = 1.0;      // nucleus; 1: no limit
};

// The key/value cache, scratch and logits live in the model's backend; only
// the logits of each step are downloaded (for sampling on the host).
class Generator {
 public:
  // Uses the model's parameters and ops; the model needs no activation memory.
  explicit Generator(Model& model);
  void reset() { position_ = 0; }
  int64_t position() const { return position_; }
  // Runs the token at the next position and returns the logits [V] for the
  // following one. The position must stay below n_ctx.
  const std::vector<float>& feed(int32_t token);

 private:
  // A layer's parameters, resolved once (layers that share read layer 0's).
  struct LayerParams {
    const float *ln1_w, *ln1_b, *wqkv, *bqkv, *wdense, *bdense, *ln2_w, *ln2_b, *w0, *b0, *w2, *b2;
  };
  Model& model_;
  int64_t position_ = 0;
  std::vector<LayerParams> layers_;
  DeviceArray<float> k_cache_, v_cache_;  // [L, n_ctx, D]
  DeviceArray<float> x_, ln_, qkv_, att_, branch_, ffn_, logits_;
  DeviceArray<float> emb_;  // factorized embedding: the E-wide embedding row, then the E-wide head input
  DeviceArray<float> mean_, rstd_;
  std::vector<float> host_logits_;
};

// Chooses the next token from logits given the tokens so far (penalized).
int32_t sample_next(std::vector<float> logits, const std::vector<int32_t>& history, const SamplingOptions& options,
                    CounterRng& rng);

}  // namespace ctrl
