// Tokenizer: training on a small generated Japanese corpus, control codes as
// single tokens, round trips, parallel encoding, small-corpus vocabulary.
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <regex>

#include "core/error.h"
#include "core/file_io.h"
#include "corpus/clean.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/trainer_log.h"

namespace ctrl {
namespace {

// A few thousand distinct Japanese sentences built from small word lists.
std::vector<std::string> japanese_sentences() {
  const char* who[] = {"私は", "彼女は", "先生が", "子供たちは", "猫が", "東京の友人は", "父は", "学生が"};
  const char* what[] = {"本を", "りんごを", "手紙を", "新しい車を", "日本語の辞書を", "古い写真を", "コーヒーを"};
  const char* how[] = {"ゆっくり", "毎日", "昨日", "静かに", "急いで", "三回"};
  const char* verb[] = {"読みました。", "買いました。", "書きます。", "見ています。", "探しました。", "飲みます。"};
  std::vector<std::string> out;
  for (auto a : who)
    for (auto b : what)
      for (auto c : how)
        for (auto d : verb) out.push_back(std::string(a) + c + b + d);
  // Real corpora mix in spaces and Latin text; so does this one.
  for (int i = 0; i < 200; ++i) out.push_back("Line " + std::to_string(i) + " of the ASCII part and 日本語 mixed");
  return out;
}

class TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() / ("ctrl_tok_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    VectorSentenceSource source(japanese_sentences());
    TokenizerTrainOptions options;
    options.vocab_size = 400;
    options.control_codes = {"Wikipedia", "Manual", "青空文庫"};
    trained_vocab_ = train_tokenizer(source, options, model_path());
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }
  static std::string model_path() { return (dir_ / "t.model").string(); }
  static std::filesystem::path dir_;
  static uint32_t trained_vocab_;
};
std::filesystem::path TokenizerTest::dir_;
uint32_t TokenizerTest::trained_vocab_ = 0;

// A control code is one control piece: text never encodes to it, the same
// word inside a document included, so it appears only where a sequence is given it.
TEST_F(TokenizerTest, ControlCodesAreControlPiecesThatNoTextEncodesTo) {
  const Tokenizer t = Tokenizer::load(model_path());
  EXPECT_EQ(trained_vocab_, 400u);
  EXPECT_EQ(t.vocab_size(), 400u);
  for (const char* code : {"Wikipedia", "Manual", "青空文庫"}) {
    const int32_t id = t.piece_to_id(code);
    ASSERT_GE(id, 0) << code;
    EXPECT_TRUE(t.is_control(id)) << code;
    EXPECT_EQ(t.id_to_piece(id), code);
    for (const std::string& text : {std::string(code), "the " + std::string(code) + "s of " + code + "日本語"}) {
      const auto ids = t.encode(text);
      EXPECT_EQ(std::count(ids.begin(), ids.end(), id), 0) << text;
      EXPECT_EQ(t.decode(ids), text);
    }
  }
  EXPECT_EQ(t.piece_to_id("NoSuchPiece"), -1);
  EXPECT_GE(t.eos_id(), 0);
  EXPECT_EQ(t.id_to_piece(t.eos_id()), "</s>");
}

TEST_F(TokenizerTest, RoundTripsJapaneseAndUnseenText) {
  const Tokenizer t = Tokenizer::load(model_path());
  for (const std::string text : {"私はゆっくり本を読みました。", "猫が毎日コーヒーを飲みます。\n先生が三回手紙を書きます。",
                                 "未知の漢字「鬱」と emoji 🍣 and ASCII 123", "Manual 私は"}) {
    const auto ids = t.encode_clean(text);
    EXPECT_FALSE(ids.empty());
    EXPECT_EQ(t.decode(ids), text);
  }
  // Seen sentences compress well below one token per character.
  EXPECT_LT(t.encode("私はゆっくり本を読みました。").size(), 10u);
  // encode() cleans (NFKC) first: half-width katakana maps to the full-width tokens.
  EXPECT_EQ(t.encode("ｺｰﾋｰ"), t.encode_clean("コーヒー"));
}

// Streamed text holds back a character still being spelled in byte pieces
// (it decodes as U+FFFD until complete), so nothing printed is ever wrong.
TEST(TextStream, HoldsBackAnIncompleteCharacter) {
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(printable_length("東京" + fffd + fffd, false), std::string("東京").size());
  EXPECT_EQ(printable_length("東京" + fffd, true), std::string("東京").size() + 3);
  EXPECT_EQ(printable_length("東京あ", false), std::string("東京あ").size());
  EXPECT_EQ(printable_length(fffd, false), 0u);
}

// Streams random and chosen id sequences through TextStream against t.decode().
void check_stream_against_decode(const Tokenizer& t) {
  std::vector<int32_t> bytes, words;
  for (int32_t id = 0; id < int32_t(t.vocab_size()); ++id)
    (t.id_to_piece(id).rfind("<0x", 0) == 0 ? bytes : words).push_back(id);
  ASSERT_EQ(bytes.size(), 256u);
  const std::vector<std::vector<int32_t>> fixed = {
      t.encode_clean("猫が 毎日\n 先生 🍣 と 鬱"),
      t.encode_clean(" 先頭の空白と末尾の空白 "),
      {bytes[0xE3], bytes[0x81], bytes[0x82], bytes[0x81]},             // あ, then a stray continuation byte
      {bytes[0xF0], bytes[0xE3], words[5], bytes[0xE3], bytes[0x81]}};  // cut characters, one at the end
  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> sequences = fixed;
  for (int n = 0; n < 300; ++n) {
    std::vector<int32_t> ids(1 + rng() % 40);
    for (auto& id : ids) id = rng() % 2 ? bytes[0x80 + rng() % 0x80] : words[rng() % words.size()];
    sequences.push_back(ids);
  }
  for (const auto& ids : sequences) {
    TextStream stream(t);
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) {
      out += stream.push(ids[i]);
      const std::string so_far = t.decode(std::vector<int32_t>(ids.begin(), ids.begin() + i + 1));
      ASSERT_EQ(so_far.compare(0, out.size(), out), 0)
          << t.path() << ", after token " << i << ": " << out << " | " << so_far;
    }
    out += stream.finish();
    ASSERT_EQ(out, t.decode(ids)) << t.path();
  }
}

