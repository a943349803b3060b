#include "corpus/text.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "corpus/aozora.h"
#include "corpus/binary.h"

namespace ctrl {
namespace {

// CRLF and lone CR -> LF; trailing blank space removed.
std::string normalize_newlines(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out.push_back(s[i]);
    }
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ' || out.back() == '\t')) out.pop_back();
  size_t lead = 0;
  while (lead < out.size() && (out[lead] == '\n' || out[lead] == ' ' || out[lead] == '\t')) ++lead;
  out.erase(0, lead);
  return out;
}

// Where to end a piece of text[start, end) of at most `limit` bytes: after its last blank line,
// else after its last line end, else at its last character boundary.
size_t split_point(const std::string& text, size_t start, size_t limit) {
  const size_t end = start + limit;
  if (end >= text.size()) return text.size();
  const std::string_view piece = std::string_view(text).substr(start, limit);  // searched only here: linear
  const size_t blank = piece.rfind("\n\n");
  if (blank != std::string_view::npos && blank > 0) return start + blank + 2;
  const size_t line = piece.rfind('\n');
  if (line != std::string_view::npos && line > 0) return start + line + 1;
  size_t cut = end;
  while (cut > start + 1 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return cut;
}

}  // namespace

void read_plain_text(std::string_view bytes, const std::string& file, ReadContext& context) {
  context.stats.bytes_in += bytes.size();
  uint64_t invalid = 0, first = 0;
  TextEncoding encoding = TextEncoding::kUtf8;
  const std::string text = decode_japanese_bytes(bytes, &invalid, &first, &encoding);  // UTF-8, EUC-JP or Shift_JIS
  // A binary file is skipped with its own warning when it is cleaned: no second one for its bytes here.
  if (invalid > 0 && binary_reason(text).empty())
    context.warnings.warn(file, first, undecodable_bytes_text(invalid, encoding));
  std::string whole = normalize_newlines(text);
  if (whole.empty()) {
    context.stats.drop("empty");
    return;
  }
  const size_t limit = std::max<size_t>(context.options.max_document_bytes, 16);
  if (whole.size() <= limit) {
    Document d;
    d.text = std::move(whole);
    d.origin = file;
    context.emit(std::move(d));
    return;
  }
  size_t pieces = 0;
  for (size_t start = 0; start < whole.size();) {
    const size_t end = split_point(whole, start, limit);
    Document d;
    d.text = normalize_newlines(std::string_view(whole).substr(start, end - start));
    d.origin = file + ":" + std::to_string(start);
    start = end;
    if (d.text.empty()) continue;
    context.emit(std::move(d));
    ++pieces;
  }
  context.warnings.warn(file, 0,
                        std::to_string(whole.size()) + " bytes of text, more than one document holds (" +
                            std::to_string(limit) + "): read as " + std::to_string(pieces) +
                            " documents, split at blank lines where it has them");
}

void read_json_lines(ByteStream& stream, const std::string& file, ReadContext& context) {
  LineReader lines(stream, file, context.warnings);
  std::string line;
  while (lines.next(line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    // Invalid UTF-8 is its own problem, not a JSON one: the bad bytes are dropped (and warned about at
    // their offset), the rest of the line is read as usual.
    uint64_t invalid_bytes = 0, first_invalid = 0;
    std::string valid = sanitize_utf8(line, &invalid_bytes, &first_invalid);
    if (invalid_bytes > 0) {
      context.warnings.warn(file, lines.line_offset() + first_invalid,
                            std::to_string(invalid_bytes) + " invalid UTF-8 byte(s) dropped from line " +
                                std::to_string(lines.line_number()) + " (expected UTF-8 JSON)");
      line = std::move(valid);
    }
    nlohmann::json j;
    std::string why;  // the parser's reason, from "column N: ..." (a lone surrogate \ud83d, a cut line, ...)
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      why = e.what();
      why = why.substr(std::min(why.find("column"), why.size())).substr(0, 160);
    }
    if (!why.empty() || !j.is_object()) {
      context.warnings.warn(file, lines.line_offset(),
                            "line " + std::to_string(lines.line_number()) +
                                (why.empty() ? " is JSON but not an object (expected {\"text\": ...}); skipped"
                                             : " is not valid JSON (" + why + "); skipped"));
      context.stats.drop("bad_json");
      continue;
    }
    auto text = j.find("text");
    if (text == j.end() || !text->is_string()) {
      context.warnings.warn(file, lines.line_offset(),
                            "line " + std::to_string(lines.line_number()) + " has no string \"text\" field; skipped");
      context.stats.drop("bad_json");
      continue;
    }
    Document d;
    uint64_t invalid = 0;
    d.text = normalize_newlines(sanitize_utf8(text->get_ref<const std::string&>(), &invalid));
    for (const char* key : {"control_code", "control"}) {
      auto code = j.find(key);
      if (code != j.end() && code->is_string() && !code->get_ref<const std::string&>().empty()) {
        d.control_code = sanitize_utf8(code->get_ref<const std::string&>(), &invalid);
        break;
      }
    }
    auto title = j.find("title");
    if (title != j.end() && title->is_string()) d.title = sanitize_utf8(title->get_ref<const std::string&>(), &invalid);
    d.origin = file + ":" + std::to_string(lines.line_offset());
    if (d.text.empty()) {
      context.stats.drop("empty");
      continue;
    }
    context.emit(std::move(d));
  }
  context.stats.bytes_in += stream.raw_offset();
}

}  // namespace ctrl
