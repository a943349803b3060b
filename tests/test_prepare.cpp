// ctrl prepare end to end: real readers, cleaning, split, tokenizer, shards,
// manifest; byte-identical reruns; one-line errors; the Debian renderers.
#include <gtest/gtest.h>
#include <sentencepiece_trainer.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "corpus/clean.h"
#include "corpus/debian_docs.h"
#include "corpus/prepare.h"
#include "corpus/sources.h"
#include "data/shard.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace ctrl {
namespace {

namespace fs = std::filesystem;

std::string japanese_document(int i) {
  const char* who[] = {"私は", "彼女は", "先生が", "子供たちは", "猫が", "東京の友人は", "父は", "学生が"};
  const char* what[] = {"本を", "りんごを", "手紙を", "新しい車を", "日本語の辞書を", "古い写真を", "コーヒーを"};
  const char* verb[] = {"読みました。", "買いました。", "書きます。", "見ています。", "探しました。", "飲みます。"};
  std::string text = "第" + std::to_string(i) + "話 ";
  for (int k = 0; k < 6; ++k) text += std::string(who[(i + k) % 8]) + what[(i * 3 + k) % 7] + verb[(i * 5 + k) % 6];
  return text + "\nThe end of story number " + std::to_string(i) + ".";
}

class PrepareTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ctrl_prep_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "novels");
    // Source 1: JSON lines, 120 documents + 5 duplicates + 3 too short + 2 empty, with half-width kana to normalize.
    std::ofstream jsonl(dir_ / "wiki.jsonl");
    for (int i = 0; i < 120; ++i) jsonl << nlohmann::json{{"text", japanese_document(i) + " ｶﾀｶﾅ"}}.dump() << "\n";
    for (int i = 0; i < 5; ++i) jsonl << nlohmann::json{{"text", japanese_document(i) + " カタカナ"}}.dump() << "\n";
    for (int i = 0; i < 3; ++i) jsonl << nlohmann::json{{"text", "短い"}}.dump() << "\n";
    for (int i = 0; i < 2; ++i) jsonl << nlohmann::json{{"text", " \t "}}.dump() << "\n";
    jsonl.close();
    // Source 2: a directory of plain text files, one document each.
    for (int i = 0; i < 30; ++i) std::ofstream(dir_ / "novels" / ("n" + std::to_string(100 + i) + ".txt")) << japanese_document(1000 + i);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<PrepareInput> inputs() const {
    std::vector<PrepareInput> in;
    for (const auto& [code, path] : std::vector<std::pair<std::string, std::string>>{
             {"Wikipedia", (dir_ / "wiki.jsonl").string()}, {"Novel", (dir_ / "novels").string()}}) {
      const SourceSpec spec{code, path};
      in.push_back({code, path, [spec](const DocumentSink& sink) { return read_source(spec, ReaderOptions{}, sink); }});
    }
    return in;
  }
  PrepareOptions options(const std::string& out) const {
    PrepareOptions o;
    o.out_dir = (dir_ / out).string();
    o.vocab_size = 400;
    o.valid_fraction = 0.1;
    o.threads = 2;
    o.quiet = true;
    return o;
  }
  fs::path dir_;
};

