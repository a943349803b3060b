// Text cleaning: the one place where text is normalized before it reaches
// the tokenizer. NFKC happens here (ICU), so the SentencePiece model is
// trained with normalization_rule_name=identity and never normalizes again:
// what the shards hold is exactly the cleaned text, and `Tokenizer::encode`
// applies this same normalization to prompts (see tokenizer/tokenizer.h).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace ctrl {

// NFKC (ICU). Invalid UTF-8 sequences become U+FFFD before normalizing.
std::string normalize_nfkc(std::string_view text);

// Promises: NFKC; \r\n, \r, U+2028/2029 become \n; tabs and every other
// Unicode space become ' '; control (Cc except \n), format (Cf), private-use
// and unassigned code points and U+FFFD are removed; runs of spaces collapse to
// one; lines are trimmed; runs of blank lines collapse to one blank line; no
// leading or trailing blank lines. Idempotent: clean_text(clean_text(x)) == clean_text(x).
std::string clean_text(std::string_view text);

// Number of Unicode code points in valid UTF-8 (continuation bytes not counted).
uint64_t count_chars(std::string_view utf8);

}  // namespace ctrl
