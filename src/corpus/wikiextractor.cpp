#include "corpus/wikiextractor.h"

#include <nlohmann/json.hpp>

namespace ctrl {
namespace {

// Text as WikiExtractor leaves it: entities decoded, surrounding blank lines removed.
std::string clean_text(std::string_view text) {
  uint64_t invalid = 0;
  std::string s = decode_html_entities(sanitize_utf8(text, &invalid));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  size_t lead = 0;
  while (lead < s.size() && (s[lead] == '\n' || s[lead] == ' ')) ++lead;
  return s.substr(lead);
}

// The value of attribute `name` in a <doc …> line, entities decoded; empty if absent.
std::string attribute(std::string_view tag, std::string_view name) {
  std::string key(" ");
  key.append(name);
  key.append("=\"");
  const size_t p = tag.find(key);
  if (p == std::string_view::npos) return "";
  const size_t start = p + key.size();
  const size_t end = tag.find('"', start);
  if (end == std::string_view::npos) return "";
  return decode_html_entities(tag.substr(start, end - start));
}

}  // namespace

void read_wikiextractor_json(ByteStream& stream, const std::string& file, ReadContext& context) {
  LineReader lines(stream, file, context.warnings);
  std::string line;
  while (lines.next(line)) {
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    auto text = j.is_object() ? j.find("text") : j.end();
    if (j.is_discarded() || !j.is_object() || text == j.end() || !text->is_string()) {
      context.warnings.warn(file, lines.line_offset(), "expected a WikiExtractor JSON object with a \"text\" field; skipped");
      context.stats.drop("bad_json");
      continue;
    }
    Document d;
    d.text = clean_text(text->get_ref<const std::string&>());
    auto title = j.find("title");
    if (title != j.end() && title->is_string()) d.title = clean_text(title->get_ref<const std::string&>());
    d.origin = file + "#" + d.title;
    if (d.text.empty()) {
      context.stats.drop("empty");
      continue;
    }
    context.emit(std::move(d));
  }
  context.stats.bytes_in += stream.raw_offset();
}

void read_wikiextractor_doc(ByteStream& stream, const std::string& file, ReadContext& context) {
  LineReader lines(stream, file, context.warnings);
  std::string line, body, title;
  bool in_doc = false, first_line = false;
  uint64_t doc_offset = 0;
  auto flush = [&] {
    Document d;
    d.title = title;
    d.text = clean_text(body);
    d.origin = file + "#" + title;
    if (d.text.empty()) context.stats.drop("empty");
    else context.emit(std::move(d));
    body.clear();
  };
  while (lines.next(line)) {
    if (line.rfind("<doc ", 0) == 0 || line == "<doc>") {
      if (in_doc) {
        context.warnings.warn(file, lines.line_offset(), "<doc> before the previous </doc>; closing it here");
        flush();
      }
      in_doc = true;
      first_line = true;
      doc_offset = lines.line_offset();
      title = attribute(line, "title");
      continue;
    }
    if (line == "</doc>") {
      if (!in_doc) {
        context.warnings.warn(file, lines.line_offset(), "</doc> without <doc>; ignored");
        continue;
      }
      flush();
      in_doc = false;
      continue;
    }
    if (!in_doc) {
      if (line.find_first_not_of(" \t") != std::string::npos) {
        context.warnings.warn(file, lines.line_offset(), "text outside <doc>…</doc>; skipped");
        context.stats.drop("outside_doc");
      }
      continue;
    }
    if (first_line) {  // WikiExtractor repeats the title as the first line
      first_line = false;
      if (line == title) continue;
    }
    body += line;
    body += '\n';
  }
  if (in_doc) {
    context.warnings.warn(file, doc_offset, "<doc> not closed before the end of the file; its text is kept");
    flush();
  }
  context.stats.bytes_in += stream.raw_offset();
}

}  // namespace ctrl