TEST_F(PrepareTest, EndToEndShardsMatchTheSummary) {
  const PrepareSummary s = prepare_corpus(inputs(), options("out"));
  ASSERT_EQ(s.sources.size(), 2u);
  EXPECT_EQ(s.sources[0].clean.documents_in, 128u);  // the reader itself skips the 2 empty lines
  EXPECT_EQ(s.sources[0].clean.documents_kept, 120u);
  EXPECT_EQ(s.sources[0].clean.dropped.at(DocumentFilter::kDuplicate), 5u);  // NFKC made them equal
  EXPECT_EQ(s.sources[0].clean.dropped.at(DocumentFilter::kTooShort), 3u);
  EXPECT_EQ(s.sources[1].clean.documents_kept, 30u);

  const Dataset d = Dataset::open((dir_ / "out").string());
  ASSERT_EQ(d.n_codes(), 2u);
  EXPECT_EQ(d.code(0).name, "Wikipedia");
  EXPECT_EQ(d.code(1).name, "Novel");
  const Tokenizer t = Tokenizer::load(d.tokenizer_path());
  EXPECT_EQ(d.manifest().vocab_size, t.vocab_size());
  EXPECT_EQ(d.manifest().eos_id, t.eos_id());
  for (size_t c = 0; c < 2; ++c) {
    const auto& code = d.code(c);
    EXPECT_EQ(code.token_id, t.piece_to_id(code.name));
    EXPECT_EQ(code.documents_train + code.documents_valid, c == 0 ? 120u : 30u);
    EXPECT_GE(code.documents_valid, 1u);
    EXPECT_EQ(d.train(c).documents(), code.documents_train);
    EXPECT_EQ(d.valid(c).documents(), code.documents_valid);
    EXPECT_EQ(d.train(c).size(), s.codes[c].tokens_train);
    EXPECT_EQ(d.valid(c).size(), s.codes[c].tokens_valid);
    // Documents are followed by eos: count them, and decode the first one.
    std::vector<int32_t> all(d.train(c).size());
    d.train(c).copy(0, all.size(), all.data());
    EXPECT_EQ(uint64_t(std::count(all.begin(), all.end(), t.eos_id())), code.documents_train);
    EXPECT_EQ(all.back(), t.eos_id());
    const auto eos = std::find(all.begin(), all.end(), t.eos_id());
    const std::string first = t.decode(std::vector<int32_t>(all.begin(), eos));
    EXPECT_NE(first.find("The end of story number"), std::string::npos) << first;
    EXPECT_EQ(clean_text(first), first);
    if (c == 0) {
      EXPECT_NE(first.find("カタカナ"), std::string::npos) << "NFKC applied before tokenizing";
    }
  }
  // Sources are recorded with their counts.
  const auto manifest = nlohmann::json::parse(read_file((dir_ / "out" / "manifest.json").string()));
  EXPECT_EQ(manifest["sources"][0]["documents_kept"], 120);
  EXPECT_EQ(manifest["sources"][0]["dropped"]["duplicate"], 5);
  EXPECT_FALSE(fs::exists(dir_ / ("out.tmp-" + std::to_string(getpid()))));
}

// The same inputs give the same files, at another thread count too (another machine): the
// tokenizer trainer's float sums must not follow the cores.
TEST_F(PrepareTest, RerunIsByteIdenticalAndRollingShardsKeepTheTokens) {
  prepare_corpus(inputs(), options("a"));
  PrepareOptions b = options("b");
  b.threads = 1;
  prepare_corpus(inputs(), b);
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir_ / "a")) {
    ++files;
    EXPECT_EQ(read_file(e.path().string()), read_file((dir_ / "b" / e.path().filename()).string())) << e.path();
  }
  EXPECT_GE(files, 6u);  // tokenizer, manifest, 2 codes x 2 splits
  // Rerunning into an existing output replaces it.
  prepare_corpus(inputs(), b);
  EXPECT_EQ(read_file((dir_ / "a" / "manifest.json").string()), read_file((dir_ / "b" / "manifest.json").string()));

  // Small shards, the given tokenizer: same streams, more files.
  PrepareOptions small = options("small");
  small.shard_tokens = 500;
  small.tokenizer = (dir_ / "a" / "tokenizer.model").string();
  prepare_corpus(inputs(), small);
  const Dataset da = Dataset::open((dir_ / "a").string()), ds = Dataset::open((dir_ / "small").string());
  EXPECT_GT(ds.code(0).shards_train.size(), 3u);
  for (size_t c = 0; c < 2; ++c) {
    ASSERT_EQ(da.train(c).size(), ds.train(c).size());
    std::vector<int32_t> x(da.train(c).size()), y(x.size());
    da.train(c).copy(0, x.size(), x.data());
    ds.train(c).copy(0, y.size(), y.data());
    EXPECT_EQ(x, y);
  }
}

TEST_F(PrepareTest, AnotherSeedGivesAnotherSplit) {
  prepare_corpus(inputs(), options("s1"));
  PrepareOptions o = options("s2");
  o.seed = 2;
  prepare_corpus(inputs(), o);
  const Dataset a = Dataset::open((dir_ / "s1").string()), b = Dataset::open((dir_ / "s2").string());
  EXPECT_NE(read_file((dir_ / "s1" / "manifest.json").string()), read_file((dir_ / "s2" / "manifest.json").string()));
  EXPECT_EQ(a.code(0).documents_train + a.code(0).documents_valid, b.code(0).documents_train + b.code(0).documents_valid);
}

