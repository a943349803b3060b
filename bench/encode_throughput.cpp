// Encoding throughput helper for bench/encode_vs_spm.sh.
//   encode_throughput dump DIR            decoded train text of a prepared corpus, to stdout,
//                                         each document's lines as lines
//   encode_throughput encode MODEL TEXT THREADS
//                                         encodes each line of TEXT with ctrl's parallel
//                                         encoder, writes ids like `spm_encode --output_format=id`
//                                         to stdout and the encode-only seconds to stderr
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/file_io.h"
#include "data/shard.h"
#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) try {
  const std::vector<std::string> a(argv + 1, argv + argc);
  if (a.size() == 2 && a[0] == "dump") {
    const ctrl::Dataset d = ctrl::Dataset::open(a[1]);
    const ctrl::Tokenizer t = ctrl::Tokenizer::load(d.tokenizer_path());
    for (size_t c = 0; c < d.n_codes(); ++c) {
      std::vector<int32_t> ids(d.train(c).size()), doc;
      d.train(c).copy(0, ids.size(), ids.data());
      for (int32_t id : ids) {
        if (id != t.eos_id()) {
          doc.push_back(id);
          continue;
        }
        // Each line of a document as a line of its own: what ctrl encodes at a time, and what
        // spm_encode reads (a whole document as one line once drifted in SentencePiece's float scores).
        std::printf("%s\n", t.decode(doc).c_str());
        doc.clear();
      }
    }
    return 0;
  }
  if (a.size() == 4 && a[0] == "encode") {
    const ctrl::Tokenizer t = ctrl::Tokenizer::load(a[1]);
    const std::string text = ctrl::read_file(a[2]);
    std::vector<std::string_view> lines;
    for (size_t p = 0; p < text.size();) {
      const size_t e = std::min(text.find('\n', p), text.size());
      lines.emplace_back(text.data() + p, e - p);
      p = e + 1;
    }
    const auto start = std::chrono::steady_clock::now();
    const auto ids = t.encode_batch(lines, std::stoi(a[3]));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::string out;
    for (const auto& line : ids) {
      for (size_t i = 0; i < line.size(); ++i) {
        if (i) out += ' ';
        out += std::to_string(line[i]);
      }
      out += '\n';
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fprintf(stderr, "%.3f\n", seconds);
    return 0;
  }
  std::fprintf(stderr, "usage: encode_throughput dump DIR | encode MODEL TEXT THREADS\n");
  return 2;
} catch (const ctrl::Error& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