// A stream of any ids, byte pieces (whole characters, cut ones, stray
// bytes), spaces, newlines and control pieces among them, returns exactly the
// whole sequence's decode(), and after each token a prefix of the decode() so
// far: with ctrl's tokenizers, and with one of SentencePiece's defaults (a
// dummy prefix, extra whitespace removed), as `ctrl import hf --tokenizer` takes.
TEST_F(TokenizerTest, StreamedTextIsTheWholeSequencesDecode) {
  std::string corpus;
  for (const std::string& s : japanese_sentences()) corpus += s + "\n";
  for (int i = 0; i < 300; ++i)
    corpus += "the quick brown fox jumps over the lazy dog number " + std::to_string(i) + "\n";
  write_file_atomically((dir_ / "defaults.txt").string(), corpus);
  const auto trained = sentencepiece::SentencePieceTrainer::Train(
      "--input=" + (dir_ / "defaults.txt").string() + " --model_prefix=" + (dir_ / "defaults").string() +
      " --vocab_size=420 --byte_fallback=true --control_symbols=Wiki --minloglevel=2");
  ASSERT_TRUE(trained.ok()) << trained.ToString();
  for (const std::string path : {model_path(), (dir_ / "defaults.model").string()})
    check_stream_against_decode(Tokenizer::load(path));
}

// The space is a piece even where it is rare (Japanese text, a few spaces in
// thousands of characters): character_coverage once left it out, byte
// fallback then spelled the bytes of SentencePiece's "▁", and the text came
// back with a literal "▁" where it had a space.
TEST_F(TokenizerTest, ARareSpaceIsAPieceAndDecodesAsASpace) {
  std::vector<std::string> sentences;
  for (const std::string& s : japanese_sentences())
    if (s.find(' ') == std::string::npos) sentences.push_back(s);
  sentences.push_back("新しいWindows 11の機能");
  VectorSentenceSource source(sentences);
  TokenizerTrainOptions options;
  options.vocab_size = 400;
  const std::string path = (dir_ / "rare_space.model").string();
  train_tokenizer(source, options, path);
  const Tokenizer t = Tokenizer::load(path);
  for (const std::string text : {"新しいWindows 11の機能", "私は 本を  読みました。 "}) {
    const auto ids = t.encode_clean(text);
    EXPECT_EQ(t.decode(ids), text);
    for (int32_t id : ids) EXPECT_NE(t.id_to_piece(id), "<0xE2>") << text;  // no byte pieces for "▁"
  }
  EXPECT_GE(t.piece_to_id("\xE2\x96\x81"), 0);
}

