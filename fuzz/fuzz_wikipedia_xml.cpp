// libFuzzer: the MediaWiki XML reader (and the bz2 stream when the input starts with "BZh") on bytes in memory.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "corpus/wikipedia.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  ctrl::ReadStats stats;
  ctrl::Warnings warnings(stats, 0);
  ctrl::DocumentSink sink = [](ctrl::Document&&) {};
  ctrl::ReaderOptions options;
  options.threads = size % 3 == 0 ? 2 : 1;
  ctrl::ReadContext context{"Wikipedia", options, stats, warnings, sink};
  try {
    auto stream = ctrl::memory_byte_stream(bytes, "fuzz", warnings);
    ctrl::read_wikipedia_xml(*stream, "fuzz", context);
  } catch (const ctrl::Error&) {
  }
  return 0;
}
