// Wikitext to plain text in four linear passes:
//   1. comments and tags (<ref>, <gallery>, … dropped with content; inline tags unwrapped; the content
//      of <math>, <syntaxhighlight>, <nowiki> … set aside behind a placeholder, so no later pass
//      reads it as markup),
//   2. brackets: templates {{…}}, tables {|…|} and links [[…]] matched with one stack; layout and
//      content templates give their text, simple tables their rows,
//   3. lines: headings, list markers, table remnants, quotes, external links, magic words, entities,
//      empty brackets and blank-line collapsing,
//   4. the placeholders replaced by what was set aside.
// Every scan moves forward only; unmatched openers stay as text (their content is kept),
// so an unclosed bracket can neither hang nor swallow the page.
#include "corpus/wikitext.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "corpus/input.h"

namespace ctrl {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }

// The characters that open a list line: * # (items), ; (a term), : (a definition or an indent).
bool is_list_marker(char c) { return c == '*' || c == '#' || c == ':' || c == ';'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && (is_space(s.front()) || s.front() == '\n')) s.remove_prefix(1);
  while (!s.empty() && (is_space(s.back()) || s.back() == '\n')) s.remove_suffix(1);
  return s;
}

char ascii_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = ascii_lower(c);
  return r;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// ---------------------------------------------------------------- pass 1: comments and tags

// Tags whose content is not prose: dropped together with their content.
constexpr std::array<std::string_view, 21> kDropContentTags = {
    "ref",        "gallery",  "timeline",     "score",      "graph",          "mapframe",  "maplink",
    "templatedata", "imagemap", "hiero",      "references", "inputbox",       "categorytree", "includeonly",
    "table",      "rt",       "rp",           "templatestyles", "indicator",  "charinsert", "style"};
// Tags whose content is set aside untouched and put back at the end (pass 4).
constexpr std::array<std::string_view, 3> kTexTags = {"math", "chem", "ce"};               // inline TeX
constexpr std::array<std::string_view, 3> kCodeTags = {"syntaxhighlight", "source", "pre"};  // code lines
// Tags that are removed while their content is kept.
constexpr std::array<std::string_view, 47> kUnwrapTags = {
    "b",    "i",     "u",     "s",      "strike", "del",  "ins",  "span",    "div",     "small",
    "big",  "sub",   "sup",   "font",   "center", "code", "tt",   "var",     "kbd",     "em",
    "strong", "cite", "blockquote", "p", "abbr", "poem", "q",    "ruby",    "rb",      "mark",
    "dfn",  "bdi",   "bdo",   "onlyinclude", "noinclude", "section", "li", "ul",  "ol",      "dl",
    "dt",   "dd",    "time",  "data",   "wbr",    "hr",  "samp"};

template <size_t N>
bool in(const std::array<std::string_view, N>& set, std::string_view s) {
  return std::find(set.begin(), set.end(), s) != set.end();
}

// Content set aside in pass 1, put back in pass 4 where its placeholder survived.
enum class Aside { kTex, kCode, kLiteral };
struct SetAside {
  Aside kind;
  std::string_view text;
};
// Placeholder: U+E000, the decimal index, U+E001 (private-use characters, removed from the input first).
constexpr std::string_view kAsideOpen = "\xEE\x80\x80", kAsideClose = "\xEE\x80\x81";
// Where passes 1 and 2 removed markup that gave no text (a <ref>, a comment, a template, a table), they
// leave U+E002; pass 3 removes the brackets, commas and blank space around it that the markup left
// without content ("（{{lang|x|}}）"), and then the mark itself. Brackets without a mark are text: "（,）".
constexpr std::string_view kHole = "\xEE\x80\x82";
// Where a template gave a value that only the wiki's data could supply (a population from
// {{自治体人口/…}}, an area, an {{#expr:}}), it leaves U+E003; pass 3 drops the sentence around it, since
// "推計人口は人である。" would teach a model a sentence with its number missing.
constexpr std::string_view kUnknownValue = "\xEE\x80\x83";
// Where a block tag (<blockquote>) starts or ends a line, or a <br> breaks one, pass 1 leaves U+E004, which
// becomes a line break after pass 2 (a space inside a table cell, where a line break would make the table
// no longer simple).
constexpr std::string_view kBlockBreak = "\xEE\x80\x84";

// Length of the blank space (ASCII space or tab, U+3000, U+00A0) at s[i], or 0.
size_t blank_at(std::string_view s, size_t i) {
  if (i < s.size() && (s[i] == ' ' || s[i] == '\t')) return 1;
  if (s.compare(i, 3, "\xE3\x80\x80") == 0) return 3;
  if (s.compare(i, 2, "\xC2\xA0") == 0) return 2;
  return 0;
}

// Skips blank space and hole marks from i; *holes tells whether a mark was among them.
size_t skip_blanks(std::string_view s, size_t i, bool* holes) {
  for (;;) {
    if (s.compare(i, kHole.size(), kHole) == 0) {
      *holes = true;
      i += kHole.size();
    } else if (const size_t n = blank_at(s, i)) {
      i += n;
    } else {
      return i;
    }
  }
}

std::string strip_tags(std::string_view s, uint32_t disabled, std::vector<SetAside>& aside) {
  std::string out;
  out.reserve(s.size());
  // For each content tag name: position from which no closing tag exists (search memo, keeps it linear).
  std::vector<std::pair<std::string, size_t>> no_close_after;
  size_t i = 0;
  while (i < s.size()) {
    const size_t lt = s.find('<', i);
    if (lt == std::string_view::npos) {
      out.append(s.substr(i));
      break;
    }
    out.append(s.substr(i, lt - i));
    i = lt;
    if (s.compare(lt, 4, "<!--") == 0) {  // comment: to "-->", or to the end if unclosed (as MediaWiki)
      const size_t end = s.find("-->", lt + 4);
      i = end == std::string_view::npos ? s.size() : end + 3;
      out.append(kHole);
      continue;
    }
    size_t p = lt + 1;
    const bool closing = p < s.size() && s[p] == '/';
    if (closing) ++p;
    const size_t name_start = p;
    while (p < s.size() && p - name_start < 20 && (std::isalnum(static_cast<unsigned char>(s[p])))) ++p;
    const std::string name = lower(s.substr(name_start, p - name_start));
    // What becomes of the content: dropped, set aside (TeX, code, literal) or kept (unwrap).
    enum { kUnknown, kDrop, kTex, kCode, kLiteral, kUnwrap, kBreak } what = kUnknown;
    if (name.empty()) what = kUnknown;
    else if (in(kDropContentTags, name)) what = kDrop;
    else if (in(kTexTags, name)) what = (disabled & kWikitextMath) ? kDrop : kTex;
    else if (in(kCodeTags, name)) what = !(disabled & kWikitextCode) ? kCode : name == "pre" ? kUnwrap : kDrop;
    else if (name == "nowiki") what = kLiteral;
    else if (in(kUnwrapTags, name) || (name.size() == 2 && name[0] == 'h' && name[1] >= '1' && name[1] <= '6'))
      what = kUnwrap;
    else if (name == "br") what = kBreak;
    // The tag must end with '>' soon, without another '<' in between.
    size_t gt = std::string_view::npos;
    if (what != kUnknown && p < s.size() && (s[p] == '>' || s[p] == '/' || is_space(s[p]) || s[p] == '\n')) {
      for (size_t q = p; q < s.size() && q - p < 2000; ++q) {
        if (s[q] == '>') { gt = q; break; }
        if (s[q] == '<') break;
      }
    }
    if (gt == std::string_view::npos) {  // not a tag: a literal '<'
      out.push_back('<');
      ++i;
      continue;
    }
    const bool self_closing = s[gt - 1] == '/';
    i = gt + 1;
    if (what == kBreak) {  // a line break, but a space inside a table cell (see kBlockBreak)
      out.append(kBlockBreak);
      continue;
    }
    if (name == "blockquote") {  // a quotation block starts and ends a line
      out.append(kBlockBreak);
      continue;
    }
    if (closing || self_closing || what == kUnwrap) {  // drop just the tag
      if (what == kDrop) out.append(kHole);  // <ref name="x" />
      continue;
    }
    // The content runs to the matching close tag (not nested: MediaWiki does not nest these either).
    auto memo = std::find_if(no_close_after.begin(), no_close_after.end(), [&](auto& e) { return e.first == name; });
    if (memo != no_close_after.end() && i >= memo->second) continue;  // known unclosed: drop only the opening tag
    const std::string close = "</" + name;
    size_t c = i;
    size_t found = std::string_view::npos;
    while ((c = s.find("</", c)) != std::string_view::npos) {
      if (s.size() - c >= close.size() && lower(s.substr(c, close.size())) == close) {
        found = c;
        break;
      }
      c += 2;
    }
    if (found == std::string_view::npos) {
      if (memo == no_close_after.end()) no_close_after.emplace_back(name, i);
      else memo->second = std::min(memo->second, i);
      continue;
    }
    if (what == kDrop) out.append(kHole);
    if (what != kDrop) {
      const Aside kind = what == kTex ? Aside::kTex : what == kCode ? Aside::kCode : Aside::kLiteral;
      out.append(kAsideOpen).append(std::to_string(aside.size())).append(kAsideClose);
      aside.push_back({kind, s.substr(i, found - i)});
    }
    const size_t close_gt = s.find('>', found);
    i = close_gt == std::string_view::npos ? s.size() : close_gt + 1;
  }
  return out;
}

