// ctrl eval: held-out loss and perplexity per control code; with --codes the
// code-by-code matrix and each code's control gain (eval/control.h).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/command.h"
#include "core/clean_text.h"
#include "core/file_io.h"
#include "eval/control.h"
#include "tokenizer/tokenizer.h"
#include "train/trainer.h"

namespace ctrl::cli {
namespace {

const char* kUsage =
    "usage: ctrl eval --model CKPT --data DIR [--max-sequences N] [--batch N] [--json]\n"
    "                 [--codes] [--control-accuracy N [--max-tokens N] [--temperature T] [--top-k K]\n"
    "                 [--top-p P] [--penalty THETA] [--seed S]] [--out DIR] [--device cpu|checked|cuda[:N]]\n"
    "                 [--threads N]\n\n"
    "Loss (nats per token) and perplexity of a checkpoint on each control code's held-out split of a\n"
    "prepared corpus, over up to N windows of n_ctx tokens per code (default 256), scored --batch N\n"
    "windows at a time (default: the checkpoint's train.micro_batch; it changes the results only by\n"
    "fp32 rounding).\n\n"
    "--codes  the code-by-code matrix: each code A's held-out windows scored again with their control\n"
    "         token replaced by each code B. Prints the loss and perplexity matrices and each code's\n"
    "         control gain (mean loss under the other codes minus the loss under its own; positive when\n"
    "         the code helps) and writes control-codes.json and control-codes.svg (a heatmap) into\n"
    "         --out DIR: by default the run directory of a checkpoint in RUN/checkpoints/, else the\n"
    "         checkpoint's own directory. The diagonal equals plain `ctrl eval` exactly.\n\n"
    "--control-accuracy N  generates N samples under each code (--max-tokens, default 80, and ctrl\n"
    "         generate's sampling flags; defaults --temperature 0.8 --top-k 40 --penalty 1.2 --seed 1) and\n"
    "         labels each with an independent domain classifier (character 1-3-gram naive Bayes) trained\n"
    "         on the corpus's training split. Prints the confusion matrix and the accuracy (mean over\n"
    "         codes of the share labelled with the code it was generated under), and the classifier's own\n"
    "         accuracy on held-out documents cut into snippets of the samples' length: the ceiling. Writes\n"
    "         control-accuracy.json (with the samples) into the same directory as --codes.\n";

// Where --codes writes: the run beside RUN/checkpoints/step-N.ckpt, else the checkpoint's folder.
std::string default_out_dir(const std::string& checkpoint) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(checkpoint).parent_path();
  if (dir.filename() == "checkpoints") return dir.parent_path().empty() ? "." : dir.parent_path().string();
  return dir.empty() ? "." : dir.string();
}

void print_confusion(const ControlAccuracy& a, const std::vector<std::vector<int64_t>>& m, const char* rows) {
  std::printf("%-16s", rows);
  for (const auto& c : a.codes) std::printf(" %s", fit_columns(c, 10, true).c_str());
  std::printf(" %9s\n", "correct");
  for (size_t r = 0; r < a.codes.size(); ++r) {
    int64_t total = 0;
    for (int64_t v : m[r]) total += v;
    std::printf("%s", fit_columns(a.codes[r], 16).c_str());
    for (int64_t v : m[r]) std::printf(" %10lld", static_cast<long long>(v));
    if (total) std::printf(" %8.1f%%\n", 100.0 * double(m[r][r]) / double(total));
    else std::printf(" %9s\n", "-");
  }
}

void print_matrix(const CodeMatrix& m, bool perplexity) {
  std::printf("%s by control code given (rows: the held-out text's code; * its own code)\n",
              perplexity ? "perplexity" : "loss (nats/token)");
  std::printf("%-16s", "");
  for (const auto& c : m.columns) std::printf(" %s", fit_columns(c, 12, true).c_str());
  std::printf(perplexity ? "\n" : " %12s\n", "control gain");
  for (size_t r = 0; r < m.rows.size(); ++r) {
    std::printf("%s", fit_columns(m.rows[r], 16).c_str());
    for (size_t c = 0; c < m.columns.size(); ++c) {
      const double v = perplexity ? std::exp(m.loss[r][c]) : m.loss[r][c];
      std::printf(perplexity ? " %11.2f%c" : " %11.4f%c", v, c == m.row_column[r] ? '*' : ' ');
    }
    if (perplexity) std::printf("\n");
    else std::printf(" %+12.4f\n", m.gain(r));
  }
}

int run(const std::vector<std::string>& argv) {
  Args args("eval", kUsage);
  args.flag("model");
  args.flag("data");
  args.flag("max-sequences");
  args.flag("batch");
  args.boolean("json");
  args.boolean("codes");
  args.flag("control-accuracy");
  for (const char* f : {"max-tokens", "temperature", "top-k", "top-p", "penalty", "seed"}) args.flag(f);
  args.flag("out");
  args.flag("device");
  args.flag("threads");
  if (!args.parse(argv)) return 0;
  // Flags first, so a bad value fails before anything is loaded.
  const int64_t max_sequences = args.get_int("max-sequences", 256, 1, int64_t(1) << 30);
  const bool has_batch = args.has("batch");
  const int64_t batch_flag = args.get_int("batch", 0, 1, 1 << 20);
  const bool codes = args.has("codes"), accuracy = args.has("control-accuracy");
  ControlAccuracyOptions ao;
  ao.samples_per_code = args.get_int("control-accuracy", 0, 1, 1 << 20);
  ao.max_tokens = args.get_int("max-tokens", ao.max_tokens, 1, int64_t(1) << 30);
  ao.sampling.temperature = args.get_double("temperature", ao.sampling.temperature, 0, 1e6);
  ao.sampling.top_k = args.get_int("top-k", ao.sampling.top_k, 0, int64_t(1) << 31);
  ao.sampling.top_p = args.get_double("top-p", ao.sampling.top_p, 0, 1, true);
  ao.sampling.penalty = args.get_double("penalty", ao.sampling.penalty, 0, 1e6, true);
  ao.seed = uint64_t(args.get_int("seed", 1, 0));
  ao.quiet = args.has("json");
  for (const char* f : {"max-tokens", "temperature", "top-k", "top-p", "penalty", "seed"})
    if (args.has(f) && !accuracy) fail(std::string("ctrl eval: --") + f + " is a sampling flag of --control-accuracy; give it too");
  if (accuracy && ao.sampling.temperature == 0)  // greedy, as ctrl generate: nothing would be drawn
    for (const char* f : {"top-k", "top-p"})
      if (args.has(f)) fail(std::string("ctrl eval: --") + f + " applies to sampling, and --temperature 0 is greedy");
  for (const char* f : {"max-sequences", "batch"})
    if (args.has(f) && accuracy && !codes)
      fail(std::string("ctrl eval: --") + f + " sets the held-out windows of plain eval and --codes; " +
           "--control-accuracy alone does not use it");
  if (args.has("out") && !codes && !accuracy)
    fail("ctrl eval: --out is where --codes and --control-accuracy write their files; give one of them");
  const std::string model_path = model_checkpoint(args.require("model"));
  Checkpoint ckpt(model_path);
  const Config& config = ckpt.config();
  auto data = std::make_shared<Dataset>(Dataset::open(args.require("data")));
  check_corpus_matches(ckpt.contents(), *data, "ctrl eval");
  Batches batches = Batches::from_dataset(data, config.model.n_ctx, config.train.seed);
  // No more windows at a time than any code has: a --batch far above them would only hold memory.
  int64_t most_windows = 1;
  for (size_t c = 0; c < batches.n_codes(); ++c)
    most_windows = std::max(most_windows, batches.held_out_windows(c, max_sequences));
  const int64_t batch = std::min(has_batch ? batch_flag : config.train.micro_batch, most_windows);
  auto ops = make_ops(args.has("device") ? args.get("device") : "cpu", int(args.get_int("threads", 0, 0, 1 << 16)));
  Model model(config.model, *ops, batch);
  ckpt.load_parameters(model);
  const std::string no_window =
      args.get("data") + ": no control code has a held-out window of n_ctx tokens (" + held_out_gap_note(batches) + ")";
  const std::string out = args.has("out") ? args.get("out") : default_out_dir(model_path);
  if (codes || accuracy) {  // checked now, not after the scoring: a long --control-accuracy run is not lost
    std::error_code ec;
    if (std::filesystem::exists(out, ec) && !std::filesystem::is_directory(out, ec))
      fail(out + ": exists and is not a directory; --out names the directory for eval's files");
  }
  nlohmann::ordered_json json_out;
  if (codes) {
    const CodeMatrix m = code_matrix(model, batches, batch, max_sequences, args.has("json"));
    if (m.rows.empty()) fail(no_window);
    make_directories(out);  // only once there is something to write
    const std::string json = code_matrix_json(m);
    // Both or neither: a failed write leaves the earlier pair as it was, never a new JSON beside an old heatmap.
    write_files_atomically({{out + "/control-codes.json", json}, {out + "/control-codes.svg", code_matrix_svg(m)}});
    if (args.has("json")) {
      json_out["codes"] = nlohmann::ordered_json::parse(json);
    } else {
      print_matrix(m, false);
      std::printf("\n");
      print_matrix(m, true);
      std::printf("\nwrote %s/control-codes.json and %s/control-codes.svg\n", out.c_str(), out.c_str());
    }
  }
  if (accuracy) {
    // The classifier reads text: the tokenizer the checkpoint carries (the corpus's, as checked above).
    const auto& contents = ckpt.contents();
    if (contents.tokenizer.empty() && data->tokenizer_path().empty())
      fail("ctrl eval --control-accuracy: " + model_path +
           " carries no tokenizer and the corpus has none (a token-only corpus); the classifier reads text");
    const Tokenizer tokenizer = contents.tokenizer.empty()
                                    ? Tokenizer::load(data->tokenizer_path())
                                    : Tokenizer::from_bytes(contents.tokenizer, model_path + " (tokenizer.model)");
    if (codes && !args.has("json")) std::printf("\n");
    const ControlAccuracy a = control_accuracy(model, *data, tokenizer, ao);
    make_directories(out);
    const std::string json = control_accuracy_json(a, ao);
    write_file_atomically(out + "/control-accuracy.json", json);
    if (args.has("json")) {
      json_out["control_accuracy"] = nlohmann::ordered_json::parse(json);
    } else {
      std::printf("control accuracy: %lld samples per code, classifier's labels (columns)\n",
                  static_cast<long long>(ao.samples_per_code));
      print_confusion(a, a.confusion, "generated under");
      const int64_t empty = a.empty_total();
      std::printf(
          "accuracy %.1f%% (chance %.1f%%)%s\n", 100 * a.sample_accuracy(), 100.0 / double(a.codes.size()),
          empty ? (", " + std::to_string(empty) + " samples empty: not in the matrix, counted as misses").c_str() : "");
      std::printf("\nclassifier ceiling: held-out documents cut into snippets of %lld tokens\n",
                  static_cast<long long>(a.sample_tokens));
      print_confusion(a, a.ceiling_confusion, "held-out of");
      const std::vector<std::string> covered = a.ceiling_codes();
      std::string names;
      for (const std::string& c : covered) names += (names.empty() ? "" : ", ") + c;
      std::printf(
          "ceiling accuracy %.1f%%%s\n", 100 * ControlAccuracy::accuracy(a.ceiling_confusion),
          covered.size() < a.codes.size() ? (" (over " + names + " only: the codes with held-out text)").c_str() : "");
      std::printf("\nwrote %s/control-accuracy.json (with the samples)\n", out.c_str());
    }
  }
  if (codes || accuracy) {
    if (args.has("json")) std::printf("%s\n", json_out.dump(2).c_str());
    return 0;
  }
  const auto results = evaluate_held_out(model, batches, batch, max_sequences);
  if (results.empty()) fail(no_window);
  if (args.has("json")) {
    nlohmann::ordered_json j;
    for (const auto& r : results) j[r.code] = {{"loss", r.loss}, {"perplexity", r.perplexity()}, {"tokens", r.tokens}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%-20s %10s %12s %10s\n", "control code", "loss", "perplexity", "tokens");
    for (const auto& r : results)
      std::printf("%s %10.4f %12.2f %10lld\n", fit_columns(r.code, 20).c_str(), r.loss, r.perplexity(),
                  static_cast<long long>(r.tokens));
  }
  const std::string gap = held_out_gap_note(batches);
  if (!gap.empty()) std::fprintf(stderr, "ctrl eval: note: %s\n", gap.c_str());
  return 0;
}

CommandRegistration registration({"eval", "held-out loss and perplexity per control code; the code-by-code matrix",
                                  run});

}  // namespace
}  // namespace ctrl::cli
