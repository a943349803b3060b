// Bad input (issue 10): every case a hostile user found is refused with one
// line naming the file and field, or handled, instead of crashing or being
// silently used. docs/input-validation.md lists each check and its test here.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"
#include "core/safetensors.h"
#include "corpus/binary.h"
#include "corpus/prepare.h"
#include "corpus/sources.h"
#include "data/shard.h"
#include "model/config.h"
#include "model/layout.h"
#include "plan/plan.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"
#include "train/batches.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

using namespace ctrl;
namespace fs = std::filesystem;

namespace {

std::string fresh_dir(const std::string& name) { return test_support::fresh_dir("ctrl_badinput", name); }

using test_support::error_of;

#define EXPECT_ERROR(expr, ...)                                               \
  do {                                                                        \
    const std::string message_ = error_of([&] { (void)(expr); });             \
    EXPECT_FALSE(message_.empty()) << #expr " was accepted";                  \
    for (const char* part_ : {__VA_ARGS__})                                   \
      EXPECT_NE(message_.find(part_), std::string::npos) << "'" << part_ << "' not in: " << message_; \
    EXPECT_EQ(message_.find('\n'), std::string::npos) << "not one line: " << message_; \
  } while (0)

// Runs the ctrl binary; returns its exit status and its stderr+stdout.
int ctrl_cli(const std::string& args, std::string* out) {
  return test_support::run_shell(test_support::ctrl_binary() + " " + args + " 2>&1", out);
}

Config small_config(int64_t steps) { return test_support::tiny_trainer_config(steps, 2); }

// Every command `ctrl --help` lists answers --help with its usage, exit 0
// (export and import too, whose first word is a format).
TEST(BadInputCli, EveryCommandHasHelp) {
  std::string listing;
  ASSERT_EQ(ctrl_cli("--help", &listing), 0);
  std::istringstream lines(listing.substr(listing.find("commands:")));
  std::string line;
  int commands = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("  ", 0) != 0) continue;
    const std::string command = line.substr(2, line.find(' ', 2) - 2);
    std::string help;
    EXPECT_EQ(ctrl_cli(command + " --help", &help), 0) << command << ": " << help;
    EXPECT_EQ(help.rfind("usage: ctrl " + command, 0), 0u) << command << ": " << help;
    std::string same;  // `ctrl help COMMAND` is `ctrl COMMAND --help`
    EXPECT_EQ(ctrl_cli("help " + command, &same), 0) << command;
    EXPECT_EQ(same, help) << command;
    ++commands;
  }
  EXPECT_GE(commands, 8);
  // An unknown command or format: one line that names what there is, usage status 2 or 1.
  std::string unknown;
  EXPECT_EQ(ctrl_cli("nosuch", &unknown), 2);
  EXPECT_NE(unknown.find("unknown command 'nosuch' (commands: bench, eval, export, generate,"), std::string::npos)
      << unknown;
  EXPECT_EQ(ctrl_cli("export onnx --model m --out d", &unknown), 1);
  EXPECT_NE(unknown.find("ctrl export: unknown format 'onnx' (ctrl knows hf"), std::string::npos) << unknown;
  EXPECT_EQ(ctrl_cli("generate --model /nonexistent", &unknown), 1);  // the missing flag first, not the model
  EXPECT_NE(unknown.find("missing --control"), std::string::npos) << unknown;
}

// ---------------------------------------------------------------- crashes

TEST(BadInputCrash, HeldOutWithZeroOrNegativeSequencesIsEmpty) {
  const std::string dir = fresh_dir("heldout");
  std::vector<uint32_t> a(40, 7), b(40, 9);
  test_support::write_two_code_corpus(dir, a, b, 64);
  const Batches batches = Batches::from_dataset(std::make_shared<Dataset>(Dataset::open(dir)), 8, 1);
  std::vector<int32_t> tokens, targets;
  EXPECT_EQ(batches.held_out(0, 0, &tokens, &targets), 0);   // was SIGFPE (stride = size / 0)
  EXPECT_EQ(batches.held_out(0, -1, &tokens, &targets), 0);  // was vector::_M_default_append
  EXPECT_TRUE(tokens.empty());
  EXPECT_EQ(batches.held_out(0, 2, &tokens, &targets), 2);
  fs::remove_all(dir);
}

TEST(BadInputCrash, EvalBatchesAndMaxSequencesMustBePositive) {
  Config c = small_config(1);
  EXPECT_ERROR(apply_override(c, "train.eval_batches=0"), "--set train.eval_batches: expected an integer in [1, ");
  c.train.eval_batches = 0;  // set in code, not read: validate still checks it
  EXPECT_ERROR(validate(c), "train.eval_batches = 0", "expected an integer in [1, ");
  std::string out;
  EXPECT_EQ(ctrl_cli("eval --model none.ckpt --data none --max-sequences 0", &out), 1);
  EXPECT_NE(out.find("--max-sequences 0: expected an integer in [1, "), std::string::npos) << out;
  EXPECT_EQ(ctrl_cli("eval --model none.ckpt --data none --max-sequences -1", &out), 1);
  EXPECT_NE(out.find("--max-sequences -1: expected an integer in [1, "), std::string::npos) << out;
}

// A directory where a file belongs (--tokenizer corpus/) is named as such, not "read error".
TEST(BadInputFlags, ADirectoryGivenForAFileIsNamed) {
  const std::string dir = fresh_dir("dir_for_file");
  make_directories(dir);
  const std::string said = dir + ": is a directory; expected a file";
  EXPECT_ERROR(read_file(dir), said.c_str());
  std::string out;
  EXPECT_EQ(ctrl_cli("plan --config small --tokens 1e6 --machine " + dir, &out), 1);
  EXPECT_NE(out.find(said), std::string::npos) << out;
}