// ---------------------------------------------------------------- pass 2: templates, tables, links

enum class Frame { kTemplate, kTable, kLink };
struct OpenFrame {
  Frame kind;
  size_t start;  // position in out where the frame's content begins
};
constexpr size_t kMaxDepth = 64;

std::vector<std::string_view> split_pipes(std::string_view s) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == '|') {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return parts;
}

// The parameters of a template call, trimmed: positional ones in order ("1=x" counts as the first),
// named ones by name. A part is named when an '=' comes before any newline or bracket: so a list
// item "\n* a = b" given to a layout template stays positional.
struct Params {
  std::vector<std::string_view> positional;
  std::vector<std::pair<std::string_view, std::string_view>> named;
  std::string_view arg(size_t k) const { return k < positional.size() ? positional[k] : std::string_view(); }
  std::string_view get(std::string_view name) const {
    for (const auto& [n, v] : named) if (n == name) return v;
    return {};
  }
};

Params parse_params(const std::vector<std::string_view>& parts) {
  Params r;
  for (size_t k = 1; k < parts.size(); ++k) {
    const std::string_view p = trim(parts[k]);
    const size_t eq = p.find('=');
    if (eq == std::string_view::npos || eq == 0 || p.find_first_of("<[{\n") < eq) {  // "== heading ==" too
      r.positional.push_back(p);
      continue;
    }
    const std::string_view name = trim(p.substr(0, eq)), value = trim(p.substr(eq + 1));
    size_t index = 0;
    bool numeric = !name.empty() && name.size() <= 2;
    for (char c : name) numeric = numeric && c >= '0' && c <= '9', index = index * 10 + static_cast<size_t>(c - '0');
    if (numeric && index >= 1) {
      if (r.positional.size() < index) r.positional.resize(index);
      r.positional[index - 1] = value;
    } else {
      r.named.emplace_back(name, value);
    }
  }
  return r;
}

// What a template gives to the text.
enum class Gives {
  kFirst,        // its 1st parameter
  kSecond,       // its 2nd parameter
  kQuote,        // its 1st parameter, or text=/quote=
  kMarked,       // the text a maintenance tag marks: 範囲= only (the tag alone gives nothing)
  kMarkedRange,  // the text a *範囲 tag marks: its 1st parameter or 範囲=
  kLast,         // its last positional parameter, from the 2nd on
  kCountry,      // a country's name: from its code (the template's name, or parameter 1) or parameter 1
  kUnknown,      // a value from the wiki's data (population, area, arithmetic): its sentence is dropped
  kLangName,     // "language: text" from parameters 2 and 3
  kLangNamed,    // "language: text" from 表示言語名= (else 言語記事名=) and parameter 2
  kReading,      // "word（reading）" from parameters 1 and 2
  kNihongo,      // "word（kanji）" from parameters 1 and 2
  kConvert,      // "number unit" when parameter 1 is a plain number ("number–number unit" for ranges)
  kBirthDate,    // "Y年M月D日" from parameters 1-3
  kDeathDate,    // "Y年M月D日（N歳没）" from parameters 4-6 and the birth date 1-3
  kIsbn,         // "ISBN parameter 1"
  kCoordinates,  // "北緯D度M分S秒 東経D度M分S秒" (coordinates_text)
  kPipe,         // "|" inside a table (a cell separator), nothing elsewhere
  kSpace,        // a space ({{nbsp}}: 30{{nbsp}}°C)
  kLayout,       // the content parameters on their own lines (not widths or named options)
  kLines,        // each positional parameter on its own line
  kCommaList,    // the positional parameters joined with "、"
  kDotList,      // the positional parameters joined with "・"
};
struct TemplateRule {
  std::string_view name;  // lowercase, '_' as ' '; a trailing '-', '/' or ':' matches a prefix
  Gives gives;
  std::string_view doc;
};
// The templates that carry prose, most frequent in jawiki first. Every other template gives nothing.
constexpr TemplateRule kTemplateRules[] = {
    {"仮リンク", Gives::kFirst, "the Japanese title (1st)"},
    {"lang", Gives::kSecond, "the text (2nd)"},
    {"lang-", Gives::kFirst, "the text (1st), any lang-xx and lang-xx-short"},
    {"ipa", Gives::kFirst, "the transcription (1st)"},
    {"ipa2", Gives::kFirst, "the transcription (1st)"},
    {"ipa-", Gives::kFirst, "the transcription (1st), any IPA-xx"},
    {"audio", Gives::kSecond, "the label (2nd)"},
    {"quotation", Gives::kQuote, "the quotation (1st or text=)"},
    {"quote", Gives::kQuote, "the quotation (1st or text=)"},
    {"cquote", Gives::kQuote, "the quotation (1st or text=)"},
    {"bquote", Gives::kQuote, "the quotation (1st or text=)"},
    {"quote box", Gives::kQuote, "the quotation (quote=)"},
    {"ilq", Gives::kFirst, "the inline quotation (1st)"},
    {"indent", Gives::kLines, "the indented text, on its own line"},
    {"引用", Gives::kQuote, "the quotation (1st)"},
    {"langwithname", Gives::kLangName, "\"language: text\" (2nd, 3rd)"},
    {"rtl-langwithname", Gives::kLangName, "\"language: text\" (2nd, 3rd)"},
    {"llang", Gives::kLangNamed, "\"language: text\" (表示言語名= or 言語記事名=, 2nd); the text alone without them"},
    {"nihongo", Gives::kNihongo, "\"word（kanji）\" (1st, 2nd)"},
    {"ruby", Gives::kFirst, "the base text (1st)"},
    {"読み仮名", Gives::kReading, "\"word（reading）\" (1st, 2nd)"},
    {"読み仮名 ruby不使用", Gives::kReading, "\"word（reading）\" (1st, 2nd)"},
    {"ill2", Gives::kFirst, "the Japanese title (1st)"},
    {"ill", Gives::kFirst, "the Japanese title (1st)"},
    {"interlang", Gives::kLast, "the label (3rd), else the title (2nd)"},
    {"nbsp", Gives::kSpace, "a space"},
    {"読み", Gives::kFirst, "the reading (1st)"},
    {"ピン音", Gives::kFirst, "the pinyin (1st)"},
    {"transl", Gives::kLast, "the transliteration (last)"},
    {"jpn", Gives::kCountry,
     "the country's name (日本); likewise the other country-code templates: USA, CHN, KOR, GBR, …"},
    {"flag", Gives::kCountry, "the name (1st; a country code gives the country's name)"},
    {"flagcountry", Gives::kCountry, "the country's name (1st, a code or a name)"},
    {"自治体人口/", Gives::kUnknown, "a population: the sentence around it is dropped"},
    {"自治体面積/", Gives::kUnknown, "an area: the sentence around it is dropped"},
    {"#expr:", Gives::kUnknown, "arithmetic (on such values): the sentence around it is dropped"},
    {"convert", Gives::kConvert, "\"number unit\" for plain numbers"},
    {"生年月日と年齢", Gives::kBirthDate, "the date \"Y年M月D日\" (no age: it depends on the day)"},
    {"死亡年月日と没年齢", Gives::kDeathDate, "\"Y年M月D日（N歳没）\""},
    {"isbn", Gives::kIsbn, "\"ISBN number\""},
    {"isbn2", Gives::kIsbn, "\"ISBN number\""},
    {"visible anchor", Gives::kFirst, "the text (1st)"},
    {"coord", Gives::kCoordinates, "\"北緯D度M分S秒 東経D度M分S秒\" (nothing with display=title alone)"},
    {"ウィキ座標度分秒", Gives::kCoordinates, "\"北緯D度M分S秒 東経D度M分S秒\""},
    {"ウィキ座標2段度分秒", Gives::kCoordinates, "\"北緯D度M分S秒 東経D度M分S秒\""},
    {"ウィキ座標度分", Gives::kCoordinates, "\"北緯D度M分S秒 東経D度M分S秒\""},
    {"ウィキ座標", Gives::kCoordinates, "\"北緯D度M分S秒 東経D度M分S秒\""},
    {"要出典範囲", Gives::kMarkedRange, "the marked text (1st or 範囲=)"},
    {"いつ範囲", Gives::kMarkedRange, "the marked text (1st or 範囲=)"},
    {"独自研究範囲", Gives::kMarkedRange, "the marked text (1st or 範囲=)"},
    {"要検証範囲", Gives::kMarkedRange, "the marked text (1st or 範囲=)"},
    {"疑問点範囲", Gives::kMarkedRange, "the marked text (1st or 範囲=)"},
    {"誰範囲", Gives::kMarkedRange, "the marked text (1st or 範囲=)"},
    {"信頼性要検証範囲", Gives::kMarkedRange, "the marked text (1st or 範囲=)"},
    {"要出典", Gives::kMarked, "the marked text (範囲=); without it, nothing"},
    {"small", Gives::kFirst, "the text (1st)"},
    {"smaller", Gives::kFirst, "the text (1st)"},
    {"larger", Gives::kFirst, "the text (1st)"},
    {"large", Gives::kFirst, "the text (1st)"},
    {"big", Gives::kFirst, "the text (1st)"},
    {"nowrap", Gives::kFirst, "the text (1st)"},
    {"nobr", Gives::kFirst, "the text (1st)"},
    {"inline-block", Gives::kFirst, "the text (1st)"},
    {"sup", Gives::kFirst, "the text (1st)"},
    {"sub", Gives::kFirst, "the text (1st)"},
    {"nts", Gives::kFirst, "the number (1st)"},
    {"color", Gives::kSecond, "the text (2nd)"},
    {"fontsize", Gives::kSecond, "the text (2nd)"},
    {"補助漢字フォント", Gives::kFirst, "the character (1st)"},
    {"jis2004フォント", Gives::kFirst, "the character (1st)"},
    {"unicode", Gives::kFirst, "the character (1st)"},
    {"pdflink", Gives::kFirst, "the link (1st)"},
    {"!", Gives::kPipe, "a cell separator inside a table"},
    {"en", Gives::kFirst, "the text (1st); likewise every 2-3 letter language code: fr, de, zh, ko, el, …"},
    {"col-list", Gives::kLayout, "its content (lists, headings)"},
    {"columns-list", Gives::kLayout, "its content"},
    {"col", Gives::kLayout, "its columns, one after the other"},
    {"plainlist", Gives::kLayout, "its list"},
    {"flatlist", Gives::kLayout, "its list"},
    {"表2列", Gives::kLayout, "its two columns, one after the other"},
    {"no col break", Gives::kLayout, "its content"},
    {"div col", Gives::kLayout, "its content (when given as a parameter)"},
    {"multicol", Gives::kLayout, "its content (when given as a parameter)"},
    {"unbulleted list", Gives::kLines, "each item on its own line"},
    {"ubl", Gives::kLines, "each item on its own line"},
    {"ul", Gives::kLines, "each item on its own line"},
    {"ol", Gives::kLines, "each item on its own line"},
    {"bulleted list", Gives::kLines, "each item on its own line"},
    {"ordered list", Gives::kLines, "each item on its own line"},
    {"hlist-comma", Gives::kCommaList, "the items joined with 、"},
    {"hlist", Gives::kDotList, "the items joined with ・"},
};

