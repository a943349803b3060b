// Corpus filtering: exact-duplicate and short-document removal and the
// deterministic train/held-out split, over text that core/clean_text.h cleaned.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_set>

#include "core/clean_text.h"
#include "corpus/document.h"

namespace ctrl {

// A 64-bit hash of text that is the same on every platform and version
// (FNV-1a followed by a splitmix finalizer); used for dedup and the split.
uint64_t text_hash(std::string_view text);

// Deterministic train/held-out decision for a document: a pure function of
// (text hash, seed), so the split does not depend on order or thread count.
double split_score(uint64_t hash, uint64_t seed);  // uniform in [0, 1)
inline bool is_held_out(uint64_t hash, uint64_t seed, double valid_fraction) {
  return split_score(hash, seed) < valid_fraction;
}

struct CleanOptions {
  uint64_t min_chars = 20;  // documents shorter than this (after cleaning) are dropped
};

// What cleaning kept and dropped for one source, and why.
struct CleanStats {
  uint64_t documents_in = 0, documents_kept = 0;
  uint64_t chars_in = 0, chars_kept = 0, chars_dropped = 0;  // code points, after cleaning
  std::map<std::string, uint64_t> dropped;                    // reason -> documents
};

// Filters cleaned documents: drops empty, too-short and exact-duplicate ones
// (duplicates across all sources, by text_hash of the cleaned text; the first
// occurrence in input order is kept). Not thread-safe: call in input order.
class DocumentFilter {
 public:
  explicit DocumentFilter(CleanOptions options) : options_(options) {}
  // `text` must already be clean_text()'s output. Returns true if kept.
  bool accept(std::string_view text, CleanStats& stats);
  static const char* kEmpty;
  static const char* kTooShort;
  static const char* kDuplicate;

 private:
  CleanOptions options_;
  std::unordered_set<uint64_t> seen_;
};

}  // namespace ctrl
