#include "corpus/aozora.h"

#include <iconv.h>
#include <zip.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

#include "core/clean_text.h"
#include "core/error.h"

namespace ctrl {
namespace {

// An iconv conversion to UTF-8, reset before each use.
class Converter {
 public:
  explicit Converter(const char* from) : cd_(iconv_open("UTF-8", from)) {
    if (cd_ == reinterpret_cast<iconv_t>(-1)) fail(std::string("iconv cannot convert from ") + from);
  }
  ~Converter() { iconv_close(cd_); }
  Converter(const Converter&) = delete;
  Converter& operator=(const Converter&) = delete;

  // Converts all of in; false (out unspecified) if some byte sequence is invalid or incomplete.
  bool convert(std::string_view in, std::string& out) {
    iconv(cd_, nullptr, nullptr, nullptr, nullptr);
    out.resize(in.size() * 4 + 16);
    char* src = const_cast<char*>(in.data());
    size_t src_left = in.size();
    char* dst = out.data();
    size_t dst_left = out.size();
    if (iconv(cd_, &src, &src_left, &dst, &dst_left) == static_cast<size_t>(-1)) return false;
    if (iconv(cd_, nullptr, nullptr, &dst, &dst_left) == static_cast<size_t>(-1)) return false;  // flush
    out.resize(out.size() - dst_left);
    return true;
  }

  // Converts character by character where needed: bytes that do not decode are dropped and counted in
  // *bad, and the offset in `in` of the first one is stored in *first_bad (if not already set).
  // 0x7F (DEL) is never text: a lead byte before it is invalid too (glibc's CP932 decodes 0x81 0x7F
  // as a lone DEL, which would hide both).
  void convert_lossy(std::string_view in, std::string& out, uint64_t* bad, std::optional<size_t>* first_bad) {
    out.clear();
    std::string piece;
    size_t i = 0;
    while (i < in.size()) {
      // Try a 2-byte then a 1-byte character.
      size_t len = 0;
      for (size_t try_len : {size_t(2), size_t(1)}) {
        if (i + try_len > in.size() || in[i + try_len - 1] == '\x7F') continue;
        if (convert(in.substr(i, try_len), piece) && !piece.empty()) {
          len = try_len;
          break;
        }
      }
      if (len == 0) {
        if (!*first_bad) *first_bad = i;
        ++*bad;
        ++i;
      } else {
        out += piece;
        i += len;
      }
    }
  }

 private:
  iconv_t cd_;
};

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// An Aozora header is the title, author, translator: a few short lines.
constexpr size_t kMaxHeaderLines = 8, kMaxHeaderLineChars = 100;

// Splits at '\n' (a '\r' before it is removed).
std::vector<std::string_view> split_lines(std::string_view s) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < s.size()) {
    size_t end = s.find('\n', start);
    if (end == std::string_view::npos) end = s.size();
    std::string_view line = s.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    start = end + 1;
  }
  return lines;
}