// A code with one document trains on it, whatever the split's hash says
// (at --valid-fraction 0.99 it would be held out, leaving the code no text).
TEST_F(PrepareTest, ACodesOnlyDocumentTrains) {
  std::ofstream(dir_ / "one.txt") << japanese_document(5000);
  const SourceSpec one{"One", (dir_ / "one.txt").string()};
  std::vector<PrepareInput> in = inputs();
  in.push_back({"One", one.path, [one](const DocumentSink& sink) { return read_source(one, ReaderOptions{}, sink); }});
  PrepareOptions o = options("only");
  o.valid_fraction = 0.99;
  const PrepareSummary summary = prepare_corpus(in, o);
  ASSERT_EQ(summary.codes.size(), 3u);
  EXPECT_EQ(summary.codes[2].name, "One");
  EXPECT_EQ(summary.codes[2].documents_train, 1u);
  EXPECT_EQ(summary.codes[2].documents_valid, 0u);
  EXPECT_GE(summary.codes[1].documents_train, 1u);  // the others keep one on each side
}

// Shard files carry the code's own name, Japanese included; only ASCII
// punctuation that a path cannot hold is replaced.
TEST_F(PrepareTest, ShardNamesKeepAJapaneseCodeAndReplaceASlash) {
  std::vector<PrepareInput> in;
  for (const auto& [code, path] : std::vector<std::pair<std::string, std::string>>{
           {"小説", (dir_ / "novels").string()}, {"wiki/ja", (dir_ / "wiki.jsonl").string()}}) {
    const SourceSpec spec{code, path};
    in.push_back({code, path, [spec](const DocumentSink& sink) { return read_source(spec, ReaderOptions{}, sink); }});
  }
  prepare_corpus(in, options("names"));
  const Dataset d = Dataset::open((dir_ / "names").string());
  ASSERT_EQ(d.n_codes(), 2u);
  EXPECT_EQ(d.code(0).name, "小説");
  ASSERT_FALSE(d.code(0).shards_train.empty());
  EXPECT_EQ(d.code(0).shards_train[0].rfind("00-小説.train.", 0), 0u) << d.code(0).shards_train[0];
  ASSERT_FALSE(d.code(1).shards_train.empty());
  EXPECT_EQ(d.code(1).shards_train[0].rfind("01-wiki_ja.train.", 0), 0u) << d.code(1).shards_train[0];
}

