#include "corpus/input.h"

#include <bzlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "core/file_io.h"
#include "core/progress.h"
#include "corpus/html_entities.h"

namespace ctrl {

void Warnings::warn(const std::string& file, uint64_t offset, const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.warnings;
  if (stats_.warnings <= max_printed_) {
    print_line("ctrl: warning: " + file + ": byte " + std::to_string(offset) + ": " + what);
    if (stats_.warnings == max_printed_) print_line("ctrl: further warnings are only counted");
  }
}

void Warnings::skip(const std::string& file, uint64_t offset, const std::string& what, const std::string& reason) {
  warn(file, offset, what);
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.drop(reason);
}

uint64_t Warnings::count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_.warnings;
}

void ReadContext::emit(Document&& document) {
  if (document.control_code.empty()) document.control_code = control_code;
  document.read_bytes = bytes_before + (stream ? std::min(stream->raw_offset(), file_bytes) : file_bytes);
  ++stats.documents;
  sink(std::move(document));
}

int ReadContext::threads() const {
  if (options.threads > 0) return options.threads;
  return std::max(1u, std::thread::hardware_concurrency());
}

namespace {

// Bytes in memory, optionally owned through a mapping, optionally bz2-compressed.
class MemoryStream : public ByteStream {
 public:
  MemoryStream(MappedFile mapping, std::string_view bytes, std::string name, Warnings& warnings)
      : mapping_(std::move(mapping)), bytes_(bytes), name_(std::move(name)), warnings_(warnings) {
    bz2_ = bytes_.size() >= 3 && bytes_.substr(0, 3) == "BZh";
    if (bz2_) start_bz2_stream();
  }
  ~MemoryStream() override {
    if (bz2_open_) BZ2_bzDecompressEnd(&bz_);
  }

  size_t read(char* buffer, size_t size) override {
    if (size == 0 || done_) return 0;
    size_t n = bz2_ ? read_bz2(buffer, size) : read_plain(buffer, size);
    offset_ += n;
    return n;
  }
  uint64_t raw_offset() const override { return raw_pos_; }
  uint64_t offset() const override { return offset_; }
  uint64_t raw_size() const override { return bytes_.size(); }

 private:
  size_t read_plain(char* buffer, size_t size) {
    const size_t n = std::min(size, bytes_.size() - raw_pos_);
    if (n > 0) std::memcpy(buffer, bytes_.data() + raw_pos_, n);  // an empty file has no data pointer
    raw_pos_ += n;
    if (n == 0) done_ = true;
    return n;
  }

  void start_bz2_stream() {
    std::memset(&bz_, 0, sizeof bz_);
    if (BZ2_bzDecompressInit(&bz_, 0, 0) != BZ_OK) fail(name_ + ": cannot initialise bz2 decompression");
    bz2_open_ = true;
    bz_.next_in = const_cast<char*>(bytes_.data() + raw_pos_);
    bz_.avail_in = static_cast<unsigned>(std::min<size_t>(bytes_.size() - raw_pos_, 1u << 30));
  }

  void end_bz2_stream() {
    BZ2_bzDecompressEnd(&bz_);
    bz2_open_ = false;
  }