// Resolves the inside of a gaiji note ※［＃…］: "U+XXXX" or a JIS X 0213 "plane-row-cell" field.
std::string resolve_gaiji(std::string_view note) {
  const size_t u = note.find("U+");
  if (u != std::string_view::npos) {
    uint32_t cp = 0;
    size_t k = u + 2, digits = 0;
    for (; k < note.size() && digits < 6 && std::isxdigit(static_cast<unsigned char>(note[k])); ++k, ++digits)
      cp = cp * 16 + static_cast<uint32_t>(std::stoi(std::string(1, note[k]), nullptr, 16));
    if (digits >= 4 && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF)) {
      std::string r;
      char buf[8];
      int n = 0;
      if (cp < 0x80) buf[n++] = static_cast<char>(cp);
      else if (cp < 0x800) buf[n++] = static_cast<char>(0xC0 | (cp >> 6)), buf[n++] = static_cast<char>(0x80 | (cp & 0x3F));
      else if (cp < 0x10000)
        buf[n++] = static_cast<char>(0xE0 | (cp >> 12)), buf[n++] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
        buf[n++] = static_cast<char>(0x80 | (cp & 0x3F));
      else
        buf[n++] = static_cast<char>(0xF0 | (cp >> 18)), buf[n++] = static_cast<char>(0x80 | ((cp >> 12) & 0x3F)),
        buf[n++] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), buf[n++] = static_cast<char>(0x80 | (cp & 0x3F));
      return std::string(buf, static_cast<size_t>(n));
    }
  }
  // The last "P-R-C" of ASCII digits (as in "第3水準1-84-77" or "1-2-22").
  auto is_digit = [&](size_t k) { return k < note.size() && note[k] >= '0' && note[k] <= '9'; };
  int found[3] = {0, 0, 0};
  bool any = false;
  for (size_t i = 0; i < note.size(); ++i) {
    if (!is_digit(i) || (i > 0 && is_digit(i - 1))) continue;
    int fields[3];
    size_t k = i;
    bool ok = true;
    for (int f = 0; f < 3 && ok; ++f) {
      if (f > 0) {
        if (k < note.size() && note[k] == '-') ++k;
        else ok = false;
      }
      int v = 0, digits = 0;
      while (ok && is_digit(k) && digits < 3) v = v * 10 + (note[k++] - '0'), ++digits;
      if (digits == 0 || is_digit(k)) ok = false;
      fields[f] = v;
    }
    if (ok) {
      std::copy(fields, fields + 3, found);
      any = true;
    }
  }
  if (any) return jisx0213_to_utf8(found[0], found[1], found[2]);
  return "";
}

// Aozora accent notation: letter + mark -> accented letter (青空文庫「アクセント分解」の表).
// The apostrophe and comma forms of consonants (l' n' s' t,) are left out: inside a span they are more
// often French elision or punctuation (l'existence, Menschenwelt,) than ĺ ń ś ţ.
struct Accent {
  char mark;
  std::string_view bases;
  std::array<std::string_view, 20> composed;
};
const Accent kAccents[] = {
    {'`', "aeiouAEIOU", {"à", "è", "ì", "ò", "ù", "À", "È", "Ì", "Ò", "Ù"}},
    {'\'', "aeiouyAEIOUY", {"á", "é", "í", "ó", "ú", "ý", "Á", "É", "Í", "Ó", "Ú", "Ý"}},
    {'^', "aeioucghjsAEIOUCGHJS", {"â", "ê", "î", "ô", "û", "ĉ", "ĝ", "ĥ", "ĵ", "ŝ",
                                   "Â", "Ê", "Î", "Ô", "Û", "Ĉ", "Ĝ", "Ĥ", "Ĵ", "Ŝ"}},
    {':', "aeiouyAEIOUY", {"ä", "ë", "ï", "ö", "ü", "ÿ", "Ä", "Ë", "Ï", "Ö", "Ü", "Ÿ"}},
    {'~', "anoiuANOIU", {"ã", "ñ", "õ", "ĩ", "ũ", "Ã", "Ñ", "Õ", "Ĩ", "Ũ"}},
    {'&', "auAU", {"å", "ů", "Å", "Ů"}},
    {',', "cC", {"ç", "Ç"}},
    {'/', "odhlODHL", {"ø", "đ", "ħ", "ł", "Ø", "Đ", "Ħ", "Ł"}},
    {'_', "aeiouAEIOU", {"ā", "ē", "ī", "ō", "ū", "Ā", "Ē", "Ī", "Ō", "Ū"}},
};

