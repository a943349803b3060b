#include "corpus/binary.h"

#include <cstdint>

namespace ctrl {

std::string binary_reason(std::string_view text) {
  const std::string_view sample = text.substr(0, size_t(64) << 10);
  uint64_t chars = 0, odd = 0;
  for (size_t i = 0; i < sample.size();) {
    const unsigned char c = static_cast<unsigned char>(sample[i]);
    if (c == 0) return "NUL bytes";
    ++chars;
    if (c < 0x80) {
      if (c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f') ++odd;
      else if (c == 0x7F) ++odd;
      ++i;
      continue;
    }
    // A UTF-8 sequence: its length from the lead byte, then continuation bytes.
    const size_t n = c >= 0xF0 && c < 0xF8 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
    bool valid = n > 0 && i + n <= sample.size();
    for (size_t k = 1; valid && k < n; ++k) valid = (static_cast<unsigned char>(sample[i + k]) & 0xC0) == 0x80;
    if (!valid) {
      if (i + 4 > sample.size() && sample.size() == size_t(64) << 10) break;  // a character cut by the sample
      ++odd;
      ++i;
      continue;
    }
    uint32_t cp = c & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(sample[i + k]) & 0x3F);
    if ((cp >= 0x80 && cp < 0xA0) || cp == 0xFFFD) ++odd;
    i += n;
  }
  if (chars >= 16 && odd * 20 > chars)
    return std::to_string(odd) + " of its first " + std::to_string(chars) +
           " characters are control characters or undecodable bytes";
  return "";
}

}  // namespace ctrl
