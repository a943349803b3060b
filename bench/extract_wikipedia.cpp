// Throughput of the Wikipedia reader: runs read_source on a MediaWiki XML file
// (plain or bz2) single-threaded and with all threads, and prints pages/s and
// MB/s of XML (decompressed bytes) for each. Usage:
//   extract_wikipedia <file.xml[.bz2]> [threads] [--dump out.txt]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/file_io.h"
#include "corpus/input.h"
#include "corpus/sources.h"

namespace {

struct Run {
  double seconds;
  uint64_t pages, documents, xml_bytes;
};

Run run(const std::string& path, int threads, std::FILE* dump) {
  ctrl::ReaderOptions options;
  options.threads = threads;
  uint64_t text_bytes = 0;
  const auto start = std::chrono::steady_clock::now();
  ctrl::ReadStats stats = ctrl::read_source({"Wikipedia", path}, options, [&](ctrl::Document&& d) {
    text_bytes += d.text.size();
    if (dump) std::fprintf(dump, "# %s\n%s\n\n", d.title.c_str(), d.text.c_str());
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  uint64_t pages = stats.documents;
  for (const auto& [reason, n] : stats.dropped) pages += n;
  // Decompressed XML size: count it by streaming once more (cheap next to parsing).
  ctrl::ReadStats scratch;
  ctrl::Warnings quiet(scratch, 0);
  auto stream = ctrl::open_byte_stream(path, quiet);
  static char buffer[1 << 20];
  while (stream->read(buffer, sizeof buffer) > 0) {
  }
  return {seconds, pages, stats.documents, stream->offset()};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <file.xml[.bz2]> [threads] [--dump out.txt]\n", argv[0]);
    return 2;
  }
  try {
    const std::string path = argv[1];
    int threads = static_cast<int>(std::thread::hardware_concurrency());
    std::FILE* dump = nullptr;
    for (int i = 2; i < argc; ++i) {
      if (std::strcmp(argv[i], "--dump") == 0 && i + 1 < argc) dump = std::fopen(argv[++i], "w");
      else threads = std::atoi(argv[i]);
    }
    for (int t : {1, threads}) {
      const Run r = run(path, t, t == 1 ? dump : nullptr);
      std::printf("threads=%d pages=%llu documents=%llu seconds=%.3f pages_per_s=%.1f xml_MB_per_s=%.2f\n", t,
                  static_cast<unsigned long long>(r.pages), static_cast<unsigned long long>(r.documents), r.seconds,
                  r.pages / r.seconds, r.xml_bytes / 1e6 / r.seconds);
      if (threads == 1) break;
    }
    if (dump) std::fclose(dump);
  } catch (const ctrl::Error& e) {
    std::fprintf(stderr, "extract_wikipedia: %s\n", e.what());
    return 1;
  }
  return 0;
}
