// Aozora Bunko: the real notation-example file (Shift_JIS, CRLF), UTF-8 copies, a .zip, and gaiji lookup.
#include <gtest/gtest.h>
#include <zip.h>

#include "core/error.h"
#include "core/file_io.h"
#include "corpus/aozora.h"
#include "corpus/sources.h"

namespace {

const std::string kSample = CTRL_SOURCE_DIR "/../shared/data/aozora-notation-examples.sjis.txt";

#define REQUIRE_SAMPLE()                                                                   \
  if (!ctrl::file_exists(kSample)) GTEST_SKIP() << "sample data not found at " << kSample

std::vector<ctrl::Document> read_path(const std::string& path, ctrl::ReadStats* stats_out = nullptr) {
  std::vector<ctrl::Document> docs;
  ctrl::ReaderOptions options;
  options.max_warnings_printed = 0;
  ctrl::ReadStats stats = ctrl::read_source({"青空文庫", path}, options, [&](ctrl::Document&& d) { docs.push_back(std::move(d)); });
  if (stats_out) *stats_out = stats;
  return docs;
}

bool has_line(const std::string& text, const std::string& line) {
  return ("\n" + text + "\n").find("\n" + line + "\n") != std::string::npos;
}

TEST(CorpusAozora, JisX0213PlaneRowCellViaIconv) {
  EXPECT_EQ(ctrl::jisx0213_to_utf8(1, 13, 21), "Ⅰ");
  EXPECT_EQ(ctrl::jisx0213_to_utf8(1, 2, 22), "〻");
  EXPECT_EQ(ctrl::jisx0213_to_utf8(1, 6, 57), "ς");
  EXPECT_EQ(ctrl::jisx0213_to_utf8(1, 84, 77), "挘");
  EXPECT_EQ(ctrl::jisx0213_to_utf8(1, 4, 2), "あ");
  EXPECT_EQ(ctrl::jisx0213_to_utf8(2, 1, 1), "𠂉");
  EXPECT_EQ(ctrl::jisx0213_to_utf8(3, 1, 1), "");
  EXPECT_EQ(ctrl::jisx0213_to_utf8(1, 95, 1), "");
}

TEST(CorpusAozora, NotationExamplesFile) {
  REQUIRE_SAMPLE();
  ctrl::ReadStats stats;
  const auto docs = read_path(kSample, &stats);
  ASSERT_EQ(docs.size(), 1u);
  const std::string& t = docs[0].text;
  EXPECT_EQ(docs[0].title, "「注記一覧」記載例文");
  EXPECT_EQ(docs[0].control_code, "青空文庫");
  // Header (title, author, the 記号について block) and footer (from ［＃本文終わり］) are gone.
  EXPECT_EQ(t.find("青空文庫作成ファイル"), std::string::npos);
  EXPECT_EQ(t.find("【テキスト中に現れる記号について】"), std::string::npos);
  EXPECT_EQ(t.rfind("「注記一覧」に記載した記入例をまとめた、サンプルテキストです。", 0), 0u) << t.substr(0, 200);
  // No notation is left.
  for (const char* mark : {"［＃", "\r"}) EXPECT_EQ(t.find(mark), std::string::npos) << mark;
  // The only 《 》 left are the gaiji ※［＃始め二重山括弧、1-1-52］ and ※［＃終わり二重山括弧、1-1-53］.
  EXPECT_EQ(t.find("《"), t.rfind("《"));
  EXPECT_EQ(t.find("》"), t.rfind("》"));
  EXPECT_TRUE(has_line(t, "《"));
  EXPECT_TRUE(has_line(t, "》"));
  EXPECT_EQ(t.find("｜"), t.rfind("｜"));  // ※［＃縦線、1-1-35］
  EXPECT_TRUE(has_line(t, "｜"));
  // Ruby: base text kept, reading dropped.
  EXPECT_TRUE(has_line(t, "…頗る理論の品価を増たるもの多し。明治八年三月二十五日、福沢諭吉記。"));
  // Gaiji by plane-row-cell and by Unicode; the one with neither is 〓.
  EXPECT_TRUE(has_line(t, "挘"));
  EXPECT_TRUE(has_line(t, "呭"));  // U+546D
  EXPECT_TRUE(has_line(t, "〓"));  // 「土へん＋竒」、ページ数-行数
  EXPECT_TRUE(has_line(t, "〻"));
  EXPECT_TRUE(has_line(t, "ς"));
  EXPECT_TRUE(has_line(t, "…水鉢を置いた欞子窓の下には…"));
  EXPECT_EQ(stats.notes.at("gaiji written as 〓 (characters)"), 1u);  // a count of characters, not a dropped document
  EXPECT_EQ(stats.dropped.count("gaiji_unresolved"), 0u);
  // Accent notation.
  EXPECT_TRUE(has_line(t, "繁雑な日本の étiquette も、"));
  EXPECT_TRUE(has_line(t, "いささか、étranger の感があった。"));
  EXPECT_TRUE(has_line(t, "jusqu'à"));
  EXPECT_TRUE(has_line(t, "presqu'île"));
  EXPECT_TRUE(has_line(t, "'blessée'"));
  // 〔…〕 around Japanese text is ordinary punctuation and stays.
  EXPECT_NE(t.find("〔本全集第一巻所収〕"), std::string::npos);
  EXPECT_EQ(stats.warnings, 0u);
}

TEST(CorpusAozora, Utf8CopiesWithAndWithoutBomDecodeTheSame) {
  REQUIRE_SAMPLE();
  const std::string raw = ctrl::read_file(kSample);
  uint64_t bad = 0;
  const std::string utf8 = ctrl::decode_japanese_bytes(raw, &bad);
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(utf8.find('\r'), std::string::npos);
  const std::string dir = ::testing::TempDir() + "/corpus_aozora";
  ctrl::make_directories(dir);
  ctrl::write_file_atomically(dir + "/plain.txt", utf8);
  ctrl::write_file_atomically(dir + "/bom.txt", "\xEF\xBB\xBF" + utf8);
  const auto sjis = read_path(kSample);
  const auto plain = read_path(dir + "/plain.txt");
  const auto bom = read_path(dir + "/bom.txt");
  ASSERT_EQ(plain.size(), 1u);
  ASSERT_EQ(bom.size(), 1u);
  EXPECT_EQ(plain[0].text, sjis[0].text);
  EXPECT_EQ(bom[0].text, sjis[0].text);
}

TEST(CorpusAozora, Cp932FallbackAndBadBytes) {
  // "～" is 0x8160 in CP932; 0x87 0x40 (①) is NEC special in CP932 and JIS X 0213 alike; 0xFF never decodes.
  const std::string raw = std::string("\x82\xa0\x81\x60\r\n\x87\x40\xff\r\n", 10);
  uint64_t bad = 0;
  const std::string utf8 = ctrl::decode_japanese_bytes(raw, &bad);
  EXPECT_EQ(bad, 1u);
  EXPECT_EQ(utf8.substr(0, 3), "あ");
  EXPECT_NE(utf8.find("①"), std::string::npos);
}

// CP932's extension characters (IBM and NEC-selected) are what a Windows file
// means by them; JIS X 0213 has other kanji at those codes.
TEST(CorpusAozora, Cp932ExtensionCharactersAreNotReadAsJisX0213) {
  // 髙 0xFBFC, 橋 0x8BB4, 山 0x8E52, 﨑 0xFAB1, ⅰ 0xEEEF.
  const std::string raw = std::string("\xFB\xFC\x8B\xB4\x81\x40\x8E\x52\xFA\xB1\x81\x40\xEE\xEF\r\n", 16);
  uint64_t bad = 0;
  EXPECT_EQ(ctrl::decode_japanese_bytes(raw, &bad), "髙橋　山﨑　ⅰ\n");
  EXPECT_EQ(bad, 0u);
  // Without extension characters a line stays JIS X 0213: 0x8160 is the wave dash U+301C, not CP932's U+FF5E.
  EXPECT_EQ(ctrl::decode_japanese_bytes(std::string("\x82\xa0\x81\x60\r\n", 6), &bad), "あ\u301C\n");
  // And on a line with an extension character the same bytes give the same symbols: ― 〜 − as JIS X 0213 has them.
  EXPECT_EQ(ctrl::decode_japanese_bytes("\xFA\xB1\x81\x5C\x81\x60\x81\x7C\r\n\x81\x5C\x81\x60\x81\x7C\r\n", &bad),
            "﨑\u2014\u301C\u2212\n\u2014\u301C\u2212\n");
}

// EUC-JP text (a common Japanese encoding besides Shift_JIS) is read as
// EUC-JP, half-width kana included: it was read as Shift_JIS, into mojibake
// with no warning. Shift_JIS text, whose kana lead with 0x82 and 0x83, is not
// taken for it.
TEST(CorpusAozora, EucJpTextIsReadAsEucJp) {
  const std::string euc =
      "\xA4\xB3\xA4\xEC\xA4\xCF"
      "EUC-JP"
      "\xA4\xC7\xBD\xF1\xA4\xAB\xA4\xEC\xA4\xBF\xC6\xFC\xCB\xDC\xB8\xEC"
      "\xA4\xCE\xCA\xB8\xBE\xCF\xA4\xC7\xA4\xB9\xA1\xA3\x8E\xB6\x8E\xC0\x8E\xB6\x8E\xC5\r\n"
      "\xB8\xE3\xC7\xDA\xA4\xCF\xC7\xAD\xA4\xC7\xA4\xA2\xA4\xEB\xA1\xA3\r\n";
  EXPECT_TRUE(ctrl::looks_euc_jp(euc));
  uint64_t bad = 0, first = 0;
  ctrl::TextEncoding encoding = ctrl::TextEncoding::kUtf8;
  EXPECT_EQ(ctrl::decode_japanese_bytes(euc, &bad, &first, &encoding),
            "これはEUC-JPで書かれた日本語の文章です。ｶﾀｶﾅ\n吾輩は猫である。\n");
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(encoding, ctrl::TextEncoding::kEucJp);
  // A stray byte is dropped and named as EUC-JP's.
  const std::string damaged = euc.substr(0, 6) + "\x90" + euc.substr(6);
  EXPECT_FALSE(ctrl::looks_euc_jp(damaged));  // 0x90 is no EUC-JP byte: then it is Shift_JIS's
  const std::string sjis = "\x82\xB1\x82\xEA\x82\xCD\x93\xFA\x96\x7B\x8C\xEA\x82\xC5\x82\xB7\x81\x42\r\n";
  EXPECT_FALSE(ctrl::looks_euc_jp(sjis));
  EXPECT_EQ(ctrl::decode_japanese_bytes(sjis, &bad, &first, &encoding), "これは日本語です。\n");
  EXPECT_EQ(encoding, ctrl::TextEncoding::kShiftJis);
  const std::string cut = euc + "\xA4\xB3\xA4";  // a character cut at the end
  EXPECT_TRUE(ctrl::looks_euc_jp(cut));
  ctrl::decode_japanese_bytes(cut, &bad, &first, &encoding);
  EXPECT_EQ(bad, 1u);
  EXPECT_NE(ctrl::undecodable_bytes_text(bad, encoding).find("(the file is EUC-JP)"), std::string::npos);
}

// A UTF-8 Aozora file with a damaged byte, or cut inside its last character,
// stays UTF-8: only the bad bytes go, at the offset the warning names.
TEST(CorpusAozora, DamagedUtf8StaysUtf8) {
  REQUIRE_SAMPLE();
  uint64_t bad = 0;
  const std::string utf8 = ctrl::decode_japanese_bytes(ctrl::read_file(kSample), &bad);
  const std::string dir = ::testing::TempDir() + "/corpus_aozora_damaged";
  ctrl::make_directories(dir);
  const size_t at = utf8.find("福沢諭吉");
  ASSERT_NE(at, std::string::npos);
  ctrl::write_file_atomically(dir + "/damaged.txt", utf8.substr(0, at) + "\xFF" + utf8.substr(at));
  ctrl::write_file_atomically(dir + "/cut.txt", utf8 + "本文の続き\xE6\x9C");
  ctrl::ReadStats stats;
  const auto clean = read_path(kSample);
  const auto damaged = read_path(dir + "/damaged.txt", &stats);
  ASSERT_EQ(damaged.size(), 1u);
  EXPECT_EQ(damaged[0].text, clean[0].text);
  EXPECT_EQ(stats.warnings, 1u);
  uint64_t first = 0;
  ctrl::decode_japanese_bytes(utf8.substr(0, at) + "\xFF" + utf8.substr(at), &bad, &first);
  EXPECT_EQ(bad, 1u);
  EXPECT_EQ(first, at);
  const auto cut = read_path(dir + "/cut.txt");
  ASSERT_EQ(cut.size(), 1u);
  EXPECT_EQ(cut[0].text, clean[0].text);  // the cut line is past the 底本 footer
}

// Japanese text without Aozora's notation, in either encoding, is plain text:
// its first paragraph is not taken for a title block, 《書名》 is not ruby.
TEST(CorpusAozora, TextWithoutAozoraNotationIsPlainText) {
  const std::string dir = ::testing::TempDir() + "/corpus_aozora_plain";
  ctrl::make_directories(dir);
  // Shift_JIS: 社員名簿 / 山田 (no blank line after, no notation).
  ctrl::write_file_atomically(dir + "/sjis.txt",
                              std::string("\x8E\xD0\x88\xF5\x96\xBC\x95\xEB\r\n\x8E\x52\x93\x63\r\n", 14));
  const auto sjis = read_path(dir + "/sjis.txt");
  ASSERT_EQ(sjis.size(), 1u);
  EXPECT_EQ(sjis[0].text, "社員名簿\n山田");
  ctrl::write_file_atomically(dir + "/brackets.txt", "はじめに\n\n古典の《論語》と《孟子》について述べます。\n");
  const auto brackets = read_path(dir + "/brackets.txt");
  ASSERT_EQ(brackets.size(), 1u);
  EXPECT_EQ(brackets[0].text, "はじめに\n\n古典の《論語》と《孟子》について述べます。");
  EXPECT_EQ(ctrl::detect_source_kind(dir + "/brackets.txt"), ctrl::SourceKind::kPlainText);
  // Kana ruby is Aozora's: 漢字《かんじ》.
  EXPECT_TRUE(ctrl::looks_like_aozora("本文の漢字《かんじ》です。"));
  EXPECT_FALSE(ctrl::looks_like_aozora("古典の《論語》です。"));
}

// A symbol block whose rule comes right under the title, with no blank line, is still the header's.
TEST(CorpusAozora, SymbolBlockRightUnderTheTitleIsRemoved) {
  const ctrl::AozoraText t = ctrl::aozora_to_text(
      "題名\n著者\n-------------------------------------------------------\n【テキスト中に現れる記号について】\n\n"
      "《》：ルビ\n-------------------------------------------------------\n\n本文の一行目《いちぎょうめ》。\n");
  EXPECT_EQ(t.title, "題名");
  EXPECT_EQ(t.text, "本文の一行目。");
}

// A long work without ruby or annotations shows Aozora's notation only in its
// 底本 footer, past the first 64 KiB that detection reads: the tail is read too.
TEST(CorpusAozora, ALongWorkIsKnownByItsFooter) {
  const std::string dir = ::testing::TempDir() + "/corpus_aozora_long";
  ctrl::make_directories(dir);
  std::string body;
  while (body.size() < (100u << 10)) body += "吾輩は猫である。名前はまだ無い。\n";
  ctrl::write_file_atomically(dir + "/long.txt", "題名\n著者\n\n" + body + "\n底本：「全集」出版社\n入力：誰か\n");
  EXPECT_EQ(ctrl::detect_source_kind(dir + "/long.txt"), ctrl::SourceKind::kAozoraText);
  const auto docs = read_path(dir + "/long.txt");
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(docs[0].title, "題名");
  EXPECT_EQ(docs[0].text.find("底本"), std::string::npos);
  EXPECT_EQ(docs[0].text.rfind("吾輩は猫である。", 0), 0u);
}

// A first paragraph of long lines is body text, not a title block (the
// fuzzer's input once looped here forever).
TEST(CorpusAozora, ALongFirstParagraphIsBodyText) {
  std::string long_line;
  for (int i = 0; i < 40; ++i) long_line += "長い一行目です。";
  const ctrl::AozoraText t = ctrl::aozora_to_text(long_line + "\n二行目\n三行目\n\n本文《ほんぶん》。\n");
  EXPECT_EQ(t.title, "");
  EXPECT_EQ(t.text, long_line + "\n二行目\n三行目\n\n本文。");
}

// くの字点, written across two characters as ／＼ and ／″＼, becomes 〳〵 and 〴〵.
TEST(CorpusAozora, KunojitenBecomesItsCharacters) {
  const ctrl::AozoraText t = ctrl::aozora_to_text("［＃ここから本文］いろ／＼な事が、だん／″＼と。");
  EXPECT_EQ(t.text, "いろ〳〵な事が、だん〴〵と。");
}

TEST(CorpusAozora, ZipAsDistributed) {
  REQUIRE_SAMPLE();
  const std::string dir = ::testing::TempDir() + "/corpus_aozora_zip";
  ctrl::make_directories(dir);
  const std::string path = dir + "/12345_ruby_678.zip";
  const std::string raw = ctrl::read_file(kSample);
  int error = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &error);
  ASSERT_NE(z, nullptr);
  zip_source_t* txt = zip_source_buffer(z, raw.data(), raw.size(), 0);
  ASSERT_GE(zip_file_add(z, "chukiichiran.txt", txt, ZIP_FL_ENC_UTF_8), 0);
  static const char png[] = "\x89PNG\r\n\x1a\n";
  zip_source_t* img = zip_source_buffer(z, png, sizeof png - 1, 0);
  ASSERT_GE(zip_file_add(z, "fig1.png", img, 0), 0);
  ASSERT_EQ(zip_close(z), 0);
  const auto docs = read_path(path);
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(docs[0].text, read_path(kSample)[0].text);
  EXPECT_NE(docs[0].origin.find("chukiichiran.txt"), std::string::npos);

