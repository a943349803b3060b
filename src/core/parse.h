// Numbers from text where the whole text must be the number: "3u", "3 ", ""
// and out-of-range values are rejected, not read as 3 (std::stoll and strtoll
// stop at the first character they cannot use). Callers turn an empty result
// into their own one-line error naming the file, flag or key.
#pragma once
#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ctrl {

// A base-10 integer, optionally with a leading '+' or '-', within int64_t.
inline std::optional<int64_t> parse_whole_int(std::string_view text) {
  if (text.size() > 1 && text[0] == '+' && text[1] != '-') text.remove_prefix(1);
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// A decimal or scientific number (also "inf" and "nan": callers that need a
// finite value check it), optionally with a leading '+'.
inline std::optional<double> parse_whole_double(std::string_view text) {
  if (text.size() > 1 && text[0] == '+' && text[1] != '-') text.remove_prefix(1);
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace ctrl
