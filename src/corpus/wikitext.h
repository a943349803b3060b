// MediaWiki markup to plain text, in one linear pass per construct so that
// unclosed brackets or templates can neither hang nor go quadratic.
#pragma once
#include <string>
#include <string_view>

namespace ctrl {

struct WikitextOptions {
  // Cut everything from the first trailing section heading (脚注, 参考文献, 関連項目, 外部リンク, 出典, 注釈,
  // 参考, 関連書籍, 外部サイト, See also, References, ...) to the end.
  bool drop_trailing_sections = true;
};

// Plain text of an article: templates {{…}}, tables {|…|}, comments, <ref> and non-text tags
// (<math>, <gallery>, …) removed; inline tags (<b>, <span>, …) unwrapped; [[link|anchor]] -> anchor,
// [[link]] -> link; file, category and interlanguage links removed; [http://x label] -> label;
// '''bold'''/''italic'' quotes removed; headings kept as their own line of text ("== 歴史 ==" -> "歴史");
// list markers (* # : ;) removed; entities decoded; magic words (__TOC__ …) removed. Blank lines collapse.
std::string wikitext_to_text(std::string_view wikitext, const WikitextOptions& options = {});

// "#REDIRECT [[…]]" / "#転送 [[…]]" (any case, leading spaces allowed).
bool is_redirect_wikitext(std::string_view wikitext);

// The page carries a disambiguation template: {{Aimai}}, {{曖昧さ回避}}, {{人名の曖昧さ回避}},
// {{地名の曖昧さ回避}}, {{Disambig}}, {{Dab}} (any parameters). {{要曖昧さ回避}} does not count.
bool is_disambiguation_wikitext(std::string_view wikitext);

}  // namespace ctrl
