// libFuzzer: shard and manifest loading. The input is a manifest.json, a NUL,
// then the bytes of the shard file "a.bin" that manifest may name; the corpus
// is opened (Manifest::check, shard headers, checksums, token ids, document
// counts) and what opens is sampled as training and held-out sequences.
// `CTRL_FUZZ_WRITE_SEED=DIR fuzz_shards` writes seed inputs into DIR and exits.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/file_io.h"
#include "data/shard.h"
#include "train/batches.h"

namespace {

std::string scratch_dir() {
  return (std::filesystem::temp_directory_path() / ("fuzz_shards_" + std::to_string(getpid()))).string();
}

// A manifest naming a.bin for both splits of code A (token 3), with `documents` in each.
std::string manifest_json(uint32_t vocab, uint64_t documents) {
  ctrl::Manifest m;
  m.vocab_size = vocab;
  m.eos_id = 2;
  m.valid_fraction = 0.1;
  m.codes = {{"A", 3, documents, documents, {"a.bin"}, {"a.bin"}}};
  const std::string dir = scratch_dir() + "_seed";
  ctrl::make_directories(dir);
  m.write(dir);
  std::string text = ctrl::read_file(dir + "/manifest.json");
  std::filesystem::remove_all(dir);
  return text;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("CTRL_FUZZ_WRITE_SEED")) {
    ctrl::make_directories(dir);
    const std::string tmp = std::string(dir) + "/.shard";
    int n = 0;
    for (uint32_t vocab : {16u, 70000u}) {
      std::vector<uint32_t> tokens;
      for (uint32_t i = 0; i < 40; ++i) tokens.push_back(i % 7 == 6 ? 2 : 5 + i % 9);
      ctrl::write_shard(tmp, tokens, 5, vocab);
      ctrl::write_file_atomically(std::string(dir) + "/seed" + std::to_string(n++),
                                  manifest_json(vocab, 5) + std::string(1, '\0') + ctrl::read_file(tmp));
    }
    std::filesystem::remove(tmp);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = scratch_dir();
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view manifest = input.substr(0, nul);
  const std::string_view shard = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  ctrl::make_directories(dir);
  // Plain writes (no fsync): the fuzzer runs this thousands of times a second.
  std::ofstream(dir + "/manifest.json", std::ios::binary | std::ios::trunc).write(manifest.data(), std::streamsize(manifest.size()));
  std::ofstream(dir + "/a.bin", std::ios::binary | std::ios::trunc).write(shard.data(), std::streamsize(shard.size()));
  try {
    auto d = std::make_shared<const ctrl::Dataset>(ctrl::Dataset::open(dir));
    for (int64_t T : {2, 5}) {
      const ctrl::Batches b = ctrl::Batches::from_dataset(d, T, 1);
      std::vector<int32_t> tokens(size_t(4 * T)), targets(size_t(4 * T));
      b.train(0, 4, tokens.data(), targets.data());
      for (size_t c = 0; c < b.n_codes(); ++c)
        for (int64_t n : {int64_t(-1), int64_t(0), int64_t(3)}) b.held_out(c, n, &tokens, &targets);
    }
  } catch (const ctrl::Error&) {
  }
  return 0;
}
