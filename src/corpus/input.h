// Shared plumbing of the corpus readers: options, counted warnings, the
// per-read context, and byte streams that decompress bz2 (single or
// multistream) transparently while streaming.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "corpus/document.h"

namespace ctrl {

struct ReaderOptions {
  int threads = 0;                     // 0 = all cores
  bool drop_trailing_sections = true;  // Wikipedia: cut 脚注, 参考文献, 関連項目, 外部リンク, 出典, 注釈 ... sections
  size_t max_warnings_printed = 20;    // after that, warnings are only counted
  // A plain-text file longer than this is split at blank lines into documents of at most this length
  // (a document is cleaned and spooled whole; the spool's records are 32-bit).
  size_t max_document_bytes = size_t(64) << 20;
};

// Counts problems found in the input; prints the first max_printed to stderr
// as "ctrl: warning: <file>: byte <offset>: <what>". Thread-safe.
class Warnings {
 public:
  Warnings(ReadStats& stats, size_t max_printed) : stats_(stats), max_printed_(max_printed) {}
  void warn(const std::string& file, uint64_t offset, const std::string& what);
  // A warning about a document that is skipped: also counted as dropped for `reason`.
  void skip(const std::string& file, uint64_t offset, const std::string& what, const std::string& reason);
  uint64_t count() const;

 private:
  mutable std::mutex mutex_;
  ReadStats& stats_;
  size_t max_printed_;
};

// What every reader needs: where documents go, what they are tagged with,
// where to count what was kept, dropped and warned about.
struct ReadContext {
  std::string control_code;
  ReaderOptions options;
  ReadStats& stats;
  Warnings& warnings;
  const DocumentSink& sink;
  // Where reading is, for Document::read_bytes: the bytes of the source's
  // earlier files, the current file's size, and its stream while a streaming
  // reader consumes it (else the file counts as read once a document comes).
  uint64_t bytes_before = 0, file_bytes = 0;
  const class ByteStream* stream = nullptr;
  // Hands a document to the sink (filling in control_code if empty and its
  // read_bytes) and counts it.
  void emit(Document&& document);
  // Resolved thread count (options.threads, or all cores when 0).
  int threads() const;
};

// A forward-only stream of bytes. read() returns 0 only at the end; a damaged
// input (e.g. a truncated or corrupt bz2 stream) is reported as a warning and
// then ends the stream, so what was read before is kept.
class ByteStream {
 public:
  virtual ~ByteStream() = default;
  virtual size_t read(char* buffer, size_t size) = 0;
  // Bytes consumed from the underlying file or memory (compressed), for progress.
  virtual uint64_t raw_offset() const = 0;
  // Bytes returned so far by read() (decompressed).
  virtual uint64_t offset() const = 0;
  virtual uint64_t raw_size() const = 0;
};

// Opens a file; if it starts with the bz2 magic "BZh" it is decompressed on the
// fly, all concatenated streams in turn. Throws ctrl::Error if unreadable.
std::unique_ptr<ByteStream> open_byte_stream(const std::string& path, Warnings& warnings);
// The same over bytes in memory (which must outlive the stream); name is used in warnings.
std::unique_ptr<ByteStream> memory_byte_stream(std::string_view bytes, const std::string& name, Warnings& warnings);

// Reads a stream line by line (without the '\n'; a '\r' before it is removed).
// Lines longer than max_line are warned about and skipped.
class LineReader {
 public:
  LineReader(ByteStream& stream, std::string name, Warnings& warnings, size_t max_line = size_t(64) << 20);
  // Next line into line; false at the end. line_offset() is the offset of the line returned, line_number()
  // its number (from 1, skipped over-long lines counted).
  bool next(std::string& line);
  uint64_t line_offset() const { return line_offset_; }
  uint64_t line_number() const { return line_number_; }

 private:
  bool fill();
  ByteStream& stream_;
  std::string name_;
  Warnings& warnings_;
  size_t max_line_;
  std::string buffer_;
  size_t pos_ = 0;
  uint64_t buffer_offset_ = 0, line_offset_ = 0, line_number_ = 0;
  bool eof_ = false;
};

// Makes text valid UTF-8: each invalid byte is dropped and counted in *invalid.
std::string sanitize_utf8(std::string_view text, uint64_t* invalid, uint64_t* first_invalid_offset = nullptr);

// Decodes character references once, left to right: every named one HTML5 defines with its ';'
// (&Sigma; &epsilon; &amp; … 2125 names, src/corpus/html_entities.h), decimal &#12354; and hex &#x3042;
// (a code point that is not a Unicode scalar value, or 0, is kept as written); unknown ones are kept as
// written. "&amp;lt;" gives "&lt;", not "<".
std::string decode_html_entities(std::string_view text);

}  // namespace ctrl
