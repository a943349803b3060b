// ctrl eval: held-out loss and perplexity per control code.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/command.h"
#include "train/trainer.h"

namespace ctrl::cli {
namespace {

const char* kUsage =
    "usage: ctrl eval --model CKPT --data DIR [--max-sequences N] [--batch N] [--json]\n"
    "                 [--device cpu|checked|cuda[:N]]\n\n"
    "Loss (nats per token) and perplexity of a checkpoint on each control code's held-out split of a\n"
    "prepared corpus, over up to N windows of n_ctx tokens per code (default 256).\n";

int run(const std::vector<std::string>& argv) {
  Args args("eval", kUsage);
  args.flag("model");
  args.flag("data");
  args.flag("max-sequences");
  args.flag("batch");
  args.boolean("json");
  args.flag("device");
  if (!args.parse(argv)) return 0;
  // Flags first, so a bad value fails before anything is loaded.
  const int64_t max_sequences = args.get_int("max-sequences", 256, 1, int64_t(1) << 30);
  const bool has_batch = args.has("batch");
  const int64_t batch_flag = args.get_int("batch", 0, 1, 1 << 20);
  Checkpoint ckpt(args.require("model"));
  const Config& config = ckpt.config();
  auto data = std::make_shared<Dataset>(Dataset::open(args.require("data")));
  check_corpus_matches(ckpt.contents(), *data, "ctrl eval");
  Batches batches = Batches::from_dataset(data, config.model.n_ctx, config.train.seed);
  const int64_t batch = has_batch ? batch_flag : config.train.micro_batch;
  auto ops = make_ops(args.has("device") ? args.get("device") : "cpu");
  Model model(config.model, *ops, batch);
  ckpt.load_parameters(model);
  const auto results = evaluate_held_out(model, batches, batch, max_sequences);
  if (results.empty()) fail(args.get("data") + ": no control code has a held-out window of n_ctx tokens");
  if (args.has("json")) {
    nlohmann::ordered_json j;
    for (const auto& r : results) j[r.code] = {{"loss", r.loss}, {"perplexity", r.perplexity()}, {"tokens", r.tokens}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%-20s %10s %12s %10s\n", "control code", "loss", "perplexity", "tokens");
    for (const auto& r : results)
      std::printf("%-20s %10.4f %12.2f %10lld\n", r.code.c_str(), r.loss, r.perplexity(),
                  static_cast<long long>(r.tokens));
  }
  return 0;
}

CommandRegistration registration({"eval", "held-out loss and perplexity per control code", run});

}  // namespace
}  // namespace ctrl::cli