// An empty value, and a flag where a value belongs (the value forgotten), are refused in one
// line before anything is read or written: `--data ''` once trained on random tokens, and
// `--out --resume` made a run directory named --resume.
TEST(BadInputFlags, EmptyValuesAndFlagsTakenForValuesAreRefused) {
  const std::string dir = fresh_dir("flags");
  const struct {
    std::string args, expected;
  } cases[] = {
      {"train --config tiny --out " + dir + "/r --data ''", "ctrl train: --data: expected a value, got ''"},
      {"train --config tiny --out --resume", "ctrl train: --out needs a value; got the flag --resume"},
      {"eval --model m.ckpt --data d --codes --out --json", "ctrl eval: --out needs a value; got the flag --json"},
      {"plan --config tiny --tokens 1e9 --gpu ''", "ctrl plan: --gpu: expected a value, got ''"},
      {"generate --model m.ckpt --control X --prompt --help", "--prompt needs a value; got the flag --help"},
      // Flags that would be ignored.
      {"prepare --source A=" + dir + "/a.txt --out " + dir + "/o --cache " + dir + "/c",
       "--cache is where the built-in corpus (no --source) keeps its packages"},
      {"eval --model m.ckpt --data d --control-accuracy 2 --temperature 0 --top-k 5",
       "ctrl eval: --top-k applies to sampling, and --temperature 0 is greedy"},
  };
  for (const auto& c : cases) {
    std::string out;
    EXPECT_EQ(ctrl_cli(c.args, &out), 1) << c.args;
    EXPECT_NE(out.find(c.expected), std::string::npos) << c.args << ": " << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << c.args << ": " << out;
  }
  EXPECT_FALSE(fs::exists("--resume"));
  EXPECT_FALSE(fs::exists(dir));
  // An empty prompt is a prompt (none), and --flag=VALUE takes a value that looks like a flag.
  std::string out;
  EXPECT_EQ(ctrl_cli("generate --model " + dir + "/none.ckpt --control X --prompt ''", &out), 1);
  EXPECT_EQ(out.find("--prompt"), std::string::npos) << out;
  EXPECT_EQ(ctrl_cli("generate --model " + dir + "/none.ckpt --control X --prompt=--json", &out), 1);
  EXPECT_EQ(out.find("--prompt"), std::string::npos) << out;
  // --threads 0 is the default (all usable CPUs) in every command, as train.threads=0 is.
  EXPECT_EQ(ctrl_cli("train --config tiny --threads 0 --out " + dir + "/t --set train.lr=-1", &out), 1);
  EXPECT_EQ(out.find("--threads"), std::string::npos) << out;
  EXPECT_NE(out.find("train.lr = -1"), std::string::npos) << out;
}

// A shard file written with vocabulary `written` whose header then claims `claimed`:
// the checksum covers only the tokens, so the file is otherwise valid.
void write_shard_claiming(const std::string& path, const std::vector<uint32_t>& tokens, uint32_t written,
                          uint32_t claimed) {
  write_shard(path, tokens, 1, written);
  std::string bytes = read_file(path);
  std::memcpy(&bytes[16], &claimed, 4);  // magic 8, version 4, token_bytes 4, then vocab_size
  write_file_atomically(path, bytes);
}

TEST(BadInputCrash, ShardTokenOutsideTheVocabularyIsRefusedAtLoad) {
  const std::string dir = fresh_dir("oov");
  make_directories(dir);
  std::vector<uint32_t> tokens(100, 5);
  tokens[37] = 4000;
  write_shard_claiming(dir + "/a.bin", tokens, 4001, 4000);
  EXPECT_ERROR(Shard(dir + "/a.bin", 4000), "a.bin", "token id 4000", "byte offset 138", "vocabulary of 4000");
  tokens[37] = 65535;  // the id that made embedding_backward segfault
  write_shard_claiming(dir + "/b.bin", tokens, 65536, 4000);
  EXPECT_ERROR(Shard(dir + "/b.bin", 4000), "b.bin", "token id 65535", "byte offset 138");
  tokens[37] = 3999;
  write_shard_claiming(dir + "/c.bin", tokens, 4000, 4000);
  EXPECT_EQ(Shard(dir + "/c.bin", 4000).at(37), 3999u);
  fs::remove_all(dir);
}

TEST(BadInputCrash, ShardHeaderWithAHugeTokenCountIsRefused) {
  const std::string dir = fresh_dir("huge");
  make_directories(dir);
  write_shard(dir + "/a.bin", {}, 0, 4000);  // 64 bytes: the header alone
  std::string bytes = read_file(dir + "/a.bin");
  ASSERT_EQ(bytes.size(), 64u);
  const uint64_t n = uint64_t(1) << 63;  // × 2 bytes overflows to 0, which used to pass the size check
  std::memcpy(&bytes[24], &n, 8);
  write_file_atomically(dir + "/a.bin", bytes);
  EXPECT_ERROR(Shard(dir + "/a.bin", 4000), "a.bin", "truncated or oversized shard", "9223372036854775808 tokens");
  fs::remove_all(dir);
}

// ---------------------------------------------------------------- checkpoint metadata

// A trained run of `steps` steps (checkpoints every 2), returning its directory.
std::string trained_run(const std::string& name, int64_t steps) {
  TrainerOptions o{fresh_dir(name), false, true};
  Trainer(small_config(steps), o).run();
  return o.run_dir;
}

// Rewrites a checkpoint's metadata as `edit` says, keeping every tensor and a valid data CRC;
// the metadata checksum is left as it was (so an edit shows as tampering).
void rewrite_metadata(const std::string& path, const std::function<void(std::map<std::string, std::string>&)>& edit) {
  const std::string copy = path + ".orig";
  fs::copy_file(path, copy, fs::copy_options::overwrite_existing);
  {
    SafetensorsReader r(copy);
    SafetensorsWriter w;
    std::vector<std::pair<std::string, TensorInfo>> ordered(r.tensors().begin(), r.tensors().end());
    std::sort(ordered.begin(), ordered.end(), [](auto& a, auto& b) { return a.second.data < b.second.data; });
    for (const auto& [name, info] : ordered) w.add(name, info.dtype, info.shape, info.data);
    auto meta = r.metadata();
    meta.erase("crc32");
    edit(meta);
    for (const auto& [k, v] : meta) w.set_metadata(k, v);
    w.set_crc_metadata("crc32");
    w.write(path);
  }
  fs::remove(copy);
}

// The metadata of a version-1 checkpoint (no metadata checksum) with one field changed.
std::function<void(std::map<std::string, std::string>&)> as_version1(const std::string& key, const std::string& value) {
  return [key, value](std::map<std::string, std::string>& m) {
    m["version"] = "1";
    m.erase("metadata_crc32");
    if (!key.empty()) m[key] = value;
  };
}

TEST(BadInputCheckpoint, MetadataEditsAreCaughtByTheMetadataChecksum) {
  const std::string run = trained_run("meta", 2);
  const std::string path = checkpoint_path(run, 2);
  const std::string pristine = read_file(path);
  EXPECT_NO_THROW(Checkpoint{path});
  struct Edit {
    const char* key;
    std::function<std::string(const std::string&)> change;
  };
  const std::vector<Edit> edits = {
      {"next_sequence", [](const std::string&) { return std::string("5"); }},
      {"step", [](const std::string&) { return std::string("3"); }},
      {"config", [](const std::string& v) {  // layer_norm_eps 1e-6 -> 1e-5
         auto j = nlohmann::json::parse(v);
         j["model.layer_norm_eps"] = "1.0000000000000001e-05";
         return j.dump();
       }},
      {"codes", [](const std::string&) { return std::string(R"([{"name":"Synthetic","token_id":2}])"); }},
  };
  for (const auto& e : edits) {
    write_file_atomically(path, pristine);
    rewrite_metadata(path, [&](std::map<std::string, std::string>& m) { m[e.key] = e.change(m.at(e.key)); });
    EXPECT_ERROR(Checkpoint{path}, "step-00000002.ckpt", "metadata checksum mismatch");
  }
  fs::remove_all(run);
}