// Decodes the accent notation inside one 〔…〕 span.
std::string decode_accents(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    // Ligatures and inverted marks first: ae& oe& AE& OE& s& !@ ?@
    if (i + 2 < s.size() && s[i + 2] == '&') {
      const std::string_view two = s.substr(i, 2);
      const char* lig = two == "ae" ? "æ" : two == "AE" ? "Æ" : two == "oe" ? "œ" : two == "OE" ? "Œ" : nullptr;
      if (lig) { out += lig; i += 2; continue; }
    }
    if (i + 1 < s.size()) {
      if (s[i] == 's' && s[i + 1] == '&') { out += "ß"; ++i; continue; }
      if (s[i] == '!' && s[i + 1] == '@') { out += "¡"; ++i; continue; }
      if (s[i] == '?' && s[i + 1] == '@') { out += "¿"; ++i; continue; }
      bool done = false;
      for (const auto& a : kAccents) {
        const size_t k = a.bases.find(s[i]);
        if (s[i + 1] == a.mark && k != std::string_view::npos) {
          out += a.composed[k];
          ++i;
          done = true;
          break;
        }
      }
      if (done) continue;
    }
    out.push_back(s[i]);
  }
  return out;
}

// Removes ruby 《…》 and its start mark ｜, ［＃…］ annotations (nested too), and decodes 〔…〕 accent spans.
// Works line by line; an unclosed bracket drops only its opener. A gaiji, resolved or 〓, is a character of
// the text: never a bracket of the notation and never part of an accent mark.
std::string strip_notation(std::string_view line, AozoraText& result) {
  static constexpr std::string_view kGaiji = "※［＃", kAnnot = "［＃", kOpenSq = "［", kCloseSq = "］",
                                    kRubyOpen = "《", kRubyClose = "》", kBar = "｜", kAccOpen = "〔", kAccClose = "〕",
                                    kRepeat = "／＼", kRepeatVoiced = "／″＼";
  std::string out;
  out.reserve(line.size());
  std::vector<std::pair<size_t, size_t>> gaiji;  // [begin, end) in out, in order
  auto cut_to = [&](size_t n) {
    out.resize(n);
    while (!gaiji.empty() && gaiji.back().first >= n) gaiji.pop_back();
  };
  size_t depth = 0;          // inside ［＃…］
  size_t annot_start = 0;    // output position where the outermost annotation began
  bool in_ruby = false;
  size_t ruby_start = 0;
  size_t i = 0;
  while (i < line.size()) {
    const std::string_view rest = line.substr(i);
    if (depth == 0 && starts_with(rest, kGaiji)) {  // ※［＃…］: the character itself, never taken as notation
      // Its ］ is looked for only up to the next ［: each search ends where the next note starts (linear).
      const size_t next_open = rest.find(kOpenSq, kGaiji.size());
      const size_t close = rest.substr(0, next_open).find(kCloseSq);
      std::string c;
      if (close != std::string_view::npos) {
        c = resolve_gaiji(rest.substr(kGaiji.size(), close - kGaiji.size()));
        i += close + kCloseSq.size();
      } else {  // the note is not closed before the next bracket: an unknown character, the note's text stays
        i += kGaiji.size();
      }
      ++(c.empty() ? result.gaiji_unresolved : result.gaiji_resolved);
      const std::string_view shown = c.empty() ? std::string_view("〓") : std::string_view(c);
      gaiji.emplace_back(out.size(), out.size() + shown.size());
      out += shown;
      continue;
    }
    if (starts_with(rest, kAnnot)) {
      if (depth == 0) annot_start = out.size();
      ++depth;
      i += kAnnot.size();
    } else if (depth > 0 && starts_with(rest, kOpenSq)) {
      ++depth;
      i += kOpenSq.size();
    } else if (depth > 0 && starts_with(rest, kCloseSq)) {
      if (--depth == 0) cut_to(annot_start);
      i += kCloseSq.size();
    } else if (depth == 0 && starts_with(rest, kRubyOpen)) {
      in_ruby = true;
      ruby_start = out.size();
      i += kRubyOpen.size();
    } else if (depth == 0 && in_ruby && starts_with(rest, kRubyClose)) {
      cut_to(ruby_start);
      in_ruby = false;
      i += kRubyClose.size();
    } else if (starts_with(rest, kBar)) {
      i += kBar.size();
    } else if (starts_with(rest, kRepeatVoiced)) {  // くの字点, written across two characters
      out += "〴〵";
      i += kRepeatVoiced.size();
    } else if (starts_with(rest, kRepeat)) {
      out += "〳〵";
      i += kRepeat.size();
    } else {
      out.push_back(line[i]);
      ++i;
    }
  }
  // Unclosed annotation or ruby: their openers are already dropped, their text stays (minus ruby brackets).
  // (Gaiji are resolved only outside annotations, so none lies in this tail.)
  if (depth > 0) {
    std::string tail;
    for (size_t k = annot_start; k < out.size(); ++k) {
      const std::string_view r = std::string_view(out).substr(k);
      if (starts_with(r, kRubyOpen) || starts_with(r, kRubyClose)) k += kRubyOpen.size() - 1;
      else tail.push_back(out[k]);
    }
    out.resize(annot_start);
    out += tail;
  }
  // Accent spans: 〔…〕 whose text outside gaiji is ASCII are decoded and lose their brackets.
  auto gaiji_end_at = [&](size_t pos) -> size_t {  // the end of the gaiji starting at pos, or 0
    const auto g = std::lower_bound(gaiji.begin(), gaiji.end(), std::make_pair(pos, size_t{0}));
    return g != gaiji.end() && g->first == pos ? g->second : 0;
  };
  std::string decoded;
  size_t p = 0;
  while (p < out.size()) {
    if (const size_t g = gaiji_end_at(p)) {
      decoded.append(out, p, g - p);
      p = g;
      continue;
    }
    if (out.compare(p, kAccOpen.size(), kAccOpen) != 0) {
      decoded += out[p++];
      continue;
    }
    // A span: its pieces are ASCII runs (decoded) and gaiji (kept); anything else means it is not notation.
    std::string span;
    bool ascii_seen = false, notation = true;
    size_t q = p + kAccOpen.size(), run = q;
    auto flush_run = [&](size_t to) {
      span += decode_accents(std::string_view(out).substr(run, to - run));
      ascii_seen |= to > run;
    };
    for (;;) {
      if (q >= out.size()) {
        notation = false;
        break;
      }
      if (const size_t g = gaiji_end_at(q)) {
        flush_run(q);
        span.append(out, q, g - q);
        q = run = g;
      } else if (out.compare(q, kAccClose.size(), kAccClose) == 0) {
        flush_run(q);
        break;
      } else if (static_cast<unsigned char>(out[q]) >= 0x80) {
        notation = false;
        break;
      } else {
        ++q;
      }
    }
    if (notation && ascii_seen) {
      decoded += span;
      p = q + kAccClose.size();
    } else {  // the bracket is text; what follows is scanned again (it may open a span of its own)
      decoded.append(out, p, kAccOpen.size());
      p += kAccOpen.size();
    }
  }
  return decoded;
}