// Language-code templates ({{en|text}}, {{fr|text}} …: the text in that language).
constexpr std::array<std::string_view, 40> kLanguageCodes = {
    "en", "ja", "fr", "de", "es", "it", "pt", "ru", "zh", "ko", "el", "la", "ar", "nl",
    "sv", "fi", "pl", "cs", "hu", "tr", "he", "fa", "hi", "th", "vi", "id", "ms", "uk",
    "ro", "da", "no", "is", "ga", "cy", "eo", "sa", "grc", "ain", "mn", "bo"};

// Country-code templates ({{JPN}}, {{USA}} …: a flag and the country's name, which is what they give):
// the ISO 3166 and IOC codes of the sovereign states, the home nations (ENG, SCO …) and former states
// (URS, FRG …) with the short names jawiki shows. Matched in capitals only, so that {{col}} stays a
// layout template and {{COL}} is Colombia.
// clang-format off
constexpr std::pair<std::string_view, std::string_view> kCountries[] = {
    {"AFG", "アフガニスタン"}, {"AGO", "アンゴラ"}, {"ALB", "アルバニア"}, {"ALG", "アルジェリア"}, {"AND", "アンドラ"},
    {"ANG", "アンゴラ"}, {"ARE", "アラブ首長国連邦"}, {"ARG", "アルゼンチン"}, {"ARM", "アルメニア"},
    {"ATG", "アンティグア・バーブーダ"}, {"AUS", "オーストラリア"}, {"AUT", "オーストリア"}, {"AZE", "アゼルバイジャン"}, {"BAH", "バハマ"},
    {"BAN", "バングラデシュ"}, {"BDI", "ブルンジ"}, {"BEL", "ベルギー"}, {"BEN", "ベナン"}, {"BFA", "ブルキナファソ"},
    {"BGD", "バングラデシュ"}, {"BGR", "ブルガリア"}, {"BHR", "バーレーン"}, {"BHS", "バハマ"}, {"BHU", "ブータン"},
    {"BIH", "ボスニア・ヘルツェゴビナ"}, {"BLR", "ベラルーシ"}, {"BLZ", "ベリーズ"}, {"BOL", "ボリビア"}, {"BOT", "ボツワナ"},
    {"BRA", "ブラジル"}, {"BRB", "バルバドス"}, {"BRN", "ブルネイ"}, {"BRU", "ブルネイ"}, {"BTN", "ブータン"},
    {"BUL", "ブルガリア"}, {"BUR", "ブルキナファソ"}, {"BWA", "ボツワナ"}, {"CAF", "中央アフリカ共和国"}, {"CAM", "カンボジア"},
    {"CAN", "カナダ"}, {"CGO", "コンゴ共和国"}, {"CHA", "チャド"}, {"CHE", "スイス"}, {"CHI", "チリ"}, {"CHL", "チリ"},
    {"CHN", "中国"}, {"CIV", "コートジボワール"}, {"CMR", "カメルーン"}, {"COD", "コンゴ民主共和国"}, {"COG", "コンゴ共和国"},
    {"COL", "コロンビア"}, {"COM", "コモロ"}, {"CPV", "カーボベルデ"}, {"CRC", "コスタリカ"}, {"CRI", "コスタリカ"},
    {"CRO", "クロアチア"}, {"CUB", "キューバ"}, {"CYP", "キプロス"}, {"CZE", "チェコ"}, {"DEN", "デンマーク"},
    {"DEU", "ドイツ"}, {"DJI", "ジブチ"}, {"DMA", "ドミニカ国"}, {"DNK", "デンマーク"}, {"DOM", "ドミニカ共和国"},
    {"DZA", "アルジェリア"}, {"ECU", "エクアドル"}, {"EGY", "エジプト"}, {"ENG", "イングランド"}, {"ERI", "エリトリア"},
    {"ESA", "エルサルバドル"}, {"ESP", "スペイン"}, {"EST", "エストニア"}, {"ETH", "エチオピア"}, {"EU", "欧州連合"},
    {"FIJ", "フィジー"}, {"FIN", "フィンランド"}, {"FJI", "フィジー"}, {"FRA", "フランス"}, {"FRG", "西ドイツ"},
    {"FSM", "ミクロネシア連邦"}, {"GAB", "ガボン"}, {"GAM", "ガンビア"}, {"GBR", "イギリス"}, {"GDR", "東ドイツ"},
    {"GEO", "ジョージア"}, {"GER", "ドイツ"}, {"GHA", "ガーナ"}, {"GIN", "ギニア"}, {"GMB", "ガンビア"},
    {"GNB", "ギニアビサウ"}, {"GNQ", "赤道ギニア"}, {"GRC", "ギリシャ"}, {"GRD", "グレナダ"}, {"GRE", "ギリシャ"},
    {"GTM", "グアテマラ"}, {"GUA", "グアテマラ"}, {"GUI", "ギニア"}, {"GUY", "ガイアナ"}, {"HAI", "ハイチ"}, {"HKG", "香港"},
    {"HND", "ホンジュラス"}, {"HON", "ホンジュラス"}, {"HRV", "クロアチア"}, {"HTI", "ハイチ"}, {"HUN", "ハンガリー"},
    {"IDN", "インドネシア"}, {"INA", "インドネシア"}, {"IND", "インド"}, {"IRI", "イラン"}, {"IRL", "アイルランド"},
    {"IRN", "イラン"}, {"IRQ", "イラク"}, {"ISL", "アイスランド"}, {"ISR", "イスラエル"}, {"ITA", "イタリア"},
    {"JAM", "ジャマイカ"}, {"JOR", "ヨルダン"}, {"JPN", "日本"}, {"KAZ", "カザフスタン"}, {"KEN", "ケニア"},
    {"KGZ", "キルギス"}, {"KHM", "カンボジア"}, {"KIR", "キリバス"},
    {"KNA", "セントクリストファー・ネイビス"}, {"KOR", "韓国"}, {"KOS", "コソボ"}, {"KSA", "サウジアラビア"}, {"KUW", "クウェート"},
    {"KWT", "クウェート"}, {"LAO", "ラオス"}, {"LAT", "ラトビア"}, {"LBN", "レバノン"}, {"LBR", "リベリア"}, {"LBY", "リビア"},
    {"LCA", "セントルシア"}, {"LES", "レソト"}, {"LIB", "レバノン"}, {"LIE", "リヒテンシュタイン"}, {"LKA", "スリランカ"},
    {"LSO", "レソト"}, {"LTU", "リトアニア"}, {"LUX", "ルクセンブルク"}, {"LVA", "ラトビア"}, {"MAC", "マカオ"},
    {"MAD", "マダガスカル"}, {"MAR", "モロッコ"}, {"MAS", "マレーシア"}, {"MAW", "マラウイ"}, {"MCO", "モナコ"},
    {"MDA", "モルドバ"}, {"MDG", "マダガスカル"}, {"MDV", "モルディブ"}, {"MEX", "メキシコ"}, {"MGL", "モンゴル"},
    {"MHL", "マーシャル諸島"}, {"MKD", "北マケドニア"}, {"MLI", "マリ"}, {"MLT", "マルタ"}, {"MMR", "ミャンマー"},
    {"MNE", "モンテネグロ"}, {"MNG", "モンゴル"}, {"MON", "モナコ"}, {"MOZ", "モザンビーク"}, {"MRI", "モーリシャス"},
    {"MRT", "モーリタニア"}, {"MUS", "モーリシャス"}, {"MWI", "マラウイ"}, {"MYA", "ミャンマー"}, {"MYS", "マレーシア"},
    {"NAM", "ナミビア"}, {"NED", "オランダ"}, {"NEP", "ネパール"}, {"NER", "ニジェール"}, {"NGA", "ナイジェリア"},
    {"NGR", "ナイジェリア"}, {"NIC", "ニカラグア"}, {"NIG", "ニジェール"}, {"NIR", "北アイルランド"}, {"NLD", "オランダ"},
    {"NOR", "ノルウェー"}, {"NPL", "ネパール"}, {"NRU", "ナウル"}, {"NZL", "ニュージーランド"}, {"OMA", "オマーン"},
    {"OMN", "オマーン"}, {"PAK", "パキスタン"}, {"PAN", "パナマ"}, {"PAR", "パラグアイ"}, {"PER", "ペルー"},
    {"PHI", "フィリピン"}, {"PHL", "フィリピン"}, {"PLE", "パレスチナ"}, {"PLW", "パラオ"},
    {"PNG", "パプアニューギニア"}, {"POL", "ポーランド"}, {"POR", "ポルトガル"}, {"PRC", "中華人民共和国"},
    {"PRI", "プエルトリコ"}, {"PRK", "北朝鮮"}, {"PRT", "ポルトガル"}, {"PRY", "パラグアイ"}, {"PSE", "パレスチナ"},
    {"PUR", "プエルトリコ"}, {"QAT", "カタール"}, {"ROC", "中華民国"}, {"ROU", "ルーマニア"},
    {"RSA", "南アフリカ共和国"}, {"RUS", "ロシア"}, {"RWA", "ルワンダ"}, {"SAM", "サモア"}, {"SAU", "サウジアラビア"},
    {"SCO", "スコットランド"}, {"SDN", "スーダン"}, {"SEN", "セネガル"}, {"SEY", "セーシェル"}, {"SGP", "シンガポール"},
    {"SIN", "シンガポール"}, {"SLB", "ソロモン諸島"}, {"SLE", "シエラレオネ"}, {"SLO", "スロベニア"},
    {"SLV", "エルサルバドル"}, {"SMR", "サンマリノ"}, {"SOL", "ソロモン諸島"}, {"SOM", "ソマリア"}, {"SOV", "ソビエト連邦"},
    {"SRB", "セルビア"}, {"SRI", "スリランカ"}, {"SSD", "南スーダン"}, {"STP", "サントメ・プリンシペ"}, {"SUD", "スーダン"},
    {"SUI", "スイス"}, {"SUR", "スリナム"}, {"SVK", "スロバキア"}, {"SVN", "スロベニア"}, {"SWE", "スウェーデン"},
    {"SWZ", "エスワティニ"}, {"SYC", "セーシェル"}, {"SYR", "シリア"}, {"TAN", "タンザニア"}, {"TCD", "チャド"},
    {"TCH", "チェコスロバキア"}, {"TGA", "トンガ"}, {"TGO", "トーゴ"}, {"THA", "タイ"}, {"TJK", "タジキスタン"},
    {"TKM", "トルクメニスタン"}, {"TLS", "東ティモール"}, {"TOG", "トーゴ"}, {"TON", "トンガ"},
    {"TPE", "チャイニーズタイペイ"}, {"TRI", "トリニダード・トバゴ"}, {"TTO", "トリニダード・トバゴ"}, {"TUN", "チュニジア"},
    {"TUR", "トルコ"}, {"TUV", "ツバル"}, {"TWN", "台湾"}, {"TZA", "タンザニア"}, {"UAE", "アラブ首長国連邦"},
    {"UGA", "ウガンダ"}, {"UK", "イギリス"}, {"UKR", "ウクライナ"}, {"URS", "ソビエト連邦"}, {"URU", "ウルグアイ"},
    {"URY", "ウルグアイ"}, {"USA", "アメリカ合衆国"}, {"UZB", "ウズベキスタン"}, {"VAN", "バヌアツ"}, {"VAT", "バチカン"},
    {"VCT", "セントビンセント・グレナディーン"}, {"VEN", "ベネズエラ"}, {"VIE", "ベトナム"}, {"VNM", "ベトナム"}, {"VUT", "バヌアツ"},
    {"WAL", "ウェールズ"}, {"WSM", "サモア"}, {"YEM", "イエメン"}, {"YUG", "ユーゴスラビア"},
    {"ZAF", "南アフリカ共和国"}, {"ZAM", "ザンビア"}, {"ZIM", "ジンバブエ"}, {"ZMB", "ザンビア"}, {"ZWE", "ジンバブエ"}};
