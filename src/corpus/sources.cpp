#include "corpus/sources.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "corpus/aozora.h"
#include "corpus/text.h"
#include "corpus/wikiextractor.h"
#include "corpus/wikipedia.h"

namespace ctrl {
namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// UTF-8 apart from a character cut at the end of the sample, or a few stray bytes among
// many valid multi-byte characters (then it is damaged UTF-8, not Shift_JIS).
// Every file the source names, sorted so that the order (and so the output) is deterministic.
std::vector<std::string> expand_path(const std::string& path) {
  std::vector<std::string> files;
  auto add_tree = [&](const fs::path& root) {
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (!name.empty() && name[0] == '.') {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file()) files.push_back(it->path().string());
    }
    if (ec) fail(root.string() + ": cannot list directory: " + ec.message());
  };
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    add_tree(path);
  } else if (fs::exists(path, ec)) {
    files.push_back(path);
  } else if (path.find_first_of("*?[") != std::string::npos) {
    glob_t g{};
    const int rc = glob(path.c_str(), 0, nullptr, &g);
    if (rc == 0) {
      for (size_t k = 0; k < g.gl_pathc; ++k) {
        if (fs::is_directory(g.gl_pathv[k], ec)) add_tree(g.gl_pathv[k]);
        else files.push_back(g.gl_pathv[k]);
      }
    }
    globfree(&g);
    if (files.empty()) fail(path + ": the pattern matches no file (expected files to read)");
  } else {
    fail(path + ": no such file or directory (expected a corpus file, directory or glob)");
  }
  if (files.empty()) fail(path + ": no file to read (the directory is empty, or holds only hidden files)");
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

uint64_t source_bytes(const std::string& path) {
  uint64_t total = 0;
  for (const auto& f : expand_path(path)) {
    std::error_code ec;
    const uint64_t size = fs::file_size(f, ec);
    if (!ec) total += size;
  }
  return total;
}

SourceSpec parse_source_spec(const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
    fail("source '" + spec + "': expected Code=path, e.g. Wikipedia=jawiki.xml.bz2");
  SourceSpec s{spec.substr(0, eq), spec.substr(eq + 1)};
  if (s.control_code.find_first_of(" \t\r\n") != std::string::npos)
    fail("source '" + spec + "': the control code must not contain whitespace");
  return s;
}

const char* source_kind_name(SourceKind kind) {
  switch (kind) {
    case SourceKind::kWikipediaXml: return "MediaWiki XML";
    case SourceKind::kWikiExtractorJson: return "WikiExtractor JSON";
    case SourceKind::kWikiExtractorDoc: return "WikiExtractor <doc>";
    case SourceKind::kAozoraText: return "Aozora Bunko text";
    case SourceKind::kAozoraZip: return "Aozora Bunko zip";
    case SourceKind::kJsonLines: return "JSON lines";
    case SourceKind::kPlainText: return "plain text";
  }
  return "?";
}

// Aozora Bunko's footer (底本, 入力, 校正, 青空文庫作成ファイル) is within this much of a file's end.
constexpr uint64_t kAozoraTailBytes = 16 << 10;

