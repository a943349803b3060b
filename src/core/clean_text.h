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

// Promises: NFKC, except that the spacing sound marks ゛ ゜ stay whole; \r\n, \r, U+2028/2029 become \n; tabs and every
// other Unicode space become ' '; control (Cc except \n), format (Cf), private-use and unassigned code points and
// U+FFFD are removed; runs of spaces collapse to one; lines are trimmed; runs of blank lines collapse to one blank
// line; no leading or trailing blank lines. Idempotent: clean_text(clean_text(x)) == clean_text(x).
std::string clean_text(std::string_view text);

// Number of Unicode code points in valid UTF-8 (continuation bytes not counted).
uint64_t count_chars(std::string_view utf8);

// Terminal columns of `text`: East Asian wide and fullwidth characters take
// two, combining marks none, everything else one.
int display_columns(std::string_view text);

// `text` cut to whole characters that fill at most `columns` terminal columns
// (East Asian wide and fullwidth characters take two, combining marks none),
// then padded with spaces to exactly `columns`: on the left when `right_align`.
// For tables: printf's %10.10s counts bytes and cuts UTF-8 inside a character.
std::string fit_columns(std::string_view text, int columns, bool right_align = false);

}  // namespace ctrl
