// What each wikitext rule recovers: converts every article of a pages file with all rules on, then
// with one rule (or one template of the rule table) switched off at a time, and prints, per rule, how
// many non-space characters, lines and articles the rule adds. Usage:
//   wikitext_rules <pages.jsonl> [--dump out.jsonl]
// pages.jsonl: one {"title", "ns", "redirect", "text"} object per page (bench/wikitext_fidelity.py
// writes it from the XML); pages outside namespace 0, redirects and disambiguation pages are skipped,
// as the Wikipedia reader does. --dump writes {"title", "text"} with all rules on.
// Non-space characters: code points other than ASCII blank space and U+3000 (bench/wikitext_fidelity.py
// counts with Python's str.isspace, which also skips U+00A0 and other Unicode spaces: a few hundred fewer).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "corpus/wikitext.h"

namespace {

struct Page {
  std::string title, text;
};

size_t non_space_chars(const std::string& s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = s[i];
    if ((c & 0xC0) == 0x80 || c == ' ' || c == '\n' || c == '\t' || c == '\r') continue;
    if (s.compare(i, 3, "\xE3\x80\x80") == 0) continue;  // U+3000
    ++n;
  }
  return n;
}

struct Totals {
  size_t chars = 0, lines = 0;
  std::vector<size_t> per_page;
};

Totals convert_all(const std::vector<Page>& pages, const ctrl::WikitextOptions& options) {
  Totals t;
  for (const Page& p : pages) {
    const std::string text = ctrl::wikitext_to_text(p.text, options);
    const size_t n = non_space_chars(text);
    t.chars += n;
    t.per_page.push_back(n);
    if (!text.empty()) {
      ++t.lines;
      for (char c : text) t.lines += c == '\n';
    }
  }
  return t;
}

void report(const char* name, const Totals& all, const Totals& without) {
  size_t articles = 0;
  for (size_t k = 0; k < all.per_page.size(); ++k) articles += all.per_page[k] != without.per_page[k];
  std::printf("| %s | %+lld | %+lld | %zu |\n", name, static_cast<long long>(all.chars) - static_cast<long long>(without.chars),
              static_cast<long long>(all.lines) - static_cast<long long>(without.lines), articles);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <pages.jsonl> [--dump out.jsonl]\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    std::fprintf(stderr, "wikitext_rules: cannot read %s\n", argv[1]);
    return 1;
  }
  std::vector<Page> pages;
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("text") || !j["text"].is_string()) {
      std::fprintf(stderr, "wikitext_rules: %s:%zu: expected a JSON object with a string \"text\"\n", argv[1], line_no);
      return 1;
    }
    const std::string text = j["text"];
    if (j.value("ns", "0") != "0" || j.value("redirect", false) || ctrl::is_redirect_wikitext(text) ||
        ctrl::is_disambiguation_wikitext(text))
      continue;
    pages.push_back({j.value("title", ""), text});
  }
  const ctrl::WikitextOptions all_rules;
  const auto start = std::chrono::steady_clock::now();
  const Totals all = convert_all(pages, all_rules);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%zu articles, %zu non-space characters, %zu lines with every rule (%.2f s)\n\n", pages.size(), all.chars,
              all.lines, seconds);
  std::printf("| rule switched off | characters it recovers | lines | articles changed |\n| --- | ---: | ---: | ---: |\n");
  const std::pair<const char*, uint32_t> rules[] = {
      {"entities (HTML5 table)", ctrl::kWikitextEntities},     {"layout templates", ctrl::kWikitextLayoutTemplates},
      {"content templates (all)", ctrl::kWikitextContentTemplates}, {"<math>/<chem> TeX inline", ctrl::kWikitextMath},
      {"<syntaxhighlight>/<source>/<pre> code", ctrl::kWikitextCode}, {"simple tables as rows", ctrl::kWikitextTables},
      {"empty brackets removed", ctrl::kWikitextEmptyBrackets}};
  for (const auto& [name, bit] : rules) {
    ctrl::WikitextOptions options;
    options.disabled_rules = bit;
    report(name, all, convert_all(pages, options));
  }
  std::printf("\n| template | what it gives | characters it recovers | lines | articles changed |\n"
              "| --- | --- | ---: | ---: | ---: |\n");
  for (const auto& [name, gives] : ctrl::wikitext_template_rules()) {
    ctrl::WikitextOptions options;
    options.disabled_template = name;
    const Totals without = convert_all(pages, options);
    size_t articles = 0;
    for (size_t k = 0; k < all.per_page.size(); ++k) articles += all.per_page[k] != without.per_page[k];
    std::printf("| {{%s}} | %s | %+lld | %+lld | %zu |\n", name.c_str(), gives.c_str(),
                static_cast<long long>(all.chars) - static_cast<long long>(without.chars),
                static_cast<long long>(all.lines) - static_cast<long long>(without.lines), articles);
  }
  for (int i = 2; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--dump") != 0) continue;
    const std::string path = argv[i + 1], temp = path + ".tmp";
    std::ofstream out(temp);
    for (const Page& p : pages)
      out << nlohmann::json{{"title", p.title}, {"text", ctrl::wikitext_to_text(p.text, all_rules)}}.dump() << '\n';
    out.close();
    if (!out || std::rename(temp.c_str(), path.c_str()) != 0) {
      std::fprintf(stderr, "wikitext_rules: cannot write %s\n", path.c_str());
      return 1;
    }
  }
  return 0;
}