  // Decompresses into buffer; at the end of one bz2 stream, continues with the next
  // one if the bytes that follow start with "BZh" (multistream files).
  size_t read_bz2(char* buffer, size_t size) {
    size_t produced = 0;
    while (produced == 0 && !done_) {
      bz_.next_out = buffer;
      bz_.avail_out = static_cast<unsigned>(std::min<size_t>(size, 1u << 30));
      const unsigned in_before = bz_.avail_in;
      const int rc = BZ2_bzDecompress(&bz_);
      raw_pos_ += in_before - bz_.avail_in;
      produced = size - bz_.avail_out;
      if (rc == BZ_STREAM_END) {
        end_bz2_stream();
        const std::string_view rest = bytes_.substr(raw_pos_);
        if (rest.size() >= 3 && rest.substr(0, 3) == "BZh") {
          start_bz2_stream();
        } else {
          if (!rest.empty() && rest.find_first_not_of(std::string_view("\0", 1)) != std::string_view::npos)
            warnings_.warn(
                name_, offset_ + produced,
                "ignoring " + std::to_string(rest.size()) + " bytes after the last bz2 stream, from " + at_raw());
          raw_pos_ = bytes_.size();
          done_ = true;
        }
      } else if (rc != BZ_OK) {
        warnings_.warn(name_, offset_ + produced,
                       "corrupt bz2 data (error " + std::to_string(rc) + ") in the block ending near " + at_raw() +
                           "; keeping what was decompressed before that block");
        done_ = true;
      } else if (produced == 0 && bz_.avail_in == 0) {
        if (raw_pos_ < bytes_.size()) {  // more than 1 GiB handed in at a time: hand in the next part
          bz_.next_in = const_cast<char*>(bytes_.data() + raw_pos_);
          bz_.avail_in = static_cast<unsigned>(std::min<size_t>(bytes_.size() - raw_pos_, 1u << 30));
          continue;
        }
        warnings_.warn(name_, offset_ + produced,
                       "bz2 stream truncated at " + at_raw() + " (no end-of-stream marker); keeping what was read");
        done_ = true;
      }
    }
    return produced;
  }

  // Warnings give the offset in the decompressed text, as the readers' do; this adds the file's own.
  std::string at_raw() const {
    return "compressed byte " + std::to_string(raw_pos_) + " of " + std::to_string(bytes_.size());
  }

  MappedFile mapping_;
  std::string_view bytes_;
  std::string name_;
  Warnings& warnings_;
  bool bz2_ = false, bz2_open_ = false, done_ = false;
  bz_stream bz_{};
  uint64_t raw_pos_ = 0, offset_ = 0;
};

}  // namespace

std::unique_ptr<ByteStream> open_byte_stream(const std::string& path, Warnings& warnings) {
  MappedFile mapping(path);
  const std::string_view bytes(reinterpret_cast<const char*>(mapping.data()), mapping.size());
  return std::make_unique<MemoryStream>(std::move(mapping), bytes, path, warnings);
}

std::unique_ptr<ByteStream> memory_byte_stream(std::string_view bytes, const std::string& name, Warnings& warnings) {
  return std::make_unique<MemoryStream>(MappedFile(), bytes, name, warnings);
}

LineReader::LineReader(ByteStream& stream, std::string name, Warnings& warnings, size_t max_line)
    : stream_(stream), name_(std::move(name)), warnings_(warnings), max_line_(max_line) {}

bool LineReader::fill() {
  if (eof_) return false;
  if (pos_ > 0) {
    buffer_.erase(0, pos_);
    buffer_offset_ += pos_;
    pos_ = 0;
  }
  const size_t old = buffer_.size();
  const size_t chunk = 1 << 20;
  buffer_.resize(old + chunk);
  const size_t n = stream_.read(buffer_.data() + old, chunk);
  buffer_.resize(old + n);
  if (n == 0) eof_ = true;
  return n > 0;
}