// clang-format on

std::string_view country_name(std::string_view code) {
  if (code.size() < 2 || code.size() > 3 || code[0] < 'A' || code[0] > 'Z') return {};  // most template names
  for (const auto& [c, name] : kCountries)
    if (code == c) return name;
  return {};
}

const TemplateRule* find_rule(const std::string& name) {
  for (const auto& r : kTemplateRules) {
    const char last = r.name.back();
    if (last == '-' || last == '/' || last == ':' ? starts_with(name, r.name) : name == r.name) return &r;
  }
  if (in(kLanguageCodes, name)) return find_rule("en");
  return nullptr;
}

bool is_plain_number(std::string_view s) {
  bool digit = false;
  for (char c : s) {
    if (c >= '0' && c <= '9') digit = true;
    else if (c != ',' && c != '.' && c != '-' && c != '+') return false;
  }
  return digit;
}

int to_int(std::string_view s) {
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9' || v > 100000) return -1;
    v = v * 10 + (c - '0');
  }
  return s.empty() ? -1 : v;
}

std::string date_text(std::string_view y, std::string_view m, std::string_view d) {
  if (to_int(y) < 0) return "";
  std::string r = std::string(y) + "年";
  if (to_int(m) > 0) r += std::string(m) + "月";
  if (to_int(m) > 0 && to_int(d) > 0) r += std::string(d) + "日";
  return r;
}

