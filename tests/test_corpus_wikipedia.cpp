// The Wikipedia reader on the real jawiki excerpt (262 pages), and on damaged copies of it.
#include <bzlib.h>
#include <gtest/gtest.h>

#include <map>

#include "core/error.h"
#include "core/file_io.h"
#include "corpus/sources.h"
#include "corpus/wikipedia.h"

namespace {

const std::string kData = CTRL_SOURCE_DIR "/../shared/data";
const std::string kSample = kData + "/jawiki-excerpt.xml.bz2";

#define REQUIRE_SAMPLE()                                                                   \
  if (!ctrl::file_exists(kSample)) GTEST_SKIP() << "sample data not found at " << kSample

struct Collected {
  std::vector<ctrl::Document> docs;
  ctrl::ReadStats stats;
};

Collected read_path(const std::string& path, int threads, size_t warnings_printed = 0) {
  Collected c;
  ctrl::ReaderOptions options;
  options.threads = threads;
  options.max_warnings_printed = warnings_printed;
  c.stats = ctrl::read_source({"Wikipedia", path}, options, [&](ctrl::Document&& d) { c.docs.push_back(std::move(d)); });
  return c;
}

std::string decompressed_sample() {
  ctrl::ReadStats s;
  ctrl::Warnings w(s, 0);
  auto stream = ctrl::open_byte_stream(kSample, w);
  std::string out(1 << 20, '\0');
  size_t got = 0;
  while (size_t n = stream->read(out.data() + got, out.size() - got)) {
    got += n;
    if (got == out.size()) out.resize(out.size() * 2);
  }
  out.resize(got);
  return out;
}

std::string bz2(const std::string& data) {
  unsigned int size = static_cast<unsigned int>(data.size() + data.size() / 50 + 1024);
  std::string out(size, '\0');
  EXPECT_EQ(BZ2_bzBuffToBuffCompress(out.data(), &size, const_cast<char*>(data.data()),
                                     static_cast<unsigned>(data.size()), 9, 0, 0),
            BZ_OK);
  out.resize(size);
  return out;
}

const ctrl::Document* find(const Collected& c, const std::string& title) {
  for (const auto& d : c.docs)
    if (d.title == title) return &d;
  return nullptr;
}

TEST(CorpusWikipedia, SampleCountsAndCleanText) {
  REQUIRE_SAMPLE();
  const Collected c = read_path(kSample, 2);
  // 262 pages: 39 outside namespace 0, 19 redirects in namespace 0 (31 with
  // the other namespaces), 6 disambiguation pages ({{Aimai}}/{{aimai}}: 地理, サンバ, フォスター, タイ, ゴスペル, EU (曖昧さ回避)).
  EXPECT_EQ(c.stats.dropped.at("namespace"), 39u);
  EXPECT_EQ(c.stats.dropped.at("redirect"), 19u);
  EXPECT_EQ(c.stats.dropped.at("disambiguation"), 6u);
  uint64_t total = c.stats.documents;
  for (const auto& [reason, n] : c.stats.dropped) total += n;
  EXPECT_EQ(total, 262u);
  EXPECT_EQ(c.docs.size(), c.stats.documents);
  EXPECT_EQ(c.stats.documents, 198u);  // 223 - 19 - 6: no article is empty after cleaning
  EXPECT_EQ(c.stats.warnings, 1u);  // the file stops without </mediawiki>
  EXPECT_EQ(find(c, "地理"), nullptr);

  const ctrl::Document* amp = find(c, "アンパサンド");
  ASSERT_NE(amp, nullptr);
  EXPECT_EQ(amp->control_code, "Wikipedia");
  EXPECT_EQ(amp->text.rfind("アンパサンド（&, ampersand）は、並立助詞「…と…」を意味する記号である。", 0), 0u) << amp->text.substr(0, 300);
  EXPECT_NE(amp->text.find("\n語源\n"), std::string::npos);  // headings are kept as their own line
  const ctrl::Document* hokkaido = find(c, "北海道");
  ASSERT_NE(hokkaido, nullptr);
  EXPECT_EQ(hokkaido->text.rfind("北海道（ほっかいどう）は、日本の北海道地方に位置する道。道庁所在地は札幌市。", 0), 0u);
  for (const auto& d : c.docs) {
    for (const char* junk : {"{{", "}}", "[[", "]]", "<ref", "</ref", "{|", "'''", "&amp;", "&nbsp;", "<!--", "__TOC__",
                             "[[Category:", "ファイル:", "画像:"})
      EXPECT_EQ(d.text.find(junk), std::string::npos) << d.title << " contains " << junk;
    // Trailing sections are cut.
    EXPECT_EQ(d.text.find("\n脚注\n"), std::string::npos) << d.title;
    EXPECT_EQ(d.text.find("\n外部リンク\n"), std::string::npos) << d.title;
  }
}

TEST(CorpusWikipedia, SameDocumentsWhateverTheThreadCount) {
  REQUIRE_SAMPLE();
  const Collected one = read_path(kSample, 1);
  const Collected four = read_path(kSample, 4);
  ASSERT_EQ(one.docs.size(), four.docs.size());
  for (size_t i = 0; i < one.docs.size(); ++i) {
    EXPECT_EQ(one.docs[i].title, four.docs[i].title);
    EXPECT_EQ(one.docs[i].text, four.docs[i].text);
  }
}

TEST(CorpusWikipedia, MultistreamTruncatedAndCutOffXml) {
  REQUIRE_SAMPLE();
  const std::string xml = decompressed_sample();
  const std::string dir = ::testing::TempDir() + "/corpus_wikipedia";
  ctrl::make_directories(dir);
  const Collected whole = read_path(kSample, 2);

  // Multistream: the XML split at a page boundary into two concatenated bz2 streams.
  const size_t cut = xml.find("<page>", xml.size() / 2);
  ASSERT_NE(cut, std::string::npos);
  ctrl::write_file_atomically(dir + "/multi.xml.bz2", bz2(xml.substr(0, cut)) + bz2(xml.substr(cut)));
  const Collected multi = read_path(dir + "/multi.xml.bz2", 2);
  EXPECT_EQ(multi.stats.documents, whole.stats.documents);
  EXPECT_EQ(multi.stats.warnings, 1u);

  // A truncated bz2 stream: a warning, and the pages decompressed before the cut are kept.
  const std::string compressed = ctrl::read_file(kSample);
  ctrl::write_file_atomically(dir + "/truncated.xml.bz2", compressed.substr(0, compressed.size() / 2));
  const Collected truncated = read_path(dir + "/truncated.xml.bz2", 2);
  EXPECT_GT(truncated.stats.documents, 20u);
  EXPECT_LT(truncated.stats.documents, whole.stats.documents);
  EXPECT_GE(truncated.stats.warnings, 2u);  // bz2 truncated + XML cut off

  // Damage inside a block: the warning's offset is in the text (as the XML
  // reader's is), and it names the compressed byte near which the block ends.
  std::string damaged = compressed;
  damaged.replace(500000, 8, std::string(8, '\xff'));
  ctrl::write_file_atomically(dir + "/damaged.xml.bz2", damaged);
  ::testing::internal::CaptureStderr();
  const Collected kept = read_path(dir + "/damaged.xml.bz2", 2, 5);
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_GT(kept.stats.documents, 20u);
  EXPECT_LT(kept.stats.documents, whole.stats.documents);
  const size_t at = said.find("damaged.xml.bz2: byte ");
  ASSERT_NE(at, std::string::npos) << said;
  const uint64_t text_offset = std::stoull(said.substr(at + 22));
  EXPECT_GT(text_offset, 500000u) << said;  // the text is about 3.5 times the compressed bytes
  EXPECT_NE(said.find("corrupt bz2 data (error -4) in the block ending near compressed byte 5"), std::string::npos)
      << said;
  EXPECT_NE(said.find(" of " + std::to_string(compressed.size()) + "; keeping"), std::string::npos) << said;

  // XML cut in the middle of a page's text: the complete pages are kept, the partial one is counted.
  const size_t mid = xml.find("</text>", xml.size() / 3);
  ctrl::write_file_atomically(dir + "/cut.xml", xml.substr(0, mid - 100));
  const Collected cut_off = read_path(dir + "/cut.xml", 2);
  EXPECT_GT(cut_off.stats.documents, 20u);
  EXPECT_EQ(cut_off.stats.dropped.at("truncated_page"), 1u);
  for (size_t i = 0; i < cut_off.docs.size(); ++i) EXPECT_EQ(cut_off.docs[i].text, whole.docs[i].text);

  // Garbage in the middle of the XML: the pages before it are kept, a warning names the offset.
  const size_t bad_at = xml.find("<page>", xml.size() / 4);
  ctrl::write_file_atomically(dir + "/garbage.xml", xml.substr(0, bad_at) + "<page><<<&&&" + xml.substr(bad_at));
  const Collected garbage = read_path(dir + "/garbage.xml", 2);
  EXPECT_GT(garbage.stats.documents, 10u);
  EXPECT_EQ(garbage.stats.warnings, 1u);
}

TEST(CorpusWikipedia, NotXmlAtAllIsAnError) {
  const std::string dir = ::testing::TempDir() + "/corpus_wikipedia";
  ctrl::make_directories(dir);
  ctrl::write_file_atomically(dir + "/broken.xml", "<mediawiki><<<< not xml");
  EXPECT_THROW(read_path(dir + "/broken.xml", 1), ctrl::Error);
  EXPECT_THROW(read_path(dir + "/missing.xml", 1), ctrl::Error);
}

// The documents of an XML export in memory, read as the control code "Wiki".
std::vector<ctrl::Document> read_xml(const std::string& xml, ctrl::ReadStats& stats) {
  ctrl::Warnings warnings(stats, 0);
  std::vector<ctrl::Document> docs;
  ctrl::DocumentSink sink = [&](ctrl::Document&& d) { docs.push_back(std::move(d)); };
  ctrl::ReadContext context{"Wiki", {}, stats, warnings, sink};
  auto stream = ctrl::memory_byte_stream(xml, "mem", warnings);
  ctrl::read_wikipedia_xml(*stream, "mem", context);
  return docs;
}

TEST(CorpusWikipedia, MinimalExportWithAllPageKinds) {
  const std::string xml =
      "<mediawiki><page><title>A</title><ns>0</ns><revision><text>'''A''' is [[B|a letter]].</text></revision></page>"
      "<page><title>R</title><ns>0</ns><redirect title=\"A\"/><revision><text>#REDIRECT [[A]]</text></revision></page>"
      "<page><title>R2</title><ns>0</ns><revision><text>#転送 [[A]]</text></revision></page>"
      "<page><title>D</title><ns>0</ns><revision><text>'''D''' may mean:\n* x\n{{人名の曖昧さ回避}}</text></revision></page>"
      "<page><title>T:X</title><ns>10</ns><revision><text>template</text></revision></page>"
      "<page><title>E</title><ns>0</ns><revision><text>{{Infobox}}</text></revision></page>"
      "</mediawiki>";
  ctrl::ReadStats stats;
  const std::vector<ctrl::Document> docs = read_xml(xml, stats);
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(docs[0].text, "A is a letter.");
  EXPECT_EQ(docs[0].control_code, "Wiki");
  EXPECT_EQ(stats.dropped["redirect"], 2u);
  EXPECT_EQ(stats.dropped["disambiguation"], 1u);
  EXPECT_EQ(stats.dropped["namespace"], 1u);
  EXPECT_EQ(stats.dropped["empty"], 1u);
  EXPECT_EQ(stats.warnings, 0u);
}

// Exports of schema 0.3 and older have no <ns>: a page's namespace is the one its title's prefix names
// in <siteinfo>, and a title without such a prefix (a colon of its own included) is an article.
TEST(CorpusWikipedia, OldExportsWithoutNsKeepTheirArticles) {
  auto page = [](const std::string& title) {
    return "<page><title>" + title + "</title><id>1</id><revision><text>" + title +
           " は記事の本文です。</text></revision></page>";
  };
  const std::string xml =
      "<mediawiki xmlns=\"http://www.mediawiki.org/xml/export-0.3/\" version=\"0.3\"><siteinfo><namespaces>"
      "<namespace key=\"-2\">メディア</namespace><namespace key=\"0\" /><namespace key=\"4\">Wikipedia</namespace>"
      "<namespace key=\"10\">Template</namespace></namespaces></siteinfo>" +
      page("東京") + page("Wikipedia:井戸端") + page("Template:Infobox") + page("Re:ゼロ") + "</mediawiki>";
  ctrl::ReadStats stats;
  const auto docs = read_xml(xml, stats);
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0].title, "東京");
  EXPECT_EQ(docs[1].title, "Re:ゼロ");
  EXPECT_EQ(stats.dropped["namespace"], 2u);
  EXPECT_EQ(stats.warnings, 0u);
}

// Two dump parts joined with `cat` are two XML documents in one file: the
// second is read on, with or without its XML declaration, across the reader's
// 1 MiB buffers. Anything else after the first document stays an error.
TEST(CorpusWikipedia, ConcatenatedDumpPartsAreAllRead) {
  auto part = [](const std::string& title, const std::string& padding) {
    return "<mediawiki><page><title>" + title + "</title><ns>0</ns><revision><text>" + title + " は記事の本文です。" +
           padding + "</text></revision></page></mediawiki>\n";
  };
  const std::string declaration = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  for (const std::string& padding : {std::string(), std::string((1 << 20) - 100, 'x')}) {
    ctrl::ReadStats stats;
    const auto docs = read_xml(part("A", padding) + part("B", "") + declaration + part("C", ""), stats);
    ASSERT_EQ(docs.size(), 3u) << padding.size();
    EXPECT_EQ(docs[2].text.rfind("C は記事の本文です。", 0), 0u) << docs[2].text;
    EXPECT_EQ(stats.warnings, 0u);
  }
  ctrl::ReadStats stats;
  EXPECT_EQ(read_xml(part("A", "") + "trailing junk", stats).size(), 1u);
  EXPECT_EQ(stats.warnings, 1u);
}

}  // namespace
