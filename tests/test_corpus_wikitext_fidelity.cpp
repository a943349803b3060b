// Fidelity of the wikitext cleaner on real Japanese Wikipedia text: one test per rule on verbatim
// pieces of ../shared/data/jawiki-excerpt.xml.bz2 (tests/data/corpus/jawiki-snippets.wiki), the whole
// excerpt read end to end, and the warnings of the Aozora and JSON-lines readers.
#include <gtest/gtest.h>

#include <map>

#include "core/file_io.h"
#include "corpus/aozora.h"
#include "corpus/input.h"
#include "corpus/sources.h"
#include "corpus/wikitext.h"
#include "corpus_test_support.h"

namespace {

using ctrl::wikitext_to_text;

const std::string kExcerpt = CTRL_SOURCE_DIR "/../shared/data/jawiki-excerpt.xml.bz2";
const std::string kAozora = CTRL_SOURCE_DIR "/../shared/data/aozora-notation-examples.sjis.txt";

// The pieces of jawiki-snippets.wiki by id.
const std::map<std::string, std::string>& snippets() {
  static const std::map<std::string, std::string> pieces = [] {
    std::map<std::string, std::string> r;
    const std::string s = ctrl::read_file(corpus_test::kData + "/jawiki-snippets.wiki");
    size_t p = 0;
    while ((p = s.find("\n#### ", p)) != std::string::npos) {
      const size_t bar = s.find(" | ", p), nl = s.find('\n', p + 1);
      const size_t next = s.find("\n#### ", nl);
      r[s.substr(p + 6, bar - p - 6)] = s.substr(nl + 1, (next == std::string::npos ? s.size() - 1 : next) - nl - 1);
      p = nl;
    }
    return r;
  }();
  return pieces;
}

std::string text_of(const std::string& id) {
  const auto it = snippets().find(id);
  EXPECT_NE(it, snippets().end()) << id;
  return it == snippets().end() ? "" : wikitext_to_text(it->second);
}

std::string without(const std::string& id, uint32_t rule) {
  ctrl::WikitextOptions options;
  options.disabled_rules = rule;
  return wikitext_to_text(snippets().at(id), options);
}

bool has_line(const std::string& text, const std::string& line) {
  return ("\n" + text + "\n").find("\n" + line + "\n") != std::string::npos;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(WikitextFidelity, SnippetsAreVerbatimFromTheExcerpt) {
  if (!ctrl::file_exists(kExcerpt)) GTEST_SKIP() << "excerpt not found at " << kExcerpt;
  ctrl::ReadStats stats;
  ctrl::Warnings warnings(stats, 0);
  auto stream = ctrl::open_byte_stream(kExcerpt, warnings);
  std::string xml, buffer(1 << 20, '\0');
  while (const size_t n = stream->read(buffer.data(), buffer.size())) xml.append(buffer, 0, n);
  ASSERT_GE(snippets().size(), 15u);
  for (const auto& [id, piece] : snippets()) {
    std::string escaped;  // as the XML export writes text
    for (char c : piece) {
      if (c == '&') escaped += "&amp;";
      else if (c == '<') escaped += "&lt;";
      else if (c == '>') escaped += "&gt;";
      else if (c == '"') escaped += "&quot;";
      else escaped += c;
    }
    EXPECT_NE(xml.find(escaped), std::string::npos) << id;
  }
}

TEST(WikitextFidelity, EveryHtml5EntityDecodedOnce) {
  const std::string t = text_of("entities");  // 正規言語
  EXPECT_TRUE(contains(t, "文字セット Σ 上の正規言語"));
  EXPECT_TRUE(has_line(t, "空文字列言語 { ε } は正規言語である。"));
  EXPECT_TRUE(contains(t, "a ∈ Σ である各 a"));
  EXPECT_TRUE(contains(t, "A ∪ B（和集合）も A • B（結合）"));
  EXPECT_EQ(t.find('&'), std::string::npos);
  EXPECT_TRUE(contains(without("entities", ctrl::kWikitextEntities), "&Sigma;"));
  EXPECT_TRUE(contains(text_of("entities-theta"), "揺らぎ角を θ とすると"));  // ネマティック液晶
  // Names up to the longest HTML5 one, two-code-point ones, and once only.
  EXPECT_EQ(ctrl::decode_html_entities("&CounterClockwiseContourIntegral;&NotEqualTilde;&amp;lt;&Sigma"),
            "\u2233\u2242\u0338&lt;&Sigma");
}

TEST(WikitextFidelity, LayoutTemplatesGiveBackTheirListsAndHeadings) {
  const std::string fukui = text_of("layout-no-col-break");  // 福井県: {{no col break}} inside {{div col}}
  EXPECT_TRUE(has_line(fukui, "嶺北"));
  EXPECT_TRUE(has_line(fukui, "嶺南"));
  EXPECT_TRUE(has_line(fukui, "福井市（県本庁舎所在地）"));
  EXPECT_TRUE(has_line(fukui, "若狭町（旧上中町地域）"));
  EXPECT_EQ(without("layout-no-col-break", ctrl::kWikitextLayoutTemplates), "");
  const std::string paris = text_of("layout-columns-list");  // パリ: {{Columns-list|2|…}}, the "2" is no text
  EXPECT_EQ(paris.rfind("オデオン座\n", 0), 0u);
  EXPECT_TRUE(has_line(paris, "オペラ・ガルニエ（日本で「オペラ座」と呼ぶのはこちら）"));
  EXPECT_FALSE(has_line(paris, "2"));
  EXPECT_EQ(text_of("layout-table2"), "松葉ガニ\n岩ガキ\n白イカ\n\nイワシ\nカレイ\nマグロ");  // 鳥取県: {{表2列}}
  // 兵庫県: {{ul}} whose item holds a {{col-list}}.
  EXPECT_EQ(text_of("layout-ul"), "高原\n鉢伏高原\n神鍋高原\n瀞川平\n兎和野高原\n上山高原\n杉ヶ沢高原\n柤岡高原\n美原高原\n美方高原\n"
                                   "砥峰高原\n峰山高原");
  const std::string austria = text_of("layout-col");  // オーストリア: {{col|…|…|…}}
  EXPECT_TRUE(has_line(austria, "オーストリア関係記事の一覧"));
  EXPECT_TRUE(has_line(austria, "ターフェルシュピッツ"));
}

TEST(WikitextFidelity, ContentTemplatesGiveTheirText) {
  EXPECT_TRUE(contains(text_of("ipa"), "「か行」は k、「さ行」は s（θ を用いる地方・話者もある）"));  // 日本語: {{IPA}}
  EXPECT_TRUE(contains(without("ipa", ctrl::kWikitextContentTemplates), "「か行」は、「さ行」は"));
  // スペイン語: {{lang}} nested in {{audio}}.
  EXPECT_EQ(text_of("audio-lang"), "スペイン語（スペインご、西：español）は、インド・ヨーロッパ語族イタリック語派に属する言語。");
  const std::string quote = text_of("cquote");  // 人工知能: {{Cquote}}, whose quotation was lost
  EXPECT_TRUE(contains(quote, "誤解を恐れず平易にいいかえるならば、「これまで人間にしかできなかった知的な行為"));
  EXPECT_EQ(without("cquote", ctrl::kWikitextContentTemplates), "");
  EXPECT_EQ(text_of("en"), "I am a president.」「I am happy.」と同じ調子で「I am go.」と誤った作文をすることがある");
  // One template switched off alone.
  ctrl::WikitextOptions no_ipa;
  no_ipa.disabled_template = "ipa";
  EXPECT_FALSE(contains(wikitext_to_text(snippets().at("ipa"), no_ipa), " k、"));
  // Every rule is listed with what it gives.
  bool lang = false;
  for (const auto& [name, gives] : ctrl::wikitext_template_rules()) lang = lang || (name == "lang" && !gives.empty());
  EXPECT_TRUE(lang);
}

TEST(WikitextFidelity, MathKeepsItsTexInlineSoNoSentenceHasAHole) {
  const std::string t = text_of("math");  // 文脈自由文法
  EXPECT_EQ(t, "R\\, は V から (V\\cup\\Sigma)^{*} への関係であり、\\exist\\, w\\in (V\\cup\\Sigma)^{*}: (S,w)\\in R が成り立つ");
  EXPECT_TRUE(contains(without("math", ctrl::kWikitextMath), "は から への関係であり、 が成り立つ"));  // the old hole
  // TeX that looks like markup stays TeX: "<3 … 1>" (ネマティック液晶).
  EXPECT_TRUE(contains(text_of("entities-theta"), "\\Delta \\chi = 1/2 <3 \\cos^{2} \\theta - 1> N \\Delta \\kappa と"));
}

TEST(WikitextFidelity, CodeBlocksKeepTheirLines) {
  EXPECT_EQ(text_of("code"), "以下のCSS断片を例にとる。\n\np#id { color: #ff3300 }");  // Cascading Style Sheets
  EXPECT_EQ(without("code", ctrl::kWikitextCode), "以下のCSS断片を例にとる。");
}

TEST(WikitextFidelity, SimpleTablesAreRowsOthersGoWithTheirTitle) {
  const std::string cases = text_of("table-kept");  // 日本語: the table of 格助詞
  EXPECT_TRUE(has_line(cases, "助詞 | 機能 | 使用例"));
  EXPECT_TRUE(has_line(cases, "が | 動作・作用の主体を表す。 | 例：「空が青い」、「犬がいる」"));
  EXPECT_TRUE(has_line(cases, "で | 動作・作用の行われる場所を表す。 | 「川で洗濯する」、「風呂で寝る」"));
  EXPECT_EQ(without("table-kept", ctrl::kWikitextTables), "主な格助詞とその典型的な機能は次の通りである。");
  const std::string inline_cells = text_of("table-kept-inline-cells");  // "a || b" cells, quotes removed
  EXPECT_TRUE(has_line(inline_cells, "学校に行く。 | 学校は行く。（学校には行く。）"));
  // 栃木県: a ranking with colspan and cells from data templates: dropped, its ";title" line with it.
  EXPECT_EQ(text_of("table-dropped-with-title"), "");
  // 栃木県: a title whose bracket held only data templates keeps no "（ ）".
  EXPECT_EQ(text_of("caption-empty-brackets"), "栃木県内市別人口密度ランキング");
  // Without the rule the brackets stay, emptied of the values only the wiki's data knows.
  EXPECT_EQ(without("caption-empty-brackets", ctrl::kWikitextEmptyBrackets), "栃木県内市別人口密度ランキング（）");
}

TEST(WikitextFidelity, BracketsThatAreTextStay) {
  // フランス語 and 香川県 write these brackets themselves: only brackets that dropped markup emptied go.
  EXPECT_EQ(wikitext_to_text("コンマ（,）、[[括弧]]（( )、[ ]）以外"), "コンマ（,）、括弧（( )、[ ]）以外");
  EXPECT_EQ(wikitext_to_text("（）内は全国平均"), "（）内は全国平均");
  EXPECT_EQ(wikitext_to_text("前（{{lang|en|}}、後）"), "前（後）");
}

// The whole excerpt through the Wikipedia reader: what the issue found lost or dirty is fixed everywhere.
TEST(WikitextFidelity, WholeExcerptHasNoLeftoverMarkupAndKeepsWhatWasLost) {
  if (!ctrl::file_exists(kExcerpt)) GTEST_SKIP() << "excerpt not found at " << kExcerpt;
  const corpus_test::Collected c = corpus_test::read_path(kExcerpt, "Wikipedia");
  std::map<std::string, std::string> by_title;
  for (const auto& d : c.docs) by_title[d.title] = d.text;
  ASSERT_GE(by_title.size(), 190u);
  for (const auto& [title, text] : by_title) {
    EXPECT_EQ(ctrl::decode_html_entities(text), text) << title << ": an entity left";
    for (const char* markup : {"{{", "}}", "[[", "]]", "<ref", "</ref", "<math", "{|", "<!--"})
      EXPECT_FALSE(contains(text, markup)) << title << ": " << markup;
  }
  EXPECT_TRUE(contains(by_title["正規言語"], "文字セット Σ 上の"));
  EXPECT_TRUE(has_line(by_title["福井県"], "嶺北"));
  EXPECT_TRUE(has_line(by_title["福井県"], "嶺南"));
  EXPECT_TRUE(has_line(by_title["パリ"], "オデオン座"));
  EXPECT_TRUE(contains(by_title["日本語"], "「か行」は k、"));
  EXPECT_TRUE(contains(by_title["スペイン語"], "西：español"));
  EXPECT_TRUE(contains(by_title["人工知能"], "誤解を恐れず平易にいいかえるならば"));
  EXPECT_FALSE(contains(by_title["文脈自由文法"], "は から への"));
  EXPECT_FALSE(contains(by_title["栃木県"], "ランキング（"));
  // 社会学: prose after a trailing section (関連書籍) is kept; the book list itself is not.
  EXPECT_TRUE(contains(by_title["社会学"], "日本の社会学者の質問題"));
  EXPECT_FALSE(contains(by_title["社会学"], "ソシオロゴス"));
}

TEST(WikitextFidelity, AozoraInvalidByteWarningNamesItsOffsetAndDelIsNoText) {
  if (!ctrl::file_exists(kAozora)) GTEST_SKIP() << "sample not found at " << kAozora;
  std::string raw = ctrl::read_file(kAozora);
  const size_t at = raw.find("\r\n", raw.size() / 2) + 2;  // a line start in the middle of the real file
  raw.insert(at, "\x81\x7F");                               // a lead byte, then DEL
  uint64_t bad = 0, first = 0;
  const std::string utf8 = ctrl::decode_japanese_bytes(raw, &bad, &first);
  EXPECT_EQ(bad, 2u);
  EXPECT_EQ(first, at);
  EXPECT_EQ(utf8.find('\x7F'), std::string::npos);
  const std::string dir = corpus_test::temp_dir("wikitext_fidelity", "aozora");
  ctrl::write_file_atomically(dir + "/bad.txt", raw);
  ctrl::ReaderOptions options;
  testing::internal::CaptureStderr();
  ctrl::read_source({"青空文庫", dir + "/bad.txt"}, options, [](ctrl::Document&&) {});
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(err, "bad.txt: byte " + std::to_string(at) + ": 2 byte(s)")) << err;
}

TEST(WikitextFidelity, JsonLineWithInvalidUtf8IsReportedAsSuchAndKept) {
  std::string data = ctrl::read_file(corpus_test::kData + "/sample.jsonl");
  const size_t line = data.size();
  data += "{\"text\": \"壊れた\xFF文字\"}\n";
  const std::string dir = corpus_test::temp_dir("wikitext_fidelity", "jsonl");
  ctrl::write_file_atomically(dir + "/bad.jsonl", data);
  ctrl::ReaderOptions options;
  std::vector<std::string> texts;
  testing::internal::CaptureStderr();
  const ctrl::ReadStats stats =
      ctrl::read_source({"Web", dir + "/bad.jsonl"}, options, [&](ctrl::Document&& d) { texts.push_back(d.text); });
  const std::string err = testing::internal::GetCapturedStderr();
  const size_t offset = line + std::string("{\"text\": \"壊れた").size();
  EXPECT_TRUE(contains(err, "bad.jsonl: byte " + std::to_string(offset) + ": 1 invalid UTF-8 byte(s)")) << err;
  ASSERT_FALSE(texts.empty());
  EXPECT_EQ(texts.back(), "壊れた文字");
  EXPECT_EQ(stats.dropped.at("bad_json"), 2u);  // only the two lines of the sample that are bad JSON
}

}  // namespace
