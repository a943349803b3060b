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

// The whole text as a T: a base-10 integer within int64_t (T = int64_t), or a
// decimal or scientific number, "inf" and "nan" included (T = double: callers
// that need a finite value check it); either optionally with a leading '+'.
template <typename T>
std::optional<T> parse_whole(std::string_view text) {
  if (text.size() > 1 && text[0] == '+' && text[1] != '-') text.remove_prefix(1);
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}
inline std::optional<int64_t> parse_whole_int(std::string_view text) { return parse_whole<int64_t>(text); }
inline std::optional<double> parse_whole_double(std::string_view text) { return parse_whole<double>(text); }

}  // namespace ctrl