// A long document is encoded line by line: the same text back, never a worse
// segmentation (by the pieces' scores summed in double) than SentencePiece's
// own encoding of the whole document, whose float path scores drift over
// tens of kilobytes; and each line's ids are that line's alone.
TEST_F(TokenizerTest, LongDocumentsAreEncodedLineByLine) {
  const Tokenizer t = Tokenizer::load(model_path());
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load(model_path()).ok());
  const auto sentences = japanese_sentences();
  std::string doc;
  for (size_t i = 0; doc.size() < 200000; ++i) doc += sentences[i % sentences.size()] + (i % 3 == 2 ? "\n" : "");
  const auto ids = t.encode_clean(doc);
  EXPECT_EQ(t.decode(ids), doc);
  std::vector<int> whole;
  ASSERT_TRUE(sp.Encode(doc, &whole).ok());
  auto score = [&](const auto& v) {
    double s = 0;
    for (int id : v) s += sp.GetScore(id);
    return s;
  };
  EXPECT_GE(score(ids), score(whole) - 1e-6);
  const size_t first_line = doc.find('\n') + 1;
  const auto head = t.encode_clean(doc.substr(0, first_line));
  EXPECT_TRUE(std::equal(head.begin(), head.end(), ids.begin()));
}

TEST_F(TokenizerTest, BatchEncodingMatchesSequentialInOrder) {
  const Tokenizer t = Tokenizer::load(model_path());
  const auto sentences = japanese_sentences();
  std::vector<std::string_view> views(sentences.begin(), sentences.end());
  const auto one = t.encode_batch(views, 1);
  const auto two = t.encode_batch(views, 2);
  ASSERT_EQ(one.size(), sentences.size());
  EXPECT_EQ(one, two);
  for (size_t i = 0; i < sentences.size(); i += 97) EXPECT_EQ(one[i], t.encode_clean(sentences[i]));
}

TEST_F(TokenizerTest, TrainingIsDeterministic) {
  VectorSentenceSource source(japanese_sentences());
  TokenizerTrainOptions options;
  options.vocab_size = 400;
  options.control_codes = {"Wikipedia", "Manual", "青空文庫"};
  const std::string again = (dir_ / "again.model").string();
  train_tokenizer(source, options, again);
  EXPECT_EQ(read_file(again), read_file(model_path()));
}

// Options for a vocabulary of `vocab` pieces with the control code Wikipedia.
TokenizerTrainOptions wikipedia_vocabulary(uint32_t vocab) {
  TokenizerTrainOptions options;
  options.vocab_size = vocab;
  options.control_codes = {"Wikipedia"};
  return options;
}

TEST_F(TokenizerTest, TooLargeVocabularyIsLoweredOrRefused) {
  VectorSentenceSource source(japanese_sentences());
  TokenizerTrainOptions options = wikipedia_vocabulary(20000);
  const std::string path = (dir_ / "small.model").string();
  const uint32_t got = train_tokenizer(source, options, path);
  EXPECT_LT(got, 20000u);
  EXPECT_GT(got, 300u);
  EXPECT_EQ(Tokenizer::load(path).vocab_size(), got);
  options.allow_smaller_vocab = false;
  try {
    train_tokenizer(source, options, path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("too small for 20000 pieces"), std::string::npos) << e.what();
  }
}

// Below what the corpus's characters need, the error names the least size
// that trains, and that size does train.
TEST_F(TokenizerTest, TooSmallVocabularyNamesTheLeastThatTrains) {
  VectorSentenceSource source(japanese_sentences());
  TokenizerTrainOptions options = wikipedia_vocabulary(100);
  const std::string path = (dir_ / "tiny.model").string();
  const std::string message = test_support::error_of([&] { train_tokenizer(source, options, path); });
  std::smatch m;
  ASSERT_TRUE(std::regex_search(message, m, std::regex("pass --vocab-size ([0-9]+) or more"))) << message;
  options.vocab_size = uint32_t(std::stoul(m[1]));
  EXPECT_EQ(train_tokenizer(source, options, path), options.vocab_size) << message;
  --options.vocab_size;
  EXPECT_THROW(train_tokenizer(source, options, path), Error);
}

TEST_F(TokenizerTest, BadModelAndIdsGiveOneLineErrors) {
  EXPECT_THROW(Tokenizer::load((dir_ / "missing.model").string()), Error);
  const std::string junk = (dir_ / "junk.model").string();
  write_file_atomically(junk, "not a model");
  EXPECT_THROW(Tokenizer::load(junk), Error);
  const Tokenizer t = Tokenizer::load(model_path());
  EXPECT_THROW(t.decode({0, 400}), Error);
  EXPECT_THROW(t.id_to_piece(-1), Error);
}