TEST(BadInputCheckpoint, Version1FilesAreReadAndTheirFieldsChecked) {
  const std::string run = trained_run("v1", 2);
  const std::string path = checkpoint_path(run, 2);
  const std::string pristine = read_file(path);
  rewrite_metadata(path, as_version1("", ""));
  const Checkpoint ok(path);  // an older ctrl's file, otherwise valid
  EXPECT_EQ(ok.contents().state.step, 2);
  EXPECT_EQ(ok.optimizer_step(), 2);
  struct Bad {
    const char* key;
    const char* value;
    const char* expect;
  };
  for (const Bad& b : std::vector<Bad>{{"optimizer_step", "3u", "'optimizer_step' = '3u'"},
                                       {"optimizer_step", "s5", "'optimizer_step' = 's5'"},
                                       {"step", "-1", "'step' = '-1'"},
                                       {"next_sequence", "1e3", "'next_sequence' = '1e3'"},
                                       {"loss_scale", "nan", "'loss_scale' = 'nan'"},
                                       {"codes", R"([{"name":"Synthetic","token_id":64}])", "token_id 64"},
                                       {"codes", R"({"a":1})", "'codes'"}}) {
    write_file_atomically(path, pristine);
    rewrite_metadata(path, as_version1(b.key, b.value));
    EXPECT_ERROR(Checkpoint{path}, "step-00000002.ckpt", b.expect);
  }
  // A config the validation refuses (layer_norm_eps = inf) is refused in a checkpoint too.
  write_file_atomically(path, pristine);
  rewrite_metadata(path, [](std::map<std::string, std::string>& m) {
    as_version1("", "")(m);
    auto j = nlohmann::json::parse(m.at("config"));
    j["model.layer_norm_eps"] = "inf";
    m["config"] = j.dump();
  });
  EXPECT_ERROR(Checkpoint{path}, "model.layer_norm_eps = inf", "expected a number in (0, 1]");
  fs::remove_all(run);
}

TEST(BadInputCheckpoint, ResumeFallsBackPastAMalformedField) {
  const std::string run = trained_run("s5", 4);
  rewrite_metadata(checkpoint_path(run, 4), as_version1("optimizer_step", "s5"));  // was "ctrl train: stoll"
  TrainerOptions o{run, true, true};
  Trainer resumed(small_config(4), o);
  EXPECT_EQ(resumed.state().step, 2);
  fs::remove_all(run);
}

// The tensor table (names, types, shapes) is covered too: a one-bit flip in
// a tensor's name once passed every check ("tokenizer.model" read as
// "tokdnizer.model" dropped the tokenizer without a word), and a version
// field set back to 1 no longer switches the metadata checksum off.
TEST(BadInputCheckpoint, TensorNamesAndTheVersionAreCoveredByChecksums) {
  const std::string run = trained_run("table", 2);
  const std::string path = checkpoint_path(run, 2);
  const std::string pristine = read_file(path);
  auto with_header_edit = [&](const std::string& from, const std::string& to) {
    std::string bytes = pristine;
    const size_t at = bytes.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    ASSERT_EQ(from.size(), to.size());
    bytes.replace(at, from.size(), to);
    write_file_atomically(path, bytes);
  };
  with_header_edit("\"optimizer.adamw.m.", "\"optimizer.adamw.n.");  // one tensor renamed, same length
  EXPECT_ERROR(Checkpoint{path}, "step-00000002.ckpt", "tensor table checksum mismatch");
  with_header_edit("\"version\":\"3\"", "\"version\":\"1\"");
  EXPECT_ERROR(Checkpoint{path}, "step-00000002.ckpt", "metadata checksum mismatch");
  write_file_atomically(path, pristine);
  EXPECT_NO_THROW(Checkpoint{path});
  fs::remove_all(run);
}

// --resume past a damaged newest checkpoint moves it aside: it used to stay
// among the checkpoints, where the rotation counted it and deleted the run's
// own newer ones (keep_checkpoints = 1 left only the damaged file).
TEST(BadInputCheckpoint, ResumePastADamagedCheckpointKeepsWhatItWrites) {
  const std::string run = trained_run("rotate", 4);
  const std::string damaged = checkpoint_path(run, 4);
  std::string bytes = read_file(damaged);
  bytes[bytes.size() - 3] ^= 1;  // a data byte: the checksum fails
  write_file_atomically(damaged, bytes);
  Config c = small_config(3);  // ends before the damaged step: the old rotation deleted step 3 for it
  c.train.keep_checkpoints = 1;
  {
    Trainer resumed(c, TrainerOptions{run, true, true});
    EXPECT_EQ(resumed.state().step, 2);
    resumed.run();
  }
  EXPECT_EQ(list_checkpoints(run), std::vector<std::string>{checkpoint_path(run, 3)});
  EXPECT_EQ(read_file(damaged + ".damaged"), bytes);  // kept for a look, out of the way
  // Damaged again at the same step: the first one aside stays, the second goes beside it.
  fs::copy_file(damaged + ".damaged", damaged);
  { Trainer again(small_config(3), TrainerOptions{run, true, true}); }
  EXPECT_EQ(read_file(damaged + ".damaged"), bytes);
  EXPECT_EQ(read_file(damaged + ".damaged.1"), bytes);
  // A stray checkpoint of a later step never pushes out the one just written.
  fs::copy_file(checkpoint_path(run, 3), checkpoint_path(run, 9));
  prune_checkpoints(run, 1, 3);
  EXPECT_TRUE(fs::exists(checkpoint_path(run, 3)));
  fs::remove_all(run);
}

// Step numbers past 8 digits: step-100000000.ckpt is later than step-99999000.ckpt, though it sorts
// before it as text (resume and pruning took the older one).
TEST(BadInputCheckpoint, CheckpointsPastStep99999999StayInStepOrder) {
  const std::string run = ::testing::TempDir() + "/ckpt_order";
  fs::remove_all(run);
  fs::create_directories(run + "/checkpoints");
  for (int64_t step : {99998000, 99999000, 100000000, 100001000})
    write_file_atomically(checkpoint_path(run, step), "x");
  const std::vector<std::string> in_order = {checkpoint_path(run, 99998000), checkpoint_path(run, 99999000),
                                             checkpoint_path(run, 100000000), checkpoint_path(run, 100001000)};
  write_file_atomically(run + "/checkpoints/step-99999000.best.ckpt", "x");  // a copy is not the newest
  EXPECT_EQ(list_checkpoints(run), in_order);
  prune_checkpoints(run, 2, 100001000);
  EXPECT_EQ(list_checkpoints(run), std::vector<std::string>(in_order.begin() + 2, in_order.end()));
  fs::remove_all(run);
}

