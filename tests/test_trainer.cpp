// The training loop: resume reproduces the uninterrupted run bit for bit,
// checkpoints verify their checksum, batches follow CTRL's layout.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "core/file_io.h"
#include "test_support.h"
#include "dist/communicator.h"
#include "train/checkpoint.h"
#include "train/shard_stream.h"
#include "train/trainer.h"

using namespace ctrl;

namespace {

std::string fresh_dir(const std::string& name) { return test_support::fresh_dir("ctrl_trainer", name); }

Config small_config(int64_t steps) { return test_support::tiny_trainer_config(steps, 3); }

TEST(Trainer, ResumeReproducesTheUninterruptedRunBitForBit) {
  for (const char* optimizer : {"adamw", "adagrad"}) {
    Config c = small_config(7);
    c.train.optimizer = optimizer;
    test_support::expect_resume_bit_exact(c, 3, fresh_dir(std::string("whole_") + optimizer),
                                          fresh_dir(std::string("parts_") + optimizer), optimizer);
  }
}

// ZeRO-1 on one rank shards nothing, so it must train exactly as ZeRO-0. On
// the cuda backend (the GPU check's CTRL_DEVICE=cuda) this is the one-rank
// NCCL test: --zero 1 hands device memory to the NCCL communicator.
TEST(Trainer, ZeroOneOnOneRankTrainsExactlyAsZeroZero) {
  const Config c = small_config(5);
  Trainer plain(c, TrainerOptions{fresh_dir("zero0"), false, true});
  plain.run();
  TrainerOptions o{fresh_dir("zero1"), false, true};
  o.zero = 1;
  Trainer sharded(c, o);
  sharded.run();
  EXPECT_EQ(sharded.step_losses(), plain.step_losses());
  EXPECT_TRUE(sharded.model().params.to_host() == plain.model().params.to_host());
}

TEST(Trainer, KeepsTheLastCheckpointsAndRefusesToOverwriteARun) {
  Config c = small_config(9);
  c.train.keep_checkpoints = 2;
  TrainerOptions o{fresh_dir("keep"), false, true};
  Trainer(c, o).run();
  const auto kept = list_checkpoints(o.run_dir);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept.back(), checkpoint_path(o.run_dir, 9));
  EXPECT_TRUE(file_exists(o.run_dir + "/metrics.jsonl"));
  EXPECT_TRUE(file_exists(o.run_dir + "/loss.svg"));
  EXPECT_THROW(Trainer(c, o), Error);  // no --resume: the existing run is not overwritten
}

// loss.svg is drawn at each checkpoint, not only at the end (a killed run had
// none), and its step axis ticks at round steps (it read 6.8, 12.6, ...).
TEST(Trainer, TheLossCurveIsDrawnAtEachCheckpointWithRoundSteps) {
  Config c = small_config(60);
  c.train.checkpoint_every = 20;
  c.train.log_every = 1;
  TrainerOptions o{fresh_dir("curve"), false, true};
  o.before_step = [&](int64_t step, int) {
    if (step == 21) {
      EXPECT_TRUE(file_exists(o.run_dir + "/loss.svg")) << "drawn with the step-20 checkpoint";
    }
  };
  Trainer(c, o).run();
  const std::string svg = read_file(o.run_dir + "/loss.svg");
  for (const char* tick : {">10</text>", ">20</text>", ">60</text>"})
    EXPECT_NE(svg.find(tick), std::string::npos) << tick;
  EXPECT_EQ(svg.find(".8</text>"), std::string::npos) << svg;
}

TEST(Trainer, CorruptCheckpointIsRejectedAndResumeFallsBack) {
  Config c = small_config(6);
  TrainerOptions o{fresh_dir("corrupt"), false, true};
  Trainer(c, o).run();
  const std::string newest = checkpoint_path(o.run_dir, 6);
  std::string bytes = read_file(newest);
  bytes[bytes.size() - 3] ^= 0x40;
  write_file_atomically(newest, bytes);
  try {
    Checkpoint bad(newest);
    FAIL() << "corrupt checkpoint accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
  }
  o.resume = true;
  {
    Trainer resumed(c, o);  // falls back to step 3
    EXPECT_EQ(resumed.state().step, 3);
  }
  // A different model shape cannot resume this run.
  Config other = c;
  other.model.d_model = 48;
  other.model.n_head = 3;
  const std::string message = test_support::error_of([&] { Trainer(other, o); });
  EXPECT_NE(message.find("(model.d_model 32 in the checkpoint, 48 now; model.n_head 2 in the checkpoint, 3 now)"),
            std::string::npos)
      << message;
}

