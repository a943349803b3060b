// WikiExtractor output: --json lines and <doc> blocks, plain and bz2 (tests/data/corpus, written by hand).
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/file_io.h"
#include "corpus/input.h"
#include "corpus/sources.h"
#include "corpus_test_support.h"

namespace {

using corpus_test::bz2;
using corpus_test::Collected;
using corpus_test::kData;
using corpus_test::read_path;

std::string temp_dir(const std::string& name) { return corpus_test::temp_dir("corpus_wikiextractor", name); }

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
