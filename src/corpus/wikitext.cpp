// Wikitext to plain text in four linear passes:
//   1. comments and tags (<ref>, <math>, … dropped with content; inline tags unwrapped),
//   2. brackets: templates {{…}}, tables {|…|} and links [[…]] matched with one stack,
//   3. lines: headings, list markers, table remnants, quotes, external links, magic words,
//   4. entities and blank-line collapsing.
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
constexpr std::array<std::string_view, 26> kDropContentTags = {
    "ref",     "math",        "gallery",   "syntaxhighlight", "source",  "timeline", "score",
    "graph",   "mapframe",    "maplink",   "templatedata",    "imagemap", "chem",    "ce",
    "hiero",   "references",  "inputbox",  "categorytree",    "includeonly", "table", "rt",
    "rp",      "templatestyles", "indicator", "charinsert", "style"};
// Tags that are removed while their content is kept.
constexpr std::array<std::string_view, 48> kUnwrapTags = {
    "b",    "i",     "u",     "s",      "strike", "del",  "ins",  "span",    "div",     "small",
    "big",  "sub",   "sup",   "font",   "center", "code", "tt",   "var",     "kbd",     "em",
    "strong", "cite", "blockquote", "p", "abbr", "poem", "nowiki", "pre",   "q",       "ruby",
    "rb",   "mark",  "dfn",   "bdi",    "bdo",    "onlyinclude", "noinclude", "section", "li", "ul",
    "ol",   "dl",    "dt",    "dd",     "time",   "data", "wbr",  "hr"};

template <size_t N>
bool in(const std::array<std::string_view, N>& set, std::string_view s) {
  return std::find(set.begin(), set.end(), s) != set.end();
}