// A resume without --data goes on with the run's corpus (config.json names
// it), not with synthetic tokens; a synthetic run cannot be resumed on a
// corpus, nor a corpus run once config.json no longer names it.
TEST(Trainer, ResumeKeepsTheRunsCorpus) {
  const std::string data = fresh_dir("resume_corpus");
  std::vector<uint32_t> a, b;
  for (uint32_t i = 0; i < 400; ++i) a.push_back(10 + i % 150), b.push_back(20 + (i * 7) % 170);
  test_support::write_two_code_corpus(data, a, b, 200);
  Config c = small_config(5);
  c.model.vocab_size = 200;
  c.train.data = std::filesystem::relative(data).string();  // recorded absolute, so any directory can resume
  const std::string parts = fresh_dir("resume_corpus_parts");
  test_support::expect_resume_bit_exact(c, 2, fresh_dir("resume_corpus_whole"), parts, "resumed without --data", {},
                                        [](Config& resumed) { resumed.train.data.clear(); });
  EXPECT_NE(read_file(parts + "/config.json").find(data), std::string::npos);
  EXPECT_NE(read_file(parts + "/config.json").find("\"train.steps\": \"5\""), std::string::npos)
      << "config.json records the settings the resumed run went on with";
  // config.json gone: the checkpoint says it was a corpus run, and the resume is refused.
  std::filesystem::remove(parts + "/config.json");
  Config longer = c;
  longer.train.steps = 6;
  longer.train.data.clear();
  const std::string no_data = test_support::error_of([&] { Trainer(longer, TrainerOptions{parts, true, true}); });
  EXPECT_NE(no_data.find("was trained on the corpus " + data + "; pass --data"), std::string::npos) << no_data;
  // A synthetic run, resumed with a corpus.
  Config synthetic = small_config(2);
  synthetic.model.vocab_size = 200;
  const std::string run = fresh_dir("resume_synthetic");
  Trainer(synthetic, TrainerOptions{run, false, true}).run();
  synthetic.train.steps = 3;
  synthetic.train.data = data;
  const std::string on_corpus = test_support::error_of([&] { Trainer(synthetic, TrainerOptions{run, true, true}); });
  EXPECT_NE(on_corpus.find("was trained on synthetic tokens, not a corpus"), std::string::npos) << on_corpus;
}

// A resume at or past train.steps trains nothing and leaves the run's files
// as they were (it wrote its checkpoint and evaluation again, silently).
TEST(Trainer, AResumePastTheLastStepLeavesTheRunAlone) {
  Config c = small_config(3);
  const std::string run = fresh_dir("past_the_end");
  Trainer(c, TrainerOptions{run, false, true}).run();
  const std::string metrics = read_file(run + "/metrics.jsonl"), config = read_file(run + "/config.json");
  const std::string last = read_file(checkpoint_path(run, 3));
  c.train.steps = 2;
  Trainer resumed(c, TrainerOptions{run, true, true});
  resumed.run();
  EXPECT_EQ(resumed.state().step, 3);
  EXPECT_TRUE(resumed.step_losses().empty());
  EXPECT_EQ(read_file(run + "/metrics.jsonl"), metrics);
  EXPECT_EQ(read_file(run + "/config.json"), config);
  EXPECT_EQ(read_file(checkpoint_path(run, 3)), last);
}

// A corpus that does not open stops the run before its directory is made.
TEST(Trainer, AWrongCorpusLeavesNoRunDirectory) {
  Config c = small_config(2);
  c.train.data = fresh_dir("no_such_corpus");
  const std::string run = fresh_dir("wrong_corpus_run");
  const std::string message = test_support::error_of([&] { Trainer(c, TrainerOptions{run, false, true}); });
  EXPECT_NE(message.find("no manifest"), std::string::npos) << message;
  EXPECT_FALSE(std::filesystem::exists(run));
}

