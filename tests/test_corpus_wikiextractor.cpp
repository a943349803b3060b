// WikiExtractor output: --json lines and <doc> blocks, plain and bz2 (tests/data/corpus, written by hand).
#include <bzlib.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/file_io.h"
#include "corpus/input.h"
#include "corpus/sources.h"

namespace {

const std::string kData = CTRL_SOURCE_DIR "/tests/data/corpus";

struct Collected {
  std::vector<ctrl::Document> docs;
  ctrl::ReadStats stats;
};

Collected read_path(const std::string& path, const std::string& code = "Web") {
  Collected c;
  ctrl::ReaderOptions options;
  options.max_warnings_printed = 0;
  c.stats = ctrl::read_source({code, path}, options, [&](ctrl::Document&& d) { c.docs.push_back(std::move(d)); });
  return c;
}

std::string bz2(const std::string& data) {
  unsigned int size = static_cast<unsigned int>(data.size() + data.size() / 50 + 1024);
  std::string out(size, '\0');
  BZ2_bzBuffToBuffCompress(out.data(), &size, const_cast<char*>(data.data()), static_cast<unsigned>(data.size()), 9, 0, 0);
  out.resize(size);
  return out;
}

std::string temp_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/corpus_wikiextractor_" + name;
  ctrl::make_directories(dir);
  return dir;
}

TEST(CorpusWikiExtractor, WikiExtractorJsonAndDocFormatsPlainAndBz2) {
  const Collected json = read_path(kData + "/wikiextractor.json", "Wikipedia");
  ASSERT_EQ(json.docs.size(), 2u);
  EXPECT_EQ(json.docs[0].title, "アンパサンド");
  EXPECT_EQ(json.docs[0].text, "アンパサンド (&) は記号である。\n\n<b>の例。");
  EXPECT_EQ(json.docs[1].title, "言語");
  const Collected doc = read_path(kData + "/wikiextractor_doc.txt", "Wikipedia");
  ASSERT_EQ(doc.docs.size(), 2u);
  EXPECT_EQ(doc.docs[0].title, "アンパサンド");
  EXPECT_EQ(doc.docs[0].text, json.docs[0].text);
  EXPECT_EQ(doc.docs[1].text, json.docs[1].text);
  EXPECT_EQ(doc.stats.warnings, 1u);  // the last <doc> is not closed

  const std::string dir = temp_dir("wikiextractor");
  ctrl::write_file_atomically(dir + "/wiki_00.bz2", bz2(ctrl::read_file(kData + "/wikiextractor.json")));
  const Collected compressed = read_path(dir + "/wiki_00.bz2", "Wikipedia");
  ASSERT_EQ(compressed.docs.size(), 2u);
  EXPECT_EQ(compressed.docs[1].text, json.docs[1].text);
}

}  // namespace