// A position as jawiki shows it: "北緯35度41分22秒 東経139度41分30秒" from degrees, minutes and seconds before
// N/S and E/W ({{coord|35|41|22|N|139|41|30|E}}; trailing empty parts are left out, and the letters may be
// lower case), or "北緯35.68度 東経139.69度" from exactly two signed decimals; empty when the parameters are
// neither (a coordinate taken from Wikidata, "35|x|N", seconds without minutes).
std::string coordinates_text(const std::vector<std::string_view>& args) {
  auto number = [](std::string_view v) {  // digits with at most one inner '.'
    const size_t dot = v.find('.');
    return !v.empty() && v.find_first_not_of("0123456789.") == std::string_view::npos && dot != 0 &&
           dot + 1 != v.size() && (dot == std::string_view::npos || v.find('.', dot + 1) == std::string_view::npos);
  };
  auto letter = [](std::string_view v) { return v.size() == 1 ? char(v[0] & ~0x20) : '\0'; };  // upper case
  // One axis from args [from, to): its name, then each part with its unit; empty if a part is not a number.
  auto axis = [&](std::string_view name, size_t from, size_t to) -> std::string {
    static constexpr std::string_view kUnits[] = {"度", "分", "秒"};
    while (to > from && args[to - 1].empty()) --to;
    if (to == from || to - from > 3) return "";
    std::string r(name);
    for (size_t i = from; i < to; ++i) {
      if (!number(args[i])) return "";
      (r += args[i]) += kUnits[i - from];
    }
    return r;
  };
  auto find_letter = [&](size_t from, char a, char b) {
    for (size_t k = from; k < args.size(); ++k)
      if (letter(args[k]) == a || letter(args[k]) == b) return k;
    return args.size();
  };
  std::string latitude, longitude;
  if (const size_t ns = find_letter(0, 'N', 'S'); ns < args.size()) {
    const size_t ew = find_letter(ns + 1, 'E', 'W');
    if (ew == args.size()) return "";
    latitude = axis(letter(args[ns]) == 'N' ? "北緯" : "南緯", 0, ns);
    longitude = axis(letter(args[ew]) == 'E' ? "東経" : "西経", ns + 1, ew);
  } else if (args.size() >= 2 && !(args.size() > 2 && number(args[2]))) {
    auto signed_axis = [&](size_t k, std::string_view positive, std::string_view negative) -> std::string {
      const bool minus = starts_with(args[k], "-");
      const std::string_view v = minus ? args[k].substr(1) : args[k];
      return number(v) ? std::string(minus ? negative : positive) + std::string(v) + "度" : "";
    };
    latitude = signed_axis(0, "北緯", "南緯");
    longitude = signed_axis(1, "東経", "西経");
  }
  return latitude.empty() || longitude.empty() ? "" : latitude + " " + longitude;
}

// Whether a coordinate template's display= shows it in the text: by default, "inline" (alone or with "title"),
// and the short forms "i", "it", "ti"; "title" or "t" alone show it only beside the page's title.
bool coordinates_inline(std::string_view display) {
  const std::string d = lower(trim(display));
  return d.empty() || d.find("inline") != std::string::npos || d == "i" || d == "it" || d == "ti";
}

// Layout parameters that are not content: empty, or a count or width ("2", "30em", "7.5em", "25%").
bool is_layout_option(std::string_view v) {
  size_t k = 0;
  while (k < v.size() && ((v[k] >= '0' && v[k] <= '9') || v[k] == '.')) ++k;
  const std::string_view unit = v.substr(k);
  return v.empty() || (k > 0 && (unit.empty() || unit == "em" || unit == "px" || unit == "%" || unit == "ex"));
}

// Text of a template call: what its rule gives (see kTemplateRules), or nothing.
std::string template_text(std::string_view content, bool in_table, const WikitextOptions& options) {
  const auto parts = split_pipes(content);
  std::string name = lower(trim(parts[0]));
  for (size_t h; (h = name.find(kHole)) != std::string::npos;) name.erase(h, kHole.size());
  name = lower(trim(name));
  const std::string_view own_country = country_name(trim(parts[0]));  // {{JPN}}
  if (!own_country.empty()) name = "jpn";
  for (char& c : name) if (c == '_') c = ' ';
  if (starts_with(name, "formatnum:")) return std::string(trim(trim(parts[0]).substr(10)));
  const TemplateRule* rule = find_rule(name);
  if (!rule || rule->name == options.disabled_template) return "";
  const bool layout = rule->gives == Gives::kLayout || rule->gives == Gives::kLines;
  if (options.disabled_rules & (layout ? kWikitextLayoutTemplates : kWikitextContentTemplates)) return "";
  const Params params = parse_params(parts);
  auto arg = [&](size_t k) { return std::string(params.arg(k)); };
  auto join = [&](std::string_view separator) {
    std::string r;
    for (std::string_view a : params.positional) {
      if (a.empty()) continue;
      if (!r.empty()) r += separator;
      r += a;
    }
    return r;
  };
  switch (rule->gives) {
    case Gives::kFirst: return arg(0);
    case Gives::kSecond: return arg(1);
    case Gives::kLast:  // after the language (and the scheme): {{transl|ar|DIN|text}}, {{transl|ar|text}}
      return params.positional.size() < 2 ? "" : std::string(params.positional.back());
    case Gives::kCountry: {
      if (!own_country.empty()) return std::string(own_country);
      const std::string_view named = country_name(params.arg(0));  // {{flag|JPN}}
      return named.empty() ? arg(0) : std::string(named);
    }
    case Gives::kUnknown:
      return std::string(kUnknownValue);
    case Gives::kQuote: {
      for (std::string_view key : {"text", "quote", "引用文"})
        if (!params.get(key).empty()) return std::string(params.get(key));
      return arg(0);
    }
    case Gives::kMarked:
      return std::string(params.get("範囲"));
    case Gives::kMarkedRange:
      return params.get("範囲").empty() ? arg(0) : std::string(params.get("範囲"));
    case Gives::kLangName: return params.arg(1).empty() ? arg(2) : arg(1) + ": " + arg(2);
    case Gives::kLangNamed: {
      std::string_view language = params.get("表示言語名");
      if (language.empty()) language = params.get("言語記事名");
      return language.empty() || params.arg(1).empty() ? arg(1) : std::string(language) + ": " + arg(1);
    }
    case Gives::kReading:
    case Gives::kNihongo: return params.arg(1).empty() ? arg(0) : arg(0) + "（" + arg(1) + "）";
    case Gives::kConvert: {
      if (!is_plain_number(params.arg(0))) return "";
      static constexpr std::array<std::string_view, 8> kRange = {"-", "–", "to", "~", "～", "and", "x", "×"};
      if (in(kRange, params.arg(1)) && is_plain_number(params.arg(2)))
        return arg(0) + (params.arg(1) == "-" ? "–" : params.arg(1) == "to" ? " to " : arg(1)) + arg(2) + " " + arg(3);
      return arg(0) + " " + arg(1);
    }
    case Gives::kBirthDate: return date_text(params.arg(0), params.arg(1), params.arg(2));
    case Gives::kDeathDate: {
      std::string r = date_text(params.arg(3), params.arg(4), params.arg(5));
      const int by = to_int(params.arg(0)), bm = to_int(params.arg(1)), bd = to_int(params.arg(2));
      const int dy = to_int(params.arg(3)), dm = to_int(params.arg(4)), dd = to_int(params.arg(5));
      if (!r.empty() && by >= 0 && bm > 0 && bd > 0 && dy >= by && dm > 0 && dd > 0)
        r += "（" + std::to_string(dy - by - ((dm < bm || (dm == bm && dd < bd)) ? 1 : 0)) + "歳没）";
      return r;
    }
    case Gives::kIsbn: return params.arg(0).empty() ? "" : "ISBN " + arg(0);
    case Gives::kCoordinates: {
      return coordinates_inline(params.get("display")) ? coordinates_text(params.positional) : "";
    }
    case Gives::kPipe: return in_table ? "|" : "";
    case Gives::kSpace:
      return " ";
    case Gives::kLayout: {
      std::string r;
      for (std::string_view a : params.positional)
        if (!is_layout_option(a)) ((r += '\n') += a) += '\n';
      for (std::string_view key : {"content", "list"})
        if (!params.get(key).empty()) ((r += '\n') += params.get(key)) += '\n';
      return r;
    }
    case Gives::kLines: {
      std::string r;
      for (std::string_view a : params.positional)
        if (!a.empty()) ((r += '\n') += a) += '\n';
      return r;
    }
    case Gives::kCommaList: return join("、");
    case Gives::kDotList: return join("・");
  }
  return "";
}

// ---- tables

// Whether s holds more than blank space and hole marks.
bool has_text(std::string_view s) {
  bool holes = false;
  return skip_blanks(s, 0, &holes) < s.size();
}

// s with every occurrence of `from` replaced by `to`.
std::string replace_all(std::string&& s, std::string_view from, std::string_view to) {
  if (s.find(from) == std::string::npos) return std::move(s);
  std::string r;
  r.reserve(s.size());
  for (size_t i = 0, at; i < s.size(); i = at + from.size()) {
    at = std::min(s.find(from, i), s.size());
    r.append(s, i, at - i);
    if (at < s.size()) r.append(to);
  }
  return r;
}

// A cell "attrs | content" -> content; *spans set when the attributes hold rowspan or colspan.
std::string_view cell_content(std::string_view cell, bool* spans) {
  const size_t bar = cell.find('|');
  if (bar != std::string_view::npos) {
    const std::string attrs = lower(cell.substr(0, bar));
    if (attrs.find('=') != std::string::npos || trim(attrs).empty()) {
      if (attrs.find("rowspan") != std::string::npos || attrs.find("colspan") != std::string::npos) *spans = true;
      cell = cell.substr(bar + 1);
    }
  }
  return trim(cell);
}

// Splits "a || b || c" (and "a !! b" in header rows) into cells.
void split_cells(std::string_view line, bool header, std::vector<std::string_view>& cells) {
  size_t start = 0;
  for (size_t i = 0; i + 1 < line.size(); ++i) {
    if ((line[i] == '|' && line[i + 1] == '|') || (header && line[i] == '!' && line[i + 1] == '!')) {
      cells.push_back(line.substr(start, i - start));
      start = i + 2;
      ++i;
    }
  }
  cells.push_back(line.substr(start));
}

