// Measuring control: whether a control code steers the model.
//
// The code-by-code matrix takes each code A's held-out windows (the windows
// `ctrl eval` scores) and scores them again with their control token — the
// window's position 0 — replaced by each code B. Row A, column A is exactly
// the plain held-out loss of A (same windows, same micro-batches, same bits);
// the other cells say how much worse the model predicts A's text when told it
// is B's. A code's control gain is the mean over B != A of loss[A][B] minus
// loss[A][A]: positive when the code helps.
//
// Control accuracy (control_accuracy) generates text under each code and asks
// an independent domain classifier (eval/domain_classifier.h), trained on the
// corpus's training split, which code's text it reads like.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "generate/generator.h"
#include "model/model.h"
#include "train/batches.h"

namespace ctrl {

class Tokenizer;

struct CodeMatrix {
  std::vector<std::string> columns;      // every code of the corpus: the control token given
  std::vector<int32_t> column_tokens;
  std::vector<std::string> rows;         // codes with at least one held-out window: the text's own code
  std::vector<size_t> row_column;        // rows[i] == columns[row_column[i]]
  std::vector<int64_t> windows, tokens;  // per row: held-out windows and scored targets
  std::vector<std::vector<double>> loss;  // [row][column], mean nats per target token
  // Mean of loss[r][c] over the columns c other than the row's own, minus loss[r][own];
  // 0 when the corpus has a single code.
  double gain(size_t r) const;
};

// The matrix over up to max_sequences held-out windows per code, in
// micro-batches of `batch` sequences (as evaluate_held_out). Shows progress
// with a rate and an ETA unless quiet. Codes without a held-out window of
// n_ctx tokens have no row (they remain columns).
CodeMatrix code_matrix(Model& model, const Batches& batches, int64_t batch, int64_t max_sequences, bool quiet = false);

// The matrix as JSON (codes, windows, tokens, loss, perplexity, control gain)
// and as an SVG heatmap (cells coloured by loss minus the row's own-code loss).
std::string code_matrix_json(const CodeMatrix& m);
std::string code_matrix_svg(const CodeMatrix& m);

class Dataset;

struct ControlAccuracyOptions {
  int64_t samples_per_code = 50;
  int64_t max_tokens = 80;  // per sample, after the control code (at most the model's n_ctx count)
  // ctrl generate's sampling; the defaults are the main job's (temperature
  // 0.8, top-k 40, penalty 1.2): greedy decoding would give one sample per code.
  SamplingOptions sampling{0.8, 1.2, 40, 1.0};
  uint64_t seed = 1;
  // The classifier's training text: up to this many training tokens per code,
  // taken as 16 evenly spaced stretches of its stream.
  int64_t train_tokens_per_code = 400000;
  // Its ceiling: the held-out documents cut into consecutive snippets of the
  // samples' length (a tail shorter than half of that is dropped unless it is the
  // whole document), up to this many per code, evenly spaced.
  int64_t ceiling_snippets = 200;
  bool quiet = false;
};

struct ControlAccuracy {
  std::vector<std::string> codes;
  // [code generated under][label the classifier gave]
  std::vector<std::vector<int64_t>> confusion;
  // The same for held-out snippets: [their code][label]; rows of codes without held-out text are 0.
  std::vector<std::vector<int64_t>> ceiling_confusion;
  std::vector<std::vector<std::string>> samples;  // [code][i], decoded text
  std::vector<uint64_t> classifier_characters;    // training characters per code
  // Samples that ended at once (end-of-document first), per code: they have no
  // text to label, so they are left out of `confusion` and count as misses.
  std::vector<int64_t> empty_samples;
  // The samples' and the snippets' length: max_tokens, or n_ctx where that is smaller
  // (a sample stops when the model's context is full).
  int64_t sample_tokens = 0;
  // Mean over codes (that have rows) of the share labelled with the right code,
  // a row's misses (empty samples) counted in its total.
  static double accuracy(const std::vector<std::vector<int64_t>>& confusion, const std::vector<int64_t>& misses = {});
  double sample_accuracy() const { return accuracy(confusion, empty_samples); }
  int64_t empty_total() const;
  // The codes with held-out snippets: those the ceiling's mean runs over.
  std::vector<std::string> ceiling_codes() const;
};

// Trains the classifier on `data`'s training split (decoded with `tokenizer`),
// measures its ceiling on the held-out split, then generates samples_per_code
// samples under each of the corpus's codes and labels them. The model's codes
// must be the corpus's (check_corpus_matches). Shows progress unless quiet.
ControlAccuracy control_accuracy(Model& model, const Dataset& data, const Tokenizer& tokenizer,
                                 const ControlAccuracyOptions& options);
std::string control_accuracy_json(const ControlAccuracy& a, const ControlAccuracyOptions& options);

}  // namespace ctrl