bool is_blank(std::string_view line) {
  while (!line.empty() && (line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
  while (starts_with(line, "　")) line.remove_prefix(3);
  return line.find_first_not_of(" \t") == std::string_view::npos;
}

}  // namespace

std::string jisx0213_to_utf8(int plane, int row, int cell) {
  if (cell < 1 || cell > 94 || row < 1 || row > 94) return "";
  int s1 = 0;
  if (plane == 1) {
    s1 = row <= 62 ? (row + 0x101) >> 1 : (row + 0x181) >> 1;
  } else if (plane == 2) {
    if (row == 1 || row == 3 || row == 4 || row == 5) s1 = (row + 0x1DF) >> 1;
    else if (row == 8) s1 = 0xF0;
    else if (row >= 12 && row <= 15) s1 = (row + 0x1D9) >> 1;
    else if (row >= 78) s1 = (row + 0x19B) >> 1;
    else return "";
  } else {
    return "";
  }
  int s2 = (row % 2 == 1) ? cell + 0x3F + (cell >= 64 ? 1 : 0) : cell + 0x9E;
  const char bytes[2] = {static_cast<char>(s1), static_cast<char>(s2)};
  thread_local Converter sjis("SHIFT_JISX0213");
  std::string out;
  if (!sjis.convert(std::string_view(bytes, 2), out)) return "";
  return out;
}

namespace {

// looks_utf8's judgement on the text sanitize_utf8 made of the bytes (its bad
// bytes and the offset of the first), so a decoder judges and cleans in one pass.
bool judged_utf8(std::string_view bytes, const std::string& clean, uint64_t bad, uint64_t first) {
  if (bad == 0 || (first + 4 > bytes.size() && bad <= 3)) return true;  // clean, or cut inside the last character
  uint64_t high = 0;
  for (char c : clean) high += static_cast<unsigned char>(c) >= 0x80;
  return high >= 8 * bad;
}

// Whether a Shift_JIS line holds a character of CP932's NEC-selected or IBM
// extensions (lead bytes 0xED, 0xEE, 0xFA-0xFC). JIS X 0213 puts other
// characters at those codes (CP932's 髙 0xFBFC would read as 騠), and a file
// that uses them was written as CP932: Aozora Bunko's own files keep to JIS X
// 0208 and write other characters as ※［＃…］.
bool has_cp932_extension(std::string_view line) {
  for (size_t i = 0; i < line.size(); ++i) {
    const auto b = static_cast<unsigned char>(line[i]);
    if (b < 0x81 || (b >= 0xA0 && b <= 0xDF)) continue;  // ASCII, half-width katakana
    if (b == 0xED || b == 0xEE || b >= 0xFA) return true;
    ++i;  // a lead byte: skip its trail byte
  }
  return false;
}

}  // namespace

bool looks_utf8(std::string_view bytes) {
  uint64_t bad = 0, first = 0;
  const std::string clean = sanitize_utf8(bytes, &bad, &first);
  return judged_utf8(bytes, clean, bad, first);
}

bool looks_euc_jp(std::string_view bytes) {
  auto pair_byte = [](unsigned char b) { return b >= 0xA1 && b <= 0xFE; };
  bool high = false;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const unsigned char b = static_cast<unsigned char>(bytes[i]);
    if (b < 0x80) continue;
    high = true;
    auto at = [&](size_t k) { return i + k < bytes.size() ? static_cast<unsigned char>(bytes[i + k]) : 0; };
    if (b == 0x8E && at(1) >= 0xA1 && at(1) <= 0xDF) {
      i += 1;
    } else if (b == 0x8F && pair_byte(at(1)) && pair_byte(at(2))) {
      i += 2;
    } else if (pair_byte(b) && pair_byte(at(1))) {
      i += 1;
    } else if (i + 1 < bytes.size() || !pair_byte(b)) {  // a lead byte cut at the very end is still EUC-JP
      return false;
    }
  }
  return high;
}

