// Cleaning: NFKC, control characters, whitespace, dedup, deterministic split.
#include <gtest/gtest.h>

#include "core/file_io.h"
#include "corpus/clean.h"
#include "test_support.h"

namespace ctrl {
namespace {

TEST(Clean, NfkcFoldsWidthAndCompatibilityForms) {
  // Half-width katakana, full-width Latin and digits, circled digit, ideographic space.
  EXPECT_EQ(normalize_nfkc("ｶﾀｶﾅ ＡＢＣ１２３ ①"), "カタカナ ABC123 1");
  EXPECT_EQ(clean_text("ｶﾞｯｺｳ\u3000で　ＡＩ"), "ガッコウ で AI");
  // The spacing sound marks stay whole (NFKC would make each a space and a combining mark).
  EXPECT_EQ(clean_text("宝石強盗゛黒猫゛と ゜"), "宝石強盗゛黒猫゛と ゜");
  EXPECT_EQ(clean_text(clean_text("゛")), "゛");
  EXPECT_EQ(clean_text("ｶﾞ"), "ガ");  // a half-width voiced mark still joins its kana
  // Already normalized Japanese is unchanged.
  EXPECT_EQ(clean_text("日本語の文章です。"), "日本語の文章です。");
}

// tools/hf_prompt.py is how a user of an exported model cleans a prompt as ctrl does (the exported
// tokenizer.model has no normalization of its own): it must give clean_text's result exactly.
TEST(Clean, ThePythonRecipeForExportedModelsCleansAsCtrlDoes) {
  const std::string dir = ::testing::TempDir();
  std::string out;
  if (test_support::run_shell("python3 -c 'import unicodedata' 2>&1", &out) != 0) GTEST_SKIP() << "no python3: " << out;
  for (const std::string text :
       {"ＡＢＣ１２３ ｶﾀｶﾅ ①②", "日本\u3000語\t語\u00a0語", "日本\u200b語\uFEFF", "一\r\n\r\n\r\n二  三 ", "宝石強盗゛黒猫゛ ｶﾞ か\u3099",
        "㌔㍿Ⅻ～", "a\x01" "b\x7f" "c\uE000d", "line\u2028next\u2029", "  \n  indented\n\n\n\nend  ", "猫😀𠮷野家"}) {
    write_file_atomically(dir + "/prompt.txt", text);
    ASSERT_EQ(test_support::run_shell("python3 " CTRL_SOURCE_DIR "/tools/hf_prompt.py --clean < " + dir + "/prompt.txt > " +
                                          dir + "/clean.txt",
                                      &out),
              0)
        << out;
    EXPECT_EQ(read_file(dir + "/clean.txt"), clean_text(text)) << text;
  }
}

TEST(Clean, RemovesControlCharactersKeepsNewlines) {
  EXPECT_EQ(clean_text("a\x01" "b\x7f" "c\tz"), "abc z");
  EXPECT_EQ(clean_text("x\u200By\uFEFFz\uE000!"), "xyz!");  // zero-width space, BOM, private use
  EXPECT_EQ(clean_text("one\r\ntwo\rthree\u2028four"), "one\ntwo\nthree\nfour");
  EXPECT_EQ(clean_text("bad\xff\xfe utf8"), "bad utf8");
}

TEST(Clean, CollapsesWhitespacePerLineAndBlankLines) {
  EXPECT_EQ(clean_text("  a   b \t c  \n\n\n\n   d  \n \n"), "a b c\n\nd");
  EXPECT_EQ(clean_text("\n\n  \n"), "");
  EXPECT_EQ(clean_text("a\n \nb"), "a\n\nb");
}

TEST(Clean, IsIdempotent) {
  for (const char* s : {"ｶﾀｶﾅ\t\t x\r\n\r\n\r\ny", "  ①②\u00a0\u3000end ", "e\u200d\u0301 \x01z", "日本\n\n\n語"}) {
    const std::string once = clean_text(s);
    EXPECT_EQ(clean_text(once), once) << s;
  }
}

TEST(Clean, CountsCodePoints) {
  EXPECT_EQ(count_chars("日本語abc"), 6u);
  EXPECT_EQ(count_chars(""), 0u);
}

TEST(Clean, FilterDropsEmptyShortAndDuplicates) {
  DocumentFilter filter(CleanOptions{5});
  CleanStats stats;
  EXPECT_FALSE(filter.accept("", stats));
  EXPECT_FALSE(filter.accept("短い", stats));
  EXPECT_TRUE(filter.accept("これは十分に長い文書です。", stats));
  EXPECT_FALSE(filter.accept("これは十分に長い文書です。", stats));
  EXPECT_TRUE(filter.accept("これは別の長い文書です。", stats));
  EXPECT_EQ(stats.documents_in, 5u);
  EXPECT_EQ(stats.documents_kept, 2u);
  EXPECT_EQ(stats.dropped[DocumentFilter::kEmpty], 1u);
  EXPECT_EQ(stats.dropped[DocumentFilter::kTooShort], 1u);
  EXPECT_EQ(stats.dropped[DocumentFilter::kDuplicate], 1u);
  EXPECT_EQ(stats.chars_kept, 13u + 12u);
  EXPECT_EQ(stats.chars_dropped, 2u + 13u);
}

TEST(Clean, SplitIsDeterministicSeededAndNearTheFraction) {
  int held = 0, differs = 0;
  for (int i = 0; i < 20000; ++i) {
    const uint64_t h = text_hash("document " + std::to_string(i));
    EXPECT_EQ(is_held_out(h, 7, 0.1), is_held_out(h, 7, 0.1));
    held += is_held_out(h, 7, 0.1);
    differs += is_held_out(h, 7, 0.1) != is_held_out(h, 8, 0.1);
  }
  EXPECT_NEAR(held / 20000.0, 0.1, 0.01);
  EXPECT_GT(differs, 1000);  // another seed gives another split
  EXPECT_FALSE(is_held_out(text_hash("x"), 1, 0.0));
  // The hash is fixed across platforms and versions (the split must not move).
  EXPECT_EQ(text_hash("日本語"), 16336644465870788801ull);
  EXPECT_NE(text_hash("a"), text_hash("b"));
}

}  // namespace
}  // namespace ctrl

// Table cells: cut at whole characters by terminal columns (wide kana and
// kanji take two), padded to the width; never half a UTF-8 character.
TEST(Clean, FitColumnsCutsWholeCharactersByDisplayWidth) {
  EXPECT_EQ(ctrl::display_columns("Wikipedia"), 9);
  EXPECT_EQ(ctrl::display_columns("青空文庫"), 8);
  EXPECT_EQ(ctrl::display_columns("ｶﾀｶﾅ"), 4);       // halfwidth kana: one column each
  EXPECT_EQ(ctrl::display_columns("e\xcc\x81"), 1);  // e + combining acute
  EXPECT_EQ(ctrl::fit_columns("青空文庫", 10), "青空文庫  ");
  EXPECT_EQ(ctrl::fit_columns("青空文庫", 7), "青空文 ");  // the fourth would need columns 7 and 8
  EXPECT_EQ(ctrl::fit_columns("青空文庫", 7, true), " 青空文");
  EXPECT_EQ(ctrl::fit_columns("Wikipedia", 4), "Wiki");
  EXPECT_EQ(ctrl::fit_columns("", 3), "   ");
}
