// Measuring control (eval/control.h, eval/domain_classifier.h, ctrl eval
// --codes / --control-accuracy) on a model that has learned to follow its
// codes: a two-domain corpus (hiragana texts under Kana, ASCII texts under
// Latin) prepared with a real tokenizer, and a one-layer model trained on it
// for a few hundred steps (about a second).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "core/plot.h"
#include "core/rng.h"
#include "corpus/prepare.h"
#include "corpus/sources.h"
#include "eval/control.h"
#include "eval/domain_classifier.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

using namespace ctrl;
namespace fs = std::filesystem;

namespace {

std::string document(const std::vector<std::string>& words, const std::string& sep, uint64_t seed, int i) {
  std::string text;
  for (int k = 0; k < 40; ++k) {
    text += words[random_bits(seed, uint64_t(i), uint64_t(k)) % words.size()];
    text += k % 8 == 7 ? sep + "\n" : sep;
  }
  return text;
}

// The corpus and the trained model, made once per test process.
struct ToyRun {
  std::string dir, data, run, checkpoint;
  ToyRun() {
    dir = test_support::fresh_dir("ctrl_control", "toy");
    data = dir + "/data";
    run = dir + "/run";
    fs::create_directories(dir);
    const std::vector<std::string> kana = {"ねこ", "いぬ", "さかな", "そら", "やま", "かわ", "はな", "とり", "みず", "ほし"};
    const std::vector<std::string> latin = {"apple", "river", "stone", "cloud", "green", "seven", "light", "house",
                                            "bread", "music"};
    std::vector<PrepareInput> inputs;
    for (const auto& [code, words, sep] : std::vector<std::tuple<std::string, std::vector<std::string>, std::string>>{
             {"Kana", kana, "の"}, {"Latin", latin, " "}}) {
      const std::string path = dir + "/" + code + ".jsonl";
      std::ofstream f(path);
      for (int i = 0; i < 160; ++i) f << nlohmann::json{{"text", document(words, sep, code.size(), i)}}.dump() << "\n";
      f.close();
      const SourceSpec spec{code, path};
      inputs.push_back({code, path, [spec](const DocumentSink& sink) { return read_source(spec, ReaderOptions{}, sink); }});
    }
    PrepareOptions o;
    o.out_dir = data;
    o.vocab_size = 600;
    o.valid_fraction = 0.15;
    o.threads = 2;
    o.quiet = true;
    prepare_corpus(inputs, o);
    Config c = load_config("tiny");
    const Dataset d = Dataset::open(data);
    for (const std::string s :
         {"model.n_layer=1", "model.d_model=32", "model.n_head=2", "model.d_ff=64", "model.n_ctx=32",
          "model.embd_pdrop=0", "model.resid_pdrop=0", "train.micro_batch=8", "train.global_batch=8",
          "train.steps=300", "train.eval_every=0", "train.checkpoint_every=0", "train.warmup_steps=20",
          "train.lr=0.005", "train.log_every=100"})
      apply_override(c, s);
    c.model.vocab_size = d.manifest().vocab_size;
    c.train.data = data;
    TrainerOptions t;
    t.run_dir = run;
    t.quiet = true;
    Trainer trainer(c, t);
    trainer.run();
    checkpoint = checkpoint_path(run, c.train.steps);
  }
  ~ToyRun() { fs::remove_all(dir); }
};

const ToyRun& toy() {
  static ToyRun r;
  return r;
}

nlohmann::json run_json(const std::string& cmd) {
  std::string out;
  const int rc = test_support::run_shell(cmd, &out);
  EXPECT_EQ(rc, 0) << cmd << "\n" << out;
  return nlohmann::json::parse(out);
}

TEST(ControlCodes, DiagonalEqualsPlainEvalExactlyAndIsTheLowestInEveryRow) {
  const ToyRun& r = toy();
  Checkpoint ckpt(r.checkpoint);
  auto data = std::make_shared<Dataset>(Dataset::open(r.data));
  Batches batches = Batches::from_dataset(data, ckpt.config().model.n_ctx, ckpt.config().train.seed);
  auto ops = test_support::make_test_ops();
  Model model(ckpt.config().model, *ops, 8);
  ckpt.load_parameters(model);
  const CodeMatrix m = code_matrix(model, batches, 8, 16, true);
  const auto plain = evaluate_held_out(model, batches, 8, 16);
  ASSERT_EQ(m.rows.size(), 2u);
  ASSERT_EQ(plain.size(), 2u);
  EXPECT_EQ(m.columns, (std::vector<std::string>{"Kana", "Latin"}));
  for (size_t i = 0; i < m.rows.size(); ++i) {
    EXPECT_EQ(m.rows[i], plain[i].code);
    EXPECT_EQ(m.loss[i][m.row_column[i]], plain[i].loss) << "the diagonal is plain eval, bit for bit";
    EXPECT_EQ(m.tokens[i], plain[i].tokens);
    for (size_t c = 0; c < m.columns.size(); ++c)
      if (c != m.row_column[i]) {
        EXPECT_GT(m.loss[i][c], m.loss[i][m.row_column[i]] + 0.05) << m.rows[i];
      }
    EXPECT_GT(m.gain(i), 0.05) << m.rows[i];
    EXPECT_DOUBLE_EQ(m.gain(i), m.loss[i][1 - m.row_column[i]] - m.loss[i][m.row_column[i]]);
  }
  // A matrix of one corpus twice is the same bits.
  const CodeMatrix again = code_matrix(model, batches, 8, 16, true);
  EXPECT_EQ(again.loss, m.loss);
}

TEST(ControlCodes, CommandWritesJsonAndHeatmapBesideTheRun) {
  const ToyRun& r = toy();
  const std::string base = test_support::ctrl_binary() + " eval --model " + r.checkpoint + " --data " + r.data +
                           " --max-sequences 8";
  const auto matrix = run_json(base + " --codes --json 2>/dev/null");
  const auto plain = run_json(base + " --json");
  for (const std::string code : {"Kana", "Latin"}) {
    EXPECT_EQ(matrix["codes"]["loss"][code][code].get<double>(), plain[code]["loss"].get<double>()) << code;
    EXPECT_GT(matrix["codes"]["control_gain"][code].get<double>(), 0.05) << code;
  }
  // The files land in the run directory (the checkpoint sits in RUN/checkpoints/).
  const auto file = nlohmann::json::parse(read_file(r.run + "/control-codes.json"));
  EXPECT_EQ(file, matrix["codes"]);
  const std::string svg = read_file(r.run + "/control-codes.svg");
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("Latin"), std::string::npos);
  // The readable form names the gain; --out puts the files elsewhere.
  std::string out;
  const std::string elsewhere = r.dir + "/elsewhere";
  EXPECT_EQ(test_support::run_shell(base + " --codes --out " + elsewhere + " 2>/dev/null", &out), 0);
  EXPECT_NE(out.find("control gain"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(elsewhere + "/control-codes.svg"));
  // Flags that belong to another mode are refused in one line.
  EXPECT_NE(test_support::run_shell(base + " --out /tmp/x 2>&1", &out), 0);
  EXPECT_NE(out.find("--out is where"), std::string::npos) << out;
  EXPECT_NE(test_support::run_shell(base + " --codes --temperature 1 2>&1", &out), 0);
  EXPECT_NE(out.find("--temperature is a sampling flag of --control-accuracy"), std::string::npos) << out;
  // An --out that cannot be a directory fails before the scoring, not after it.
  EXPECT_NE(test_support::run_shell(base + " --codes --out " + r.checkpoint + " 2>&1", &out), 0);
  EXPECT_NE(out.find(r.checkpoint + ": exists and is not a directory"), std::string::npos) << out;
  // A --batch far above the windows there are holds no memory for them (2^20 windows of n_ctx would be
  // gigabytes) and scores the same windows.
  const auto wide = run_json(base + " --batch 1048576 --json");
  for (const std::string code : {"Kana", "Latin"})
    EXPECT_NEAR(wide[code]["loss"].get<double>(), plain[code]["loss"].get<double>(), 1e-5) << code;
}

TEST(ControlCodes, HeatmapColoursCellsBySignAndOutlinesTheDiagonal) {
  Heatmap h;
  h.title = "a <b> & c";
  h.rows = {"r0", "r1"};
  h.columns = {"c0", "c1", "c2"};
  h.color = {{0.0, 2.0, -1.0}, {NAN, 1.0, 0.0}};
  h.text = {{"x", "y", "z"}, {"u", "v", "w"}};
  h.outlined = {{0, 0}, {1, 1}};
  const std::string svg = heatmap_svg(h);
  EXPECT_NE(svg.find("a &lt;b&gt; &amp; c"), std::string::npos) << "escaped title";
  EXPECT_NE(svg.find("fill='#ffffff'"), std::string::npos) << "0 is white";
  EXPECT_NE(svg.find("fill='#cc4040'"), std::string::npos) << "the largest positive value is full red";
  EXPECT_NE(svg.find("fill='#bbbbbb'"), std::string::npos) << "NaN is grey";
  EXPECT_NE(svg.find("fill='#9f9fe6'"), std::string::npos) << "-1 of a scale of 2 is half blue";
  size_t outlines = 0;
  for (size_t at = svg.find("stroke='#222'"); at != std::string::npos; at = svg.find("stroke='#222'", at + 1)) ++outlines;
  EXPECT_EQ(outlines, 2u);
  for (const char* label : {">x<", ">w<", ">r1<", ">c2<"}) EXPECT_NE(svg.find(label), std::string::npos) << label;
}

TEST(DomainClassifier, SeparatesToyDomainsAndIsDeterministic) {
  const std::vector<std::string> a = {"ねこ", "いぬ", "さかな", "そら", "やま"}, b = {"apple", "river", "stone", "cloud"},
                                  c = {"猫", "犬", "魚", "空", "山"};
  auto make = [&] {
    DomainClassifier k({"a", "b", "c"});
    for (int i = 0; i < 50; ++i) {
      k.add(0, document(a, "の", 1, i));
      k.add(1, document(b, " ", 2, i));
      k.add(2, document(c, "と", 3, i));
    }
    return k;
  };
  const DomainClassifier k = make(), k2 = make();
  int right = 0, total = 0;
  for (int i = 100; i < 130; ++i)
    for (size_t l = 0; l < 3; ++l) {
      // Short held-out snippets: the first 12 characters of a fresh document.
      const std::string doc = document(l == 0 ? a : l == 1 ? b : c, l == 0 ? "の" : l == 1 ? " " : "と", l + 1, i);
      const auto cps = utf8_code_points(doc);
      std::string snippet;
      for (size_t j = 0; j < 12; ++j) {
        const uint32_t cp = cps[j];  // back to UTF-8
        if (cp < 0x80) snippet += char(cp);
        else snippet += {char(0xE0 | (cp >> 12)), char(0x80 | ((cp >> 6) & 0x3F)), char(0x80 | (cp & 0x3F))};
      }
      right += k.classify(snippet) == l;
      ++total;
      EXPECT_EQ(k.scores(snippet), k2.scores(snippet)) << "deterministic";
    }
  EXPECT_GE(double(right) / total, 0.95);
  EXPECT_EQ(k.classify(""), 0u) << "a tie goes to the first label";
  EXPECT_EQ(k.trained_characters().size(), 3u);
  // UTF-8: valid sequences decode, an invalid byte is a code point of its own.
  EXPECT_EQ(utf8_code_points("aね"), (std::vector<uint32_t>{'a', 0x306D}));
  EXPECT_EQ(utf8_code_points("\xff" "a"), (std::vector<uint32_t>{0xDCFF, 'a'}));
  EXPECT_EQ(utf8_code_points("\xe3\x81"), (std::vector<uint32_t>{0xDCE3, 0xDC81}));
}

TEST(ControlAccuracy, SamplesFollowTheirCodeAndTheCeilingIsMeasured) {
  const ToyRun& r = toy();
  const std::string base = test_support::ctrl_binary() + " eval --model " + r.checkpoint + " --data " + r.data;
  const auto j = run_json(base + " --control-accuracy 12 --max-tokens 24 --json 2>/dev/null")["control_accuracy"];
  EXPECT_EQ(j["codes"], (nlohmann::json{"Kana", "Latin"}));
  for (const std::string code : {"Kana", "Latin"}) {
    EXPECT_EQ(j["confusion"][code]["Kana"].get<int>() + j["confusion"][code]["Latin"].get<int>() +
                  j["empty_samples"][code].get<int>(),
              12);
    EXPECT_EQ(j["samples"][code].size(), 12u);
  }
  EXPECT_GE(j["classifier"]["held_out_accuracy"].get<double>(), 0.95);
  EXPECT_GE(j["accuracy"].get<double>(), 0.9) << j.dump(1);
  EXPECT_EQ(nlohmann::json::parse(read_file(r.run + "/control-accuracy.json"))["accuracy"], j["accuracy"]);
  // The same seed gives the same samples; the readable form prints the confusion matrix and the ceiling.
  const auto again = run_json(base + " --control-accuracy 12 --max-tokens 24 --json 2>/dev/null")["control_accuracy"];
  EXPECT_EQ(again["samples"], j["samples"]);
  std::string out;
  ASSERT_EQ(test_support::run_shell(base + " --control-accuracy 2 --max-tokens 8 --seed 3 2>/dev/null", &out), 0);
  EXPECT_NE(out.find("generated under"), std::string::npos) << out;
  EXPECT_NE(out.find("ceiling accuracy"), std::string::npos) << out;
  EXPECT_NE(test_support::run_shell(base + " --control-accuracy 0 2>&1", &out), 0);
  EXPECT_NE(out.find("--control-accuracy 0: expected"), std::string::npos) << out;
  // A sample stops when the context is full: the ceiling's snippets are no longer than that either.
  const int64_t n_ctx = Checkpoint(r.checkpoint).config().model.n_ctx;
  const auto capped =
      run_json(base + " --control-accuracy 1 --max-tokens 100000 --json 2>/dev/null")["control_accuracy"];
  EXPECT_EQ(capped["sampling"]["max_tokens"].get<int64_t>(), n_ctx);
  ASSERT_EQ(test_support::run_shell(base + " --control-accuracy 1 --max-tokens 100000 2>/dev/null", &out), 0);
  EXPECT_NE(out.find("snippets of " + std::to_string(n_ctx) + " tokens"), std::string::npos) << out;
  // Flags that --control-accuracy alone would ignore are refused.
  EXPECT_NE(test_support::run_shell(base + " --control-accuracy 1 --max-sequences 4 2>&1", &out), 0);
  EXPECT_NE(out.find("--max-sequences sets the held-out windows of plain eval and --codes"), std::string::npos) << out;
}

// An empty sample (end of document first) has no text to label: it is a miss
// in its code's row, not a label of the first code.
TEST(ControlAccuracy, EmptySamplesCountAsMisses) {
  const std::vector<std::vector<int64_t>> confusion = {{3, 1}, {0, 4}};
  EXPECT_DOUBLE_EQ(ControlAccuracy::accuracy(confusion), (3.0 / 4 + 1.0) / 2);
  EXPECT_DOUBLE_EQ(ControlAccuracy::accuracy(confusion, {4, 0}), (3.0 / 8 + 1.0) / 2);
  ControlAccuracy a;
  a.confusion = confusion;
  a.empty_samples = {0, 4};
  EXPECT_DOUBLE_EQ(a.sample_accuracy(), (3.0 / 4 + 4.0 / 8) / 2);
  EXPECT_EQ(a.empty_total(), 4);
  a.confusion = {{0, 0}, {0, 4}};
  a.empty_samples = {5, 0};
  EXPECT_DOUBLE_EQ(a.sample_accuracy(), 0.5) << "a code whose every sample is empty scores 0, not nothing";
}

// An export carries the checkpoint's tokenizer, and importing the directory
// takes it back: a round trip keeps text generation.
TEST(ControlCodes, ExportAndImportKeepTheTokenizer) {
  const ToyRun& r = toy();
  const std::string dir = r.dir + "/hf", back = r.dir + "/back.ckpt";
  std::string out;
  ASSERT_EQ(test_support::run_shell(
                test_support::ctrl_binary() + " export hf --model " + r.checkpoint + " --out " + dir + " 2>&1", &out),
            0)
      << out;
  EXPECT_NE(out.find(dir + "/tokenizer.model"), std::string::npos) << out;
  // transformers' generate stops at </s>, which ends every training document, only if the config names it.
  const nlohmann::json config = nlohmann::json::parse(read_file(dir + "/config.json"));
  ASSERT_TRUE(config.contains("eos_token_id")) << config.dump();
  EXPECT_EQ(config["eos_token_id"].get<int32_t>(),
            Tokenizer::from_bytes(Checkpoint(r.checkpoint).contents().tokenizer, "toy").eos_id());
  ASSERT_EQ(test_support::run_shell(test_support::ctrl_binary() + " import hf --in " + dir + " --out " + back + " 2>&1",
                                    &out),
            0)
      << out;
  EXPECT_EQ(Checkpoint(back).contents().tokenizer, Checkpoint(r.checkpoint).contents().tokenizer);
  // Exporting again over the earlier export (its three files) is allowed.
  EXPECT_EQ(test_support::run_shell(
                test_support::ctrl_binary() + " export hf --model " + r.checkpoint + " --out " + dir + " 2>&1", &out),
            0)
      << out;
}

// A prompt that fills the context exactly (with the control code) still has
// the logits of one more token, as Hugging Face's generate uses them; one
// token more is refused, naming both lengths.
TEST(ControlCodes, APromptThatFillsTheContextGivesOneToken) {
  const ToyRun& r = toy();
  const Tokenizer tokenizer = Tokenizer::load(r.data + "/tokenizer.model");
  const int64_t n_ctx = Checkpoint(r.checkpoint).config().model.n_ctx;
  const std::vector<std::string> words = {"apple", "river", "stone", "cloud", "green", "seven", "light", "house"};
  std::string fits, over;  // prompts of n_ctx - 1 and n_ctx tokens
  std::string prompt;
  for (size_t i = 0; i < 200 && over.empty(); ++i) {
    prompt += (prompt.empty() ? "" : " ") + words[i % words.size()];
    const int64_t n = int64_t(tokenizer.encode(prompt).size());
    if (n == n_ctx - 1) fits = prompt;
    if (n == n_ctx) over = prompt;
  }
  ASSERT_FALSE(fits.empty());
  ASSERT_FALSE(over.empty());
  const std::string base = test_support::ctrl_binary() + " generate --model " + r.checkpoint + " --control Latin --ids";
  std::string out;
  ASSERT_EQ(test_support::run_shell(base + " --prompt '" + fits + "' 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("(1 tokens generated under Latin)"), std::string::npos) << out;
  EXPECT_NE(out.find("context of " + std::to_string(n_ctx) + " tokens is full"), std::string::npos) << out;
  EXPECT_EQ(test_support::run_shell(base + " --prompt '" + over + "' 2>&1", &out), 1) << out;
  EXPECT_NE(out.find("the prompt is " + std::to_string(n_ctx + 1) +
                     " tokens with the control code, over the model's "
                     "context of " +
                     std::to_string(n_ctx)),
            std::string::npos)
      << out;
}

// A prompt that is not UTF-8 is refused: cleaning would drop its bad bytes and generate from the rest.
TEST(ControlCodes, GenerateRefusesAPromptThatIsNotUtf8) {
  const ToyRun& r = toy();
  std::string out;
  EXPECT_EQ(test_support::run_shell(test_support::ctrl_binary() + " generate --model " + r.checkpoint +
                                        " --control Latin --max-tokens 1 --prompt \"$(printf 'ab\\377c')\" 2>&1",
                                    &out),
            1)
      << out;
  EXPECT_NE(out.find("ctrl generate: --prompt: invalid UTF-8 at byte 2; expected UTF-8 text"), std::string::npos)
      << out;
}

// Output that cannot be written (a full disk: /dev/full) ends generate with an
// error, not "N tokens generated" over a cut file.
TEST(ControlCodes, GenerateFailsWhenItsOutputCannotBeWritten) {
  const ToyRun& r = toy();
  for (const char* as : {"", " --ids"}) {
    std::string out;
    EXPECT_EQ(test_support::run_shell(test_support::ctrl_binary() + " generate --model " + r.checkpoint +
                                          " --control Latin --max-tokens 5" + as + " 2>&1 >/dev/full",
                                      &out),
              1)
        << out;
    EXPECT_NE(out.find("ctrl generate: writing the output failed: No space left on device"), std::string::npos) << out;
    EXPECT_EQ(out.find("tokens generated"), std::string::npos) << out;
  }
}

// The same for every command whose printed output is its result: bench --json > bench.json on a full disk
// once left an empty file and exit 0 (found by an audit), and plan --machine then called it "not valid JSON".
TEST(ControlCodes, CommandsWhoseOutputIsTheirResultFailWhenItCannotBeWritten) {
  const ToyRun& r = toy();
  const std::string ctrl = test_support::ctrl_binary();
  for (const auto& [name, command] : std::vector<std::pair<std::string, std::string>>{
           {"eval", ctrl + " eval --model " + r.checkpoint + " --data " + r.data + " --json"},
           {"plan", ctrl + " plan --config tiny --tokens 1e6 --gpu H100 --json"},
           {"plan", ctrl + " plan --config tiny --tokens 1e6 --gpu H100"},
           {"bench", ctrl + " bench --config tiny --steps 1 --warmup 0 --threads 1 --json"}}) {
    std::string out;
    EXPECT_EQ(test_support::run_shell(command + " 2>&1 >/dev/full", &out), 1) << command << "\n" << out;
    EXPECT_NE(out.find("ctrl " + name + ": writing the output failed: No space left on device"), std::string::npos)
        << command << "\n"
        << out;
  }
}

}  // namespace