// The text of a closed table {|…|} (content without the brackets): a simple table gives its caption
// and one line per row, the non-empty cells joined with " | "; any other gives nothing. Simple: no
// rowspan/colspan, no cell that runs over several lines, at least 60% of the cells non-empty.
std::string table_text(std::string_view content) {
  std::string caption;
  std::vector<std::vector<std::string_view>> rows(1);
  bool simple = true;
  size_t cells = 0, filled = 0;
  size_t start = content.find('\n');  // the first line holds the table's attributes
  while (simple && start != std::string_view::npos && start < content.size()) {
    size_t end = content.find('\n', start + 1);
    if (end == std::string_view::npos) end = content.size();
    const std::string_view line = trim(content.substr(start, end - start));
    start = end;
    if (!has_text(line)) continue;  // blank, or only what a comment or a dropped tag left
    if (starts_with(line, "|+")) {
      bool spans = false;
      caption = std::string(cell_content(line.substr(2), &spans));
    } else if (starts_with(line, "|-")) {
      if (!rows.back().empty()) rows.emplace_back();
    } else if (line[0] == '|' || line[0] == '!') {
      std::vector<std::string_view> raw;
      split_cells(line.substr(1), line[0] == '!', raw);
      bool spans = false;
      for (std::string_view c : raw) {
        const std::string_view text = cell_content(c, &spans);
        ++cells;
        // A cell with a value only the wiki's data knows is empty: the row keeps its other cells.
        if (has_text(text) && text.find(kUnknownValue) == std::string_view::npos) ++filled, rows.back().push_back(text);
      }
      if (spans) simple = false;
    } else {
      simple = false;  // a cell's content on further lines: lists, paragraphs
    }
  }
  if (!simple || cells == 0 || filled * 10 < cells * 6) return "";
  std::string r = "\n";
  if (has_text(caption)) (r += replace_all(std::move(caption), kUnknownValue, kHole)) += '\n';
  for (const auto& row : rows) {
    for (size_t k = 0; k < row.size(); ++k) (r += k ? " | " : "") += row[k];
    if (!row.empty()) r += '\n';
  }
  return replace_all(std::move(r), kBlockBreak, " ");
}

// Removes a definition-term line (";title") that stands right before position `at` of out with nothing
// but blank space between: the title of a table that was dropped goes with it.
void drop_title_before(std::string& out, size_t at) {
  size_t k = at;
  while (k > 0) {
    if (out[k - 1] == '\n' || is_space(out[k - 1])) --k;
    else if (k >= kHole.size() && out.compare(k - kHole.size(), kHole.size(), kHole) == 0) k -= kHole.size();
    else break;
  }
  const size_t line_start = out.rfind('\n', k == 0 ? 0 : k - 1);
  const size_t from = line_start == std::string::npos ? 0 : line_start + 1;
  if (k > from && trim(std::string_view(out).substr(from, k - from)).substr(0, 1) == ";") out.erase(from, at - from);
}

bool is_language_prefix(std::string_view p) {
  if (p.size() < 2 || p.size() > 12) return false;
  size_t letters = 0;
  for (char c : p) {
    if (c >= 'a' && c <= 'z') ++letters;
    else if (c != '-') return false;
  }
  return p.front() != '-' && (p.size() <= 3 || p.find('-') != std::string_view::npos || p == "simple");
}

// Text of a closed [[…]] link.
std::string link_text(std::string_view content) {
  const size_t bar = content.find('|');
  std::string_view target = trim(content.substr(0, bar));
  const bool has_anchor = bar != std::string_view::npos;
  std::string_view anchor = has_anchor ? trim(content.substr(bar + 1)) : std::string_view();
  const bool leading_colon = !target.empty() && target[0] == ':';
  if (leading_colon) target = trim(target.substr(1));
  const size_t colon = target.find(':');
  if (colon != std::string_view::npos) {
    const std::string prefix = lower(trim(target.substr(0, colon)));
    static constexpr std::array<std::string_view, 10> kDropped = {
        "file", "image", "ファイル", "画像", "category", "カテゴリ", "media", "メディア", "imagen", "datei"};
    if (!leading_colon && in(kDropped, prefix)) return "";
    // Language prefixes are written in lower case; [[CSI:科学捜査班]] is an article, not a link to Cree.
    if (!leading_colon && is_language_prefix(trim(target.substr(0, colon))) && !has_anchor) return "";
    static constexpr std::array<std::string_view, 14> kInterwiki = {
        "wikt", "wiktionary", "w", "commons", "s", "wikisource", "b", "q", "n", "v", "voy", "d", "meta", "species"};
    if (!has_anchor && in(kInterwiki, prefix)) return std::string(trim(target.substr(colon + 1)));
  }
  if (has_anchor && !anchor.empty()) return std::string(anchor);
  return std::string(target);
}

bool at_line_start(std::string_view s, size_t i) {
  size_t k = i;
  while (k > 0 && (is_space(s[k - 1]) || s[k - 1] == ':')) --k;
  return k == 0 || s[k - 1] == '\n';
}

std::string strip_brackets(std::string_view s, const WikitextOptions& options) {
  std::string out;
  out.reserve(s.size());
  std::vector<OpenFrame> stack;
  auto has_open = [&](Frame kind) {
    for (const auto& f : stack) if (f.kind == kind) return true;
    return false;
  };
  // Closes the innermost frame of `kind`, discarding frames opened inside it that never closed
  // (their content stays), and returns the content of the closed frame.
  auto close = [&](Frame kind) {
    while (stack.back().kind != kind) stack.pop_back();
    const size_t start = stack.back().start;
    stack.pop_back();
    std::string content = out.substr(start);
    out.resize(start);
    return content;
  };
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const char c = s[i];
    const char d = i + 1 < n ? s[i + 1] : '\0';
    if (c == '{' && d == '{' && stack.size() < kMaxDepth) {
      stack.push_back({Frame::kTemplate, out.size()});
      i += 2;
    } else if (c == '{' && d == '|' && at_line_start(s, i) && stack.size() < kMaxDepth) {
      stack.push_back({Frame::kTable, out.size()});
      i += 2;
    } else if (c == '[' && d == '[' && stack.size() < kMaxDepth) {
      stack.push_back({Frame::kLink, out.size()});
      i += 2;
    } else if (c == '}' && d == '}' && has_open(Frame::kTemplate) && stack.back().kind != Frame::kTable) {
      const std::string content = close(Frame::kTemplate);
      const std::string text = template_text(content, has_open(Frame::kTable), options);
      out += text.empty() ? kHole : text;
      i += 2;
    } else if (c == '|' && d == '}' && at_line_start(s, i) && has_open(Frame::kTable) &&
               stack.back().kind != Frame::kTemplate) {
      const std::string content = close(Frame::kTable);
      // Nested tables are dropped; a table kept gives its rows, a dropped one takes its title along.
      const std::string rows = (options.disabled_rules & kWikitextTables) || has_open(Frame::kTable) ? "" : table_text(content);
      if (rows.empty()) drop_title_before(out, out.size());
      out += rows.empty() ? kHole : rows;
      i += 2;
    } else if (c == ']' && d == ']' && !stack.empty() && stack.back().kind == Frame::kLink) {
      const std::string text = link_text(close(Frame::kLink));
      out += text.empty() ? kHole : text;
      i += 2;
    } else {  // copy the run up to the next bracket or bar in one go
      size_t j = i + 1;
      while (j < n && s[j] != '{' && s[j] != '}' && s[j] != '[' && s[j] != ']' && s[j] != '|') ++j;
      out.append(s.data() + i, j - i);
      i = j;
    }
  }
  return out;  // frames still open: their opener is dropped, their content kept
}

// ---------------------------------------------------------------- pass 3: lines

constexpr std::array<std::string_view, 26> kTrailingSections = {
    "脚注", "注釈", "出典", "参考文献", "関連項目", "外部リンク", "参考", "関連書籍", "外部サイト", "注",
    "参照", "関連文献", "参考資料", "註釈", "脚注・出典", "出典・脚注", "注釈・出典", "脚注・参考文献", "参考文献・脚注",
    "see also", "references", "external links", "notes", "further reading", "bibliography", "sources"};

bool is_trailing_section(std::string_view heading) {
  const std::string h = lower(heading);
  if (in(kTrailingSections, h)) return true;
  for (std::string_view p : {"脚注", "出典", "参考文献", "外部リンク", "関連項目"})
    if (starts_with(h, p)) return true;
  return false;
}

