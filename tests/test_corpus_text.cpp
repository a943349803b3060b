// Plain text, JSON lines, byte streams and source dispatch (files, directories, globs).
#include <gtest/gtest.h>
#include <sys/stat.h>

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

std::string temp_dir(const std::string& name) { return corpus_test::temp_dir("corpus_text", name); }

TEST(CorpusText, ParseSourceSpec) {
  const ctrl::SourceSpec s = ctrl::parse_source_spec("Wikipedia=data/jawiki.xml.bz2");
  EXPECT_EQ(s.control_code, "Wikipedia");
  EXPECT_EQ(s.path, "data/jawiki.xml.bz2");
  EXPECT_EQ(ctrl::parse_source_spec("Books=a=b.txt").path, "a=b.txt");
  for (const char* bad : {"nocode", "=path", "Code=", "Two words=x"})
    EXPECT_THROW(ctrl::parse_source_spec(bad), ctrl::Error) << bad;
}

TEST(CorpusText, PlainTextFileIsOneDocumentAndBadBytesAreWarnings) {
  const std::string dir = temp_dir("plain");
  ctrl::write_file_atomically(dir + "/a.txt", "\xEF\xBB\xBF一行目\r\n二行目\xff\xfe\r\n\r\n");
  const Collected c = read_path(dir + "/a.txt");
  ASSERT_EQ(c.docs.size(), 1u);
  EXPECT_EQ(c.docs[0].text, "一行目\n二行目");
  EXPECT_EQ(c.docs[0].control_code, "Web");
  EXPECT_EQ(c.stats.warnings, 1u);
  ctrl::write_file_atomically(dir + "/empty.txt", "");
  EXPECT_EQ(read_path(dir + "/empty.txt").stats.dropped.at("empty"), 1u);
}

// A text file longer than a document may be (a whole corpus in one .txt) is read as several documents,
// cut at blank lines, else at line ends, else between characters: nothing of it is lost.
TEST(CorpusText, ALongPlainTextFileIsSplitIntoDocumentsNotCut) {
  const std::string dir = temp_dir("long");
  std::string text;
  for (int k = 0; k < 40; ++k) text += "第" + std::to_string(k) + "段落の文。\n続きの行。\n\n";
  ctrl::write_file_atomically(dir + "/corpus.txt", text);
  const Collected c = read_path(dir + "/corpus.txt", "Web", 100);
  ASSERT_GT(c.docs.size(), 10u);
  std::string joined;
  for (const auto& d : c.docs) {
    EXPECT_LE(d.text.size(), 100u);
    EXPECT_EQ(d.text.find("第"), 0u) << d.text;  // every piece starts at a paragraph
    joined += d.text + "\n\n";
  }
  EXPECT_EQ(joined, text);
  EXPECT_EQ(c.stats.warnings, 1u);  // said once
  // One paragraph longer than a document: cut at line ends; one line: between characters.
  const std::string line(300, 'a'), kana = "あいうえお" + std::string(40, 'x') + "かきくけこ";
  ctrl::write_file_atomically(dir + "/lines.txt", line + "\n" + line);
  const Collected lines = read_path(dir + "/lines.txt", "Web", 128);
  std::string back;
  for (const auto& d : lines.docs) back += d.text;
  EXPECT_EQ(back, line + line);
  std::string repeated;
  for (int k = 0; k < 10; ++k) repeated += kana;
  ctrl::write_file_atomically(dir + "/chars.txt", repeated);
  std::string chars;
  for (const auto& d : read_path(dir + "/chars.txt", "Web", 32).docs) {
    EXPECT_EQ(ctrl::sanitize_utf8(d.text, nullptr), d.text);  // no character cut in two
    chars += d.text;
  }
  EXPECT_EQ(chars, repeated);
}