// SentencePiece 0.1.97's log of a unigram training for 4000 pieces on 3 MB of
// the jawiki excerpt (spm_train --minloglevel=0), abridged: 11 EM rounds of 2 steps.
TEST(UnigramLogParser, EstimatesTheEmStepsFromARealLog) {
  const char* lines[] = {
      "trainer_interface.cc(406) LOG(INFO) Loaded all 18315 sentences",
      "trainer_interface.cc(427) LOG(INFO) Normalizing sentences...",
      "unigram_model_trainer.cc(146) LOG(INFO) Making suffix array...",
      "unigram_model_trainer.cc(150) LOG(INFO) Extracting frequent sub strings...",
      "unigram_model_trainer.cc(201) LOG(INFO) Initialized 159387 seed sentencepieces",
      "unigram_model_trainer.cc(491) LOG(INFO) Using 33576 sentences for EM training"};
  const int sizes[] = {73355, 66778, 49982, 49856, 37377, 37370, 28024, 28024, 21018, 21017, 15762,
                       15762, 11821, 11821, 8865,  8865,  6648,  6648,  4986,  4986,  4400,  4400};
  UnigramLogParser parser(4000);
  EXPECT_EQ(parser.phase(), "reading sentences");
  std::vector<std::string> phases;
  for (const char* line : lines) {
    if (parser.feed(line)) phases.push_back(parser.phase());
    EXPECT_EQ(parser.steps_total(), 0u) << "no estimate before the first EM step";
  }
  EXPECT_EQ(phases, (std::vector<std::string>{"normalizing", "suffix array", "seed pieces"}));
  EXPECT_EQ(parser.pieces(), 159387u);
  uint64_t previous_done = 0;
  for (size_t i = 0; i < std::size(sizes); ++i) {
    const std::string line = "unigram_model_trainer.cc(507) LOG(INFO) EM sub_iter=" + std::to_string(i % 2) +
                             " size=" + std::to_string(sizes[i]) + " obj=70.1 num_tokens=474208 num_tokens/piece=6.4";
    ASSERT_TRUE(parser.feed(line)) << line;
    EXPECT_EQ(parser.steps_done(), previous_done + 1);
    previous_done = parser.steps_done();
    EXPECT_GE(parser.steps_total(), parser.steps_done());
    // From the second step on the round count is known: within one round of the 11 that ran.
    if (i >= 1) {
      EXPECT_NEAR(double(parser.steps_total()), 22.0, 2.0) << "after step " << i + 1;
    }
  }
  EXPECT_EQ(parser.steps_total(), 22u) << "the last step closes the estimate exactly";
  EXPECT_EQ(parser.pieces(), 4400u);
  EXPECT_TRUE(parser.feed("trainer_interface.cc(685) LOG(INFO) Saving model: /tmp/spmt.model"));
  EXPECT_EQ(parser.phase(), "saving");
  EXPECT_FALSE(parser.feed("  vocab_size: 4000")) << "the trainer spec dump is not progress";
}

// Training draws its own progress line (not SentencePiece's log) and ends it
// with the step count; stderr is fd 2 again afterwards.
TEST(UnigramLogParser, TrainingReportsEmStepsAndRestoresStderr) {
  const auto dir = std::filesystem::temp_directory_path() / ("ctrl_tok_log_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  VectorSentenceSource source(japanese_sentences());
  TokenizerTrainOptions options;
  options.vocab_size = 400;
  testing::internal::CaptureStderr();
  train_tokenizer(source, options, (dir / "t.model").string());
  std::fprintf(stderr, "after\n");
  const std::string err = testing::internal::GetCapturedStderr();
  std::filesystem::remove_all(dir);
  EXPECT_NE(err.find("tokenizer: training unigram model (400 pieces): "), std::string::npos) << err;
  EXPECT_NE(err.find(" EM steps, "), std::string::npos) << err;
  EXPECT_NE(err.find("took"), std::string::npos) << err;
  EXPECT_EQ(err.find("LOG(INFO)"), std::string::npos) << "SentencePiece's own log leaked: " << err;
  EXPECT_EQ(err.substr(err.size() - 6), "after\n");
}

}  // namespace
}  // namespace ctrl
