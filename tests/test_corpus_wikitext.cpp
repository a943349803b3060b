// Wikitext to text: each construct, and malformed markup that must stay linear-time.
#include <gtest/gtest.h>

#include <chrono>

#include "corpus/wikitext.h"

namespace {

using ctrl::wikitext_to_text;

TEST(CorpusWikitext, LinksTemplatesAndQuotes) {
  EXPECT_EQ(wikitext_to_text("'''東京'''は[[日本]]の[[首都|首都]]。''斜体''"), "東京は日本の首都。斜体");
  EXPECT_EQ(wikitext_to_text("[[日本語|にほんご]]と[[英語]]s"), "にほんごと英語s");
  EXPECT_EQ(wikitext_to_text("前{{Infobox|名前={{lang|en|X}}|[[a|b]]}}後"), "前後");
  EXPECT_EQ(wikitext_to_text("{{仮リンク|フォスター (企業)|en|Foster's Group}}が{{lang|en|Geography}}"),
            "フォスター (企業)がGeography");
  EXPECT_EQ(wikitext_to_text("A[[ファイル:X.jpg|thumb|説明 [[リンク]] 付き]]B[[File:y.png]]C[[画像:z.svg|[[a]]]]D"), "ABCD");
  EXPECT_EQ(wikitext_to_text("本文\n[[Category:日本]]\n[[カテゴリ:東京]]\n[[en:Tokyo]]"), "本文");
  EXPECT_EQ(wikitext_to_text("[[:Category:日本|日本の記事]]を参照"), "日本の記事を参照");
  EXPECT_EQ(wikitext_to_text("[http://example.com 例のサイト]と[https://x.org]"), "例のサイトと");
  EXPECT_EQ(wikitext_to_text("__TOC__\n本文__NOTOC__"), "本文");
}

// Maintenance tags that mark a stretch of prose keep the prose; the tag alone gives nothing.
TEST(CorpusWikitext, MarkedRangesKeepTheirText) {
  EXPECT_EQ(wikitext_to_text("A{{要出典|範囲=主張である|date=2020年1月}}。"), "A主張である。");
  EXPECT_EQ(wikitext_to_text("A{{要出典|date=2020年1月}}。"), "A。");
  EXPECT_EQ(wikitext_to_text("{{独自研究範囲|説である|date=2021年}}と{{要検証範囲|数値|date=2021年}}"),
            "説であると数値");
  EXPECT_EQ(wikitext_to_text("{{疑問点範囲|疑問}}{{誰範囲|ある人}}{{信頼性要検証範囲|話}}{{要出典範囲|範囲=本文}}"),
            "疑問ある人話本文");
}

// The jawiki excerpt's templates that gave nothing though the page shows text (an audit of the excerpt).
TEST(CorpusWikitext, ReadingsTransliterationsAndCountryNamesKeepTheirText) {
  EXPECT_EQ(wikitext_to_text("[[フランス語]]の télévision（{{読み|テレヴィジオン|}}）に由来する。"),
            "フランス語の télévision（テレヴィジオン）に由来する。");
  EXPECT_EQ(wikitext_to_text("北京語で{{ピン音|Xīnxiè}}（シンシエ）と発音する"),
            "北京語でXīnxiè（シンシエ）と発音する");
  EXPECT_EQ(wikitext_to_text("（ラテン翻字: {{transl|ar|DIN|Miṣr}}）"), "（ラテン翻字: Miṣr）");
  EXPECT_EQ(wikitext_to_text("A{{transl|ar|Miṣr}}B{{transl|ar|}}C"), "AMiṣrBC");  // never the language code
  EXPECT_EQ(wikitext_to_text("（{{Smaller|ドイツ語: レプブリーク}}）"), "（ドイツ語: レプブリーク）");
  EXPECT_EQ(wikitext_to_text("（{{JPN}}・下関港国際ターミナル ― {{KOR}}・釜山）"),
            "（日本・下関港国際ターミナル ― 韓国・釜山）");
  EXPECT_EQ(wikitext_to_text("* {{USA}}[[モンタナ州]]"), "アメリカ合衆国モンタナ州");
  EXPECT_EQ(wikitext_to_text("{{ill|アテネのダモン|en|Damon of Athens}}と会った。"), "アテネのダモンと会った。");
  EXPECT_EQ(
      wikitext_to_text("（{{llang|言語記事名=カランガ語|la|Hango yeZimbabwe}}、"
                       "{{llang|言語記事名=チュワ語|表示言語名=コイサン語|la|Zimbabwe Nù}}、{{llang|en|Zimbabwe}}）"),
      "（カランガ語: Hango yeZimbabwe、コイサン語: Zimbabwe Nù、Zimbabwe）");
  // ";term:definition" on one line is two lines, as the page shows it; a colon written &#58; is text.
  EXPECT_EQ(wikitext_to_text(";エキスパートシステム:推論機能を適用する。\n;時刻&#58;正午\n;用語\n"
                             ";[[CSI:科学捜査班]]:ドラマ\n;[http://example.com 例]:リンク"),
            "エキスパートシステム\n推論機能を適用する。\n時刻:正午\n用語\nCSI:科学捜査班\nドラマ\n例\nリンク");
  EXPECT_EQ(wikitext_to_text("（{{interlang|en|Entropia Universe}}）と（{{interlang|en|Title|表示名}}）"),
            "（Entropia Universe）と（表示名）");
  EXPECT_EQ(wikitext_to_text("1,707万5,400{{nbsp}}km2で、30{{nbsp}}°C"), "1,707万5,400 km2で、30 °C");
  // Home nations, former states and IOC codes outside ISO 3166.
  EXPECT_EQ(wikitext_to_text("{{ENG}}、{{URS}}、{{FRG}}、{{TPE}}、{{IRI}}"),
            "イングランド、ソビエト連邦、西ドイツ、チャイニーズタイペイ、イラン");
  EXPECT_EQ(wikitext_to_text("{{flag|兵庫県}}と{{flag|JPN}}と{{flagcountry|USA}}"), "兵庫県と日本とアメリカ合衆国");
  EXPECT_EQ(wikitext_to_text("{{flagicon|USA}} アメリカ"), "アメリカ");  // the flag alone shows no text
  EXPECT_EQ(wikitext_to_text("{{col-list|2|\n* a\n* b}}"), "a\nb");      // a layout rule, not Colombia's code
}

// Coordinates in prose read as jawiki shows them; those shown only beside the title, or taken from Wikidata, give
// nothing (the sentences around them lost their object: "国境 () である").
TEST(CorpusWikitext, CoordinatesReadAsThePageShowsThem) {
  EXPECT_EQ(wikitext_to_text("国境 ({{Coord|33|22||N|38|47||E|display=inline}}) である。"),
            "国境 (北緯33度22分 東経38度47分) である。");
  EXPECT_EQ(wikitext_to_text(
                "県庁は{{ウィキ座標度分秒|39|42|12.6|N|141|9|9.8|E|region:JP|name=岩手県庁|display=inline,title}}。"),
            "県庁は北緯39度42分12.6秒 東経141度9分9.8秒。");
  EXPECT_EQ(wikitext_to_text("南西{{coord|6|10.5|S|106|49.7|W|type:city}}、十進{{coord|-33.87|151.21}}"),
            "南西南緯6度10.5分 西経106度49.7分、十進南緯33.87度 東経151.21度");
  EXPECT_EQ(wikitext_to_text("首都{{Coord|30|2|N|31|13|E|type:city|display=title}}"), "首都");
  EXPECT_EQ(wikitext_to_text("県{{Coord|format=dms|region:JP-22_type:adm1st|display=inline,title}}"), "県");
  EXPECT_EQ(wikitext_to_text("点{{coord|35|x|N|139|E}}と{{coord|35|41|N|139}}"), "点と");  // neither form
  // Lower-case letters and the short display forms; seconds without minutes, a malformed number or more
  // than two bare numbers are neither form (one of them read "北緯35度 東経41度").
  EXPECT_EQ(wikitext_to_text("{{coord|35|41|22|n|139|41|30|e|display=it}}"), "北緯35度41分22秒 東経139度41分30秒");
  EXPECT_EQ(wikitext_to_text("点{{coord|33||15|N|38||47|E}}{{coord|1.2.3|4.|N|5|E}}{{coord|35|41|22|139|41|30}}"),
            "点");
  EXPECT_EQ(wikitext_to_text("首都{{coord|30|2|N|31|13|E|display=t}}"), "首都");
}

// Where only the wiki's data knows a value, the sentence is dropped rather than kept with a hole.
TEST(CorpusWikitext, SentencesWithValuesOnlyTheWikiKnowsAreDropped) {
  // A line of thousands of such values goes whole, in linear time (each value rescanned the line).
  std::string data = "前の段落。\n";
  for (int i = 0; i < 20000; ++i) data += "{{自治体人口/x}}い。";
  EXPECT_EQ(wikitext_to_text(data + "\n後の段落。"), "前の段落。\n後の段落。");
  EXPECT_EQ(
      wikitext_to_text("兵庫県は近畿地方にある。推計人口は{{自治体人口/兵庫県|兵庫県}}人である。県庁所在地は神戸市。"),
      "兵庫県は近畿地方にある。県庁所在地は神戸市。");
  EXPECT_EQ(wikitext_to_text("面積は{{formatnum:{{自治体面積/岩手県|岩手県}}}}km<sup>2</sup>で、広い。\n次の段落。"),
            "次の段落。");
  EXPECT_EQ(wikitext_to_text("人口は{{formatnum:{{#expr:{{自治体人口/北海道|札幌市}}/10000 round 0}}}}万人。"), "");
  EXPECT_EQ(wikitext_to_text("* 札幌\n* 中通り {{自治体人口/福島県|中通り}}人\n* 会津"), "札幌\n会津");  // no gap left
  // Other stops end a sentence too; a stop inside a quotation does not.
  EXPECT_EQ(wikitext_to_text("A。人口は{{自治体人口/x|y}}人！次の文。"), "A。次の文。");
  EXPECT_EQ(wikitext_to_text("A。彼は「人口は{{自治体人口/x|y}}人。」と述べた。次。"), "A。次。");
  // In brackets, the brackets go and the sentence stays; in a heading or a ;title only the value goes.
  EXPECT_EQ(wikitext_to_text("以下、人口は推計人口（総人口は{{自治体人口/福島県|福島県}}人）による。"),
            "以下、人口は推計人口による。");
  EXPECT_EQ(wikitext_to_text("; 秋田周辺地域（{{formatnum:{{#expr:{{自治体人口/秋田県|x}}}}}}人）\n* 秋田市"),
            "秋田周辺地域\n秋田市");
  EXPECT_EQ(wikitext_to_text("A。\n== 脚注 ==\nx\n== 人口{{自治体人口/x|date}}現在 ==\n本文。"), "A。\n人口\n本文。");
  EXPECT_EQ(wikitext_to_text("=== 県北地方振興局管内 {{自治体人口/福島県|県北}}人 ===\n本文"),
            "県北地方振興局管内\n本文");
  // In a table a cell with such a value is empty, as one of the template alone was: the row keeps the rest.
  EXPECT_EQ(wikitext_to_text("{|\n|-\n| 札幌市 || {{自治体人口/北海道|札幌市}} || 道央\n|-\n| 旭川市 || 1 || 道北\n|}"),
            "札幌市 | 道央\n旭川市 | 1 | 道北");
  EXPECT_EQ(
      wikitext_to_text("{|\n|-\n| 札幌市 || {{formatnum:{{自治体人口/北海道|札幌市}}}}人 || 道央\n|-\n| 旭川市 || 1 || "
                       "道北\n|}"),
      "札幌市 | 道央\n旭川市 | 1 | 道北");
  // A page cannot forge the mark (U+E003).
  EXPECT_EQ(wikitext_to_text("A\xEE\x80\x83"
                             "B。C"),
            "AB。C");
}

// What removing a <ref> leaves between two full stops or at the start of a line.
TEST(CorpusWikitext, AFootnoteBetweenFullStopsOrLinesLeavesOneSentence) {
  EXPECT_EQ(wikitext_to_text("発言している。<ref>[https://x.jp 参考]</ref>。次の文。"), "発言している。次の文。");
  EXPECT_EQ(wikitext_to_text("断言できないとしている{{Sfn|山田|2001}}\n。次の文。"),
            "断言できないとしている。次の文。");
  EXPECT_EQ(wikitext_to_text("神奈川県出身 \n<ref name=\"a\">x</ref>。女性。"), "神奈川県出身。女性。");
  EXPECT_EQ(wikitext_to_text("した。<ref>x</ref>\n。次"), "した。次");
  EXPECT_EQ(wikitext_to_text("段落。\n\n。で始まる段落"), "段落。\n\n。で始まる段落");  // a blank line stays a break
  // Only a paragraph's line joins the one before, and only a paragraph's line takes it.
  EXPECT_EQ(wikitext_to_text("== 概要 ==\n<ref>x</ref>。本文。"), "概要\n。本文。");
  EXPECT_EQ(wikitext_to_text("* 項目A\n、項目B"), "項目A\n、項目B");
  EXPECT_EQ(wikitext_to_text("文\n* 、項目"), "文\n、項目");
  EXPECT_EQ(wikitext_to_text("目的とする。<blockquote>（80条）出版権者は</blockquote>続く文"),
            "目的とする。\n（80条）出版権者は\n続く文");
  // In a table cell a quotation is a space: a line break would make the table no longer simple.
  EXPECT_EQ(wikitext_to_text("{|\n|-\n| a<blockquote>q</blockquote>x || b\n|-\n| c || d\n|}"), "a q x | b\nc | d");
}

TEST(CorpusWikitext, TagsCommentsEntities) {
  EXPECT_EQ(wikitext_to_text("文<ref name=\"a\">出典 [[x]]</ref>章<ref name=\"a\" />。"), "文章。");
  EXPECT_EQ(wikitext_to_text("<b>太字</b>と<span style=\"x\">範囲</span><!-- 注釈 -->"), "太字と範囲");
  // <math> keeps its TeX inline (no hole in the sentence); <gallery> goes with its content.
  EXPECT_EQ(wikitext_to_text("式<math>x^2</math>と<gallery>\nA.jpg|a\n</gallery>図"), "式x^2と図");
  EXPECT_EQ(wikitext_to_text("a &amp; b &lt;c&gt; &#12354;&#x3042;&nbsp;!"), "a & b <c> ああ\u00a0!");
  EXPECT_EQ(wikitext_to_text("1 < 2 かつ 3 > 2"), "1 < 2 かつ 3 > 2");
  EXPECT_EQ(wikitext_to_text("行<br />改行"), "行\n改行");
}

TEST(CorpusWikitext, TablesHeadingsListsAndTrailingSections) {
  EXPECT_EQ(wikitext_to_text("前\n{| class=\"wikitable\"\n|-\n| a || b\n|}\n後"), "前\n\na | b\n\n後");  // a simple table: rows
  EXPECT_EQ(wikitext_to_text("前\n{| class=\"wikitable\"\n|-\n| rowspan=2 | a || b\n|}\n後"), "前\n\n後");
  // A <br> in a cell is a space there (40 tables of the excerpt have one; they were dropped whole), a line
  // break elsewhere; a comment on a line of its own inside a table is nothing.
  EXPECT_EQ(
      wikitext_to_text("{| class=\"wikitable\"\n! 名前 !! 説明\n<!-- 見出し行 -->\n|-\n| A || 一行目<br />二行目\n"
                       "|-\n| B || {{nowrap|x<br>y}}\n|}\n前<br>後"),
      "名前 | 説明\nA | 一行目 二行目\nB | x y\n\n前\n後");
  EXPECT_EQ(wikitext_to_text("導入\n== 歴史 ==\n本文\n=== 近代 ===\n* 項目1\n# 項目2\n: 字下げ\n; 用語"),
            "導入\n歴史\n本文\n近代\n項目1\n項目2\n字下げ\n用語");
  EXPECT_EQ(wikitext_to_text("本文\n== 脚注 ==\n{{Reflist}}\n== 外部リンク ==\n* [http://x.jp X]"), "本文");
  ctrl::WikitextOptions keep;
  keep.drop_trailing_sections = false;
  EXPECT_EQ(wikitext_to_text("本文\n== 関連項目 ==\n* [[A]]", keep), "本文\n関連項目\nA");
  EXPECT_EQ(wikitext_to_text("段落1\n\n\n\n段落2"), "段落1\n\n段落2");
}

TEST(CorpusWikitext, RedirectsAndDisambiguation) {
  EXPECT_TRUE(ctrl::is_redirect_wikitext("#REDIRECT [[A]]"));
  EXPECT_TRUE(ctrl::is_redirect_wikitext("  #redirect[[A]]"));
  EXPECT_TRUE(ctrl::is_redirect_wikitext("#転送 [[A]]"));
  EXPECT_FALSE(ctrl::is_redirect_wikitext("本文 #REDIRECT"));
  for (const char* t : {"{{Aimai}}", "x\n{{aimai}}", "{{曖昧さ回避}}", "{{人名の曖昧さ回避|x}}", "{{地名の曖昧さ回避}}", "{{Disambig}}"})
    EXPECT_TRUE(ctrl::is_disambiguation_wikitext(t)) << t;
  EXPECT_FALSE(ctrl::is_disambiguation_wikitext("{{要曖昧さ回避|date=2020}}"));
  EXPECT_FALSE(ctrl::is_disambiguation_wikitext("曖昧さ回避のページ"));
}

TEST(CorpusWikitext, UnclosedMarkupKeepsTheRestOfThePage) {
  EXPECT_EQ(wikitext_to_text("前{{未完のテンプレート|a\n後の段落"), "前未完のテンプレート|a\n後の段落");
  EXPECT_EQ(wikitext_to_text("[[閉じない リンク\n本文"), "閉じない リンク\n本文");
  EXPECT_EQ(wikitext_to_text("a<ref>閉じない注\n本文"), "a閉じない注\n本文");
  EXPECT_EQ(wikitext_to_text("a<!-- 閉じないコメント\n本文"), "a");  // as MediaWiki: the comment runs to the end
  EXPECT_EQ(wikitext_to_text("x}}y]]z|}"), "x}}y]]z|}");
}

TEST(CorpusWikitext, PathologicalInputStaysLinear) {
  // 200k unclosed openers of every kind; quadratic scanning would take minutes here.
  std::string evil = "本文 ";
  for (int i = 0; i < 200000; ++i) evil += "{{[[<ref><math>{|'''[http://a ";
  const std::string text = wikitext_to_text(evil);
  EXPECT_FALSE(text.empty());
  std::string deep(400000, '{');
  deep += std::string(400000, '}');
  EXPECT_NO_THROW(wikitext_to_text(deep));
}

}  // namespace