  ctrl::write_file_atomically(dir + "/broken.zip", "PK\x03\x04 not really a zip");
  ctrl::ReadStats stats;
  EXPECT_THROW(read_path(dir + "/broken.zip", &stats), ctrl::Error);  // nothing readable in the only file
}

TEST(CorpusAozora, SmallTextWithFooterAndNesting) {
  const std::string text =
      "吾輩は猫である\n夏目漱石\n\n吾輩《わがはい》は猫である。［＃「猫」に傍点］名前はまだ無い。\n"
      "｜一番《いちばん》［＃「［＃注］」は入れ子］よし。\n閉じない［＃注記と《ルビ\n\n底本：「吾輩は猫である」岩波文庫\n入力：某\n";
  const ctrl::AozoraText t = ctrl::aozora_to_text(text);
  EXPECT_EQ(t.title, "吾輩は猫である");
  EXPECT_EQ(t.author, "夏目漱石");
  EXPECT_EQ(t.text, "吾輩は猫である。名前はまだ無い。\n一番よし。\n閉じない注記とルビ");
}

// Shift_JIS's single bytes 0x5C and 0x7E are ASCII \ and ~ (as CP932, WHATWG and Python read them), not
// JIS X 0201's ¥ and ‾ that glibc's SHIFT_JISX0213 gives: paths and Aozora's tilde accent survive.
TEST(CorpusAozora, ShiftJisBackslashAndTildeStayAscii) {
  uint64_t bad = 0;
  // 0x8C 0xCC is 言 (a double byte whose trail is not 0x5C); ￥ 0x818F and ￣ 0x8150 stay full-width.
  EXPECT_EQ(ctrl::decode_japanese_bytes("\x8C\xBE C:\\tmp ~/data \x81\x8F\x81\x50", &bad), "言 C:\\tmp ~/data ￥￣\n");
  EXPECT_EQ(bad, 0u);
  // 0x955C is 表: its trail byte 0x5C is part of the character, not a backslash.
  EXPECT_EQ(ctrl::decode_japanese_bytes("\x95\x5C\x81\x40\x83\x5C", &bad), "表　ソ\n");
  const ctrl::AozoraText t = ctrl::aozora_to_text(
      "［＃ここから本文］" + ctrl::decode_japanese_bytes("\x96\x7B\x95\xB6\x81\x6B\x45\x73\x70\x61\x6E\x7E\x61\x81\x6C",
                                                         &bad));  // 本文〔Espan~a〕
  EXPECT_EQ(t.text, "本文España");
}

