// libFuzzer: JSON lines and WikiExtractor (--json and <doc>) readers, and plain text, on bytes in memory.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "corpus/text.h"
#include "corpus/wikiextractor.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  ctrl::ReadStats stats;
  ctrl::Warnings warnings(stats, 0);
  ctrl::DocumentSink sink = [](ctrl::Document&&) {};
  ctrl::ReadContext context{"Web", {}, stats, warnings, sink};
  try {
    auto a = ctrl::memory_byte_stream(bytes, "fuzz", warnings);
    ctrl::read_json_lines(*a, "fuzz", context);
    auto b = ctrl::memory_byte_stream(bytes, "fuzz", warnings);
    ctrl::read_wikiextractor_json(*b, "fuzz", context);
    auto c = ctrl::memory_byte_stream(bytes, "fuzz", warnings);
    ctrl::read_wikiextractor_doc(*c, "fuzz", context);
    ctrl::read_plain_text(bytes, "fuzz", context);
  } catch (const ctrl::Error&) {
  }
  return 0;
}