// Synthetic sequences (ctrl bench, a run without --data) longer than 256 tokens are each their own
// draw, not their neighbour's tokens shifted by 256.
TEST(BadInputCheckpoint, SyntheticSequencesLongerThan256AreIndependent) {
  for (int64_t T : {256, 512, 2048}) {
    const Batches b = Batches::synthetic(32000, T, 1);
    std::vector<int32_t> tokens(size_t(2 * T)), targets(size_t(2 * T));
    b.train(0, 2, tokens.data(), targets.data());
    int64_t equal = 0;
    for (int64_t t = 0; t + 256 < T; ++t) equal += targets[size_t(t + 256)] == targets[size_t(T + t)];
    EXPECT_LT(equal, 3) << "T " << T;  // one in 32,000 by chance
  }
}

// A resume says where it goes on, and which training settings this command
// changes: a forgotten --set (train.steps=7 on the first start) once resumed
// silently into the preset's 600 steps.
TEST(BadInputCheckpoint, AResumeNamesItsStepAndTheSettingsItChanges) {
  const std::string run = trained_run("changed", 4);
  Config c = small_config(6);
  c.train.lr *= 2;
  testing::internal::CaptureStderr();
  { Trainer resumed(c, TrainerOptions{run, true, false}); }
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("resuming " + run + " from step 4 (" + checkpoint_path(run, 4) + ")"), std::string::npos) << said;
  EXPECT_NE(said.find("train.steps 4 in the checkpoint, 6 now"), std::string::npos) << said;
  EXPECT_NE(said.find("train.lr "), std::string::npos) << said;
  testing::internal::CaptureStderr();
  { Trainer same(small_config(4), TrainerOptions{run, true, false}); }
  EXPECT_EQ(testing::internal::GetCapturedStderr().find("settings other than the run's"), std::string::npos);
  testing::internal::CaptureStderr();  // --quiet: neither
  { Trainer quiet(c, TrainerOptions{run, true, true}); }
  EXPECT_EQ(testing::internal::GetCapturedStderr().find("resuming"), std::string::npos);
  // bf16 on the CPU: the checkpoint records the path taken (native or widened), which auto keeps.
  Config bf16 = small_config(2);
  bf16.train.precision = "bf16";
  const std::string bf16_run = fresh_dir("changed_bf16");
  Trainer(bf16, TrainerOptions{bf16_run, false, true}).run();
  testing::internal::CaptureStderr();
  { Trainer again(bf16, TrainerOptions{bf16_run, true, false}); }
  const std::string bf16_said = testing::internal::GetCapturedStderr();
  EXPECT_EQ(bf16_said.find("settings other than the run's"), std::string::npos) << bf16_said;
  fs::remove_all(bf16_run);
  fs::remove_all(run);
}

// A run whose checkpoints were deleted is not restarted over its metrics.
TEST(BadInputCheckpoint, ResumeWithoutTheCheckpointsOfALoggedRunIsRefused) {
  const std::string run = trained_run("gone", 4);
  fs::remove_all(run + "/checkpoints");
  TrainerOptions o{run, true, true};
  EXPECT_ERROR(Trainer(small_config(6), o), "metrics.jsonl records steps up to 4, past the first checkpoint (step 2)",
               "checkpoints holds no checkpoint (deleted or moved?)", "remove metrics.jsonl to start again");
  EXPECT_NE(read_file(run + "/metrics.jsonl").find("\"step\":4"), std::string::npos);  // not truncated
  // The run's own checkpoint interval counts (config.json), not this start's: a run that never reached
  // its first checkpoint starts again even when the resume asks for more frequent ones.
  auto j = nlohmann::json::parse(read_file(run + "/config.json"));
  j["train.checkpoint_every"] = "1000";
  write_file_atomically(run + "/config.json", j.dump());
  Config often = small_config(6);
  often.train.checkpoint_every = 1;
  Trainer again(often, o);
  EXPECT_EQ(again.state().step, 0);
  fs::remove_all(run);
}

// The metadata checksum as the checkpoint format defines it (docs/input-validation.md): a newer
// ctrl's file carries a valid one.
void reseal(std::map<std::string, std::string>& m) {
  uint32_t crc = 0;
  for (const auto& [key, value] : m)
    if (key != "crc32" && key != "metadata_crc32")
      crc = crc32_of(value.c_str(), value.size() + 1, crc32_of(key.c_str(), key.size() + 1, crc));
  m["metadata_crc32"] = std::to_string(crc);
}

TEST(BadInputCheckpoint, ANewerFormatVersionIsRefusedNotSkippedAndOverwritten) {
  const std::string run = trained_run("newer", 4);
  const std::string newest = checkpoint_path(run, 4);
  const std::string pristine = read_file(newest);
  // A version raised by damage (the checksum no longer matches) is damage: --resume falls back.
  rewrite_metadata(newest, [](std::map<std::string, std::string>& m) { m["version"] = "7"; });
  EXPECT_ERROR(Checkpoint{newest}, "step-00000004.ckpt", "metadata checksum mismatch", "format version '7'");
  {
    Trainer fallen_back(small_config(4), TrainerOptions{run, true, true});
    EXPECT_EQ(fallen_back.state().step, 2);
  }
  fs::rename(newest + ".damaged", newest);
  write_file_atomically(newest, pristine);
  rewrite_metadata(newest, [](std::map<std::string, std::string>& m) {
    m["version"] = "4";
    reseal(m);
  });
  const std::string bytes = read_file(newest);
  EXPECT_ERROR(Checkpoint{newest}, "step-00000004.ckpt", "format version 4 is newer than this ctrl reads");
  EXPECT_THROW(Checkpoint{newest}, CheckpointTooNew);
  TrainerOptions o{run, true, true};
  EXPECT_ERROR(Trainer(small_config(6), o), "format version 4 is newer");
  EXPECT_EQ(read_file(newest), bytes);  // left as it was
  fs::remove_all(run);
}

// ---------------------------------------------------------------- manifest, tokenizer, checkpoint

class BadInputCorpus : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fresh_dir("corpus");
    make_directories(root_ + "/text");
    for (int i = 0; i < 40; ++i) {
      std::ofstream f(root_ + "/text/" + std::to_string(i) + ".txt");
      for (int k = 0; k < 8; ++k)
        f << "文書" << i << "の" << k << "行目です。The quick brown fox " << (i * 7 + k) % 13 << " jumps.\n";
    }
    PrepareOptions o;
    o.out_dir = root_ + "/prepared";
    o.vocab_size = 500;
    o.valid_fraction = 0.2;
    o.threads = 2;
    o.quiet = true;
    std::vector<PrepareInput> in;
    for (const char* code : {"Alpha", "Beta"}) {
      const SourceSpec spec{code, root_ + "/text"};
      in.push_back({code, spec.path, [spec](const DocumentSink& sink) { return read_source(spec, {}, sink); }});
    }
    // Two codes over the same files: Beta's documents are all duplicates, so give Beta its own text.
    in.pop_back();
    make_directories(root_ + "/beta");
    for (int i = 0; i < 10; ++i)
      std::ofstream(root_ + "/beta/" + std::to_string(i) + ".txt") << "ベータ" << i << "番目の文書です。Lorem ipsum " << i;
    const SourceSpec beta{"Beta", root_ + "/beta"};
    in.push_back({"Beta", beta.path, [beta](const DocumentSink& sink) { return read_source(beta, {}, sink); }});
    prepare_corpus(in, o);
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  // A copy of the prepared corpus with its manifest JSON edited.
  std::string edited(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
    const std::string dir = root_ + "/" + name;
    fs::remove_all(dir);
    fs::copy(root_ + "/prepared", dir);
    auto j = nlohmann::json::parse(read_file(dir + "/manifest.json"));
    edit(j);
    write_file_atomically(dir + "/manifest.json", j.dump(2));
    return dir;
  }
  static std::string root_;
};
std::string BadInputCorpus::root_;

