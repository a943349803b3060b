// Hugging Face interop (a directory transformers itself wrote, and round
// trips) and generation (the KV-cache path equals the full forward pass;
// CTRL's penalty as Hugging Face applies it).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "generate/generator.h"
#include "io/hf.h"
#include "test_support.h"

using namespace ctrl;

namespace {

const std::string kFixtures = test_support::source_dir() + "/tests/fixtures/";

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("ctrl_hf_" + name + "_" + std::to_string(getpid()))).string();
}

TEST(HuggingFace, ImportsADirectoryWrittenByTransformersAndReproducesItsLogits) {
  const std::string ckpt_path = temp_path("import.ckpt");
  import_hf(kFixtures + "hf_tiny", ckpt_path, {{"Wiki", 5}}, "");
  Checkpoint ckpt(ckpt_path);
  EXPECT_EQ(ckpt.contents().codes.size(), 1u);
  auto ops = test_support::make_test_ops();
  SafetensorsReader ref(kFixtures + "hf_tiny_logits.safetensors");
  const auto& ids = ref.get("input_ids");
  const int64_t B = ids.shape[0], T = ids.shape[1];
  Model model(ckpt.config().model, *ops, B);
  ckpt.load_parameters(model);
  std::vector<int32_t> tokens;
  for (int64_t v : ref.read_ints("input_ids")) tokens.push_back(int32_t(v));
  std::vector<float> logits(size_t(B * T * ckpt.config().model.vocab_size));
  model.logits(tokens.data(), B, T, logits.data());
  const auto expected = ref.read_floats("logits");
  double worst = 0;
  for (size_t i = 0; i < expected.size(); ++i) worst = std::max(worst, double(std::abs(logits[i] - expected[i])));
  EXPECT_LT(worst, 1e-4);
}

TEST(HuggingFace, ExportThenImportKeepsEveryParameterAndTheControlCodes) {
  const std::string first = temp_path("a.ckpt"), dir = temp_path("export"), second = temp_path("b.ckpt");
  import_hf(kFixtures + "hf_tiny", first, {{"Wiki", 5}, {"Books", 6}}, "");
  export_hf(first, dir);
  EXPECT_TRUE(file_exists(dir + "/config.json"));
  import_hf(dir, second, {}, "");  // codes come back from config.json's control_codes
  Checkpoint a(first), b(second);
  ASSERT_EQ(b.contents().codes.size(), 2u);
  EXPECT_EQ(b.contents().codes[0].name, "Wiki");  // in the exported order, not sorted
  EXPECT_EQ(b.contents().codes[1].name, "Books");
  auto ops = test_support::make_test_ops();
  Model ma(a.config().model, *ops, 0), mb(b.config().model, *ops, 0);
  a.load_parameters(ma);
  b.load_parameters(mb);
  const std::vector<float> pa = ma.params.to_host(), pb = mb.params.to_host();
  for (size_t i = 0; i < pa.size(); ++i) ASSERT_EQ(pa[i], pb[i]);
}

