// MediaWiki markup to plain text, in one linear pass per construct so that
// unclosed brackets or templates can neither hang nor go quadratic.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ctrl {

// The rules that recover text beyond plain markup removal. Each can be switched off alone, so that
// bench/wikitext_rules can measure what it recovers (docs/corpus-fidelity.md).
enum WikitextRule : uint32_t {
  kWikitextEntities = 1u << 0,          // HTML5 named, decimal and hex character references decoded
  kWikitextLayoutTemplates = 1u << 1,   // {{col-list}}, {{Columns-list}}, {{Plainlist}}, … give their content
  kWikitextContentTemplates = 1u << 2,  // {{lang}}, {{IPA}}, {{quotation}}, … give their text
  kWikitextMath = 1u << 3,              // <math>, <chem>, <ce>: the TeX source kept inline
  kWikitextCode = 1u << 4,              // <syntaxhighlight>, <source>, <pre>: the code kept as lines
  kWikitextTables = 1u << 5,            // simple tables kept as lines of cells
  kWikitextEmptyBrackets = 1u << 6,     // brackets left empty by dropped markup ("（ ）", "(、") removed
};

struct WikitextOptions {
  // Drop the trailing sections (脚注, 参考文献, 関連項目, 外部リンク, 出典, 注釈, 参考, 関連書籍, 外部サイト,
  // See also, References, ...) with their subsections; a section of prose after them is kept.
  bool drop_trailing_sections = true;
  // WikitextRule bits switched off (for measuring; 0 in normal use).
  uint32_t disabled_rules = 0;
  // One content template (a name from wikitext_content_templates()) switched off, for measuring.
  std::string disabled_template;
};

// Plain text of an article:
// - comments, <ref> and non-text tags (<gallery>, <score>, <timeline>, …) removed with their content;
//   inline tags (<b>, <span>, …) unwrapped; <math>/<chem>/<ce> keep their TeX source inline (whitespace
//   collapsed), so that a sentence never has a hole where a formula was; <syntaxhighlight>, <source>
//   and <pre> keep their code as lines; <nowiki> content is kept literally;
// - templates {{…}} removed, except layout templates, which give back their content (lists and
//   headings inside {{col-list}}, {{Plainlist}} …), and the content templates of
//   wikitext_content_templates(), which give their text;
// - simple tables (no rowspan/colspan, no nested table, no multi-line cell, mostly filled) kept as one
//   line per row, "caption" then "cell | cell | …"; other tables dropped together with their caption;
// - [[link|anchor]] -> anchor, [[link]] -> link; file, category and interlanguage links removed;
//   [http://x label] -> label; bold/italic quotes removed; headings kept as their own line
//   ("== 歴史 ==" -> "歴史"); list markers (* # : ;) removed; magic words (__TOC__ …) removed;
// - every HTML5 character reference decoded once, after markup removal; brackets that removed markup
//   left empty ("（ ）", "( )", "（、") removed; blank lines collapse.
std::string wikitext_to_text(std::string_view wikitext, const WikitextOptions& options = {});

// The content and layout templates and what each gives, as (name, what it gives), in table order;
// the names are those WikitextOptions::disabled_template takes. Names match case-insensitively, with
// '_' as ' '; a name ending in '-', '/' or ':' matches every name with that prefix (lang-, IPA-,
// 自治体人口/, #expr:). The country-code templates ({{JPN}} …) are one rule, "jpn".
std::vector<std::pair<std::string, std::string>> wikitext_template_rules();

// "#REDIRECT [[…]]" / "#転送 [[…]]" (any case, leading spaces allowed).
bool is_redirect_wikitext(std::string_view wikitext);

// The page carries a disambiguation template: {{Aimai}}, {{曖昧さ回避}}, {{人名の曖昧さ回避}},
// {{地名の曖昧さ回避}}, {{Disambig}}, {{Dab}} (any parameters). {{要曖昧さ回避}} does not count.
bool is_disambiguation_wikitext(std::string_view wikitext);

}  // namespace ctrl
