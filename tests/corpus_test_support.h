// Helpers shared by the corpus reader tests: read a source into memory,
// bz2-compress a string, make a scratch directory.
#pragma once
#include <bzlib.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/file_io.h"
#include "corpus/sources.h"

namespace corpus_test {

const std::string kData = CTRL_SOURCE_DIR "/tests/data/corpus";

struct Collected {
  std::vector<ctrl::Document> docs;
  ctrl::ReadStats stats;
};

inline Collected read_path(const std::string& path, const std::string& code = "Web",
                           size_t max_document_bytes = ctrl::ReaderOptions().max_document_bytes) {
  Collected c;
  ctrl::ReaderOptions options;
  options.max_warnings_printed = 0;
  options.max_document_bytes = max_document_bytes;
  c.stats = ctrl::read_source({code, path}, options, [&](ctrl::Document&& d) { c.docs.push_back(std::move(d)); });
  return c;
}

inline std::string bz2(const std::string& data) {
  unsigned int size = static_cast<unsigned int>(data.size() + data.size() / 50 + 1024);
  std::string out(size, '\0');
  BZ2_bzBuffToBuffCompress(out.data(), &size, const_cast<char*>(data.data()), static_cast<unsigned>(data.size()), 9, 0, 0);
  out.resize(size);
  return out;
}

// A directory under gtest's temporary folder, named by the test file and case.
inline std::string temp_dir(const std::string& prefix, const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/" + prefix + "_" + name;
  ctrl::make_directories(dir);
  return dir;
}

}  // namespace corpus_test