namespace {

// Replaces each pair's first string by its second, in one pass (a replacement may be shorter).
void replace_each(std::string& utf8, std::initializer_list<std::pair<std::string_view, std::string_view>> pairs) {
  if (std::none_of(pairs.begin(), pairs.end(), [&](const auto& p) { return utf8.find(p.first) != std::string::npos; }))
    return;
  std::string out;
  out.reserve(utf8.size());
  for (size_t i = 0; i < utf8.size();) {
    const auto hit = std::find_if(pairs.begin(), pairs.end(),
                                  [&](const auto& p) { return utf8.compare(i, p.first.size(), p.first) == 0; });
    if (hit == pairs.end()) {
      out += utf8[i++];
    } else {
      out += hit->second;
      i += hit->first.size();
    }
  }
  utf8 = std::move(out);
}

// glibc's SHIFT_JISX0213 reads the single bytes 0x5C and 0x7E as JIS X 0201's ¥ and ‾; CP932, the WHATWG
// decoder and Python read them as ASCII \ and ~, and so do the files' writers (paths, URLs, Aozora's accent
// notation: 〔Espan~a〕). Its double-byte ￥ and ￣ decode to U+FFE5 and U+FFE3, so in its output U+00A5 and
// U+203E can only be those two bytes.
void ascii_for_jis_roman(std::string& utf8) { replace_each(utf8, {{"\u00A5", "\\"}, {"\u203E", "~"}}); }

// The seven JIS X 0208 symbols that CP932 maps to other code points than JIS X 0213 does (0x815C ―,
// 0x8160 〜, 0x8161 ‖, 0x817C −, 0x8191 ¢, 0x8192 £, 0x81CA ¬), given JIS X 0213's, so that a byte is
// one character throughout a file whichever of the two decoded its line (after NFKC, CP932's ～ and －
// would be ASCII ~ and - on those lines alone).
void jis_symbols_for_cp932(std::string& utf8) {
  replace_each(utf8, {{"\u2015", "\u2014"},
                      {"\uFF5E", "\u301C"},
                      {"\u2225", "\u2016"},
                      {"\uFF0D", "\u2212"},
                      {"\uFFE0", "\u00A2"},
                      {"\uFFE1", "\u00A3"},
                      {"\uFFE2", "\u00AC"}});
}

}  // namespace