TEST_F(PrepareTest, BadInputGivesOneLineErrorsAndLeavesNothing) {
  auto expect_error = [&](std::vector<PrepareInput> in, PrepareOptions o, const std::string& needle) {
    const bool existed = fs::exists(o.out_dir);  // an --out that exists is left as it was
    try {
      prepare_corpus(in, o);
      FAIL() << "expected an error containing " << needle;
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(needle), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
    EXPECT_EQ(fs::exists(o.out_dir), existed);
    EXPECT_FALSE(fs::exists(o.out_dir + ".tmp-" + std::to_string(getpid())));
  };
  const SourceSpec missing{"Wikipedia", (dir_ / "nope.xml").string()};
  expect_error({{"Wikipedia", missing.path, [missing](const DocumentSink& s) { return read_source(missing, {}, s); }}},
               options("e1"), "nope.xml");
  std::ofstream(dir_ / "empty.txt").close();
  const SourceSpec empty{"Empty", (dir_ / "empty.txt").string()};
  expect_error({{"Empty", empty.path, [empty](const DocumentSink& s) { return read_source(empty, {}, s); }}},
               options("e2"), "empty.txt");
  expect_error({}, options("e3"), "no sources");
  PrepareOptions bad = options("e4");
  bad.valid_fraction = 1.5;
  expect_error(inputs(), bad, "valid-fraction");
  // A tokenizer that lacks one of the codes as a single token.
  prepare_corpus({inputs()[1]}, options("novel_only"));
  PrepareOptions wrong = options("e5");
  wrong.tokenizer = (dir_ / "novel_only" / "tokenizer.model").string();
  // A given tokenizer is checked before any source is read, and named as given.
  bool read = false;
  std::vector<PrepareInput> watched = inputs();
  for (auto& in : watched)
    in.read = [&read, inner = in.read](const DocumentSink& sink) {
      read = true;
      return inner(sink);
    };
  expect_error(watched, wrong, wrong.tokenizer + ": control code 'Wikipedia' is not a single token");
  // A code that is an ordinary piece of the tokenizer (a word of its text) is refused: text encodes to it.
  const Tokenizer novel = Tokenizer::load(wrong.tokenizer);
  std::string word;
  for (int32_t id = 0; id < int32_t(novel.vocab_size()) && word.empty(); ++id) {
    const std::string piece = novel.id_to_piece(id);
    const bool japanese = std::all_of(piece.begin(), piece.end(), [](char c) { return (unsigned char)c >= 0xE3; }) ||
                          std::none_of(piece.begin(), piece.end(), [](char c) { return (unsigned char)c < 0x80; });
    if (!novel.is_special(id) && piece.size() >= 6 && japanese && piece.find("\xE2\x96\x81") == std::string::npos)
      word = piece;
  }
  ASSERT_FALSE(word.empty());
  std::vector<PrepareInput> ordinary = watched;
  ordinary[0].control_code = word;
  expect_error(ordinary, wrong, "control code '" + word + "' is an ordinary piece of this tokenizer");
  // Tokenizers of older ctrl versions made the codes user-defined symbols: still accepted.
  const std::string older = (dir_ / "older_codes").string();
  {
    std::ofstream text(older + ".txt");
    for (int i = 0; i < 300; ++i) text << "吾輩は猫である。名前はまだ無い。 line " << i << " of some text\n";
  }
  const auto trained = sentencepiece::SentencePieceTrainer::Train(
      "--input=" + older + ".txt --model_prefix=" + older +
      " --vocab_size=340 --byte_fallback=true --add_dummy_prefix=false --remove_extra_whitespaces=false"
      " --normalization_rule_name=identity --user_defined_symbols=Wikipedia,Novel --minloglevel=2");
  ASSERT_TRUE(trained.ok()) << trained.ToString();
  PrepareOptions accepted = options("older_codes_corpus");
  accepted.tokenizer = older + ".model";
  EXPECT_NO_THROW(prepare_corpus(inputs(), accepted));
  PrepareOptions junk = options("e6");
  junk.tokenizer = (dir_ / "junk.model").string();
  std::ofstream(junk.tokenizer) << "not a model";
  expect_error(watched, junk, junk.tokenizer + ": not a SentencePiece model");
  // A code named as one of SentencePiece's own pieces: refused by name, and as a piece of a given tokenizer.
  for (const char* name : {"</s>", "<0x41>"}) {
    std::vector<PrepareInput> special = watched;
    special[0].control_code = name;
    expect_error(special, options("e7"), std::string("control code '") + name + "' is one of SentencePiece's special");
  }
  EXPECT_FALSE(read);
  // An existing directory that is not ours is never replaced.
  fs::create_directories(dir_ / "precious");
  std::ofstream(dir_ / "precious" / "keep.txt") << "x";
  try {
    prepare_corpus(inputs(), options("precious"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not written by `ctrl prepare`"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists(dir_ / "precious" / "keep.txt"));
  // Nor is one whose manifest.json is another program's, and that is found before any reading.
  std::ofstream(dir_ / "precious" / "manifest.json") << R"({"name": "app"})";
  expect_error(watched, options("precious"), "manifest.json");
  EXPECT_FALSE(read);
  EXPECT_TRUE(fs::exists(dir_ / "precious" / "keep.txt"));
  // Nor an earlier output with a file of the user's added: it is only replaced whole.
  prepare_corpus(inputs(), options("earlier"));
  std::ofstream(dir_ / "earlier" / "NOTES.md") << "mine";
  expect_error(watched, options("earlier"), "holds NOTES.md, which `ctrl prepare` did not write");
  EXPECT_FALSE(read);
  EXPECT_TRUE(fs::exists(dir_ / "earlier" / "NOTES.md"));
  fs::remove(dir_ / "earlier" / "NOTES.md");
  prepare_corpus(inputs(), options("earlier"));  // as prepare left it: replaced
  // A code that is not NFKC is refused before reading, naming the --source.
  std::vector<PrepareInput> wide = watched;
  wide[0].control_code = "Ｗｉｋｉ";
  expect_error(wide, options("e8"), "prepare: --source Ｗｉｋｉ=");
  // SentencePiece's space mark in a name would make a code of " x" in the text.
  wide[0].control_code = "\u2581x";
  expect_error(wide, options("e9"), "without spaces, commas or U+2581");
  EXPECT_FALSE(read);
}

// A JSON line whose own control code cannot be a token is skipped and counted;
// the other lines, and the source's code, go on.
TEST_F(PrepareTest, ADocumentsBadCodeSkipsThatDocument) {
  std::ofstream jsonl(dir_ / "coded.jsonl");
  for (int i = 0; i < 20; ++i)
    jsonl << nlohmann::json{{"text", japanese_document(2000 + i)}, {"control_code", i == 3 ? "</s>" : "Own"}}.dump()
          << "\n";
  jsonl.close();
  const SourceSpec spec{"Coded", (dir_ / "coded.jsonl").string()};
  std::vector<PrepareInput> in = inputs();
  in.push_back({spec.control_code, spec.path,
                [spec](const DocumentSink& sink) { return read_source(spec, ReaderOptions{}, sink); }});
  const PrepareSummary s = prepare_corpus(in, options("coded"));
  EXPECT_EQ(s.sources[2].clean.dropped.at("bad control code"), 1u);
  EXPECT_EQ(s.sources[2].clean.documents_kept, 19u);
  ASSERT_EQ(s.codes.size(), 3u);
  EXPECT_EQ(s.codes[2].name, "Own");
}

// One spool file is open per control code while reading: 300 per-line codes
// under a soft limit of 64 open files read, since prepare takes the hard limit.
TEST_F(PrepareTest, ManyPerDocumentCodesOutnumberTheSoftFileLimit) {
  std::ofstream jsonl(dir_ / "many.jsonl");
  for (int i = 0; i < 300; ++i)
    jsonl << nlohmann::json{{"text", japanese_document(3000 + i)}, {"control_code", "c" + std::to_string(i)}}.dump()
          << "\n";
  jsonl.close();
  struct rlimit files;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
  if (files.rlim_max != RLIM_INFINITY && files.rlim_max < 400) GTEST_SKIP() << "hard limit of open files below 400";
  const struct rlimit before = files;
  files.rlim_cur = 64;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &files), 0);
  const SourceSpec spec{"Many", (dir_ / "many.jsonl").string()};
  PrepareOptions o = options("many");
  o.vocab_size = 1000;
  PrepareSummary s;
  const std::string error = test_support::error_of([&] {
    s = prepare_corpus({{spec.control_code, spec.path,
                         [spec](const DocumentSink& sink) { return read_source(spec, ReaderOptions{}, sink); }}},
                       o);
  });
  setrlimit(RLIMIT_NOFILE, &before);
  EXPECT_EQ(error, "");
  EXPECT_EQ(s.codes.size(), 300u);
}

TEST_F(PrepareTest, CommandLineReportsErrorsInOneLine) {
  const std::string cmd = test_support::ctrl_binary() + " prepare --source Wikipedia=" +
                          (dir_ / "missing.bz2").string() + " --out " + (dir_ / "cli").string() + " 2>" +
                          (dir_ / "err.txt").string();
  const int status = std::system(cmd.c_str());
  EXPECT_EQ(WEXITSTATUS(status), 1);
  const std::string err = read_file((dir_ / "err.txt").string());
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("missing.bz2"), std::string::npos) << err;
}

TEST_F(PrepareTest, CommandLineOnTheRealWikipediaSample) {
  const std::string sample = std::string(CTRL_SOURCE_DIR) + "/../shared/data/jawiki-excerpt.xml.bz2";
  const std::string path = fs::exists(sample) ? sample : "/work/shared/data/jawiki-excerpt.xml.bz2";
  if (!fs::exists(path)) GTEST_SKIP() << "no Wikipedia sample";
  const std::string out = (dir_ / "wiki").string();
  const std::string cmd = test_support::ctrl_binary() + " prepare --source Wikipedia=" + path + " --source Novel=" +
                          (dir_ / "novels").string() + " --out " + out +
                          " --vocab-size 4000 --sample-sentences 4000 --valid-fraction 0.05 --threads 2 > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const Dataset d = Dataset::open(out);
  ASSERT_EQ(d.n_codes(), 2u);
  EXPECT_GT(d.code(0).documents_train, 150u);  // 198 articles after redirects, disambiguation, other namespaces
  EXPECT_GE(d.code(0).documents_valid, 1u);
  EXPECT_GT(d.train(0).size(), 100000u);
  EXPECT_EQ(d.manifest().vocab_size, 4000u);
}

// A prepare killed mid-run leaves "<out>.tmp-<pid>" with its spool files (and
// "<out>.old-<pid>" while replacing): the next prepare removes those of dead
// processes, but not a running prepare's, nor a directory it did not write.
TEST_F(PrepareTest, LeftoversOfAKilledPrepareAreRemoved) {
  const std::string out = (dir_ / "out").string();
  const pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  const std::string stale = out + ".tmp-" + std::to_string(dead), old = out + ".old-" + std::to_string(dead),
                    live = out + ".tmp-" + std::to_string(getppid()), foreign = out + ".tmp-" + std::to_string(dead + 1);
  for (const auto& d : {stale, old, live}) {
    make_directories(d);
    write_file_atomically(d + "/.spool-0", std::string(100, 's'));
  }
  make_directories(foreign + "/sub");  // not a flat directory of files: not ctrl's
  prepare_corpus(inputs(), options("out"));
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_FALSE(fs::exists(old));
  EXPECT_TRUE(fs::exists(live + "/.spool-0"));
  EXPECT_TRUE(fs::exists(foreign + "/sub"));
  EXPECT_TRUE(fs::exists(out + "/manifest.json"));
}

TEST(DebianDocs, RendersHtmlAsLinesOfText) {
  const std::string html =
      "<html><head><title>題</title><style>p{}</style></head><body>"
      "<div class=\"navheader\">前へ 次へ</div><h1>第1章 はじめに</h1>"
      "<p>これは\n段落です。<a href=\"#\">リンク</a></p><ul><li>項目一</li><li>項目二</li></ul>"
      "<pre>$ ls\n$ cd</pre><script>var x;</script></body></html>";
  const std::string text = clean_text(render_html(html, "test.html"));
  EXPECT_EQ(text, "第1章 はじめに\n\nこれは 段落です。リンク\n\n項目一\n\n項目二\n\n$ ls\n$ cd");
}

TEST(DebianDocs, RendersManPagesWithGroff) {
  const fs::path dir = fs::temp_directory_path() / ("ctrl_man_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "ls.1") << ".TH LS 1 \"2021年5月\" \"GNU coreutils\" \"ユーザーコマンド\"\n.SH 名前\nls \\- "
                                 "ディレクトリの内容を\nリスト表示する\n.SH 説明\n.PP\n\\fB\\-a\\fR, \\fB\\-\\-all\\fR\n"
                                 "\\&. で始まる要素を無視しない\n";
  std::ofstream(dir / "alias.1") << ".so man1/ls.1\n";
  const std::string text = clean_text(render_man_page((dir / "ls.1").string(), "ls.1"));
  EXPECT_EQ(text, "名前\nls - ディレクトリの内容を リスト表示する\n\n説明\n-a, --all . で始まる要素を無視しない") << text;
  EXPECT_EQ(render_man_page((dir / "alias.1").string(), "alias.1"), "");
  fs::remove_all(dir);
}

TEST(DebianDocs, MeasuresJapaneseShare) {
  EXPECT_DOUBLE_EQ(japanese_share("日本語です"), 1.0);
  EXPECT_DOUBLE_EQ(japanese_share("abcd 日本"), 2.0 / 6.0);
  EXPECT_DOUBLE_EQ(japanese_share("123 !!"), 0.0);
}

}  // namespace
}  // namespace ctrl