TEST(HuggingFace, RejectsWhatItCannotRead) {
  const std::string dir = temp_path("bad");
  make_directories(dir);
  write_file_atomically(dir + "/config.json", R"({"model_type": "gpt2"})");
  EXPECT_THROW(import_hf(dir, temp_path("x.ckpt"), {}, ""), Error);
  write_file_atomically(dir + "/config.json", "{not json");
  EXPECT_THROW(import_hf(dir, temp_path("x.ckpt"), {}, ""), Error);
  std::filesystem::copy_file(kFixtures + "hf_tiny/config.json", dir + "/config.json",
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_THROW(import_hf(dir, temp_path("x.ckpt"), {}, ""), Error);  // no model.safetensors
  // An --out that exists is never overwritten.
  const std::string kept = temp_path("kept.txt");
  write_file_atomically(kept, "keep");
  const std::string message = test_support::error_of([&] { import_hf(kFixtures + "hf_tiny", kept, {}, ""); });
  EXPECT_NE(message.find(kept + ": exists; choose another --out"), std::string::npos) << message;
  EXPECT_EQ(read_file(kept), "keep");
  // A bad --tokenizer is named as given, and nothing is written.
  const std::string junk = temp_path("junk.model"), out = temp_path("y.ckpt");
  write_file_atomically(junk, "not a model");
  const std::string bad = test_support::error_of([&] { import_hf(kFixtures + "hf_tiny", out, {}, junk); });
  EXPECT_EQ(bad.rfind("ctrl import hf --tokenizer " + junk, 0), 0u) << bad;
  EXPECT_FALSE(file_exists(out));
}

// config.json is read strictly (2.7 layers is a broken file, not 2 layers),
// and every tensor of the weights must be one of the model's: weights of 2
// layers under a config.json of 1 are refused, not cut to 1 layer.
TEST(HuggingFace, RefusesAConfigThatDoesNotDescribeItsWeights) {
  const std::string dir = temp_path("loose");
  make_directories(dir);
  std::filesystem::copy_file(kFixtures + "hf_tiny/model.safetensors", dir + "/model.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  const nlohmann::json good = nlohmann::json::parse(read_file(kFixtures + "hf_tiny/config.json"));
  auto error_with = [&](const std::string& key, const nlohmann::json& value) {
    nlohmann::json c = good;
    c[key] = value;
    write_file_atomically(dir + "/config.json", c.dump());
    const std::string out = temp_path("loose.ckpt");
    const std::string message = test_support::error_of([&] { import_hf(dir, out, {}, ""); });
    EXPECT_FALSE(file_exists(out));
    return message;
  };
  EXPECT_NE(error_with("n_layer", 2.7).find("\"n_layer\" is 2.7, expected an integer"), std::string::npos);
  EXPECT_NE(error_with("n_layer", 1)
                .find("tensor(s) that the CTRL of " + dir +
                      "/config.json does not have, e.g. "
                      "transformer.h.1."),
            std::string::npos)
      << error_with("n_layer", 1);
  EXPECT_NE(error_with("control_codes", nlohmann::json{{"Wiki", "3"}})
                .find("control_codes.Wiki is \"3\", expected a token id"),
            std::string::npos);
  EXPECT_NE(error_with("control_codes", nlohmann::json::array({"Wiki"})).find("expected an object"), std::string::npos);
  // Fields ctrl does not use must still describe these weights; sizes out of range name config.json's keys.
  EXPECT_NE(error_with("eos_token_id", "x").find("\"eos_token_id\" is \"x\", expected a token id below vocab_size 96"),
            std::string::npos);
  EXPECT_NE(error_with("eos_token_id", 96).find("expected a token id below vocab_size 96"), std::string::npos);
  EXPECT_NE(error_with("architectures", nlohmann::json::array({"GPT2LMHeadModel"}))
                .find("\"architectures\" is [\"GPT2LMHeadModel\"], expected [\"CTRLLMHeadModel\"]"),
            std::string::npos);
  nlohmann::json unnamed = good;  // transformers writes null when it has no architectures to name: not a claim
  unnamed["architectures"] = nullptr;
  write_file_atomically(dir + "/config.json", unnamed.dump());
  EXPECT_NO_THROW(import_hf(dir, temp_path("unnamed.ckpt"), {}, ""));
  const std::string range = error_with("n_positions", 1);
  EXPECT_EQ(range.rfind(dir + "/config.json: n_positions (model.n_ctx) = 1: expected an integer in [2, ", 0), 0u)
      << range;
  std::filesystem::remove_all(dir);
}

// save_pretrained shards a large model: model.safetensors.index.json names
// each tensor's file. Importing the shards gives the same model as one file.
TEST(HuggingFace, ImportsShardedWeights) {
  const std::string dir = temp_path("sharded");
  make_directories(dir);
  std::filesystem::copy_file(kFixtures + "hf_tiny/config.json", dir + "/config.json",
                             std::filesystem::copy_options::overwrite_existing);
  SafetensorsReader whole(kFixtures + "hf_tiny/model.safetensors");
  SafetensorsWriter shards[2];
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  std::vector<std::vector<float>> kept;
  int k = 0;
  for (const auto& [name, info] : whole.tensors()) {
    const int shard = k++ % 2;
    kept.push_back(whole.read_floats(name));
    shards[shard].add(name, DType::F32, info.shape, kept.back().data());
    index["weight_map"][name] = "model-0000" + std::to_string(shard + 1) + "-of-00002.safetensors";
  }
  for (int i = 0; i < 2; ++i) shards[i].write(dir + "/model-0000" + std::to_string(i + 1) + "-of-00002.safetensors");
  write_file_atomically(dir + "/model.safetensors.index.json", index.dump());
  const std::string from_shards = temp_path("shards.ckpt"), from_one = temp_path("one.ckpt");
  import_hf(dir, from_shards, {{"Wiki", 5}}, "");
  import_hf(kFixtures + "hf_tiny", from_one, {{"Wiki", 5}}, "");
  Checkpoint a(from_shards), b(from_one);
  auto ops = test_support::make_test_ops();
  Model ma(a.config().model, *ops, 0), mb(b.config().model, *ops, 0);
  a.load_parameters(ma);
  b.load_parameters(mb);
  EXPECT_EQ(ma.params.to_host(), mb.params.to_host());
  // An index naming a file outside the directory is refused.
  index["weight_map"][whole.tensors().begin()->first] = "../elsewhere.safetensors";
  write_file_atomically(dir + "/model.safetensors.index.json", index.dump());
  const std::string message = test_support::error_of([&] { import_hf(dir, temp_path("z.ckpt"), {}, ""); });
  EXPECT_NE(message.find("is not a file name in " + dir), std::string::npos) << message;
  std::filesystem::remove_all(dir);
  std::remove(from_shards.c_str());
  std::remove(from_one.c_str());
}

TEST(Generator, KeyValueCachePathEqualsTheFullForwardPass) {
  ModelConfig c;
  c.vocab_size = 40, c.n_layer = 2, c.d_model = 24, c.n_head = 3, c.d_ff = 30, c.n_ctx = 12, c.seed = 3;
  auto ops = test_support::make_test_ops();
  Model model(c, *ops, 1);
  model.init_weights();
  std::vector<float> p = model.params.to_host();
  for (size_t i = 0; i < p.size(); ++i) p[i] += 0.01f * float(int(i % 7) - 3);
  model.params.from_host(p);
  std::vector<int32_t> tokens = {1, 5, 9, 2, 33, 7, 7, 0, 12, 39};
  const int64_t T = int64_t(tokens.size());
  std::vector<float> full(size_t(T * c.vocab_size));
  model.logits(tokens.data(), 1, T, full.data());
  Generator gen(model);
  for (int64_t t = 0; t < T; ++t) {
    const auto& step = gen.feed(tokens[size_t(t)]);
    for (int64_t v = 0; v < c.vocab_size; ++v)
      ASSERT_NEAR(step[size_t(v)], full[size_t(t * c.vocab_size + v)], 1e-4) << "position " << t << " token " << v;
  }
  for (int64_t t = T; t < c.n_ctx; ++t) gen.feed(1);
  EXPECT_THROW(gen.feed(1), Error);  // the context is full
}

// ctrl generate's model holds one row of activations and no gradients; its
// decoding runs the same ops on the same row as a training-sized model's.
TEST(Generator, DecodeOnlyModelGivesTheSameBits) {
  ModelConfig c;
  c.vocab_size = 30, c.n_layer = 2, c.d_model = 16, c.n_head = 2, c.d_ff = 20, c.n_ctx = 8, c.seed = 5;
  auto ops = test_support::make_test_ops();
  Model trained(c, *ops, 2);
  trained.init_weights();
  Model decoder(c, *ops, 1, DType::F32, false, 1);
  EXPECT_EQ(decoder.grads.size(), 0u);
  EXPECT_LT(decoder.activation_layout().total, trained.activation_layout().total / 8);
  decoder.params.from_host(trained.params.to_host());
  Generator a(trained), b(decoder);
  std::vector<float> first;
  for (int32_t token : {4, 29, 0, 4, 17}) {
    const std::vector<float> x = a.feed(token), y = b.feed(token);
    ASSERT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0) << "position " << b.position();
    if (first.empty()) first = y;
  }
  EXPECT_THROW(b.feed(30), Error);  // outside the vocabulary
  b.reset();                        // a new sequence overwrites the cache from position 0
  EXPECT_EQ(b.feed(4), first);
}

// The CPU backend changes its thread count between tokens (thread_adapter.h)
// when fewer threads decode faster; that must not change what is generated.
TEST(Generator, DecodingGivesTheSameBitsAtAnyThreadCount) {
  const int saved = omp_get_max_threads();
  for (int64_t d : {256, 768}) {  // tiny's and base's widths
    ModelConfig c;
    c.vocab_size = 8000, c.n_layer = 2, c.d_model = d, c.n_head = 4, c.d_ff = 4 * d, c.n_ctx = 16, c.seed = 3;
    auto ops = test_support::make_test_ops();
    Model model(c, *ops, 1, DType::F32, false, 1);
    model.init_weights();
    Generator gen(model);
    std::vector<std::vector<float>> at_one;
    omp_set_num_threads(1);
    for (int32_t token : {7, 7999, 0, 42, 7, 1234, 9}) at_one.push_back(gen.feed(token));
    for (int threads : {2, 3}) {
      omp_set_num_threads(threads);
      gen.reset();
      size_t i = 0;
      for (int32_t token : {7, 7999, 0, 42, 7, 1234, 9}) {
        const std::vector<float>& x = gen.feed(token);
        ASSERT_EQ(std::memcmp(x.data(), at_one[i].data(), x.size() * sizeof(float)), 0)
            << "d_model " << d << ", " << threads << " threads, position " << i;
        ++i;
      }
    }
  }
  omp_set_num_threads(saved);
}

TEST(Generator, PenaltyDividesPositiveAndMultipliesNegativeLogitsOfSeenTokens) {
  SamplingOptions greedy;  // temperature 0, penalty 1.2
  CounterRng rng{1, 2, 0};
  // Token 0 leads, but it was seen: 2.0/1.2 = 1.67 < 1.9, so token 1 wins.
  EXPECT_EQ(sample_next({2.0f, 1.9f, -1.0f}, {0}, greedy, rng), 1);
  // Negative logits of seen tokens are multiplied: -1.0*1.2 = -1.2 < -1.1.
  EXPECT_EQ(sample_next({-1.0f, -1.1f, -5.0f}, {0}, greedy, rng), 1);
  greedy.penalty = 1.0;
  EXPECT_EQ(sample_next({2.0f, 1.9f, -1.0f}, {0}, greedy, rng), 0);
  // top-k 1 with any temperature is greedy; sampling is reproducible from the seed.
  SamplingOptions s;
  s.temperature = 1.0, s.top_k = 1, s.penalty = 1.0;
  EXPECT_EQ(sample_next({0.1f, 3.0f, 0.2f}, {}, s, rng), 1);
  s.top_k = 0;
  CounterRng a{9, 1, 0}, b{9, 1, 0};
  for (int i = 0; i < 20; ++i) EXPECT_EQ(sample_next({0.1f, 0.3f, 0.2f}, {}, s, a), sample_next({0.1f, 0.3f, 0.2f}, {}, s, b));
}

// Sampled tokens come at the frequencies softmax(logits / T) gives, cut to
// the top k or the smallest set reaching p and renormalised; another seed
// draws another sequence. 4,000 draws: each frequency within 0.03 (four
// standard deviations or more).
TEST(Generator, SamplingFollowsTheTemperatureTopKAndTopP) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  auto frequencies = [&](SamplingOptions o, uint64_t seed) {
    o.penalty = 1.0;
    CounterRng rng{seed, 1, 0};
    std::vector<double> f(3, 0.0);
    for (int i = 0; i < 4000; ++i) f[size_t(sample_next(logits, {}, o, rng))] += 1.0 / 4000;
    return f;
  };
  auto expect_near = [](const std::vector<double>& got, const std::vector<double>& want, const char* what) {
    for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(got[i], want[i], 0.03) << what << ", token " << i;
  };
  SamplingOptions o;
  o.temperature = 1.0;
  expect_near(frequencies(o, 1), {0.5, 0.3, 0.2}, "T 1");
  o.temperature = 0.5;  // p^2, renormalised
  expect_near(frequencies(o, 2), {0.25 / 0.38, 0.09 / 0.38, 0.04 / 0.38}, "T 0.5");
  o.temperature = 2.0;  // sqrt(p), renormalised
  const double s = std::sqrt(0.5) + std::sqrt(0.3) + std::sqrt(0.2);
  expect_near(frequencies(o, 3), {std::sqrt(0.5) / s, std::sqrt(0.3) / s, std::sqrt(0.2) / s}, "T 2");
  o.temperature = 1.0;
  o.top_p = 0.6;  // 0.5 < 0.6 <= 0.5 + 0.3: the first two
  const std::vector<double> top_p = frequencies(o, 4);
  EXPECT_EQ(top_p[2], 0.0);
  expect_near(top_p, {0.625, 0.375, 0.0}, "top-p 0.6");
  o.top_p = 1.0;
  o.top_k = 2;
  expect_near(frequencies(o, 5), {0.625, 0.375, 0.0}, "top-k 2");
  o.top_k = 0;
  CounterRng a{7, 1, 0}, b{8, 1, 0};
  int same = 0;
  for (int i = 0; i < 50; ++i) same += sample_next(logits, {}, o, a) == sample_next(logits, {}, o, b);
  EXPECT_LT(same, 45) << "another seed drew (nearly) the same sequence";
}

// A model's vocabulary may be larger than its tokenizer's: ids past the
// tokenizer are never chosen, greedy or sampled, however likely.
TEST(Generator, IdsPastTheTokenizersVocabularyAreNeverChosen) {
  SamplingOptions o;
  o.vocabulary = 2;
  CounterRng rng{3, 1, 0};
  EXPECT_EQ(sample_next({0.5f, 1.0f, 9.0f, 9.0f}, {}, o, rng), 1);
  o.temperature = 2.0;
  for (int i = 0; i < 200; ++i) EXPECT_LT(sample_next({0.5f, 1.0f, 9.0f, 9.0f}, {}, o, rng), 2);
  o.vocabulary = 0;  // no limit: the likely ids come
  bool past = false;
  for (int i = 0; i < 200; ++i) past = past || sample_next({0.5f, 1.0f, 9.0f, 9.0f}, {}, o, rng) >= 2;
  EXPECT_TRUE(past);
}

}  // namespace