std::string decode_japanese_bytes(std::string_view raw, uint64_t* bad_bytes, uint64_t* first_bad_offset,
                                  TextEncoding* encoding) {
  *bad_bytes = 0;
  const char* const file_start = raw.data();
  if (starts_with(raw, "\xEF\xBB\xBF")) raw.remove_prefix(3);
  std::string out;
  uint64_t first = 0;
  const std::string clean = sanitize_utf8(raw, bad_bytes, &first);
  if (judged_utf8(raw, clean, *bad_bytes, first)) {  // damaged UTF-8 loses its bad bytes, not its encoding
    if (encoding) *encoding = TextEncoding::kUtf8;
    if (*bad_bytes > 0 && first_bad_offset) *first_bad_offset = static_cast<uint64_t>(raw.data() - file_start) + first;
    out.reserve(clean.size());
    for (std::string_view line : split_lines(clean)) (out += line) += '\n';
    return out;
  }
  const bool euc = looks_euc_jp(raw);
  if (encoding) *encoding = euc ? TextEncoding::kEucJp : TextEncoding::kShiftJis;
  *bad_bytes = 0;  // counted again, in the encoding taken
  thread_local Converter sjis("SHIFT_JISX0213");
  thread_local Converter cp932("CP932");
  thread_local Converter euc_jp("EUC-JP");
  thread_local Converter euc_jisx0213("EUC-JISX0213");
  std::string piece;
  out.reserve(raw.size() * 3 / 2);
  std::optional<size_t> first_bad;
  for (std::string_view line : split_lines(raw)) {
    // A line with a DEL byte is never taken whole (see convert_lossy).
    const bool del = line.find('\x7F') != std::string_view::npos;
    Converter& first_choice = euc ? euc_jp : has_cp932_extension(line) ? cp932 : sjis;
    Converter& second_choice = euc ? euc_jisx0213 : &first_choice == &cp932 ? sjis : cp932;
    Converter* used = nullptr;
    if (!del)
      used = first_choice.convert(line, piece)    ? &first_choice
             : second_choice.convert(line, piece) ? &second_choice
                                                  : nullptr;
    if (used) {
      if (used == &sjis) ascii_for_jis_roman(piece);
      if (used == &cp932) jis_symbols_for_cp932(piece);
      out += piece;
    } else {
      std::optional<size_t> bad_in_line;
      (euc ? euc_jp : cp932).convert_lossy(line, piece, bad_bytes, &bad_in_line);
      if (!euc) jis_symbols_for_cp932(piece);
      if (bad_in_line && !first_bad) first_bad = static_cast<size_t>(line.data() - file_start) + *bad_in_line;
      out += piece;
    }
    out += '\n';
  }
  if (first_bad_offset && first_bad) *first_bad_offset = *first_bad;
  return out;
}