bool LineReader::next(std::string& line) {
  bool skipping = false;  // inside an over-long line, dropping bytes up to its end
  size_t scan = pos_;     // where in buffer_ to look for the next '\n'
  for (;;) {
    const size_t nl = buffer_.find('\n', scan);
    if (nl != std::string::npos) {
      ++line_number_;
      if (skipping) {
        pos_ = scan = nl + 1;
        skipping = false;
        continue;
      }
      if (nl - pos_ > max_line_) {
        warnings_.skip(name_, buffer_offset_ + pos_, "line longer than " + std::to_string(max_line_) + " bytes skipped",
                       "line too long");
        pos_ = scan = nl + 1;
        continue;
      }
      line_offset_ = buffer_offset_ + pos_;
      line.assign(buffer_, pos_, nl - pos_);
      pos_ = nl + 1;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      return true;
    }
    if (buffer_.size() - pos_ > max_line_) {
      if (!skipping)
        warnings_.skip(name_, buffer_offset_ + pos_, "line longer than " + std::to_string(max_line_) + " bytes skipped",
                       "line too long");
      skipping = true;
      pos_ = buffer_.size();
    }
    const size_t unread = buffer_.size() - pos_;
    if (!fill()) {
      if (!skipping && pos_ < buffer_.size()) {
        ++line_number_;
        line_offset_ = buffer_offset_ + pos_;
        line.assign(buffer_, pos_, std::string::npos);
        pos_ = buffer_.size();
        if (!line.empty() && line.back() == '\r') line.pop_back();
        return true;
      }
      pos_ = buffer_.size();
      return false;
    }
    scan = unread;  // fill() moved the unread rest to the front of buffer_
  }
}

std::string sanitize_utf8(std::string_view s, uint64_t* invalid, uint64_t* first_invalid_offset) {
  std::string out;
  out.reserve(s.size());
  uint64_t bad = 0;
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t cp = 0;
    if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07;
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) {
      const unsigned char d = s[i + k];
      if ((d & 0xC0) != 0x80) ok = false;
      else cp = (cp << 6) | (d & 0x3F);
    }
    if (ok) {
      if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        ok = false;
    }
    if (ok) {
      out.append(s.data() + i, len);
      i += len;
    } else {
      if (bad == 0 && first_invalid_offset) *first_invalid_offset = i;
      ++bad;
      ++i;
    }
  }
  if (invalid) *invalid = bad;
  return out;
}

namespace {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// The replacement text of a named entity (name without '&' and ';'), or nullptr if HTML5 has none.
const std::string_view* find_entity(std::string_view name) {
  const auto* begin = std::begin(html5::kEntities);
  const auto* end = std::end(html5::kEntities);
  const auto* it = std::lower_bound(begin, end, name, [](const html5::Entity& e, std::string_view n) { return e.name < n; });
  return it != end && it->name == name ? &it->utf8 : nullptr;
}

}  // namespace

std::string decode_html_entities(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const size_t amp = s.find('&', i);
    if (amp == std::string_view::npos) {
      out.append(s.substr(i));
      break;
    }
    out.append(s.substr(i, amp - i));
    i = amp;
    // Entities are short: a bounded look-ahead for the ';' (the longest name, or "#x" and 8 digits).
    const size_t semi = s.substr(0, std::min(s.size(), amp + html5::kLongestName + 2)).find(';', amp + 1);
    if (semi == std::string_view::npos) {
      out.push_back('&');
      ++i;
      continue;
    }
    const std::string_view name = s.substr(amp + 1, semi - amp - 1);
    bool done = false;
    if (name.size() >= 2 && name[0] == '#') {
      uint32_t cp = 0;
      bool hex = name[1] == 'x' || name[1] == 'X';
      const std::string_view digits = name.substr(hex ? 2 : 1);
      bool ok = !digits.empty();
      for (char c : digits) {
        int v = -1;
        if (c >= '0' && c <= '9') v = c - '0';
        else if (hex && c >= 'a' && c <= 'f') v = c - 'a' + 10;
        else if (hex && c >= 'A' && c <= 'F') v = c - 'A' + 10;
        if (v < 0 || cp > 0x10FFFF) { ok = false; break; }
        cp = cp * (hex ? 16 : 10) + static_cast<uint32_t>(v);
      }
      if (ok && cp > 0 && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF)) {
        append_utf8(out, cp);
        done = true;
      }
    } else {
      if (const std::string_view* text = find_entity(name)) {
        out.append(*text);
        done = true;
      }
    }
    if (done) {
      i = semi + 1;
    } else {
      out.push_back('&');
      ++i;
    }
  }
  return out;
}

}  // namespace ctrl