TEST(Batches, SequencesStartWithTheControlCodeAndTargetsShiftByOne) {
  const std::string dir = fresh_dir("batches");
  std::vector<uint32_t> a, b;
  for (uint32_t i = 0; i < 40; ++i) a.push_back(10 + i);   // code A's text: 10, 11, 12, ...
  for (uint32_t i = 0; i < 40; ++i) b.push_back(100 + i);  // code B's text: 100, 101, ...
  test_support::write_two_code_corpus(dir, a, b, 200);
  auto data = std::make_shared<Dataset>(Dataset::open(dir));
  Batches batches = Batches::from_dataset(data, 8, 7);
  std::vector<int32_t> tokens(8 * 64), targets(8 * 64);
  batches.train(0, 64, tokens.data(), targets.data());
  int seen_a = 0, seen_b = 0;
  for (int s = 0; s < 64; ++s) {
    const int32_t* tok = tokens.data() + s * 8;
    const int32_t* tgt = targets.data() + s * 8;
    ASSERT_TRUE(tok[0] == 3 || tok[0] == 4);
    (tok[0] == 3 ? seen_a : seen_b)++;
    for (int t = 1; t < 8; ++t) EXPECT_EQ(tok[t], tgt[t - 1]);
    for (int t = 1; t < 8; ++t) EXPECT_EQ(tgt[t], tgt[t - 1] + 1);  // a contiguous window of the stream
    EXPECT_EQ(tgt[0] >= 100, tok[0] == 4);                             // of the right code
  }
  EXPECT_GT(seen_a, 10);
  EXPECT_GT(seen_b, 10);
  // The same sequence index gives the same sequence, whatever batch it is drawn in.
  std::vector<int32_t> again(8), again_t(8);
  batches.train(17, 1, again.data(), again_t.data());
  EXPECT_TRUE(std::equal(again.begin(), again.end(), tokens.begin() + 17 * 8));
  std::vector<int32_t> ht, hg;
  EXPECT_EQ(batches.held_out(0, 100, &ht, &hg), 5);  // 40 tokens / 8
  EXPECT_EQ(batches.held_out(1, 100, &ht, &hg), 0);  // B has no held-out text
}

}  // namespace

// A streamed optimizer state (as ZeRO-1 writes it, piece by piece) makes the
// same checkpoint as the state in memory: same tensors, same bytes, a valid
// checksum. Pieces of 7 floats split every tensor across several pieces, in
// writing and in reading back as a resume does.
TEST(Checkpoint, StreamedOptimizerStateWritesTheSameFile) {
  ModelConfig mc;
  mc.vocab_size = 13, mc.n_layer = 1, mc.d_model = 8, mc.n_head = 2, mc.d_ff = 12, mc.n_ctx = 4;
  auto ops = test_support::make_test_ops();
  Model model(mc, *ops, 1);
  model.init_weights();
  std::vector<float> m(model.params.size()), v(model.params.size());
  for (size_t i = 0; i < m.size(); ++i) m[i] = 0.001f * float(i), v[i] = 1.0f + float(i % 17);
  CheckpointContents contents;
  contents.config.model = mc;
  OptimizerState in_memory;
  in_memory.step = 3;
  in_memory.buffers = {{"adamw.m", m.data(), nullptr, nullptr}, {"adamw.v", v.data(), nullptr, nullptr}};
  const std::string dir = fresh_dir("streamed");
  make_directories(dir);
  save_checkpoint(dir + "/memory.ckpt", contents, model, &in_memory);

  auto comm = make_single_communicator();
  DeviceArray<float> dm(*ops, m.size(), "m"), dv(*ops, v.size(), "v");
  dm.from_host(m);
  dv.from_host(v);
  ShardStream sm(*comm, dm, 7), sv(*comm, dv, 7);
  OptimizerState streamed;
  streamed.step = 3;
  for (auto [name, s] : {std::pair<const char*, ShardStream*>{"adamw.m", &sm}, {"adamw.v", &sv}})
    streamed.buffers.push_back(
        {name, nullptr, [s](size_t b, size_t n, const OptimizerState::Emit& emit) { s->read(b, n, emit); },
         [s] { s->finish(); }});
  save_checkpoint(dir + "/streamed.ckpt", contents, model, &streamed);

  EXPECT_EQ(read_file(dir + "/memory.ckpt"), read_file(dir + "/streamed.ckpt"));
  Checkpoint loaded(dir + "/streamed.ckpt");  // verifies the checksum
  const ParamLayout& layout = model.layout();
  std::vector<float> back(m.size(), -1.0f);
  loaded.read_optimizer_state("adamw.v", layout, 0, layout.total, back.data());
  for (const auto& t : layout.tensors)
    for (size_t i = 0; i < t.numel; ++i) ASSERT_EQ(back[t.offset + i], v[t.offset + i]) << t.name;
  // A resume reads pieces that start and end inside tensors; they join into the same buffer.
  std::vector<float> joined(layout.total, -1.0f);
  for (size_t at = 0; at < layout.total; at += 7)
    loaded.read_optimizer_state("adamw.v", layout, at, std::min<size_t>(7, layout.total - at), joined.data() + at);
  EXPECT_EQ(joined, back);
}