bool looks_like_aozora(std::string_view utf8) {
  for (std::string_view marker : {"［＃", "底本：", "【テキスト中に現れる記号について】"})
    if (utf8.find(marker) != std::string_view::npos) return true;
  // Ruby: 《…》 holding only kana (a reading); 《論語》 names a book.
  for (size_t open = utf8.find("《"); open != std::string_view::npos; open = utf8.find("《", open + 1)) {
    const size_t close = utf8.find("》", open);
    if (close == std::string_view::npos) break;
    const std::string_view inside = utf8.substr(open + 3, close - open - 3);
    if (inside.empty() || inside.size() > 3 * 20) continue;
    bool kana = true;
    for (size_t k = 0; k + 3 <= inside.size() && kana; k += 3) {
      // Hiragana U+3041-309F and katakana U+30A0-30FF are E3 81 81 - E3 83 BF in UTF-8.
      const auto b0 = static_cast<unsigned char>(inside[k]), b1 = static_cast<unsigned char>(inside[k + 1]);
      kana = b0 == 0xE3 && (b1 == 0x81 || b1 == 0x82 || b1 == 0x83);
    }
    if (kana && inside.size() % 3 == 0) return true;
  }
  return false;
}

std::string undecodable_bytes_text(uint64_t bad, TextEncoding encoding) {
  const char* what = encoding == TextEncoding::kUtf8    ? "invalid UTF-8 byte(s) dropped (the file is UTF-8)"
                     : encoding == TextEncoding::kEucJp ? "byte(s) neither EUC-JP nor EUC-JIS X 0213 dropped (the file is EUC-JP)"
                                                        : "byte(s) neither Shift_JIS X 0213 nor CP932 dropped (the file is Shift_JIS)";
  return std::to_string(bad) + " " + what + ", the first here";
}

AozoraText aozora_to_text(std::string_view utf8) {
  AozoraText result;
  const std::vector<std::string_view> lines = split_lines(utf8);
  size_t first = 0;  // leading blank lines
  while (first < lines.size() && is_blank(lines[first])) ++first;
  // The 【テキスト中に現れる記号について】 block: between two rules of hyphens, naming the notation
  // (《》：ルビ, ［＃］：入力者注…). Rules around anything else are the author's text.
  auto after_symbol_block = [&](size_t k) -> size_t {  // the line after the block's closing rule, or 0
    while (k < lines.size() && is_blank(lines[k])) ++k;
    if (k >= lines.size() || !starts_with(lines[k], "-----")) return 0;
    bool names_notation = false;
    for (size_t close = k + 1; close < lines.size(); ++close) {
      const std::string_view l = lines[close];
      if (starts_with(l, "-----")) return names_notation ? close + 1 : 0;
      for (std::string_view mark : {"【テキスト中に現れる記号について】", "《》：", "［＃］："})
        names_notation |= l.find(mark) != std::string_view::npos;
    }
    return 0;
  };
  // Header: title and author lines up to the first blank line (or the symbol block's rule, which some
  // files put right under the title). Followed by the symbol block, it is the header whatever it holds;
  // otherwise only a few short lines without notation are (a first line with ［＃ or 《, or a first
  // paragraph of long or many lines, is body text).
  auto header_line = [&](size_t j) { return !is_blank(lines[j]) && !starts_with(lines[j], "-----"); };
  size_t header_end = first;
  bool header_short = true;
  for (; header_end < lines.size() && header_line(header_end); ++header_end)
    if (count_chars(lines[header_end]) > kMaxHeaderLineChars) header_short = false;
  const size_t block_end = after_symbol_block(header_end);
  const bool header = header_end > first && (block_end > 0 || (header_end - first <= kMaxHeaderLines && header_short &&
                                                               lines[first].find("［＃") == std::string_view::npos &&
                                                               lines[first].find("《") == std::string_view::npos));
  size_t begin = first;
  if (header) {
    AozoraText ignored;  // the header's gaiji are not the body's
    result.title = strip_notation(lines[first], ignored);
    if (header_end - first > 1) result.author = strip_notation(lines[first + 1], ignored);
    begin = block_end > 0 ? block_end : header_end;
  } else if (const size_t end_of_block = after_symbol_block(first)) {
    begin = end_of_block;
  }
  // Footer: from 底本： (at a line start) or ［＃本文終わり］.
  size_t end = lines.size();
  for (size_t j = begin; j < lines.size(); ++j) {
    if (starts_with(lines[j], "底本：") || lines[j].find("［＃本文終わり］") != std::string_view::npos) {
      end = j;
      break;
    }
  }
  std::string body;
  bool blank_pending = false;
  for (size_t j = begin; j < end; ++j) {
    std::string line = strip_notation(lines[j], result);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t')) line.pop_back();
    if (is_blank(line)) {
      blank_pending = !body.empty();
      continue;
    }
    if (blank_pending) body += '\n';
    blank_pending = false;
    body += line;
    body += '\n';
  }
  while (!body.empty() && body.back() == '\n') body.pop_back();
  result.text = std::move(body);
  return result;
}

