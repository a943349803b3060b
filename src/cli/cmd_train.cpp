// ctrl train: train a model from a preset or TOML config into a run directory.
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "cli/args.h"
#include "cli/command.h"
#include "core/file_io.h"
#include "core/parse.h"
#include "core/sysinfo.h"
#include "train/trainer.h"

namespace ctrl::cli {
namespace {

const char* kUsage =
    "usage: ctrl train --config FILE|PRESET --out RUN_DIR [--data DIR] [--set section.key=value]... [--resume]\n"
    "                  [--zero 0|1] [--timeout SECONDS] [--device cpu|checked|cuda[:N]] [--threads N] [--quiet]\n"
    "                  [--teacher CKPT [--distill-alpha A] [--distill-temperature TAU]]\n\n"
    "Trains a CTRL model. PRESET is tiny, small, base, medium or ctrl; a TOML file has [model] and [train] tables\n"
    "(and may start with preset = \"small\"). --data DIR is a corpus from `ctrl prepare` (same as\n"
    "--set train.data=DIR); without it the model trains on synthetic random tokens.\n"
    "RUN_DIR receives config.json, metrics.jsonl (one JSON line per logged step), loss.svg and\n"
    "checkpoints/step-NNNNNNNN.ckpt (the last train.keep_checkpoints are kept). --resume continues from the\n"
    "newest checkpoint and reproduces the uninterrupted run's losses exactly (same thread count); it\n"
    "keeps the run's corpus and teacher (from RUN_DIR/config.json) when --data and --teacher are left out.\n"
    "SIGINT (Ctrl-C), SIGTERM or SIGHUP stops training after the current step with a checkpoint and exit\n"
    "status 130, 143 or 129; a second signal ends it at once. Creating the file RUN_DIR/stop also stops it\n"
    "after the current step with a checkpoint (exit status 0; ctrl removes the file): the way to stop a job\n"
    "under mpirun, which kills its ranks about 1 s after passing Ctrl-C on, too soon for a step and a\n"
    "checkpoint. One training at a time may write RUN_DIR,\n"
    "and a directory holding other files (an export, a corpus) is refused. --quiet prints no start-up,\n"
    "step or evaluation lines.\n\n"
    "Data-parallel: `mpirun -np N ctrl train ...` (add --bind-to none so each rank can use several\n"
    "threads). Each rank takes global_batch/N sequences of every step; --zero 1 shards the optimizer\n"
    "state across ranks (ZeRO-1). A rank that dies or hangs ends the job after --timeout seconds\n"
    "(default 600) with an error; the last checkpoint stays intact.\n\n"
    "Distillation: --teacher CKPT (train.teacher) trains the student on A*TAU^2*KL(teacher||student, both\n"
    "softened at temperature TAU) + (1-A)*cross-entropy (train.distill_alpha, default 0.5;\n"
    "train.distill_temperature, default 2). The teacher runs forward only, on the same micro-batch, in\n"
    "the student's precision; it must share the corpus's tokenizer and control codes and have a context\n"
    "at least the student's. The student may have any shape (fewer or narrower layers, sharing, a\n"
    "factorized embedding). The logged loss stays the cross-entropy; kl and objective are logged too.\n";

// Test hook for tests/mpi/trainer_runs.cpp: CTRL_TEST_FAULT=kill:N (or
// stop:N) makes rank 1 send itself SIGKILL (SIGSTOP) just before optimizer
// step N, to show how a job ends when a rank dies (hangs) mid-training.
std::function<void(int64_t, int)> fault_from_environment() {
  const char* v = std::getenv("CTRL_TEST_FAULT");
  if (!v) return nullptr;
  const std::string s = v;
  const size_t colon = s.find(':');
  const std::string kind = s.substr(0, colon);
  const int64_t at = colon == std::string::npos ? 0 : parse_whole_int(s.substr(colon + 1)).value_or(0);
  if ((kind != "kill" && kind != "stop") || at < 1)
    fail("CTRL_TEST_FAULT: expected kill:STEP or stop:STEP with STEP >= 1, got '" + s + "'");
  const int signal = kind == "kill" ? SIGKILL : SIGSTOP;
  return [signal, at](int64_t step, int rank) {
    if (rank == 1 && step == at) std::raise(signal);
  };
}

int run(const std::vector<std::string>& argv) {
  Args args("train", kUsage);
  args.flag("config");
  args.flag("out");
  args.flag("data");
  args.repeated("set");
  args.boolean("resume");
  args.boolean("quiet");
  args.flag("zero");
  args.flag("timeout");
  args.flag("device");
  args.flag("threads");
  args.flag("teacher");
  args.flag("distill-alpha");
  args.flag("distill-temperature");
  if (!args.parse(argv)) return 0;
  Config config = load_config(args.require("config"));
  if (args.has("data")) config.train.data = args.get("data");
  for (const auto& s : args.all("set")) apply_override(config, s);
  if (args.has("device")) apply_override(config, "train.device=" + args.get("device"));
  if (args.has("threads")) config.train.threads = args.get_int("threads", 0, 0, 1 << 16);
  if (args.has("teacher")) config.train.teacher = args.get("teacher");
  if (args.has("distill-alpha")) config.train.distill_alpha = args.get_double("distill-alpha", 0.5, 0, 1);
  if (args.has("distill-temperature"))
    config.train.distill_temperature = args.get_double("distill-temperature", 2, 0, 1000, true);
  // Given for this start: as flags, with --set, or in a TOML file (where they differ from the defaults).
  bool alpha_given = args.has("distill-alpha") || config.train.distill_alpha != TrainConfig().distill_alpha;
  bool temperature_given =
      args.has("distill-temperature") || config.train.distill_temperature != TrainConfig().distill_temperature;
  for (const auto& s : args.all("set")) {
    alpha_given |= s.rfind("train.distill_alpha=", 0) == 0;
    temperature_given |= s.rfind("train.distill_temperature=", 0) == 0;
  }
  // A resume may keep the run's teacher (from its config.json): the trainer checks that one exists.
  if ((alpha_given || temperature_given) && config.train.teacher.empty() && !args.has("resume"))
    fail(
        "ctrl train: --distill-alpha and --distill-temperature (train.distill_alpha, train.distill_temperature) need "
        "a teacher (--teacher CKPT)");
  validate(config);
  TrainerOptions options;
  options.run_dir = args.require("out");
  options.resume = args.has("resume");
  options.quiet = args.has("quiet");
  options.zero = int(args.get_int("zero", 0, 0, 1));
  options.distill_alpha_given = alpha_given;
  options.distill_temperature_given = temperature_given;
  options.before_step = fault_from_environment();
  auto comm = make_communicator(args.get_double("timeout", 600, 0, 1e9, true));
  options.comm = comm.get();
  Trainer trainer(config, options);
  trainer.run();
  if (trainer.stopped_by()) return 128 + trainer.stopped_by();  // as a shell reports a signal: 130, 143, 129
  if (trainer.stopped_early()) return 0;                        // by the stop file: as asked, and said so
  if (comm->rank() != 0) return 0;
  if (comm->size() > 1) std::fprintf(stderr, "data-parallel over %s\n", trainer.communicator().name().c_str());
  const std::string curve = options.run_dir + "/loss.svg";
  std::fprintf(stderr, "done: %s (peak memory %.0f MiB)%s\n", options.run_dir.c_str(),
               double(peak_rss_bytes()) / (1 << 20),
               trainer.loss_curve_current() ? ("; loss curve in " + curve).c_str() : "");
  return 0;
}

CommandRegistration registration({"train", "train a model (presets tiny, small, base, medium, ctrl, or a TOML config)", run});

}  // namespace
}  // namespace ctrl::cli