TEST_F(BadInputCorpus, TheUneditedCorpusOpens) {
  const Dataset d = Dataset::open(root_ + "/prepared");
  EXPECT_EQ(d.n_codes(), 2u);
}

TEST_F(BadInputCorpus, AnEditedCodeTokenIdIsRefused) {
  const std::string dir = edited("tokenid", [](nlohmann::json& j) { j["codes"][0]["token_id"] = 7; });
  EXPECT_ERROR(Dataset::open(dir), "manifest.json", "control code 'Alpha' has token_id 7 but the tokenizer gives it");
}

TEST_F(BadInputCorpus, ARenamedCodeIsRefused) {
  const std::string dir = edited("renamed", [](nlohmann::json& j) { j["codes"][0]["name"] = "Gamma"; });
  EXPECT_ERROR(Dataset::open(dir), "manifest.json", "control code 'Gamma' is not a piece of the tokenizer");
}

TEST_F(BadInputCorpus, EosAndVocabularyMustBeTheTokenizers) {
  EXPECT_ERROR(Dataset::open(edited("eos", [](nlohmann::json& j) { j["eos_id"] = 1; })), "manifest.json",
               "eos_id 1 but the tokenizer's end-of-document id is");
  EXPECT_ERROR(Dataset::open(edited("eos_code", [](nlohmann::json& j) { j["eos_id"] = j["codes"][1]["token_id"]; })),
               "manifest.json", "is the eos id");
}

// A field of the wrong type or a missing one is named, with what was found.
TEST_F(BadInputCorpus, AMalformedFieldIsNamed) {
  EXPECT_ERROR(Dataset::open(edited("vocab_text", [](nlohmann::json& j) { j["vocab_size"] = "x"; })),
               "manifest.json: field vocab_size is missing or malformed (type must be number, but is string)");
  EXPECT_ERROR(Dataset::open(edited("token_text", [](nlohmann::json& j) { j["codes"][1]["token_id"] = "7"; })),
               "field codes[1].token_id is missing or malformed");
  EXPECT_ERROR(Dataset::open(edited("no_seed", [](nlohmann::json& j) { j["split"].erase("seed"); })),
               "field split.seed is missing or malformed");
}

TEST_F(BadInputCorpus, DocumentCountsAndSplitFieldsAreChecked) {
  EXPECT_ERROR(Dataset::open(edited("docs", [](nlohmann::json& j) {
                 j["codes"][0]["documents"]["train"] = j["codes"][0]["documents"]["train"].get<int>() + 1;
               })),
               "manifest.json", "code 'Alpha' documents.train", "train shards hold");
  EXPECT_ERROR(Dataset::open(edited("split", [](nlohmann::json& j) { j["split"]["valid_fraction"] = 1.5; })),
               "manifest.json", "split.valid_fraction", "expected a fraction in [0, 1)");
  EXPECT_ERROR(Dataset::open(edited("novalid", [](nlohmann::json& j) { j["codes"][0]["documents"]["valid"] = 0; })),
               "manifest.json", "documents.valid 0 but 1 valid shards");
  EXPECT_ERROR(Dataset::open(edited("escape", [](nlohmann::json& j) { j["codes"][0]["shards"]["train"][0] = "../x"; })),
               "manifest.json", "shard '../x': expected a file name");
  EXPECT_ERROR(Dataset::open(edited("tokfile", [](nlohmann::json& j) { j["tokenizer"]["file"] = "/etc/passwd"; })),
               "manifest.json", "tokenizer.file '/etc/passwd': expected a file name");
}

// A code too short for one sequence is never trained on, and one too short for a held-out
// window has no held-out loss: both are named (ctrl train warns, eval notes), never left out silently.
TEST_F(BadInputCorpus, CodesTooShortForASequenceAreNamed) {
  auto d = std::make_shared<Dataset>(Dataset::open(root_ + "/prepared"));
  ASSERT_EQ(d->code(1).name, "Beta");
  const uint64_t beta_train = d->train(1).size(), beta_valid = d->valid(1).size();
  ASSERT_LT(beta_train + 1, d->train(0).size());
  ASSERT_LT(beta_valid, beta_train);
  const Batches fits = Batches::from_dataset(d, int64_t(beta_valid), 1);
  EXPECT_TRUE(fits.unusable_codes().empty());
  EXPECT_EQ(held_out_gap_note(fits).find("Beta"), std::string::npos) << held_out_gap_note(fits);
  const Batches b = Batches::from_dataset(d, int64_t(beta_train) + 1, 1);
  EXPECT_EQ(b.unusable_codes(), std::vector<std::string>{"Beta (" + std::to_string(beta_train) + " tokens)"});
  const std::string note = held_out_gap_note(b);
  EXPECT_NE(note.find("no held-out loss for "), std::string::npos) << note;
  EXPECT_NE(note.find("Beta (" + std::to_string(beta_valid) + " tokens)"), std::string::npos) << note;
  EXPECT_NE(note.find("than the " + std::to_string(beta_train + 1) + " of one window"), std::string::npos) << note;
  // Its sequences all come from the codes that have windows.
  std::vector<int32_t> tokens(size_t(64) * size_t(b.context())), targets(tokens.size());
  b.train(0, 64, tokens.data(), targets.data());
  for (int i = 0; i < 64; ++i) EXPECT_EQ(tokens[size_t(i) * size_t(b.context())], d->code(0).token_id);
}

// What ranks compare before training together: a copy is the same corpus; a
// shard with other tokens (another split, a stale copy) is not, even when the
// manifest and the tokenizer are the same.
TEST_F(BadInputCorpus, TheDigestTellsCopiesFromOtherData) {
  const std::string original = root_ + "/prepared";
  const std::string copy = edited("copy", [](nlohmann::json&) {});
  EXPECT_EQ(Dataset::open(copy).digest(), Dataset::open(original).digest());
  const Dataset d = Dataset::open(copy);
  const std::string shard = copy + "/" + d.manifest().codes[0].shards_train[0];
  std::vector<uint32_t> tokens;
  for (uint64_t i = 0; i < Shard(shard, d.manifest().vocab_size).size(); ++i)
    tokens.push_back(Shard(shard, d.manifest().vocab_size).at(i));
  std::reverse(tokens.begin(), tokens.end());
  write_shard(shard, tokens, Shard(shard, d.manifest().vocab_size).documents(), d.manifest().vocab_size);
  EXPECT_NE(Dataset::open(copy).digest(), Dataset::open(original).digest());
}