void read_aozora_bytes(std::string_view raw, const std::string& file, ReadContext& context) {
  context.stats.bytes_in += raw.size();
  uint64_t bad = 0, first_bad = 0;
  TextEncoding encoding = TextEncoding::kUtf8;
  const std::string utf8 = decode_japanese_bytes(raw, &bad, &first_bad, &encoding);
  if (bad > 0) context.warnings.warn(file, first_bad, undecodable_bytes_text(bad, encoding));
  AozoraText t = aozora_to_text(utf8);
  if (t.gaiji_unresolved > 0) context.stats.notes["gaiji written as 〓 (characters)"] += t.gaiji_unresolved;
  if (t.text.empty()) {
    context.stats.drop("empty");
    return;
  }
  Document d;
  d.title = t.title;
  d.text = std::move(t.text);
  d.origin = file;
  context.emit(std::move(d));
}

void read_aozora_zip(const std::string& path, ReadContext& context) {
  int error = 0;
  zip_t* archive = zip_open(path.c_str(), ZIP_RDONLY, &error);
  if (!archive) {
    zip_error_t ze;
    zip_error_init_with_code(&ze, error);
    const std::string what = zip_error_strerror(&ze);
    zip_error_fini(&ze);
    fail(path + ": not a readable zip archive (" + what + "); expected an Aozora Bunko .zip");
  }
  const zip_int64_t entries = zip_get_num_entries(archive, 0);
  int texts = 0;
  for (zip_int64_t e = 0; e < entries; ++e) {
    zip_stat_t st;
    if (zip_stat_index(archive, static_cast<zip_uint64_t>(e), 0, &st) != 0 || !(st.valid & ZIP_STAT_NAME)) continue;
    std::string name = st.name;
    std::string lower_name = name;
    for (char& c : lower_name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower_name.size() < 4 || lower_name.substr(lower_name.size() - 4) != ".txt") continue;
    ++texts;
    const std::string member = path + ":" + name;
    if (!(st.valid & ZIP_STAT_SIZE) || st.size > (uint64_t(1) << 30)) {
      context.warnings.warn(member, 0, "zip member too large or of unknown size; skipped");
      continue;
    }
    zip_file_t* f = zip_fopen_index(archive, static_cast<zip_uint64_t>(e), 0);
    if (!f) {
      context.warnings.warn(member, 0, std::string("cannot open zip member: ") + zip_strerror(archive));
      continue;
    }
    std::string bytes(st.size, '\0');
    const zip_int64_t n = zip_fread(f, bytes.data(), bytes.size());
    zip_fclose(f);
    if (n < 0 || static_cast<uint64_t>(n) != st.size) {
      context.warnings.warn(member, n < 0 ? 0 : static_cast<uint64_t>(n), "zip member could not be read in full; skipped");
      continue;
    }
    read_aozora_bytes(bytes, member, context);
  }
  zip_close(archive);
  if (texts == 0) {
    context.warnings.warn(path, 0, "zip archive holds no .txt file; skipped");
    context.stats.drop("no_text_in_zip");
  }
}

}  // namespace ctrl
