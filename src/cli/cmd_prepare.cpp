// ctrl prepare: sources -> cleaned, deduplicated, split, tokenized shards.
#include <cstdio>

#include "cli/args.h"
#include "cli/command.h"
#include "core/error.h"
#include "corpus/debian_docs.h"
#include "corpus/prepare.h"
#include "corpus/sources.h"

namespace ctrl::cli {
namespace {

constexpr const char* kUsage =
    "usage: ctrl prepare [--source CODE=PATH ...] --out DIR [flags]\n"
    "\n"
    "Reads every source, cleans (NFKC, control characters, whitespace), drops empty,\n"
    "short and duplicate documents, splits train/valid by document, trains a\n"
    "SentencePiece unigram tokenizer (control codes as single tokens) and writes\n"
    "token shards + manifest.json into DIR (built in DIR.tmp-<pid>, then renamed).\n"
    "Without --source: the built-in Japanese corpus from Debian's documentation\n"
    "packages (codes Manual, Reference, Guide, FAQ), vocabulary 8000 by default.\n"
    "\n"
    "  --source CODE=PATH     input (repeatable): file, directory or glob; Wikipedia XML(.bz2),\n"
    "                         WikiExtractor output, Aozora Bunko, JSON lines or text\n"
    "  --out DIR              output directory (required)\n"
    "  --vocab-size N         tokenizer pieces (default 32000; 8000 for the built-in corpus)\n"
    "  --valid-fraction F     held-out share of documents (default 0.01)\n"
    "  --seed N               split and tokenizer sampling seed (default 1)\n"
    "  --min-chars N          drop documents shorter than N characters (default 20)\n"
    "  --threads N            worker threads (default: all cores)\n"
    "  --tokenizer FILE       use this SentencePiece .model instead of training one\n"
    "  --sample-sentences N   sentences sampled for tokenizer training (default 2000000)\n"
    "  --shard-tokens N       tokens per shard before rolling to the next (default 268435456)\n"
    "  --cache DIR            where the built-in corpus's .deb files go (default ~/.cache/ctrl/debian-ja)\n";

int run_prepare(const std::vector<std::string>& argv) {
  Args args("prepare", kUsage);
  args.repeated("source");
  for (const char* f : {"out", "vocab-size", "valid-fraction", "seed", "min-chars", "threads", "tokenizer",
                        "sample-sentences", "shard-tokens", "cache"})
    args.flag(f);
  if (!args.parse(argv)) return 0;

  PrepareOptions options;
  options.out_dir = args.require("out");
  const bool builtin = args.all("source").empty();
  if (!builtin && args.has("cache"))
    fail(
        "ctrl prepare: --cache is where the built-in corpus (no --source) keeps its packages; --source reads "
        "your files instead");
  // Vocabulary ids must fit the model's int32 token ids; --threads 0 means all cores.
  options.vocab_size = uint32_t(args.get_int("vocab-size", builtin ? 8000 : 32000, 2, 2147483647));
  options.valid_fraction = args.get_double("valid-fraction", 0.01, 0, 1, false, true);
  options.seed = uint64_t(args.get_int("seed", 1, 0));
  options.min_chars = uint64_t(args.get_int("min-chars", 20, 0));
  options.threads = int(args.get_int("threads", 0, 0, 1 << 16));
  options.tokenizer = args.get("tokenizer");
  options.sample_sentences = uint64_t(args.get_int("sample-sentences", 2000000, 1));
  options.shard_tokens = uint64_t(args.get_int("shard-tokens", 256ll << 20, 1));

  std::vector<PrepareInput> inputs;
  if (builtin) {
    inputs = debian_docs_inputs(args.get("cache", default_debian_cache_dir()), options.threads);
  } else {
    ReaderOptions reader;
    reader.threads = options.threads;
    for (const auto& spec_text : args.all("source")) {
      const SourceSpec spec = parse_source_spec(spec_text);
      inputs.push_back({spec.control_code, spec.path,
                        [spec, reader](const DocumentSink& sink) { return read_source(spec, reader, sink); },
                        source_bytes(spec.path)});
    }
  }
  prepare_corpus(inputs, options);
  std::printf("%s\n", options.out_dir.c_str());
  return 0;
}

const CommandRegistration registration({"prepare", "clean, split and tokenize a corpus into token shards", run_prepare});

}  // namespace
}  // namespace ctrl::cli