TEST_F(BadInputCorpus, ACheckpointAndACorpusMustAgree) {
  const Dataset d = Dataset::open(root_ + "/prepared");
  CheckpointContents c;
  c.config = small_config(1);
  c.config.model.vocab_size = int64_t(d.manifest().vocab_size);
  for (size_t i = 0; i < d.n_codes(); ++i) c.codes.push_back({d.code(i).name, d.code(i).token_id});
  ASSERT_GE(c.codes.size(), 2u);
  c.tokenizer = read_file(d.tokenizer_path());
  EXPECT_NO_THROW(check_corpus_matches(c, d, "eval"));
  // A code of the corpus that the model never saw would be scored and sampled under untrained.
  const auto all_codes = c.codes;
  c.codes.pop_back();
  const std::string missing = "has control code '" + all_codes.back().name + "'";
  EXPECT_ERROR(check_corpus_matches(c, d, "eval"), missing.c_str(),
               "which the model was not trained with (its codes: Alpha");
  c.codes = {{"Synthetic", 0}};
  EXPECT_ERROR(check_corpus_matches(c, d, "eval"), "control code 'Alpha', which the model was not trained with");
  c.codes = all_codes;
  c.codes[0].token_id += 1;
  EXPECT_ERROR(check_corpus_matches(c, d, "eval"), "control code 'Alpha' is token");
  c.codes = all_codes;
  c.tokenizer[c.tokenizer.size() / 2] ^= 1;
  EXPECT_ERROR(check_corpus_matches(c, d, "eval"), "another tokenizer than the model's");
  c.tokenizer.clear();
  c.config.model.vocab_size = 100;
  EXPECT_ERROR(check_corpus_matches(c, d, "eval"), "larger than the model's 100");
}

// ---------------------------------------------------------------- config values and flags

TEST(BadInputConfig, EveryValueIsCheckedWithItsRangeInTheMessage) {
  struct Case {
    const char* set;
    const char* expect;
  };
  for (const Case& k : std::vector<Case>{
           {"train.lr=inf", "train.lr = inf: expected a number in (0, 100]"},
           {"train.lr=nan", "train.lr = nan"},
           {"train.beta1=5", "train.beta1 = 5: expected a number in [0, 1)"},
           {"train.eps=-1", "train.eps = -1: expected a number in (0, 1]"},
           {"train.weight_decay=-100", "train.weight_decay = -100: expected a number in [0, 10]"},
           {"model.layer_norm_eps=inf", "model.layer_norm_eps = inf: expected a number in (0, 1]"},
           {"train.eval_batches=0", "--set train.eval_batches: expected an integer in [1, "},
           {"train.seed=-1", "--set train.seed: expected an integer in [0, 2^63-1], got -1"},
           {"model.n_layer=4294967297", "--set model.n_layer: expected an integer in [1, 1048576], got 4294967297"},
           {"model.n_ctx=1", "--set model.n_ctx: expected an integer in [2, "},
           {"train.loss_scale=0", "train.loss_scale = 0"}}) {
    Config c = small_config(1);  // integers are checked as they are read, before they are narrowed
    EXPECT_ERROR((apply_override(c, k.set), validate(c)), k.expect);
  }
  Config ok = small_config(1);
  EXPECT_NO_THROW(validate(ok));
  for (const auto& p : preset_names()) EXPECT_NO_THROW(validate(load_config(p))) << p;
}

TEST(BadInputConfig, TomlTypesMustBeTheFields) {
  const std::string dir = fresh_dir("toml");
  make_directories(dir);
  std::ofstream(dir + "/bool.toml") << "[train]\nlr = true\n";
  EXPECT_ERROR(load_config(dir + "/bool.toml"), "bool.toml:2: train.lr: expected a number, got a TOML boolean");
  std::ofstream(dir + "/str.toml") << "[model]\nn_layer = \"4\"\n";
  EXPECT_ERROR(load_config(dir + "/str.toml"), "model.n_layer: expected an integer, got a TOML string");
  std::ofstream(dir + "/real.toml") << "[model]\nn_layer = 4.5\n";
  EXPECT_ERROR(load_config(dir + "/real.toml"), "model.n_layer: expected an integer");
  std::ofstream(dir + "/name.toml") << "[train]\noptimizer = 3\n";
  EXPECT_ERROR(load_config(dir + "/name.toml"), "train.optimizer: expected a string");
  std::ofstream(dir + "/preset.toml") << "# a comment\npreset = \"huge\"\n";
  EXPECT_ERROR(load_config(dir + "/preset.toml"), "preset.toml:2: preset: unknown preset 'huge'");
  std::ofstream(dir + "/chained.toml") << "preset = \"preset.toml\"\n";  // the message must not invite this
  EXPECT_ERROR(load_config(dir + "/chained.toml"), "unknown preset 'preset.toml' (expected one of tiny",
               "a file cannot be a preset)");
  std::ofstream(dir + "/preset_number.toml") << "preset = 5\n";  // was dropped: the run trained tiny
  EXPECT_ERROR(load_config(dir + "/preset_number.toml"),
               "preset_number.toml:1: preset: expected a string naming a preset");
  std::ofstream(dir + "/good.toml") << "[train]\nlr = 1\nbeta1 = 0.8\n";
  EXPECT_EQ(load_config(dir + "/good.toml").train.lr, 1.0);
  // Paths in a file are relative to the file; --set's stay as given (relative to where ctrl runs).
  std::ofstream(dir + "/paths.toml") << "[train]\ndata = \"corpus\"\nteacher = \"/abs/t.ckpt\"\n";
  Config paths = load_config(dir + "/paths.toml");
  EXPECT_EQ(paths.train.data, (fs::path(dir) / "corpus").lexically_normal().string());
  EXPECT_EQ(paths.train.teacher, "/abs/t.ckpt");
  apply_override(paths, "train.data=here");
  EXPECT_EQ(paths.train.data, "here");
  EXPECT_ERROR(load_config(dir), "not a regular file");  // a directory as --config
  fs::remove_all(dir);
}