// "== x ==" -> "x" and its level (2); returns false if the line is not a heading.
bool parse_heading(std::string_view line, std::string_view* text, size_t* level) {
  line = trim(line);
  size_t a = 0, b = 0;
  while (a < line.size() && line[a] == '=') ++a;
  while (b < line.size() - a && line[line.size() - 1 - b] == '=') ++b;
  if (a == 0 || b == 0 || a + b >= line.size()) return false;
  *text = trim(line.substr(a, line.size() - a - b));
  *level = std::min(a, b);
  return true;
}

// Removes '' and ''' (and longer runs) quotes, external-link brackets and magic words from one line.
std::string clean_inline(std::string_view line) {
  std::string out;
  out.reserve(line.size());
  size_t close = 0;  // the next ']' at or after i (npos: none), so that unclosed links stay linear
  size_t i = 0;
  while (i < line.size()) {
    const char c = line[i];
    if (c == '\'' && i + 1 < line.size() && line[i + 1] == '\'') {
      while (i < line.size() && line[i] == '\'') ++i;
      continue;
    }
    if (c == '[') {
      const std::string_view rest = line.substr(i + 1);
      if (starts_with(rest, "http://") || starts_with(rest, "https://") || starts_with(rest, "//") ||
          starts_with(rest, "ftp://") || starts_with(rest, "mailto:")) {
        if (close != std::string_view::npos && close <= i) close = line.find(']', i + 1);
        if (close != std::string_view::npos) {
          const std::string_view inner = line.substr(i + 1, close - i - 1);
          const size_t sp = inner.find(' ');
          if (sp != std::string_view::npos) out.append(trim(inner.substr(sp + 1)));
          else out.append(kHole);  // [http://x] renders as a number: nothing of it is text
          i = close + 1;
          continue;
        }
      }
    }
    if (c == '_' && i + 1 < line.size() && line[i + 1] == '_') {  // __TOC__, __NOTOC__, ...
      size_t k = i + 2;
      while (k < line.size() && k - i < 40 && ((line[k] >= 'A' && line[k] <= 'Z') || line[k] == '_')) ++k;
      if (k - i > 4 && line[k - 1] == '_' && line[k - 2] == '_' && k - i > 4) {
        out.append(kHole);
        i = k;
        continue;
      }
    }
    size_t j = i + 1;  // copy the run up to the next quote, bracket or underscore in one go
    while (j < line.size() && line[j] != '\'' && line[j] != '[' && line[j] != '_') ++j;
    out.append(line.data() + i, j - i);
    i = j;
  }
  return out;
}

// Removes what dropped markup left without content, where a hole mark shows markup was: brackets
// holding nothing else ("（ ）", "( )", "「」", "『』"), a comma next to a bracket ("（、x" -> "（x", "x、）" -> "x）")
// or to another comma, and blank space before 。、）) or at either end of the line. Then the marks go.
// With tidy false only the marks go.
std::string tidy_holes(std::string&& line, bool tidy) {
  if (line.find(kHole) == std::string::npos) return std::move(line);
  const std::string_view s = line;
  static constexpr std::string_view kOpen[] = {"（", "(", "「", "『"}, kClose[] = {"）", ")", "」", "』"},
                                    kComma[] = {"、", ","}, kStop[] = {"。", "、", "）", ")"};
  auto match = [&](const std::string_view* set, size_t n, size_t i) -> size_t {
    for (size_t k = 0; k < n; ++k)
      if (s.compare(i, set[k].size(), set[k]) == 0) return set[k].size();
    return 0;
  };
  std::string r;
  r.reserve(s.size());
  // Where one of the strings above (or a blank) may start: '(', ')', ',', ' ', '\t', U+3000-303F
  // (、。「」『』 and U+3000), U+FF08/U+FF09 (（）), U+E002 (the mark), U+00A0. Runs of other bytes are copied.
  auto may_start = [&](size_t i) {
    const unsigned char c = s[i], d = i + 1 < s.size() ? s[i + 1] : 0;
    return c == '(' || c == ')' || c == ',' || c == ' ' || c == '\t' || (c == 0xE3 && d == 0x80) ||
           (c == 0xEF && d == 0xBC) || (c == 0xEE && d == 0x80) || (c == 0xC2 && d == 0xA0);
  };
  size_t i = 0;
  while (i < s.size()) {
    bool holes = false;
    if (!may_start(i)) {
      size_t j = i + 1;
      while (j < s.size() && static_cast<unsigned char>(s[j]) >= 0x80 && s[j] != '\xE3' && s[j] != '\xEF' &&
             s[j] != '\xEE' && s[j] != '\xC2')
        ++j;  // the common case, Japanese text: skip lead and continuation bytes that start nothing
      while (j < s.size() && !may_start(j)) ++j;
      r.append(s, i, j - i);
      i = j;
      continue;
    }
    if (!tidy) {
      if (s.compare(i, kHole.size(), kHole) == 0) i += kHole.size();
      else r.push_back(s[i++]);
      continue;
    }
    if (const size_t open = match(kOpen, 4, i)) {
      const size_t j = skip_blanks(s, i + open, &holes);
      if (holes && match(kClose, 4, j)) {  // "（ ）", "「」": gone
        i = j + match(kClose, 4, j);
        continue;
      }
      if (holes && match(kComma, 2, j)) {  // "（、x": the comma goes
        r.append(s, i, open);
        i = skip_blanks(s, j + match(kComma, 2, j), &holes);
        continue;
      }
      r.append(s, i, open);
      i += open;
      continue;
    }
    if (const size_t comma = match(kComma, 2, i)) {
      const size_t j = skip_blanks(s, i + comma, &holes);
      if (holes && (match(kClose, 2, j) || match(kComma, 2, j) || j == s.size())) {  // "、）", "、、": one goes
        i = j;
        continue;
      }
      r.append(s, i, comma);
      i += comma;
      continue;
    }
    if (blank_at(s, i) || s.compare(i, kHole.size(), kHole) == 0) {
      const size_t j = skip_blanks(s, i, &holes);
      if (!holes) {
        r.append(s, i, j - i);
      } else if (j < s.size() && s.compare(j, 3, "。") == 0 && r.size() >= 3 && r.compare(r.size() - 3, 3, "。") == 0) {
        i = j + 3;  // "。<ref>…</ref>。": one full stop
        continue;
      } else if (i > 0 && j < s.size() && !match(kStop, 4, j)) {
        // Inside the line: the first blank of the run, if any ("は {{x}} から" -> "は から", "前{{x}}後" -> "前後").
        for (size_t k = i; k < j;) {
          if (const size_t n = blank_at(s, k)) {
            r.append(s, k, n);
            break;
          }
          k += kHole.size();
        }
      }  // before 。、）) or at either end of the line: nothing
      i = j;
      continue;
    }
    r.push_back(s[i++]);
  }
  return r;
}

// Length of the sentence stop (。！？!?) at s[i], or 0.
size_t stop_length(std::string_view s, size_t i) {
  for (std::string_view stop : {"。", "！", "？", "!", "?"})
    if (s.compare(i, stop.size(), stop) == 0) return stop.size();
  return 0;
}

// Takes out what holds an unknown value (kUnknownValue), leaving a hole mark for tidy_holes: what the
// brackets around it hold ("推計人口（約{{自治体人口/…}}万人）は" -> "推計人口（）は", then "推計人口は"); else, in a
// heading or a definition term (";title"), the value and its unit ("県北地方振興局管内 {{…}}人" ->
// "県北地方振興局管内"); else its sentence, from the end of the one before (or the line's start) to its own end (or the
// line's end: a list item or a line of its own).
std::string drop_unknown_values(std::string&& line) {
  static constexpr std::string_view kOpen[] = {"（", "("}, kClose[] = {"）", ")"};
  // Each value costs a pass over the line: a line of more than 64 of them is a table of the wiki's data,
  // not prose, and goes whole (so a crafted line of thousands is not quadratic).
  size_t values = 0;
  for (size_t at = line.find(kUnknownValue); at != std::string::npos && values <= 64;
       at = line.find(kUnknownValue, at + 1))
    ++values;
  if (values > 64) return std::string(kHole);
  const size_t first = line.find_first_not_of(" \t");
  const bool title = first != std::string::npos && (line[first] == '=' || line[first] == ';');
  for (size_t at; (at = line.find(kUnknownValue)) != std::string::npos;) {
    size_t open = std::string::npos, close = std::string::npos;  // the brackets right around it, if any
    for (size_t k = 0; k < 2 && open == std::string::npos; ++k) {
      const size_t o = at == 0 ? std::string::npos : line.rfind(kOpen[k], at - 1);
      const size_t c = line.find(kClose[k], at);
      if (o == std::string::npos || c == std::string::npos) continue;
      if (line.find(kClose[k], o) < at || line.rfind(kOpen[k], c) > at) continue;  // another pair in between
      open = o + kOpen[k].size(), close = c;
    }
    if (open != std::string::npos) {  // what the brackets hold goes; tidy_holes takes the empty brackets
      line.replace(open, close - open, kHole);
      continue;
    }
    if (title) {  // the value and what follows it up to a blank, a bracket or the heading's '=': its unit
      size_t end = at + kUnknownValue.size();
      while (end < line.size() && line[end] != ' ' && line[end] != '\t' && line[end] != '=' && line[end] != '(' &&
             line.compare(end, 3, "（") != 0 && line.compare(end, 3, "\xE3\x80\x80") != 0)
        ++end;
      line.replace(at, end - at, kHole);
      continue;
    }
    // A stop right before a closing quote ends the quotation, not the sentence: "「…人。」と述べた。"
    auto ends_sentence = [&](size_t i, size_t* after) {
      const size_t n = stop_length(line, i);
      *after = i + n;
      return n > 0 && line.compare(i + n, 3, "」") != 0 && line.compare(i + n, 3, "』") != 0;
    };
    size_t begin = 0, end = line.size(), after = 0;
    for (size_t i = 0; i < at; ++i)
      if (ends_sentence(i, &after) && after <= at) begin = after;
    for (size_t i = at; i < line.size(); ++i)
      if (ends_sentence(i, &after)) {
        end = after;
        break;
      }
    line.replace(begin, end - begin, kHole);
  }
  return std::move(line);
}