// A title carrying gaiji or ruby, or a file opening with a blank line, still has its header and symbol block
// taken off when the block follows; a rule of hyphens around the author's own text is text.
TEST(CorpusAozora, HeaderWithNotationBeforeTheSymbolBlock) {
  const std::string block =
      "-------------------------------------------------------\n【テキスト中に現れる記号について】\n\n"
      "《》：ルビ\n-------------------------------------------------------\n\n";
  ctrl::AozoraText t =
      ctrl::aozora_to_text("※［＃「木＋靈」、第3水準1-86-29］子窓\n山田太郎\n\n" + block + "本文《ほんぶん》です。\n");
  EXPECT_EQ(t.title, "欞子窓");
  EXPECT_EQ(t.author, "山田太郎");
  EXPECT_EQ(t.text, "本文です。");
  EXPECT_EQ(t.gaiji_resolved, 0u);  // the title's gaiji is not the body's
  t = ctrl::aozora_to_text("羅生門《らしょうもん》\n芥川龍之介\n\n" + block + "本文です。\n");
  EXPECT_EQ(t.title, "羅生門");
  EXPECT_EQ(t.text, "本文です。");
  t = ctrl::aozora_to_text("\n題名\n著者\n\n" + block + "本文です。\n");
  EXPECT_EQ(t.title, "題名");
  EXPECT_EQ(t.text, "本文です。");
  // Without the block, a first line with ruby is still body text.
  t = ctrl::aozora_to_text("ある日の暮方《くれがた》の事である。\n\n次の段落。\n");
  EXPECT_EQ(t.title, "");
  EXPECT_EQ(t.text, "ある日の暮方の事である。\n\n次の段落。");
  // Rules that hold no notation list are the author's; nothing between them is lost.
  t = ctrl::aozora_to_text("題名\n著者\n\n-------\n第一部の本文。\n-------\n第二部の本文。\n底本：x\n");
  EXPECT_EQ(t.title, "題名");
  EXPECT_EQ(t.text, "-------\n第一部の本文。\n-------\n第二部の本文。");
}

