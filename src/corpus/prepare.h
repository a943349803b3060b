// `ctrl prepare`: sources -> clean documents -> tokenizer -> token shards.
//
// Every input is read in order, each document cleaned (corpus/clean.h),
// filtered (empty, too short, exact duplicate) and assigned to train or
// held-out by a seeded hash of its text. The cleaned text is spooled to disk,
// so memory stays bounded on multi-GB corpora. The tokenizer is trained on a
// bounded sample of the train documents (or an existing one is used), then
// each code's documents are encoded in parallel and written as shards
// (data/shard.h), each document followed by eos. Everything is built in
// "<out>.tmp-<pid>" and renamed to <out> at the end; the same inputs and
// options give byte-identical files.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "corpus/clean.h"
#include "corpus/document.h"

namespace ctrl {

// One input: a default control code (documents may carry their own), a
// description for messages and the manifest, and a function that streams it.
struct PrepareInput {
  std::string control_code;
  std::string description;
  std::function<ReadStats(const DocumentSink&)> read;
  uint64_t bytes = 0;  // its size on disk (source_bytes), for progress by Document::read_bytes; 0: unknown
};

struct PrepareOptions {
  std::string out_dir;
  uint32_t vocab_size = 32000;
  double valid_fraction = 0.01;
  uint64_t seed = 1;
  uint64_t min_chars = 20;
  int threads = 0;                      // 0: all hardware threads
  std::string tokenizer;                // existing .model to use instead of training one
  uint64_t sample_sentences = 2000000;  // tokenizer training sample bound
  uint64_t shard_tokens = 256ull << 20; // roll to a new shard after this many tokens
  bool quiet = false;                   // no summary table on stderr
};

struct SourceSummary {
  std::string control_code, description;
  ReadStats read;
  CleanStats clean;
  uint64_t tokens = 0;
};

struct CodeSummary {
  std::string name;
  int32_t token_id = -1;
  uint64_t documents_train = 0, documents_valid = 0, tokens_train = 0, tokens_valid = 0;
};

struct PrepareSummary {
  std::vector<SourceSummary> sources;
  std::vector<CodeSummary> codes;
  uint32_t vocab_size = 0;
  double seconds = 0;
};

// Runs the whole pipeline. Errors (unreadable input, no documents left, a
// tokenizer without the control codes) are one-line ctrl::Error; nothing is
// left at out_dir then.
PrepareSummary prepare_corpus(const std::vector<PrepareInput>& inputs, const PrepareOptions& options);

// The summary as a human-readable table (what `ctrl prepare` prints at the end).
std::string format_summary(const PrepareSummary& summary);

}  // namespace ctrl
