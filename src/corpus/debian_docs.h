// The built-in default corpus: Japanese documentation shipped by Debian.
//
// `ctrl prepare` without --source fetches these packages with
// `apt-get download` (no root needed) into a cache directory, unpacks them
// with `dpkg-deb -x` and turns them into documents, one control code per
// kind of document:
//   Manual     manpages-ja, manpages-ja-dev: roff man pages rendered by groff
//              (-Tutf8, unadjusted, unhyphenated, very long lines so a
//              paragraph stays one line), header and footer lines removed
//   Reference  debian-reference-ja (HTML, one document per chapter file)
//   Guide      maint-guide-ja, developers-reference-ja, aptitude-doc-ja (HTML)
//   FAQ        debian-faq-ja (HTML)
// HTML is rendered to text with libxml2's HTML parser (block elements end
// lines, script/style/navigation are skipped). Pages that are mostly not
// Japanese (under 10% kana/kanji among letters) are dropped as "not Japanese".
#pragma once
#include <string>
#include <vector>

#include "corpus/document.h"
#include "corpus/prepare.h"

namespace ctrl {

struct DebianPackage {
  std::string name;          // Debian package name
  std::string control_code;  // code of its documents
  bool man_pages;            // roff man pages (else HTML)
};

// The packages of the default corpus, in the order they are read.
const std::vector<DebianPackage>& debian_ja_packages();

// ~/.cache/ctrl/debian-ja (or $XDG_CACHE_HOME/ctrl/debian-ja).
std::string default_debian_cache_dir();

// Makes sure every package's .deb is in cache_dir (apt-get download when
// missing) and unpacked under cache_dir/root/<package>; one-line error when
// apt-get or dpkg-deb fails. Returns one input per package.
std::vector<PrepareInput> debian_docs_inputs(const std::string& cache_dir, int threads);

// Text of one man page file (roff, plain or .gz) via groff; empty when the
// page is only a `.so` alias. Throws ctrl::Error if groff fails on it.
std::string render_man_page(const std::string& path, const std::string& origin);

// Text of an HTML document via libxml2: paragraphs, headings, list items,
// table rows and <pre> lines each end a line; <script>, <style>, <head> and
// navigation elements are skipped.
std::string render_html(const std::string& html, const std::string& origin);

// Share of kana and kanji among the letters of text (0 when it has none).
double japanese_share(const std::string& text);

}  // namespace ctrl