TEST(BadInputFlags, StrayArgumentsAndOutOfRangeFlagsAreRefused) {
  std::string out;
  EXPECT_EQ(ctrl_cli("generate --model none.ckpt --control A --temperature 1 extra", &out), 1);
  EXPECT_NE(out.find("ctrl generate: unexpected argument 'extra'"), std::string::npos) << out;
  for (const char* v : {"nan", "inf", "-0.5", "1.5"}) {
    EXPECT_EQ(ctrl_cli(std::string("generate --model none.ckpt --control A --top-p ") + v, &out), 1) << v;
    EXPECT_NE(out.find(std::string("--top-p ") + v + ": expected a number in (0, 1]"), std::string::npos) << out;
  }
  for (const char* f : {"--top-k 40", "--top-p 0.9", "--seed 7"}) {  // ignored by greedy decoding: refused
    EXPECT_EQ(ctrl_cli(std::string("generate --model none.ckpt --control A ") + f, &out), 1) << f;
    EXPECT_NE(out.find("applies to sampling, and temperature 0 (the default) is greedy"), std::string::npos) << out;
  }
  EXPECT_EQ(ctrl_cli("eval --model none.ckpt --data none --batch 99999999999999999999", &out), 1);
  EXPECT_NE(out.find("--batch 99999999999999999999: expected an integer in [1, 1048576]"), std::string::npos) << out;
  EXPECT_EQ(ctrl_cli("train --config tiny --out none --zero 2", &out), 1);
  EXPECT_NE(out.find("--zero 2: expected an integer in [0, 1]"), std::string::npos) << out;
}

TEST(BadInputFlags, TheCliRefusesNanSamplingAndWrappingIds) {
  std::string out;
  for (const char* flag : {"--temperature nan", "--penalty nan", "--top-p nan"}) {
    EXPECT_EQ(ctrl_cli(std::string("generate --model none.ckpt --control A ") + flag, &out), 1) << flag;
    EXPECT_NE(out.find("expected a number in"), std::string::npos) << out;
  }
  EXPECT_EQ(ctrl_cli("import hf --in none --out x.ckpt --control Foo=4294967297", &out), 1);
  EXPECT_NE(out.find("--control Foo=4294967297: expected NAME=TOKEN_ID with TOKEN_ID in [0, 2147483647]"),
            std::string::npos)
      << out;
  EXPECT_EQ(ctrl_cli("train --config tiny --out x extra", &out), 1);
  EXPECT_NE(out.find("unexpected argument 'extra'"), std::string::npos) << out;
  EXPECT_EQ(ctrl_cli("train --config / --out x", &out), 1);
  EXPECT_NE(out.find("/: not a regular file"), std::string::npos) << out;
}

// ---------------------------------------------------------------- memory check

TEST(BadInputMemory, TheEstimateIsTheLayoutsOwnFigure) {
  for (const char* variant : {"", "model.sharing=all", "model.recompute=layers", "model.recompute=cheap",
                              "model.embedding_dim=16", "train.precision=bf16", "train.optimizer=adagrad"}) {
    Config c = small_config(1);
    if (*variant) apply_override(c, variant);
    c.model.n_layer = 100;
    for (int zero : {1, 3}) {
      const plan::Memory exact = plan::memory_for(c, 3, zero, 7), guess = plan::memory_estimate(c, 3, zero, 7);
      EXPECT_EQ(guess.total(), exact.total()) << variant << " zero " << zero;
    }
  }
}

TEST(BadInputMemory, ARunThatCannotFitIsRefusedWithTheLargestMicroBatch) {
  Config c = small_config(1);
  c.train.micro_batch = 64;
  const uint64_t at8 = plan::memory_estimate(c, 8, 1, plan::kCpuRuntimeOverheadBytes).total();
  const uint64_t at9 = plan::memory_estimate(c, 9, 1, plan::kCpuRuntimeOverheadBytes).total();
  ASSERT_LT(at8, at9);
  EXPECT_ERROR(plan::check_memory(c, 64, 1, at8, 2), "at micro-batch 64", "largest micro-batch that fits is 8");
  EXPECT_NO_THROW(plan::check_memory(c, 8, 1, at8, 2));
  Config twelve = c;  // 8 fits but does not divide a global batch of 12: the advice is 6, which runs
  twelve.train.global_batch = 12;
  EXPECT_ERROR(plan::check_memory(twelve, 64, 1, at8, 2),
               "largest micro-batch that fits is 8, and the largest that "
               "divides train.global_batch / ranks (12) is 6 (--set train.micro_batch=6)");
  EXPECT_ERROR(plan::check_memory(c, 1, 1, 1 << 20, 2), "not even micro-batch 1 fits");
  // CPU ranks of one job on one host share its memory: two need twice the room.
  const uint64_t rank = plan::cpu_run_bytes(c, 8, 1, 2, nullptr, 2);
  EXPECT_NO_THROW(plan::check_memory(c, 8, 1, 2 * rank, 2, nullptr, 2, 2));
  EXPECT_ERROR(plan::check_memory(c, 8, 1, 2 * rank - 1, 2, nullptr, 2, 2), " on each of the 2 ranks on this host, ",
               "largest micro-batch that fits is 7");
  EXPECT_GT(plan::available_memory_bytes(), 0u);
  // bf16 on a CPU also needs the fp32 copies of widened products (auto may
  // widen), or native products' bf16 copy of an fp32 output gradient.
  c.train.precision = "bf16";
  const uint64_t bf16_at8 = plan::memory_estimate(c, 8, 1, plan::kCpuRuntimeOverheadBytes).total();
  const uint64_t widened = plan::cpu_widened_bytes(c, 8, 2);
  ASSERT_GT(widened, 0u);
  EXPECT_NO_THROW(plan::check_memory(c, 8, 1, bf16_at8 + widened, 2));
  EXPECT_ERROR(plan::check_memory(c, 8, 1, bf16_at8 + widened - 1, 2), "at micro-batch 8");
  c.train.cpu_bf16 = "native";
  const uint64_t native = plan::cpu_widened_bytes(c, 8, 2);
  EXPECT_EQ(native, uint64_t(2 * 8 * c.model.n_ctx * std::max(c.model.d_model, embedding_width(c.model))));
  EXPECT_LT(native, widened);
  EXPECT_NO_THROW(plan::check_memory(c, 8, 1, bf16_at8 + native, 2));
  EXPECT_ERROR(plan::check_memory(c, 8, 1, bf16_at8 + native - 1, 2), "at micro-batch 8");
  // At 16 threads each thread past two adds its runtime (native products keep no per-thread copies).
  const uint64_t at16 = bf16_at8 + native + plan::cpu_thread_bytes(16);
  EXPECT_NO_THROW(plan::check_memory(c, 8, 1, at16, 16));
  EXPECT_ERROR(plan::check_memory(c, 8, 1, at16 - 1, 16), "at micro-batch 8");
  // A GPU run is held to the GPU's room (Ops::device_room_bytes): the buffers and the CUDA
  // backend's own scratch (plan::gpu_scratch_bytes), without the host's runtime, the CPU's
  // per-thread copies or a sharing of the host's memory between ranks.
  c.train.cpu_bf16 = "widened", c.train.device = "cuda";
  const uint64_t gpu_at8 = plan::memory_estimate(c, 8, 1, 0).total() + plan::gpu_scratch_bytes(c, 8);
  EXPECT_EQ(plan::gpu_buffer_bytes(c, 8), gpu_at8);
  EXPECT_NO_THROW(plan::check_memory(c, 8, 1, gpu_at8, 16, nullptr, 2, 2));
  EXPECT_ERROR(plan::check_memory(c, 8, 1, gpu_at8 - 1, 2), "of GPU memory at micro-batch 8",
               "is free on cuda (cudaMemGetInfo", "largest micro-batch that fits is 7");
}

