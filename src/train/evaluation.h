// Held-out evaluation: the loss of fixed windows, summed on the backend and
// read once, and per control code (with several ranks, each evaluates its
// share of the windows and the sums are all-reduced).
#pragma once
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "model/model.h"
#include "train/batches.h"

namespace ctrl {

struct CodeLoss {
  std::string code;
  double loss = 0;     // mean nats per token
  int64_t tokens = 0;
  double perplexity() const;
};

// The summed loss and the target count of n windows (tokens and targets
// [n, T], host arrays) in micro-batches of `batch` sequences; the loss
// accumulates on the backend and is read once. Held-out evaluation and the
// code-by-code matrix (eval/control.h) both go through it, so the same windows
// give the same bits.
LossSum evaluate_windows(Model& model, const int32_t* tokens, const int32_t* targets, int64_t n, int64_t T,
                         int64_t batch);

// Loss and perplexity per control code over each code's held-out windows
// (at most max_sequences per code), in micro-batches of `batch` sequences.
// With a communicator of several ranks, rank r evaluates every size-th window
// and the sums are all-reduced, so every rank returns the same figures.
std::vector<CodeLoss> evaluate_held_out(Model& model, const Batches& batches, int64_t batch, int64_t max_sequences,
                                        Communicator* comm = nullptr);

}  // namespace ctrl
