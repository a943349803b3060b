// A document as the corpus readers produce it: clean text tagged with the
// control code of its source. Readers stream documents to a sink and count
// what they skipped, so a multi-GB dump never sits in memory.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace ctrl {

struct Document {
  std::string control_code;  // e.g. "Wikipedia"
  std::string title;         // may be empty
  std::string text;          // UTF-8, cleaned by the reader
  std::string origin;        // file (and page) it came from, for messages
  uint64_t read_bytes = 0;   // the source's bytes on disk read when it was emitted (ReadContext::emit), for progress
};

using DocumentSink = std::function<void(Document&&)>;

// What a reader kept and dropped, and why; warnings name file and offset.
struct ReadStats {
  uint64_t documents = 0;
  uint64_t bytes_in = 0;
  std::map<std::string, uint64_t> dropped;  // reason -> documents
  std::map<std::string, uint64_t> notes;    // counted within kept documents (e.g. characters), not drops
  uint64_t warnings = 0;
  void drop(const std::string& reason) { ++dropped[reason]; }
};

}  // namespace ctrl