// ";term:definition" on one line is a term and its definition, as ";term" and ":definition" on two: the
// first colon outside brackets ([[CSI:科学捜査班]], [http://…], {{…}}) ends the term. Runs between passes
// 1 and 2, where tags and what they hold are already out of the way (a colon written &#58; is text).
std::string split_definition_terms(std::string&& text) {
  if (text.find(';') == std::string::npos) return std::move(text);
  std::string out;
  out.reserve(text.size() + 64);
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    size_t k = start;
    while (k < end && is_list_marker(text[k])) ++k;
    size_t colon = std::string::npos;
    if (k > start && text[k - 1] == ';') {
      int depth = 0;
      for (size_t i = k; i < end && colon == std::string::npos; ++i) {
        const char c = text[i];
        if (c == '[' || c == '{')
          ++depth;
        else if ((c == ']' || c == '}') && depth > 0)
          --depth;
        else if (c == ':' && depth == 0)
          colon = i;
      }
    }
    if (colon == std::string::npos)
      out.append(text, start, end - start);
    else
      out.append(text, start, colon - start).append("\n:").append(text, colon + 1, end - colon - 1);
    if (end < text.size()) out += '\n';
    start = end + 1;
  }
  return out;
}

// ---------------------------------------------------------------- pass 4: what was set aside

// TeX on one line: runs of blank space and newlines become one space.
std::string one_line(std::string_view s) {
  std::string r;
  bool space = false;
  for (char c : trim(s)) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      space = true;
      continue;
    }
    if (space) r.push_back(' ');
    space = false;
    r.push_back(c);
  }
  return r;
}

// Replaces each placeholder left in text by what pass 1 set aside: TeX inline, code as its lines,
// <nowiki> content as written (entities decoded). Placeholders whose markup was dropped are gone already.
std::string put_back(const std::string& text, const std::vector<SetAside>& aside, bool decode) {
  if (aside.empty()) return text;
  std::string r;
  r.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const size_t open = text.find(kAsideOpen, i);
    if (open == std::string::npos) break;
    r.append(text, i, open - i);
    size_t k = open + kAsideOpen.size(), index = 0;
    while (k < text.size() && k - open < 12 && text[k] >= '0' && text[k] <= '9') index = index * 10 + (text[k++] - '0');
    i = k;
    if (text.compare(k, kAsideClose.size(), kAsideClose) != 0 || index >= aside.size()) continue;
    i = k + kAsideClose.size();
    const SetAside& a = aside[index];
    if (a.kind == Aside::kTex) r += decode ? decode_html_entities(one_line(a.text)) : one_line(a.text);
    else if (a.kind == Aside::kCode) r += trim(a.text);
    else r += decode ? decode_html_entities(a.text) : std::string(a.text);
  }
  r.append(text, std::min(i, text.size()), std::string::npos);
  return r;
}

}  // namespace

std::string wikitext_to_text(std::string_view wikitext, const WikitextOptions& options) {
  // The placeholder characters (private use) cannot come from the page itself.
  std::string own;
  auto is_mark = [&](size_t i) {
    return wikitext.compare(i, 3, kAsideOpen) == 0 || wikitext.compare(i, 3, kAsideClose) == 0 ||
           wikitext.compare(i, 3, kHole) == 0 || wikitext.compare(i, 3, kUnknownValue) == 0 ||
           wikitext.compare(i, 3, kBlockBreak) == 0;
  };
  if (wikitext.find("\xEE\x80") != std::string_view::npos) {
    own.reserve(wikitext.size());
    for (size_t i = 0; i < wikitext.size();) {
      if (is_mark(i)) i += 3;
      else own.push_back(wikitext[i++]);
    }
    wikitext = own;
  }
  const uint32_t disabled = options.disabled_rules;
  const bool decode = !(disabled & kWikitextEntities);
  std::vector<SetAside> aside;
  const std::string no_tags = split_definition_terms(strip_tags(wikitext, disabled, aside));
  const std::string flat = replace_all(strip_brackets(no_tags, options), kBlockBreak, "\n");
  std::string out;
  out.reserve(flat.size());
  bool blank_pending = false;
  bool prose = false;     // the last line written is a paragraph's (not a heading or a list item)
  size_t skip_level = 0;  // inside a trailing section of this level (0: not)
  size_t start = 0;
  while (start <= flat.size()) {
    size_t end = flat.find('\n', start);
    if (end == std::string::npos) end = flat.size();
    // Quotes, external links and magic words out; then what dropped markup left empty.
    const std::string_view raw = std::string_view(flat).substr(start, end - start);
    const bool unknown_values = raw.find(kUnknownValue) != std::string_view::npos;
    const std::string cleaned =
        tidy_holes(drop_unknown_values(clean_inline(raw)), !(disabled & kWikitextEmptyBrackets));
    start = end + 1;
    std::string_view line = cleaned;
    std::string_view heading;
    size_t level = 0;
    std::string text;
    bool paragraph = false;
    if (parse_heading(line, &heading, &level)) {
      text = decode ? decode_html_entities(heading) : std::string(heading);
      // A trailing section runs to the next heading of its level or above that is not one itself.
      if (skip_level > 0 && level > skip_level) continue;
      skip_level = options.drop_trailing_sections && is_trailing_section(trim(text)) ? level : 0;
      if (skip_level > 0) continue;
    } else if (skip_level > 0) {
      continue;
    } else {
      line = trim(line);
      if (starts_with(line, "{|") || starts_with(line, "|") || starts_with(line, "!") || starts_with(line, "----"))
        continue;  // remnants of unclosed tables, horizontal rules
      paragraph = true;
      while (!line.empty() && is_list_marker(line[0])) line.remove_prefix(1), paragraph = false;
      line = trim(line);
      text = decode ? decode_html_entities(line) : std::string(line);
    }
    std::string_view t = trim(text);
    if (t.empty()) {
      blank_pending = blank_pending || (!out.empty() && !unknown_values);  // a dropped list item breaks no list
      continue;
    }
    if (blank_pending) {
      out += '\n';
    } else if (prose && paragraph && (starts_with(t, "。") || starts_with(t, "、"))) {  // "…とした\n<ref/>。"
      out.pop_back();
      if (starts_with(t, "。") && out.size() >= 3 && out.compare(out.size() - 3, 3, "。") == 0) t.remove_prefix(3);
    }
    blank_pending = false;
    prose = paragraph;
    out.append(t);
    out += '\n';
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return put_back(out, aside, decode);
}

std::vector<std::pair<std::string, std::string>> wikitext_template_rules() {
  std::vector<std::pair<std::string, std::string>> r;
  for (const auto& rule : kTemplateRules) r.emplace_back(rule.name, rule.doc);
  return r;
}

bool is_redirect_wikitext(std::string_view wikitext) {
  size_t i = 0;
  while (i < wikitext.size() && (is_space(wikitext[i]) || wikitext[i] == '\n')) ++i;
  const std::string head = lower(wikitext.substr(i, 16));
  return starts_with(head, "#redirect") || starts_with(head, "#転送");
}

bool is_disambiguation_wikitext(std::string_view wikitext) {
  static constexpr std::array<std::string_view, 8> kNames = {"aimai", "曖昧さ回避", "人名の曖昧さ回避", "地名の曖昧さ回避",
                                                             "disambig", "dab", "disambiguation", "山の曖昧さ回避"};
  size_t p = 0;
  while ((p = wikitext.find("{{", p)) != std::string_view::npos) {
    p += 2;
    const size_t end = wikitext.find_first_of("|}\n{", p);
    if (end == std::string_view::npos || end - p > 60) continue;
    const std::string name = lower(trim(wikitext.substr(p, end - p)));
    if (in(kNames, name)) return true;
  }
  return false;
}

}  // namespace ctrl