std::string strip_tags(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  // For each drop-content tag name: position from which no closing tag exists (search memo, keeps it linear).
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
      continue;
    }
    size_t p = lt + 1;
    const bool closing = p < s.size() && s[p] == '/';
    if (closing) ++p;
    const size_t name_start = p;
    while (p < s.size() && p - name_start < 20 && (std::isalnum(static_cast<unsigned char>(s[p])))) ++p;
    const std::string name = lower(s.substr(name_start, p - name_start));
    const bool known = !name.empty() && (in(kDropContentTags, name) || in(kUnwrapTags, name) || name == "br" ||
                                         (name.size() == 2 && name[0] == 'h' && name[1] >= '1' && name[1] <= '6'));
    // The tag must end with '>' soon, without another '<' in between.
    size_t gt = std::string_view::npos;
    if (known && p < s.size() && (s[p] == '>' || s[p] == '/' || is_space(s[p]) || s[p] == '\n')) {
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
    if (name == "br") {
      out.push_back('\n');
      continue;
    }
    if (closing || self_closing || !in(kDropContentTags, name)) continue;  // unwrap: drop just the tag
    // Drop the content up to the matching close tag (not nested: MediaWiki does not nest these either).
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

// Positional (unnamed) parameters of a template call, trimmed.
std::vector<std::string_view> positional(const std::vector<std::string_view>& parts) {
  std::vector<std::string_view> r;
  for (size_t k = 1; k < parts.size(); ++k) {
    const std::string_view p = trim(parts[k]);
    const size_t eq = p.find('=');
    if (eq != std::string_view::npos && p.find_first_of("<[{") > eq) continue;  // name=value
    r.push_back(p);
  }
  return r;
}

// Text of a template call whose rendering is prose (仮リンク, lang, …); empty for all others.
std::string template_text(std::string_view content) {
  const auto parts = split_pipes(content);
  std::string name(trim(parts[0]));
  if (!name.empty()) name[0] = ascii_lower(name[0]);
  if (starts_with(name, "formatnum:")) return std::string(trim(std::string_view(name).substr(10)));
  const auto args = positional(parts);
  auto arg = [&](size_t k) { return k < args.size() ? std::string(args[k]) : std::string(); };
  static constexpr std::array<std::string_view, 13> kFirst = {
      "仮リンク", "visible anchor", "small", "nowrap", "要出典範囲", "large", "big",
      "inline-block", "補助漢字フォント", "jis2004フォント", "ruby", "nobr", "unicode"};
  if (in(kFirst, name)) return arg(0);
  if (name == "lang") return arg(1);
  if (starts_with(name, "lang-")) return arg(0);
  if (name == "読み仮名" || name == "読み仮名_ruby不使用") {
    return args.size() >= 2 && !args[1].empty() ? arg(0) + "（" + arg(1) + "）" : arg(0);
  }
  return "";
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
    if (!leading_colon && is_language_prefix(prefix) && !has_anchor) return "";
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

std::string strip_brackets(std::string_view s) {
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
      out += template_text(close(Frame::kTemplate));
      i += 2;
    } else if (c == '|' && d == '}' && at_line_start(s, i) && has_open(Frame::kTable) &&
               stack.back().kind != Frame::kTemplate) {
      close(Frame::kTable);
      i += 2;
    } else if (c == ']' && d == ']' && !stack.empty() && stack.back().kind == Frame::kLink) {
      out += link_text(close(Frame::kLink));
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

// "== x ==" -> "x"; returns false if the line is not a heading.
bool parse_heading(std::string_view line, std::string_view* text) {
  line = trim(line);
  size_t a = 0, b = 0;
  while (a < line.size() && line[a] == '=') ++a;
  while (b < line.size() - a && line[line.size() - 1 - b] == '=') ++b;
  if (a == 0 || b == 0 || a + b >= line.size()) return false;
  *text = trim(line.substr(a, line.size() - a - b));
  return true;
}

// Removes '' and ''' (and longer runs) quotes, external-link brackets and magic words from one line.
std::string clean_inline(std::string_view line) {
  std::string out;
  out.reserve(line.size());
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
        const size_t close = line.find(']', i + 1);
        if (close != std::string_view::npos) {
          const std::string_view inner = line.substr(i + 1, close - i - 1);
          const size_t sp = inner.find(' ');
          if (sp != std::string_view::npos) out.append(trim(inner.substr(sp + 1)));
          i = close + 1;
          continue;
        }
      }
    }
    if (c == '_' && i + 1 < line.size() && line[i + 1] == '_') {  // __TOC__, __NOTOC__, ...
      size_t k = i + 2;
      while (k < line.size() && k - i < 40 && ((line[k] >= 'A' && line[k] <= 'Z') || line[k] == '_')) ++k;
      if (k - i > 4 && line[k - 1] == '_' && line[k - 2] == '_' && k - i > 4) {
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

// Empty brackets left by removed templates: "（）", "()", "（、" -> "（".
void tidy_brackets(std::string& s) {
  for (const auto& [from, to] : std::array<std::pair<std::string_view, std::string_view>, 4>{
           {{"（）", ""}, {"()", ""}, {"（、", "（"}, {"、）", "）"}}}) {
    size_t p = 0;
    std::string r;
    bool changed = false;
    while (true) {
      const size_t f = s.find(from, p);
      if (f == std::string::npos) break;
      r.append(s, p, f - p);
      r.append(to);
      p = f + from.size();
      changed = true;
    }
    if (changed) {
      r.append(s, p, std::string::npos);
      s = std::move(r);
    }
  }
}

}  // namespace

std::string wikitext_to_text(std::string_view wikitext, const WikitextOptions& options) {
  const std::string no_tags = strip_tags(wikitext);
  const std::string flat = strip_brackets(no_tags);
  std::string out;
  out.reserve(flat.size());
  bool blank_pending = false;
  size_t start = 0;
  while (start <= flat.size()) {
    size_t end = flat.find('\n', start);
    if (end == std::string::npos) end = flat.size();
    std::string_view line = flat;
    line = line.substr(start, end - start);
    start = end + 1;
    std::string_view heading;
    std::string text;
    if (parse_heading(line, &heading)) {
      const std::string h = decode_html_entities(clean_inline(heading));
      if (options.drop_trailing_sections && is_trailing_section(trim(h))) break;
      text = h;
    } else {
      line = trim(line);
      if (starts_with(line, "{|") || starts_with(line, "|") || starts_with(line, "!") || starts_with(line, "----"))
        continue;  // remnants of unclosed tables, horizontal rules
      while (!line.empty() && (line[0] == '*' || line[0] == '#' || line[0] == ':' || line[0] == ';'))
        line.remove_prefix(1);
      text = decode_html_entities(clean_inline(trim(line)));
      tidy_brackets(text);
    }
    const std::string_view t = trim(text);
    if (t.empty()) {
      blank_pending = !out.empty();
      continue;
    }
    if (blank_pending) out += '\n';
    blank_pending = false;
    out.append(t);
    out += '\n';
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
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