// A gaiji is a character of the text: a gaiji 〔 〕 around Latin text is not accent notation, and a gaiji
// inside an accent span does not stop the span's decoding.
TEST(CorpusAozora, GaijiAndAccentSpans) {
  ctrl::AozoraText t = ctrl::aozora_to_text(
      "［＃ここから本文］年代※［＃始めきっこう（亀甲）括弧、1-1-44］it's "
      "1925※［＃終わりきっこう（亀甲）括弧、1-1-45］の話。");
  EXPECT_EQ(t.text, "年代〔it's 1925〕の話。");
  t = ctrl::aozora_to_text(
      "［＃ここから本文］〔Dvor※［＃「ｒ」にキャロン、U+0159］a'k〕と〔L/o'dz〕と〔本全集〕の〔cafe'〕。");
  EXPECT_EQ(t.text, "DvorřákとŁódzと〔本全集〕のcafé。");
  t = ctrl::aozora_to_text("［＃ここから本文］〔e^〕〔〔u&〕〕〔h^ s^ i~〕");
  EXPECT_EQ(t.text, "ê〔ů〕ĥ ŝ ĩ");
}

// A gaiji note left open before the next bracket stands for one unknown character; the text after it stays.
TEST(CorpusAozora, UnclosedGaijiNoteKeepsTheTextAfterIt) {
  const ctrl::AozoraText t = ctrl::aozora_to_text(
      "［＃ここから本文］置いた※［＃「木＋靈」、第3水準1-86-29子窓の下に［＃「下に」に傍点］立つ人。");
  EXPECT_EQ(t.text, "置いた〓「木＋靈」、第3水準1-86-29子窓の下に立つ人。");
  EXPECT_EQ(t.gaiji_unresolved, 1u);
  // Each search for a note's ］ ends at the next ［: a line of 200,000 open notes is read in linear time
  // (searching to the line's end each time was quadratic).
  std::string open_notes = "［＃ここから本文］";
  for (int i = 0; i < 200000; ++i) open_notes += "※［＃";
  EXPECT_EQ(ctrl::aozora_to_text(open_notes + "］").gaiji_unresolved, 200000u);
}

}  // namespace