TEST(BadInputMemory, AMillionLayersIsRefusedUpFront) {
  std::string out;
  const std::string dir = fresh_dir("million");
  // Was: allocation until "out of memory" at 3.2 GB RSS.
  EXPECT_EQ(ctrl_cli("train --config tiny --set model.n_layer=1000000 --out " + dir + " --quiet", &out), 1);
  EXPECT_NE(out.find("of memory at micro-batch 16"), std::string::npos) << out;
  EXPECT_NE(out.find("not even micro-batch 1 fits"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir));  // refused before the run directory is made
  fs::remove_all(dir);
}

// ---------------------------------------------------------------- prepare: binary files, long lines

TEST(BadInputPrepare, BinaryContentIsDetected) {
  EXPECT_EQ(binary_reason("普通の日本語の文章です。\nplain English text\twith a tab.\n"), "");
  EXPECT_EQ(binary_reason(std::string("ELF\0\0\1", 6)), "NUL bytes");
  std::string controls;
  for (int i = 0; i < 200; ++i) controls += i % 5 ? "ア" : "\x01";
  EXPECT_NE(binary_reason(controls), "");
  std::string replacement;
  for (int i = 0; i < 200; ++i) replacement += i % 4 ? "x" : "\xEF\xBF\xBD";
  EXPECT_NE(binary_reason(replacement), "");
}

TEST(BadInputPrepare, ABinaryFileInATextDirectoryIsSkippedAndCounted) {
  const std::string dir = fresh_dir("binary");
  make_directories(dir + "/text");
  for (int i = 0; i < 12; ++i)
    std::ofstream(dir + "/text/" + std::to_string(i) + ".txt")
        << "これは" << i << "番目の文書です。The text number " << i << " is plain.\n";
  fs::copy_file("/bin/ls", dir + "/text/ls.txt");
  PrepareOptions o;
  o.out_dir = dir + "/out";
  o.vocab_size = 400;
  o.threads = 2;
  o.quiet = true;
  const SourceSpec spec{"Text", dir + "/text"};
  testing::internal::CaptureStderr();
  const PrepareSummary s =
      prepare_corpus({{"Text", spec.path, [spec](const DocumentSink& k) { return read_source(spec, {}, k); }}}, o);
  const std::string said = testing::internal::GetCapturedStderr();
  // One warning for the file, that it is binary: not also one for the bytes that are not text.
  EXPECT_NE(said.find("ls.txt: binary content (NUL bytes); skipped"), std::string::npos) << said;
  EXPECT_EQ(said.find("dropped"), std::string::npos) << said;
  EXPECT_EQ(s.sources[0].clean.dropped.at("binary"), 1u);
  EXPECT_EQ(s.sources[0].clean.documents_kept, 12u);
  EXPECT_EQ(s.codes[0].documents_train + s.codes[0].documents_valid, 12u);
  fs::remove_all(dir);
}

TEST(BadInputPrepare, LongTextIsSplitAtLinesThenSentencesThenCharacters) {
  std::string text;
  for (int i = 0; i < 3000; ++i) text += "日本語の文です。";  // 24 bytes each, no newline
  const auto pieces = split_for_encoding(text, 1000);
  std::string joined;
  for (auto p : pieces) {
    EXPECT_LE(p.size(), 1000u);
    EXPECT_EQ(p.substr(p.size() - 3), "。");  // cut after a sentence end
    joined += p;
  }
  EXPECT_EQ(joined, text);
  std::string kana;
  for (int i = 0; i < 1000; ++i) kana += "あ";  // no sentence end: character boundaries
  const auto kana_pieces = split_for_encoding(kana, 100);
  for (size_t i = 0; i + 1 < kana_pieces.size(); ++i) EXPECT_EQ(kana_pieces[i].size(), 99u);
  EXPECT_EQ(kana_pieces.size(), 31u);
  std::string lines = std::string(600, 'a') + "\n" + std::string(600, 'b');
  EXPECT_EQ(split_for_encoding(lines, 1000)[0], std::string(600, 'a') + "\n");
}

TEST(BadInputPrepare, ALongLineIsEncodedWholeAndTrainedOnWhole) {
  // One line of about 300 KB: encoded in pieces it still decodes to itself, and the
  // tokenizer trainer sees all of it (it used to get the first 16 KB only).
  std::string line;
  for (int i = 0; i < 12000; ++i) line += "第" + std::to_string(i) + "の文です。ABC def " + std::to_string(i % 17) + ". ";
  ASSERT_GT(line.size(), 5 * kEncodeChunkBytes);
  const std::string dir = fresh_dir("longline");
  make_directories(dir);
  VectorSentenceSource sentences({line, "短い行です。"});
  TokenizerTrainOptions t;
  t.vocab_size = 400;
  TokenizerTrainStats stats;
  train_tokenizer(sentences, t, dir + "/t.model", &stats);
  EXPECT_EQ(stats.long_lines, 1u);
  EXPECT_GE(stats.long_line_pieces, line.size() / kMaxSentenceBytes);
  EXPECT_EQ(stats.sentences, stats.long_line_pieces + 1);
  const Tokenizer tok = Tokenizer::load(dir + "/t.model");
  const auto ids = tok.encode_clean(line);
  EXPECT_EQ(tok.decode(ids), line);
  fs::remove_all(dir);
}

// A checkpoint that cannot be opened at this moment (too many open files,
// no permission, not a file) is not damage: --resume stops with the reason
// instead of going back past it and moving it aside.
TEST(BadInputCheckpoint, ACheckpointThatCannotBeOpenedIsNotTreatedAsDamaged) {
  const std::string run = trained_run("unopenable", 4);
  const std::string newest = checkpoint_path(run, 4);
  {  // every descriptor taken: the open fails with EMFILE
    rlimit saved;
    ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
    rlimit none = saved;
    none.rlim_cur = 0;
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &none), 0);
    bool unreadable = false;
    std::string what;
    try {
      Checkpoint c(newest);
    } catch (const FileUnreadable& e) {
      unreadable = true;
      what = e.what();
    } catch (const Error&) {
    }
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
    EXPECT_TRUE(unreadable);
    EXPECT_NE(what.find("Too many open files"), std::string::npos) << what;
  }
  const std::string bytes = read_file(newest);
  fs::rename(newest, newest + ".aside");
  fs::create_directory(newest);  // opens, but cannot be mapped
  TrainerOptions o{run, true, true};
  EXPECT_ERROR(Trainer(small_config(6), o), "step-00000004.ckpt: cannot map", "nothing was moved");
  EXPECT_TRUE(fs::is_directory(newest));
  EXPECT_FALSE(fs::exists(newest + ".damaged"));
  EXPECT_EQ(list_checkpoints(run).size(), 2u);
  fs::remove_all(run);
}

}  // namespace
