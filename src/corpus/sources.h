// The one entry point of the corpus readers: a source given on the command
// line as "Code=path" is streamed, document by document, to a sink. The kind
// of each file is detected from its content (and extension), so a directory
// may mix Wikipedia dumps, WikiExtractor output, Aozora Bunko texts, JSON
// lines and plain text.
#pragma once
#include <string>

#include "corpus/document.h"
#include "corpus/input.h"

namespace ctrl {

// One source as given on the command line: "Code=path". path may be a file, a directory (read recursively,
// mixed file kinds dispatched by content/extension), or a glob ('docs/*.txt'). The kind is detected:
// MediaWiki XML (plain or .bz2, single or multistream), WikiExtractor output (--json lines or <doc> format,
// plain or .bz2), Aozora Bunko (.txt in Shift_JIS/CP932/UTF-8, or the .zip as distributed), JSON lines
// ({"text": ..., optional "control_code"/"control" field overriding Code}), plain text (one document per file).
struct SourceSpec {
  std::string control_code;
  std::string path;
};

// "Wikipedia=jawiki.xml.bz2" -> {"Wikipedia", "jawiki.xml.bz2"}. The code must be non-empty and free of
// whitespace; the path non-empty. Errors are ctrl::Error naming the spec.
SourceSpec parse_source_spec(const std::string& spec);

// The kinds of input file the readers know.
enum class SourceKind { kWikipediaXml, kWikiExtractorJson, kWikiExtractorDoc, kAozoraText, kAozoraZip, kJsonLines, kPlainText };
const char* source_kind_name(SourceKind kind);

// Detects the kind of one file from its first bytes (after bz2 decompression) and its extension.
SourceKind detect_source_kind(const std::string& path);

// Streams every document of the source to sink. The sink is called from one thread at a time and in a
// deterministic order (same inputs -> same documents in the same order, whatever the thread count).
// Problems in the input are counted warnings naming file and byte offset (printed to stderr up to a limit),
// the good documents are kept; a fatal problem (nothing readable at all, missing path) throws ctrl::Error.
// Each document carries how many of the source's bytes on disk were read when it came (read_bytes): with
// source_bytes, the caller's progress (ctrl prepare's cleaning line) has a fraction, rate and ETA.
ReadStats read_source(const SourceSpec& source, const ReaderOptions& options, const DocumentSink& sink);

// The bytes on disk of every file a source names (0 when none can be sized).
uint64_t source_bytes(const std::string& path);

// Reads one file of a known kind (used by read_source; exposed for tests and tools).
void read_file_of_kind(const std::string& path, SourceKind kind, ReadContext& context);

}  // namespace ctrl