SourceKind detect_source_kind(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))  // read twice (detection, then reading), and mapped: a pipe would give nothing
    fail(path + ": not a regular file (a pipe or a device); save it to a file first");
  const std::string name = lower(fs::path(path).filename().string());
  ReadStats scratch;
  Warnings quiet(scratch, 0);
  auto stream = open_byte_stream(path, quiet);
  std::string head(64 << 10, '\0');
  size_t got = 0;
  while (got < head.size()) {
    const size_t n = stream->read(head.data() + got, head.size() - got);
    if (n == 0) break;
    got += n;
  }
  head.resize(got);
  if (ends_with(name, ".zip") || head.compare(0, 4, "PK\x03\x04") == 0) return SourceKind::kAozoraZip;
  // Compressions other than bz2, and UTF-16, would read as binary or as garbled Shift_JIS.
  for (const auto& [magic, what] : std::vector<std::pair<std::string, std::string>>{
           {"\x1F\x8B", "gzip-compressed (gunzip it first)"},
           {std::string("\xFD"
                        "7zXZ\0",
                        6),
            "xz-compressed (unxz it first)"},
           {"\x28\xB5\x2F\xFD", "zstd-compressed (unzstd it first)"},
           {"\xFF\xFE", "UTF-16 text (iconv -f UTF-16 -t UTF-8 it first)"},
           {"\xFE\xFF", "UTF-16 text (iconv -f UTF-16 -t UTF-8 it first)"}})
    if (head.compare(0, magic.size(), magic) == 0)
      fail(path + ": " + what + "; ctrl reads UTF-8, Shift_JIS or EUC-JP text, plain or bz2-compressed");
  std::string_view h = head;
  if (h.substr(0, 3) == "\xEF\xBB\xBF") h.remove_prefix(3);
  const size_t first = h.find_first_not_of(" \t\r\n");
  h.remove_prefix(first == std::string_view::npos ? h.size() : first);
  if (h.substr(0, 10) == "<mediawiki" || h.substr(0, 5) == "<?xml") return SourceKind::kWikipediaXml;
  if (h.substr(0, 5) == "<doc " || h.substr(0, 5) == "<doc>") return SourceKind::kWikiExtractorDoc;
  if (!h.empty() && h[0] == '{') {
    const std::string_view line = h.substr(0, h.find('\n'));
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("url") && j.contains("id") && j.contains("text")) return SourceKind::kWikiExtractorJson;
    return SourceKind::kJsonLines;
  }
  if (ends_with(name, ".jsonl") || ends_with(name, ".json") || ends_with(name, ".ndjson")) return SourceKind::kJsonLines;
  // Japanese text in either encoding: Aozora Bunko's when it has its notation,
  // at its start or in the 底本 footer at its end (a long work without ruby or
  // annotations has only that). The tail is read only of an uncompressed file.
  uint64_t bad = 0;
  if (looks_like_aozora(decode_japanese_bytes(h, &bad))) return SourceKind::kAozoraText;
  const uint64_t size = fs::file_size(path, ec);
  if (!ec && size > head.size() && stream->offset() == stream->raw_offset()) {
    std::ifstream file(path, std::ios::binary);
    std::string tail(kAozoraTailBytes, '\0');
    file.seekg(std::streamoff(size - kAozoraTailBytes));
    file.read(tail.data(), std::streamsize(tail.size()));
    tail.resize(size_t(file.gcount()));
    const std::string text = decode_japanese_bytes(tail, &bad);
    if (text.find("底本：") != std::string::npos || text.find("青空文庫作成ファイル") != std::string::npos)
      return SourceKind::kAozoraText;
  }
  return SourceKind::kPlainText;
}

void read_file_of_kind(const std::string& path, SourceKind kind, ReadContext& context) {
  auto whole = [&] {  // the whole file, decompressed if bz2
    auto stream = open_byte_stream(path, context.warnings);
    std::string bytes;
    std::vector<char> buffer(1 << 20);
    while (size_t n = stream->read(buffer.data(), buffer.size())) bytes.append(buffer.data(), n);
    return bytes;
  };
  auto streamed = [&](auto reader) {  // readers that consume the (decompressed) byte stream
    auto stream = open_byte_stream(path, context.warnings);
    context.stream = stream.get();
    try {
      reader(*stream, path, context);
    } catch (...) {
      context.stream = nullptr;
      throw;
    }
    context.stream = nullptr;
  };
  switch (kind) {
    case SourceKind::kWikipediaXml: return streamed(read_wikipedia_xml);
    case SourceKind::kWikiExtractorJson: return streamed(read_wikiextractor_json);
    case SourceKind::kWikiExtractorDoc: return streamed(read_wikiextractor_doc);
    case SourceKind::kJsonLines: return streamed(read_json_lines);
    case SourceKind::kAozoraZip: read_aozora_zip(path, context); break;
    case SourceKind::kAozoraText: read_aozora_bytes(whole(), path, context); break;
    case SourceKind::kPlainText: read_plain_text(whole(), path, context); break;
  }
}

ReadStats read_source(const SourceSpec& source, const ReaderOptions& options, const DocumentSink& sink) {
  const std::vector<std::string> files = expand_path(source.path);
  ReadStats stats;
  Warnings warnings(stats, options.max_warnings_printed);
  ReadContext context{source.control_code, options, stats, warnings, sink};
  size_t failed = 0;
  std::string first_error;
  uint64_t done_bytes = 0;
  for (const auto& f : files) {
    std::error_code size_error;
    context.bytes_before = done_bytes;
    context.file_bytes = fs::file_size(f, size_error);
    if (size_error) context.file_bytes = 0;
    try {
      read_file_of_kind(f, detect_source_kind(f), context);
    } catch (const Error& e) {
      if (files.size() == 1) throw;
      ++failed;
      if (first_error.empty()) first_error = e.what();
      std::string why = e.what();  // without the file's name, which the warning starts with
      if (why.rfind(f + ": ", 0) == 0) why.erase(0, f.size() + 2);
      warnings.warn(f, 0, "unreadable, skipped: " + why);
      stats.drop("unreadable_file");
    }
    done_bytes += context.file_bytes;
  }
  if (failed == files.size()) fail(source.path + ": no file could be read; first error: " + first_error);
  return stats;
}

}  // namespace ctrl
