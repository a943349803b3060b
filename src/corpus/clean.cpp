// The corpus's dedup filter and the deterministic split decision (the text
// cleaning itself is core/clean_text.cpp).
#include "corpus/clean.h"

#include "core/error.h"
#include "core/rng.h"

namespace ctrl {

uint64_t text_hash(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char b : text) h = (h ^ b) * 0x100000001b3ull;
  return mix64(h ^ text.size());
}

double split_score(uint64_t hash, uint64_t seed) {
  return double(mix64(hash ^ mix64(seed + 0x5eed)) >> 11) * (1.0 / 9007199254740992.0);
}

const char* DocumentFilter::kEmpty = "empty";
const char* DocumentFilter::kTooShort = "too short";
const char* DocumentFilter::kDuplicate = "duplicate";

bool DocumentFilter::accept(std::string_view text, CleanStats& stats) {
  ++stats.documents_in;
  const uint64_t chars = count_chars(text);
  stats.chars_in += chars;
  const char* reason = nullptr;
  if (text.empty())
    reason = kEmpty;
  else if (chars < options_.min_chars)
    reason = kTooShort;
  else if (!seen_.insert(text_hash(text)).second)
    reason = kDuplicate;
  if (reason) {
    ++stats.dropped[reason];
    stats.chars_dropped += chars;
    return false;
  }
  ++stats.documents_kept;
  stats.chars_kept += chars;
  return true;
}

}  // namespace ctrl