// What ctrl cannot read is named for what it is, not read as binary or as
// garbled Shift_JIS: other compressions, UTF-16, a pipe, an empty directory.
TEST(CorpusText, UnreadableKindsAreNamed) {
  const std::string dir = temp_dir("kinds");
  auto error_of = [](const std::string& path) {
    try {
      read_path(path);
    } catch (const ctrl::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  ctrl::write_file_atomically(dir + "/a.xml.gz", std::string("\x1F\x8B\x08\x00\x00\x00", 6));
  EXPECT_EQ(error_of(dir + "/a.xml.gz"),
            dir +
                "/a.xml.gz: gzip-compressed (gunzip it first); ctrl reads UTF-8, Shift_JIS or EUC-JP text, plain or "
                "bz2-compressed");
  ctrl::write_file_atomically(dir + "/u.txt", std::string("\xFF\xFE\x42\x30", 4));  // UTF-16LE あ
  EXPECT_NE(error_of(dir + "/u.txt").find("UTF-16 text"), std::string::npos);
  ctrl::make_directories(dir + "/empty");
  ctrl::write_file_atomically(dir + "/empty/.hidden", "x");
  EXPECT_EQ(error_of(dir + "/empty"),
            dir + "/empty: no file to read (the directory is empty, or holds only hidden files)");
  std::remove((dir + "/pipe").c_str());
  ASSERT_EQ(mkfifo((dir + "/pipe").c_str(), 0600), 0);
  EXPECT_NE(error_of(dir + "/pipe").find("not a regular file (a pipe or a device)"), std::string::npos);
}

TEST(CorpusText, JsonLinesWithControlCodesAndBadLines) {
  const Collected c = read_path(kData + "/sample.jsonl");
  ASSERT_EQ(c.docs.size(), 3u);
  EXPECT_EQ(c.docs[0].text, "最初の文書です。\n二行目。");
  EXPECT_EQ(c.docs[0].control_code, "Web");
  EXPECT_EQ(c.docs[1].control_code, "News");
  EXPECT_EQ(c.docs[2].control_code, "Reviews");
  EXPECT_EQ(c.docs[2].title, "題");
  EXPECT_EQ(c.stats.warnings, 2u);  // one line that is not JSON, one without "text"
  EXPECT_EQ(c.stats.dropped.at("bad_json"), 2u);
}

// A bad JSON line's warning says what is wrong with it: the parser's reason
// (a lone surrogate escape, which Python's json.dumps writes, was reported as
// "not a JSON object"), or that it is JSON but no object; it names the line's number and byte offset.
TEST(CorpusText, BadJsonLinesSayWhatIsWrong) {
  const std::string path = ::testing::TempDir() + "/bad_lines.jsonl";
  ctrl::write_file_atomically(path, "{\"text\": \"\\ud83d alone\"}\n[1, 2]\n{\"text\": \"good\"}\n");
  ctrl::ReaderOptions options;
  options.max_warnings_printed = 10;
  testing::internal::CaptureStderr();
  std::vector<ctrl::Document> docs;
  const auto stats =
      ctrl::read_source({"Web", path}, options, [&](ctrl::Document&& d) { docs.push_back(std::move(d)); });
  const std::string said = testing::internal::GetCapturedStderr();
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(stats.dropped.at("bad_json"), 2u);
  EXPECT_NE(said.find("bad_lines.jsonl: byte 0: line 1 is not valid JSON (column"), std::string::npos) << said;
  EXPECT_NE(said.find("surrogate"), std::string::npos) << said;
  EXPECT_NE(said.find("bad_lines.jsonl: byte 25: line 2 is JSON but not an object"), std::string::npos) << said;
  std::remove(path.c_str());
}

TEST(CorpusText, DirectoryOfMixedFilesInSortedOrder) {
  const std::string dir = temp_dir("mixed");
  ctrl::make_directories(dir + "/sub");
  ctrl::write_file_atomically(dir + "/b.txt", "二番目のファイル");
  ctrl::write_file_atomically(dir + "/a.jsonl", "{\"text\": \"JSONの文書\"}\n");
  ctrl::write_file_atomically(dir + "/sub/c.txt", "題名\n著者\n\n［＃ここから２字下げ］\n字下げの本文《ほんぶん》\n底本：「題名」\n");
  ctrl::write_file_atomically(dir + "/sub/d.json", ctrl::read_file(kData + "/wikiextractor.json"));
  ctrl::write_file_atomically(dir + "/e.txt", "");
  ctrl::write_file_atomically(dir + "/.hidden.txt", "隠しファイル");
  const Collected c = read_path(dir);
  ASSERT_EQ(c.docs.size(), 5u);
  EXPECT_EQ(c.docs[0].text, "JSONの文書");
  EXPECT_EQ(c.docs[1].text, "二番目のファイル");
  EXPECT_EQ(c.docs[2].text, "字下げの本文");  // detected as Aozora notation
  EXPECT_EQ(c.docs[3].title, "アンパサンド");
  EXPECT_EQ(c.stats.dropped.at("empty"), 1u);

  const Collected globbed = read_path(dir + "/*.txt");
  ASSERT_EQ(globbed.docs.size(), 1u);
  EXPECT_EQ(globbed.docs[0].text, "二番目のファイル");
  EXPECT_THROW(read_path(dir + "/*.none"), ctrl::Error);
  EXPECT_THROW(read_path(dir + "/missing"), ctrl::Error);
}

TEST(CorpusText, LineReaderSkipsOverlongLines) {
  ctrl::ReadStats stats;
  ctrl::Warnings warnings(stats, 0);
  const std::string data = "short\n" + std::string(5000, 'x') + "\nafter\r\nlast";
  auto stream = ctrl::memory_byte_stream(data, "mem", warnings);
  ctrl::LineReader lines(*stream, "mem", warnings, 1000);
  std::string line;
  std::vector<std::string> got;
  while (lines.next(line)) got.push_back(line);
  EXPECT_EQ(got, (std::vector<std::string>{"short", "after", "last"}));
  EXPECT_EQ(stats.warnings, 1u);
  EXPECT_EQ(stats.dropped.at("line too long"), 1u) << "a skipped line is a dropped document, counted";
  // An overlong last line (no newline after it) is skipped and counted too.
  const std::string tail = "a\n" + std::string(5000, 'y');
  auto tail_stream = ctrl::memory_byte_stream(tail, "mem", warnings);
  ctrl::LineReader tail_lines(*tail_stream, "mem", warnings, 1000);
  got.clear();
  while (tail_lines.next(line)) got.push_back(line);
  EXPECT_EQ(got, std::vector<std::string>{"a"});
  EXPECT_EQ(stats.dropped.at("line too long"), 2u);
}

TEST(CorpusText, SanitizeUtf8AndEntities) {
  uint64_t bad = 0, first = 0;
  EXPECT_EQ(ctrl::sanitize_utf8("a\xC3\xA9\xED\xA0\x80z\xF0\x9F\x98\x80", &bad, &first), "a\xC3\xA9z\xF0\x9F\x98\x80");
  EXPECT_EQ(bad, 3u);
  EXPECT_EQ(first, 3u);
  EXPECT_EQ(ctrl::decode_html_entities("&amp;&lt;&gt;&quot;&#65;&#x3042;&bogus;&#xZZ;&"), "&<>\"Aあ&bogus;&#xZZ;&");
}

}  // namespace
