// ctrl generate: text under a control code, streamed as it is produced.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>

#include "cli/args.h"
#include "cli/command.h"
#include "core/file_io.h"
#include "corpus/input.h"
#include "generate/generator.h"
#include "tokenizer/tokenizer.h"
#include "train/checkpoint.h"

namespace ctrl::cli {
namespace {

const char* kUsage =
    "usage: ctrl generate --model CKPT --control CODE [--prompt TEXT] [--max-tokens N] [--temperature T]\n"
    "                     [--penalty THETA] [--top-k K] [--top-p P] [--seed S] [--ids]\n"
    "                     [--device cpu|checked|cuda[:N]] [--threads N]\n\n"
    "Generates text that starts with control code CODE (see the list an unknown code prints) and the\n"
    "prompt. CTRL's penalized sampling: logits of tokens already present are divided by THETA\n"
    "(multiplied when negative, as Hugging Face does; default 1.2; 1 disables); temperature 0 (default)\n"
    "is greedy; a temperature above 0 samples, with --top-k/--top-p if given, reproducibly from --seed.\n"
    "Ids past the tokenizer's vocabulary (a model with a larger one) are never chosen.\n"
    "Stops at --max-tokens (default 100), the end-of-document token or the model's context.\n"
    "--ids prints token ids instead of text (always so for a checkpoint without a tokenizer).\n"
    "CKPT may be a run directory: its newest checkpoint.\n";

// Tokenizer from the bytes a checkpoint carries (already checked against its control codes).
std::optional<Tokenizer> checkpoint_tokenizer(const CheckpointContents& c, const std::string& path) {
  if (c.tokenizer.empty()) return std::nullopt;
  return Tokenizer::from_bytes(c.tokenizer, path + " (tokenizer.model)");
}

// Pushes what was printed out to stdout; a full disk or a closed file ends
// the command with an error rather than "N tokens generated" over a cut file.
void flush_output() {
  if (std::fflush(stdout) != 0 || std::ferror(stdout))
    fail(std::string("ctrl generate: writing the output failed: ") + std::strerror(errno ? errno : EIO));
}

int run(const std::vector<std::string>& argv) {
  Args args("generate", kUsage);
  for (const char* f : {"model", "control", "prompt", "max-tokens", "temperature", "penalty", "top-k", "top-p", "seed"})
    args.flag(f);
  args.allow_empty("prompt");  // no text after the control code
  args.boolean("ids");
  args.flag("device");
  args.flag("threads");
  if (!args.parse(argv)) return 0;
  // Flags first (each with its range), so a bad value fails before the model loads.
  SamplingOptions o;
  o.temperature = args.get_double("temperature", 0.0, 0, 1e6);
  o.penalty = args.get_double("penalty", 1.2, 0, 1e6, true);
  o.top_k = args.get_int("top-k", 0, 0, int64_t(1) << 31);
  o.top_p = args.get_double("top-p", 1.0, 0, 1, true);
  const int64_t max_tokens = args.get_int("max-tokens", 100, 0, int64_t(1) << 30);
  const uint64_t seed = uint64_t(args.get_int("seed", 1, 0));
  if (o.temperature == 0)  // greedy: nothing is drawn, so these would be ignored without a word
    for (const char* f : {"top-k", "top-p", "seed"})
      if (args.has(f))
        fail(std::string("ctrl generate: --") + f +
             " applies to sampling, and temperature 0 (the default) is greedy; add --temperature T (e.g. 0.8)");
  const std::string control = args.require("control");  // before the model loads
  const std::string model_path = model_checkpoint(args.require("model"));
  Checkpoint ckpt(model_path);
  const auto& contents = ckpt.contents();
  int32_t control_id = -1;
  std::string known;
  for (const auto& c : contents.codes) {
    if (c.name == control) control_id = c.token_id;
    known += (known.empty() ? "" : ", ") + c.name;
  }
  if (control_id < 0)
    fail("ctrl generate: unknown control code '" + control + "' (" +
         (known.empty() ? "this model has none: import it with --control NAME=ID" : "this model knows: " + known) +
         ")");
  CounterRng rng{seed, 0x6E6, 0};

  auto tokenizer = checkpoint_tokenizer(contents, model_path);
  if (tokenizer) o.vocabulary = tokenizer->vocab_size();  // never an id the tokenizer cannot decode
  const bool print_ids = args.has("ids") || !tokenizer;
  std::vector<int32_t> history = {control_id};
  if (args.has("prompt")) {
    if (!tokenizer)
      fail("ctrl generate: " + model_path +
           " holds no tokenizer (trained on synthetic tokens, or imported without --tokenizer), so "
           "--prompt cannot be encoded");
    uint64_t invalid = 0, first_invalid = 0;
    sanitize_utf8(args.get("prompt"), &invalid, &first_invalid);
    if (invalid > 0)  // cleaning would drop the bytes silently
      fail("ctrl generate: --prompt: invalid UTF-8 at byte " + std::to_string(first_invalid) + "; expected UTF-8 text");
    for (int32_t t : tokenizer->encode(args.get("prompt"))) history.push_back(t);
  }
  auto ops = make_ops(args.has("device") ? args.get("device") : "cpu", int(args.get_int("threads", 0, 0, 1 << 16)));
  Model model(ckpt.config().model, *ops, 1, DType::F32, false, 1);  // decoding only: one row, no gradients
  ckpt.load_parameters(model);
  Generator gen(model);
  const int64_t n_ctx = ckpt.config().model.n_ctx;
  // n_ctx tokens still give the logits of one more.
  if (int64_t(history.size()) > n_ctx)
    fail("ctrl generate: the prompt is " + std::to_string(history.size()) +
         " tokens with the control code, over the model's context of " + std::to_string(n_ctx));
  const int32_t eos = tokenizer ? tokenizer->eos_id() : -1;

  std::vector<float> logits;
  for (int32_t t : history) logits = gen.feed(t);
  const size_t first_new = history.size();
  // The prompt (after the control code), then each new token as it comes; as ids or as text.
  std::optional<TextStream> text;
  if (!print_ids) text.emplace(*tokenizer);
  auto show = [&](size_t i) {  // history[i], the i-th token after the control code
    const std::string s = print_ids ? (i > 1 ? " " : "") + std::to_string(history[i]) : text->push(history[i]);
    std::fwrite(s.data(), 1, s.size(), stdout);
  };
  for (size_t i = 1; i < history.size(); ++i) show(i);
  bool context_full = false;
  for (int64_t i = 0; i < max_tokens; ++i) {
    const int32_t next = sample_next(logits, history, o, rng);
    if (next == eos) break;
    history.push_back(next);
    show(history.size() - 1);
    flush_output();
    if (gen.position() >= n_ctx) {
      context_full = true;
      break;
    }
    logits = gen.feed(next);
  }
  if (text) {  // what was held back: a character that never completed
    const std::string rest = text->finish();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
  }
  std::printf("\n");
  flush_output();  // the text ends its line before the notes on stderr
  if (context_full)
    std::fprintf(stderr, "(stopped: the model's context of %lld tokens is full)\n", static_cast<long long>(n_ctx));
  std::fprintf(stderr, "(%zu tokens generated under %s)\n", history.size() - first_new, control.c_str());
  return 0;
}

CommandRegistration registration({"generate", "generate text under a control code (KV cache, penalized sampling)",
                                  run});

}  // namespace
}  // namespace ctrl::cli
