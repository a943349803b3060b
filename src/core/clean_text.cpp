// Text cleaning with ICU: NFKC, control characters, whitespace.
#include "core/clean_text.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include "core/error.h"

namespace ctrl {

std::string normalize_nfkc(std::string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfkc = icu::Normalizer2::getNFKCInstance(status);
  if (U_FAILURE(status)) fail(std::string("ICU: cannot load the NFKC normalizer: ") + u_errorName(status));
  const icu::UnicodeString in = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), int32_t(text.size())));
  if (nfkc->isNormalized(in, status) && U_SUCCESS(status)) {
    std::string out;
    return in.toUTF8String(out);
  }
  status = U_ZERO_ERROR;
  const icu::UnicodeString normalized = nfkc->normalize(in, status);
  if (U_FAILURE(status)) fail(std::string("ICU: NFKC normalization failed: ") + u_errorName(status));
  std::string out;
  return normalized.toUTF8String(out);
}

namespace {

bool removed_code_point(UChar32 c) {
  if (c < 0 || c == 0xFFFD) return true;
  switch (u_charType(c)) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_PRIVATE_USE_CHAR:
    case U_SURROGATE:
    case U_UNASSIGNED:
      return true;
    default:
      return false;
  }
}

// The whitespace / control-character part of clean_text, on UTF-8.
std::string tidy(std::string_view text) {
  std::string out, line;
  out.reserve(text.size());
  bool pending_space = false, blank_line = false, after_cr = false;
  auto end_line = [&] {
    if (line.empty()) {
      if (!out.empty()) blank_line = true;
    } else {
      if (!out.empty()) out += blank_line ? "\n\n" : "\n";
      out += line;
      line.clear();
      blank_line = false;
    }
    pending_space = false;
  };
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const int32_t n = int32_t(text.size());
  CTRL_ASSERT(text.size() < (1ull << 31));
  for (int32_t i = 0; i < n;) {
    UChar32 c;
    U8_NEXT(s, i, n, c);
    const bool was_cr = after_cr;
    after_cr = c == '\r';
    if (c == '\n' && was_cr) continue;  // second half of \r\n
    if (c == '\n' || c == '\r' || c == 0x2028 || c == 0x2029) {
      end_line();
    } else if (c == '\t' || (c >= 0 && u_isUWhiteSpace(c))) {
      pending_space = !line.empty();
    } else if (!removed_code_point(c)) {
      if (pending_space) line += ' ';
      pending_space = false;
      char buf[4];
      int32_t k = 0;
      U8_APPEND_UNSAFE(reinterpret_cast<uint8_t*>(buf), k, c);
      line.append(buf, size_t(k));
    }
  }
  end_line();
  return out;
}

// NFKC takes the spacing sound marks ゛ and ゜ (U+309B/C) apart into a space and a combining mark
// (U+3099/A), so that "宝石強盗゛黒猫゛" would read "宝石強盗 ゙黒猫 ゙": they are put back together.
std::string join_spacing_sound_marks(std::string&& text) {
  if (text.find(" \xE3\x82\x99") == std::string::npos && text.find(" \xE3\x82\x9A") == std::string::npos)
    return std::move(text);
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, 3, " \xE3\x82") == 0 && i + 3 < text.size() &&
        (text[i + 3] == '\x99' || text[i + 3] == '\x9A')) {
      out += text[i + 3] == '\x99' ? "゛" : "゜";
      i += 3;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

}  // namespace

std::string clean_text(std::string_view text) {
  // Tidy first (drops invalid bytes and controls), normalize, tidy again
  // (NFKC turns e.g. U+3000 and U+00A0 into spaces that must collapse).
  return tidy(join_spacing_sound_marks(normalize_nfkc(tidy(text))));
}

uint64_t count_chars(std::string_view utf8) {
  uint64_t n = 0;
  for (unsigned char b : utf8) n += (b & 0xC0) != 0x80;
  return n;
}

namespace {
int code_point_columns(UChar32 c) {
  if (c < 0) return 1;  // an invalid byte, shown as one replacement character
  const int8_t type = u_charType(c);
  if (type == U_NON_SPACING_MARK || type == U_ENCLOSING_MARK) return 0;
  const int eaw = u_getIntPropertyValue(c, UCHAR_EAST_ASIAN_WIDTH);
  return eaw == U_EA_WIDE || eaw == U_EA_FULLWIDTH ? 2 : 1;
}
}  // namespace

int display_columns(std::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const int32_t n = int32_t(text.size());
  int columns = 0;
  for (int32_t i = 0; i < n;) {
    UChar32 c;
    U8_NEXT(s, i, n, c);
    columns += code_point_columns(c);
  }
  return columns;
}

std::string fit_columns(std::string_view text, int columns, bool right_align) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const int32_t n = int32_t(text.size());
  int32_t i = 0, kept = 0;
  int used = 0;
  while (i < n) {
    UChar32 c;
    U8_NEXT(s, i, n, c);
    const int width = code_point_columns(c);
    if (used + width > columns) break;
    used += width;
    kept = i;
  }
  const std::string pad(size_t(columns - used), ' ');
  const std::string cut(text.substr(0, size_t(kept)));
  return right_align ? pad + cut : cut + pad;
}

}  // namespace ctrl
