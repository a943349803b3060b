// The run lifecycle (docs/reliability.md): `ctrl train` killed at any moment
// resumes bit for bit; SIGINT, SIGTERM and SIGHUP stop it at a step boundary
// with a checkpoint; a full disk stops it with an error; two trainings cannot
// share a run directory; what killed runs leave is removed; metrics never
// repeat a step; exports and renames are atomic and durable. Most tests run
// the real binary (test_support::ctrl_binary()) in a child process and signal
// or limit it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "core/error.h"
#include "core/file_io.h"
#include "io/hf.h"
#include "test_support.h"
#include "train/checkpoint.h"
#include "train/run_dir.h"
#include "train/trainer.h"

namespace ctrl {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) { return test_support::fresh_dir("ctrl_run_dir", name); }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The model and schedule of every run here: tiny, so a step takes milliseconds.
const char* const kModel[] = {"model.vocab_size=64", "model.n_layer=2",  "model.d_model=32",    "model.n_head=2",
                              "model.d_ff=64",       "model.n_ctx=16",   "train.micro_batch=2", "train.global_batch=4",
                              "train.eval_every=0",  "train.warmup_steps=2", "train.schedule=warmup",
                              "train.lr=0.01",       "train.log_every=1"};

Config small_config(int64_t steps, int64_t checkpoint_every = 3) {
  Config c = load_config("tiny");
  for (const char* s : kModel) apply_override(c, s);
  c.train.steps = steps;
  c.train.checkpoint_every = checkpoint_every;
  return c;
}

std::string train_command(const std::string& out, const std::string& extra) {
  std::string s = test_support::ctrl_binary() + " train --config tiny --quiet --out " + out;
  for (const char* set : kModel) s += std::string(" --set ") + set;
  return s + " " + extra;
}

// Starts `command` under /bin/sh (exec'd, so the pid is the command's own),
// with the stop signals at their defaults as from a terminal (even under
// nohup), except `ignored` (0: none), which it starts with ignored.
pid_t spawn(const std::string& command, int ignored = 0) {
  const pid_t pid = fork();
  if (pid == 0) {
    for (int s : {SIGINT, SIGTERM, SIGHUP}) signal(s, s == ignored ? SIG_IGN : SIG_DFL);
    execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

int wait_for_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

// Polls `done` every millisecond for up to 120 s.
bool wait_until(const std::function<bool()>& done) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

std::string read_or_empty(const std::string& path) { return file_exists(path) ? read_file(path) : ""; }

// Step -> training loss of every loss line of metrics.jsonl, failing on a repeated step or a torn line.
std::map<int64_t, double> metrics_losses(const std::string& run_dir) {
  std::map<int64_t, double> out;
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("loss")) continue;
    const int64_t step = j.at("step").get<int64_t>();
    EXPECT_EQ(out.count(step), 0u) << run_dir << ": step " << step << " appears twice";
    out[step] = j.at("loss").get<double>();
  }
  return out;
}

// The last step logged so far (0 if none); tolerates a line being written.
int64_t last_logged_step(const std::string& run_dir) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::string line;
  int64_t step = 0;
  while (std::getline(in, line)) {
    try {
      step = std::max(step, nlohmann::json::parse(line).at("step").get<int64_t>());
    } catch (...) {
    }
  }
  return step;
}

// The id of a process that has ended (and was reaped), for leftovers of a "killed" writer.
long dead_pid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  return out;
}

// kill -9 at arbitrary moments (while steps run, while checkpoints are being
// written every step): every resume continues where the newest intact
// checkpoint left off, and the losses of the whole run equal those of an
// uninterrupted run bit for bit, each step logged once.
TEST(RunLifecycle, KilledAtAnyMomentResumesBitForBit) {
  const std::string whole = fresh_dir("kill_whole"), killed = fresh_dir("kill_killed");
  const std::string flags = "--set train.steps=40 --set train.checkpoint_every=1 --set train.keep_checkpoints=2";
  ASSERT_EQ(std::system((train_command(whole, flags) + " 2>/dev/null").c_str()), 0);
  std::mt19937 rng(7);
  int kills = 0;
  for (int64_t target : {3, 9, 16, 24, 31}) {
    const pid_t pid = spawn(train_command(killed, flags + (kills ? " --resume" : "")) + " 2>>" + killed + ".err");
    ASSERT_TRUE(wait_until([&] { return last_logged_step(killed) >= target; }));
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));  // anywhere in a step or a checkpoint
    kill(pid, SIGKILL);
    const int status = wait_for_exit(pid);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << read_or_empty(killed + ".err");
    ++kills;
  }
  ASSERT_EQ(std::system((train_command(killed, flags + " --resume") + " 2>>" + killed + ".err").c_str()), 0)
      << read_or_empty(killed + ".err");
  const auto a = metrics_losses(whole), b = metrics_losses(killed);
  ASSERT_EQ(a.size(), 40u);
  ASSERT_EQ(b.size(), 40u);
  for (const auto& [step, loss] : a) EXPECT_EQ(b.at(step), loss) << "step " << step;
  for (const auto& name : names_in(killed + "/checkpoints")) EXPECT_TRUE(name.ends_with(".ckpt")) << name;
}

struct Stopped {
  int status = 0;
  std::string err;
};

// Starts a long training, waits for step 2, sends `signal` and waits for the exit.
Stopped stop_with(int signal, const std::string& dir) {
  const pid_t pid =
      spawn(train_command(dir, "--set train.steps=1000000 --set train.checkpoint_every=1000") + " 2>" + dir + ".err");
  Stopped s;
  EXPECT_TRUE(wait_until([&] { return last_logged_step(dir) >= 2; }));
  kill(pid, signal);
  s.status = wait_for_exit(pid);
  s.err = read_or_empty(dir + ".err");
  return s;
}

// SIGINT, SIGTERM and SIGHUP stop training after the current step with a
// checkpoint of that step, one line saying so, and exit status 128 + signal.
TEST(RunLifecycle, SignalsStopAtAStepBoundaryWithACheckpoint) {
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) {
    const std::string dir = fresh_dir("signal_" + signal_name(signal));
    const Stopped s = stop_with(signal, dir);
    ASSERT_TRUE(WIFEXITED(s.status)) << signal_name(signal) << ": " << s.err;
    EXPECT_EQ(WEXITSTATUS(s.status), 128 + signal) << s.err;
    const int64_t step = last_logged_step(dir);
    const std::string ckpt = checkpoint_path(dir, step);
    EXPECT_TRUE(contains(s.err, "ctrl train: stopped by " + signal_name(signal) + " after step " +
                                    std::to_string(step) + " of 1000000; checkpoint " + ckpt +
                                    " written (continue with --resume)\n"))
        << s.err;
    EXPECT_EQ(Checkpoint(ckpt).contents().state.step, step);
    if (signal != SIGTERM) continue;
    // The stopped run continues from its checkpoint; no step is logged twice.
    const std::string more = " --resume --set train.steps=" + std::to_string(step + 3) + " 2>/dev/null";
    ASSERT_EQ(std::system((train_command(dir, more)).c_str()), 0);
    EXPECT_EQ(metrics_losses(dir).size(), size_t(step + 3));
  }
}

// The stop signals never interrupt a compute thread: oneDNN's GEMM kernels
// point the stack pointer into the heap, where a handler's frame would land
// (core/signals.h). So no handler is installed for them, every thread blocks
// them, and one thread takes them with sigwait. A signal that was ignored at
// the start (nohup) stays ignored.
TEST(RunLifecycle, StopSignalsAreTakenByOneThreadAndNeverByAHandler) {
  const std::string dir = fresh_dir("signal_thread");
  const pid_t pid =
      spawn(train_command(dir, "--set train.steps=100000 --set train.checkpoint_every=100000") + " 2>" + dir + ".err",
            SIGHUP);
  ASSERT_TRUE(wait_until([&] { return last_logged_step(dir) >= 2; }));
  auto mask = [](const std::string& status_path, const std::string& field) {
    std::ifstream in(status_path);
    std::string line;
    while (std::getline(in, line))
      if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1), nullptr, 16);
    return 0ull;
  };
  auto bit = [](int sig) { return 1ull << (sig - 1); };
  const std::string proc = "/proc/" + std::to_string(pid);
  EXPECT_EQ(mask(proc + "/status", "SigCgt") & (bit(SIGINT) | bit(SIGTERM) | bit(SIGHUP)), 0u);
  EXPECT_NE(mask(proc + "/status", "SigIgn") & bit(SIGHUP), 0u);
  // The thread in sigwait shows them unblocked while it waits (the kernel's
  // sigtimedwait unblocks what it waits for); every other thread blocks them.
  int threads = 0, taking = 0;
  for (const auto& task : fs::directory_iterator(proc + "/task")) {
    const auto stop = bit(SIGINT) | bit(SIGTERM);
    const auto blocked = mask(task.path().string() + "/status", "SigBlk") & stop;
    EXPECT_TRUE(blocked == stop || blocked == 0) << task.path();
    taking += blocked == 0;
    ++threads;
  }
  EXPECT_EQ(taking, 1);
  EXPECT_GE(threads, 2);  // main and the signal thread, and OpenMP's workers with more than one CPU

  kill(pid, SIGHUP);  // ignored: training goes on
  const int64_t after_hup = last_logged_step(dir);
  EXPECT_TRUE(wait_until([&] { return last_logged_step(dir) >= after_hup + 3; }));
  kill(pid, SIGTERM);
  const int status = wait_for_exit(pid);
  const std::string err = read_or_empty(dir + ".err");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM) << err;
  EXPECT_FALSE(contains(err, "SIGHUP")) << err;
  EXPECT_TRUE(contains(err, "ctrl train: stopped by SIGTERM after step ")) << err;
}

// A second signal ends training at once: no checkpoint, killed by that signal.
// The steps are made slow (~0.5 s) so the second signal lands within a step.
// (The same signal again within 0.2 s is the first one repeated, as GNU timeout
// sends it: TimeoutsTwoSignalsAreOneStop. A different one always counts.)
TEST(RunLifecycle, SecondSignalEndsAtOnce) {
  const std::string dir = fresh_dir("twice");
  const pid_t pid = spawn(train_command(dir,
                                        "--set model.d_model=256 --set model.d_ff=1024 --set model.n_layer=4 "
                                        "--set model.n_head=4 --set model.n_ctx=128 --set train.micro_batch=8 "
                                        "--set train.global_batch=8 --set train.steps=100000 "
                                        "--set train.checkpoint_every=100000") +
                          " 2>" + dir + ".err");
  ASSERT_TRUE(wait_until([&] { return last_logged_step(dir) >= 1; }));
  kill(pid, SIGINT);
  ASSERT_TRUE(wait_until([&] { return contains(read_or_empty(dir + ".err"), "SIGINT received"); }));
  kill(pid, SIGTERM);
  const int status = wait_for_exit(pid);
  const std::string err = read_or_empty(dir + ".err");
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << err;
  EXPECT_TRUE(contains(err, "ctrl train: SIGINT received; stopping after this step (again to quit at once)\n")) << err;
  EXPECT_FALSE(contains(err, "stopped by")) << err;
}

// GNU timeout signals the process and then its process group: two SIGTERMs
// moments apart are one request, so the run stops after its step with a
// checkpoint (it used to die without one when the signal thread had taken the
// first before the second came, as under load). The second is sent once the
// first has been taken, as soon as that shows.
// Training whose output pipe closes (`ctrl train ... 2>&1 | head -c 1`) goes on
// to its end and its checkpoint; SIGPIPE used to kill it at the next line.
TEST(RunLifecycle, AClosedOutputPipeDoesNotEndTraining) {
  const std::string dir = fresh_dir("pipe");
  std::string command =
      train_command(dir, "--set train.steps=20 --set train.log_every=1 --set train.checkpoint_every=1000");
  command.erase(command.find(" --quiet"), 8);  // a line per step, so writes follow the pipe's close
  ASSERT_EQ(std::system(("(" + command + " 2>&1; echo $? > " + dir + ".rc) | head -c 1 > /dev/null").c_str()), 0);
  EXPECT_EQ(read_file(dir + ".rc"), "0\n");
  EXPECT_TRUE(file_exists(checkpoint_path(dir, 20)));
}

TEST(RunLifecycle, TimeoutsTwoSignalsAreOneStop) {
  const std::string dir = fresh_dir("timeout");
  const pid_t pid =
      spawn(train_command(dir, "--set train.steps=100000 --set train.checkpoint_every=100000") + " 2>" + dir + ".err");
  ASSERT_TRUE(wait_until([&] { return last_logged_step(dir) >= 1; }));
  kill(pid, SIGTERM);
  ASSERT_TRUE(wait_until([&] { return contains(read_or_empty(dir + ".err"), "SIGTERM received"); }));
  kill(pid, SIGTERM);
  const int status = wait_for_exit(pid);
  const std::string err = read_or_empty(dir + ".err");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM) << err;
  EXPECT_TRUE(contains(err, "ctrl train: stopped by SIGTERM after step ")) << err;
  size_t checkpoints = 0;
  for (const auto& e : fs::directory_iterator(dir + "/checkpoints")) checkpoints += e.path().extension() == ".ckpt";
  EXPECT_EQ(checkpoints, 1u) << err;
}

// RUN/stop asks for a checkpointed stop: when the checkpoint cannot be
// written (a file size limit), the exit status says so and the file stays.
TEST(RunLifecycle, AStopFileWhoseCheckpointFailsIsAnError) {
  const std::string dir = fresh_dir("stop_file_full");
  const pid_t pid = spawn("bash -c \"ulimit -f 64; exec " +
                          train_command(dir, "--set train.steps=100000 --set train.checkpoint_every=100000") + "\" 2>" +
                          dir + ".err");
  ASSERT_TRUE(wait_until([&] { return last_logged_step(dir) >= 1; }));
  std::ofstream(dir + "/stop").flush();
  const int status = wait_for_exit(pid);
  const std::string err = read_or_empty(dir + ".err");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << err;
  EXPECT_TRUE(contains(err, "ctrl train: stopped by " + dir + "/stop after step ")) << err;
  EXPECT_TRUE(contains(err, ", but the checkpoint could not be written either (")) << err;
  EXPECT_TRUE(fs::exists(dir + "/stop"));
}

// A stop file left from before a start (made while nothing trained) is
// removed with a note; it used to end the next run after one step.
TEST(RunLifecycle, AStopFileFromBeforeTheStartIsRemoved) {
  TrainerOptions o{fresh_dir("stale_stop"), false, true};
  Trainer(small_config(2), o).run();
  std::ofstream(o.run_dir + "/stop").flush();
  o.resume = true;
  Trainer resumed(small_config(5), o);
  EXPECT_FALSE(fs::exists(o.run_dir + "/stop"));
  resumed.run();
  EXPECT_FALSE(resumed.stopped_early());
  EXPECT_EQ(resumed.state().step, 5);
}

// A second training of the same run directory fails at once, naming the
// holder's pid; when the first ends, the directory is free again.
TEST(RunLifecycle, OneTrainingAtATimePerRunDirectory) {
  const Config c = small_config(3);
  TrainerOptions o{fresh_dir("lock"), false, true};
  {
    Trainer first(c, o);
    try {
      Trainer second(c, o);
      FAIL() << "a second training of the same run directory started";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), o.run_dir + ": another training is writing this run directory (pid " +
                                           std::to_string(getpid()) + "); wait for it to end or choose another --out");
    }
    first.run();
  }
  o.resume = true;
  Trainer again(c, o);  // the lock went with the first
  EXPECT_EQ(again.state().step, 3);
}

// A run whose directory is removed while it trains, and a new run started at
// the same path, never meet: the first stops before its next step or
// checkpoint, since its lock is no longer the path's (its checkpoints once
// landed in the new run and its pruning deleted the new run's).
TEST(RunLifecycle, ARunWhoseDirectoryIsReplacedStops) {
  Config c = small_config(8);
  c.train.checkpoint_every = 2;
  TrainerOptions o{fresh_dir("replaced"), false, true};
  o.before_step = [&](int64_t step, int) {
    if (step != 3) return;
    fs::remove_all(o.run_dir);  // as `rm -rf RUN`, then another run's directory at the path
    make_directories(o.run_dir + "/checkpoints");
    write_file_atomically(o.run_dir + "/train.lock", "another run");
  };
  Trainer t(c, o);
  const std::string message = test_support::error_of([&] { t.run(); });
  EXPECT_EQ(message, o.run_dir + ": the run directory was removed or replaced while this training ran (" + o.run_dir +
                         "/train.lock is not its lock any more); stopping without writing there");
  EXPECT_TRUE(names_in(o.run_dir + "/checkpoints").empty()) << "nothing written into the new directory";
}

// --resume of a run directory that is not there refuses without creating it.
TEST(RunLifecycle, ResumeOfAMissingRunCreatesNothing) {
  TrainerOptions o{fresh_dir("missing") + "/nowhere", true, true};
  const std::string message = test_support::error_of([&] { Trainer(small_config(2), o); });
  EXPECT_EQ(message, o.run_dir +
                         ": --resume given but there is no such run directory (without --resume, a new run "
                         "starts there)");
  EXPECT_FALSE(fs::exists(o.run_dir));
}

// A directory that holds files but none of a run's (a Hugging Face export, a
// corpus) is refused as --out, before anything in it changes: its config.json
// used to be replaced by the run's.
TEST(RunLifecycle, ADirectoryThatIsNotARunIsNotWrittenInto) {
  const std::string dir = fresh_dir("export");
  make_directories(dir);
  write_file_atomically(dir + "/config.json", "{\"model_type\": \"ctrl\"}");
  TrainerOptions o{dir, false, true};
  const std::string message = test_support::error_of([&] { Trainer(small_config(2), o); });
  EXPECT_EQ(message, dir +
                         ": not a ctrl run directory (it holds config.json and no train.lock, checkpoints/ or "
                         "metrics.jsonl); choose another --out");
  EXPECT_EQ(read_file(dir + "/config.json"), "{\"model_type\": \"ctrl\"}");
  EXPECT_FALSE(fs::exists(dir + "/checkpoints"));
  EXPECT_FALSE(fs::exists(dir + "/train.lock"));
  o.resume = true;
  EXPECT_NE(test_support::error_of([&] { Trainer(small_config(2), o); }).find("not a ctrl run directory"),
            std::string::npos);
  // An empty directory is a new run's.
  fs::remove(dir + "/config.json");
  o.resume = false;
  Trainer(small_config(2), o).run();
  EXPECT_TRUE(fs::exists(checkpoint_path(dir, 2)));
}

// The temporaries of a run killed while writing a checkpoint (and of other
// files) are removed when the next training takes the directory, with a note.
TEST(RunLifecycle, LeftoverTemporariesAreRemovedAtTheNextStart) {
  const std::string dir = fresh_dir("leftovers");
  ASSERT_EQ(std::system((train_command(dir, "--set train.steps=3") + " 2>/dev/null").c_str()), 0);
  const std::string pid = std::to_string(dead_pid());
  write_file_atomically(dir + "/checkpoints/step-00000004.ckpt.tmp." + pid, std::string(1000, 'x'));
  write_file_atomically(dir + "/metrics.jsonl.tmp." + pid, "{}");
  write_file_atomically(dir + "/notes.txt", "the user's");  // not a temporary: stays
  const std::string err = dir + ".err";
  ASSERT_EQ(std::system((train_command(dir, "--resume --set train.steps=4") + " 2>" + err).c_str()), 0);
  const std::string text = read_file(err);
  EXPECT_TRUE(contains(text, "note: removed 2 temporaries left by an interrupted run (0.0 MB): ")) << text;
  EXPECT_FALSE(file_exists(dir + "/checkpoints/step-00000004.ckpt.tmp." + pid));
  EXPECT_FALSE(file_exists(dir + "/metrics.jsonl.tmp." + pid));
  EXPECT_TRUE(file_exists(dir + "/notes.txt"));
  EXPECT_TRUE(file_exists(checkpoint_path(dir, 4)));
}

// A rerun into a directory whose run stopped before its first checkpoint
// would log steps 1.. again: refused; --resume starts it again from step 0.
TEST(RunLifecycle, RerunWithoutACheckpointIsRefusedAndResumeRestarts) {
  const Config c = small_config(4, 10);
  TrainerOptions o{fresh_dir("rerun"), false, true};
  make_directories(o.run_dir);
  write_file_atomically(o.run_dir + "/metrics.jsonl", "{\"step\":1,\"loss\":4.1}\n{\"step\":2,\"loss\":4.0}\n{\"st");
  try {
    Trainer t(c, o);
    FAIL() << "a rerun would append to metrics.jsonl";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), o.run_dir + ": holds metrics.jsonl of an earlier run that stopped before its "
                                                 "first checkpoint; pass --resume to start it again from step 0 "
                                                 "or choose another --out");
  }
  o.resume = true;
  Trainer t(c, o);
  EXPECT_EQ(t.state().step, 0);
  t.run();
  const auto losses = metrics_losses(o.run_dir);
  ASSERT_EQ(losses.size(), 4u);
  EXPECT_NE(losses.at(1), 4.1);  // the old lines are gone
  // Without any trace of a run, --resume still fails.
  TrainerOptions none{fresh_dir("rerun_none"), true, true};
  EXPECT_THROW(Trainer(c, none), Error);
  // An empty metrics.jsonl is no trace either (checkpoints deleted before a step was logged look the same):
  // --resume refuses, a plain rerun starts the run again.
  TrainerOptions empty{fresh_dir("rerun_empty"), true, true};
  make_directories(empty.run_dir + "/checkpoints");
  write_file_atomically(empty.run_dir + "/metrics.jsonl", "");
  EXPECT_THROW(Trainer(c, empty), Error);
  empty.resume = false;
  Trainer again(c, empty);
  again.run();
  EXPECT_EQ(metrics_losses(empty.run_dir).size(), 4u);
}

// Resuming from an older checkpoint drops the metrics lines after it, so the
// redone steps appear once.
TEST(RunLifecycle, ResumeDropsTheMetricsOfStepsAfterTheCheckpoint) {
  Config c = small_config(7);
  c.train.keep_checkpoints = 5;
  TrainerOptions o{fresh_dir("truncate"), false, true};
  Trainer(c, o).run();
  fs::remove(checkpoint_path(o.run_dir, 7));
  fs::remove(checkpoint_path(o.run_dir, 6));
  o.resume = true;
  Trainer t(c, o);
  EXPECT_EQ(t.state().step, 3);
  t.run();
  EXPECT_EQ(metrics_losses(o.run_dir).size(), 7u);
}

// The closing line's peak memory is the run's: with --quiet it once was the
// bf16 path's start-up timing (2048^3 products), three times the run's own.
TEST(RunLifecycle, ThePeakMemoryReportedIsTheRunsNotTheStartUpTimings) {
  if (test_support::test_backend_is_gpu()) GTEST_SKIP() << "host memory of a CPU run";
  const std::string dir = fresh_dir("peak");
  std::string out;
  ASSERT_EQ(test_support::run_shell(train_command(dir,
                                                  "--set train.steps=3 --set train.precision=bf16 "
                                                  "--set train.cpu_bf16=auto 2>&1"),
                                    &out),
            0)
      << out;
  const size_t at = out.find("(peak memory ");
  ASSERT_NE(at, std::string::npos) << out;
  const double reported_mib = std::stod(out.substr(at + 13));
  double logged_mib = 0;  // the largest resident size metrics.jsonl logged during the steps
  std::ifstream metrics(dir + "/metrics.jsonl");
  for (std::string line; std::getline(metrics, line);)
    logged_mib = std::max(logged_mib, nlohmann::json::parse(line).value("rss_bytes", 0.0) / (1 << 20));
  ASSERT_GT(logged_mib, 0) << out;
  EXPECT_LT(reported_mib, logged_mib + 24) << out;  // the timing's products alone are 48 MiB
}

// A full disk under metrics.jsonl (here: a link to /dev/full, which fails
// every write with ENOSPC) stops training at the step whose line failed,
// after a checkpoint of that step, with an error.
TEST(RunLifecycle, FailedMetricsWriteStopsTrainingAfterACheckpoint) {
  const Config c = small_config(7, 5);
  TrainerOptions o{fresh_dir("full"), false, true};
  make_directories(o.run_dir);
  fs::create_symlink("/dev/full", o.run_dir + "/metrics.jsonl");
  Trainer t(c, o);
  try {
    t.run();
    FAIL() << "training went on without its metrics";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), o.run_dir + "/metrics.jsonl: write failed: No space left on device; training "
                                                 "stopped after step 1 of 7, checkpoint " +
                                         checkpoint_path(o.run_dir, 1) +
                                         " written (free space, then continue with --resume)");
  }
  EXPECT_EQ(t.state().step, 1);
  EXPECT_EQ(Checkpoint(checkpoint_path(o.run_dir, 1)).contents().state.step, 1);
}

// The loss chart is a view of metrics.jsonl: one that cannot be written (here a directory stands at
// loss.svg) is one warning and the run goes on to its end, where it once stopped training at its first
// checkpoint with only the chart's error (found by an audit on a disk out of inodes).
TEST(RunLifecycle, ALossChartThatCannotBeWrittenIsAWarning) {
  const std::string dir = fresh_dir("chart_blocked");
  make_directories(dir + "/checkpoints");
  make_directories(dir + "/loss.svg/in_the_way");
  const std::string cmd =
      train_command(dir, "--set train.steps=4 --set train.checkpoint_every=2 --set train.log_every=1") + " 2>" + dir +
      ".err";
  const int status = std::system(cmd.c_str());
  const std::string err = read_or_empty(dir + ".err");
  EXPECT_EQ(WEXITSTATUS(status), 0) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 2) << err;  // the warning once, then "done: …"
  EXPECT_TRUE(contains(err, "ctrl: warning: " + dir + "/loss.svg: cannot rename temporary file into place: ")) << err;
  EXPECT_TRUE(contains(err, "; the loss curve is not updated (training goes on)")) << err;
  EXPECT_TRUE(contains(err, "done: " + dir + " (peak memory ")) << err;
  EXPECT_FALSE(contains(err, "loss curve in")) << err;  // it is not
  // A finished run resumed with nothing to train names its own, current curve.
  const std::string done = fresh_dir("chart_done");
  std::string out;
  ASSERT_EQ(test_support::run_shell(train_command(done, "--set train.steps=2 --set train.log_every=1") + " 2>&1", &out),
            0)
      << out;
  ASSERT_EQ(test_support::run_shell(
                train_command(done, "--resume --set train.steps=2 --set train.log_every=1") + " 2>&1", &out),
            0)
      << out;
  EXPECT_TRUE(contains(out, "nothing to train")) << out;
  EXPECT_TRUE(contains(out, "; loss curve in " + done + "/loss.svg")) << out;
  EXPECT_EQ(list_checkpoints(dir).size(), 2u);
}

// When the checkpoint cannot be written either (a file size limit makes
// every write beyond 64 KiB fail), the one-line error says both.
TEST(RunLifecycle, FailedMetricsAndCheckpointWritesAreOneError) {
  const std::string dir = fresh_dir("full_both");
  make_directories(dir);
  fs::create_symlink("/dev/full", dir + "/metrics.jsonl");
  const std::string cmd = "bash -c \"ulimit -f 64; exec " +
                          train_command(dir, "--set train.steps=7 --set train.checkpoint_every=5") + "\" 2>" + dir +
                          ".err";
  const int status = std::system(cmd.c_str());
  const std::string err = read_or_empty(dir + ".err");
  EXPECT_EQ(WEXITSTATUS(status), 1) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_TRUE(contains(err, "metrics.jsonl: write failed: No space left on device; training stopped after step 1 of "
                            "7, the checkpoint could not be written either (")) << err;
  EXPECT_TRUE(contains(err, "step-00000001.ckpt: write failed")) << err;
  EXPECT_TRUE(list_checkpoints(dir).empty());
  for (const auto& name : names_in(dir + "/checkpoints")) ADD_FAILURE() << "left behind: " << name;
}

// A file size limit (ulimit -f) that only the checkpoint exceeds: ctrl
// ignores SIGXFSZ (which killed it with no word, status 153), so the write
// fails with its reason and training stops in one line that says where, what
// is kept and how to go on; the earlier checkpoint stays.
TEST(RunLifecycle, AFailedCheckpointStopsWithItsReason) {
  const std::string dir = fresh_dir("file_size_limit");
  make_directories(dir);
  // A checkpoint of this model with its AdamW state is about 300 KiB: over a 64 KiB limit.
  std::string out;
  ASSERT_EQ(
      test_support::run_shell(train_command(dir, "--set train.steps=2 --set train.checkpoint_every=2") + " 2>&1", &out),
      0)
      << out;
  const std::string cmd = "bash -c \"ulimit -f 64; exec " +
                          train_command(dir, "--resume --set train.steps=6 --set train.checkpoint_every=2") + "\" 2>&1";
  const int status = test_support::run_shell(cmd, &out);
  EXPECT_EQ(status, 1) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_TRUE(contains(out,
                       "step-00000004.ckpt: write failed: File too large; training stopped after step 4 of 6, "
                       "the last checkpoint " +
                           dir +
                           "/checkpoints/step-00000002.ckpt kept (free space, then "
                           "continue with --resume)"))
      << out;
  EXPECT_EQ(list_checkpoints(dir).size(), 1u);
  for (const auto& name : names_in(dir + "/checkpoints"))
    EXPECT_EQ(name, "step-00000002.ckpt") << "left behind: " << name;
}

// The first checkpoint failing before any step was logged leaves nothing to resume: the message says to run
// the same command again, which works (it said --resume, which found no readable checkpoint; an audit).
TEST(RunLifecycle, AFailedFirstCheckpointBeforeAnyLoggedStepSaysToRunAgain) {
  const std::string dir = fresh_dir("first_checkpoint");
  make_directories(dir);
  const std::string args = "--set train.steps=4 --set train.checkpoint_every=2 --set train.log_every=100";
  std::string out;
  EXPECT_EQ(test_support::run_shell("bash -c \"ulimit -f 64; exec " + train_command(dir, args) + "\" 2>&1", &out), 1)
      << out;
  EXPECT_TRUE(contains(out,
                       "step-00000002.ckpt: write failed: File too large; training stopped after step 2 of 4, "
                       "with no checkpoint (free space, then run the same command again)"))
      << out;
  ASSERT_EQ(test_support::run_shell(train_command(dir, args) + " 2>&1", &out), 0) << out;
  EXPECT_EQ(list_checkpoints(dir).size(), 2u);
}

// `ctrl export hf` builds the directory aside: on a failed write (file size
// limit) nothing is left, neither an empty directory nor weights without
// config.json; an earlier export is replaced whole; other directories are refused.
TEST(RunLifecycle, ExportIsAllOrNothing) {
  const std::string dir = fresh_dir("export");
  TrainerOptions o{dir + "/run", false, true};
  Trainer(small_config(1), o).run();
  const std::string ckpt = checkpoint_path(o.run_dir, 1), out = dir + "/hf";
  const std::string cmd = "bash -c \"ulimit -f 16; exec " + test_support::ctrl_binary() + " export hf --model " + ckpt +
                          " --out " + out + "\" 2>" + dir + "/err";
  const int status = std::system(cmd.c_str());
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_TRUE(contains(read_file(dir + "/err"), "model.safetensors: write failed")) << read_file(dir + "/err");
  const auto left = names_in(dir);
  EXPECT_EQ(std::set<std::string>(left.begin(), left.end()), (std::set<std::string>{"err", "run"}))
      << "nothing of the export is left";

  // A killed export's directory is removed by the next one; an earlier export is replaced.
  const std::string stale = out + ".tmp-" + std::to_string(dead_pid());
  make_directories(stale);
  write_file_atomically(stale + "/model.safetensors", "partial");
  export_hf(ckpt, out);
  EXPECT_FALSE(fs::exists(stale));
  write_file_atomically(out + "/config.json", "{}");
  export_hf(ckpt, out);
  EXPECT_NE(read_file(out + "/config.json"), "{}");
  std::set<std::string> names;
  for (const auto& n : names_in(dir)) names.insert(n);
  EXPECT_EQ(names, (std::set<std::string>{"err", "run", "hf"}));
  // A directory holding anything else is not an export: refused, untouched.
  write_file_atomically(out + "/README.md", "mine");
  EXPECT_THROW(export_hf(ckpt, out), Error);
  EXPECT_EQ(read_file(out + "/README.md"), "mine");
}

// Every rename of a checkpoint, config, metrics, export or prepared corpus is
// followed by an fsync of the directory it renamed into, so a file reported
// written survives a power loss (traced with tests/preload/io_trace.c).
TEST(RunLifecycle, EveryRenameIsFollowedByAnFsyncOfItsDirectory) {
#ifndef CTRL_IO_TRACE_LIB
  GTEST_SKIP() << "no tracing library in this build (sanitizers)";
#else
  const std::string dir = fresh_dir("fsync");
  make_directories(dir + "/text");
  for (int i = 0; i < 40; ++i)
    write_file_atomically(dir + "/text/d" + std::to_string(i) + ".txt",
                          "Document " + std::to_string(i) + " tells of the river, the mountain and the sea. " +
                              std::string(size_t(50 + i), "abcdefghij"[i % 10]) + "\n");
  const std::string trace = dir + "/trace", env = "env LD_PRELOAD=" CTRL_IO_TRACE_LIB " CTRL_IO_TRACE=" + trace + " ";
  const std::string ctrl = env + test_support::ctrl_binary();
  ASSERT_EQ(std::system((env + train_command(dir + "/run", "--set train.steps=2 --set train.checkpoint_every=1") +
                         " 2>/dev/null").c_str()), 0);
  ASSERT_EQ(std::system((env + train_command(dir + "/run", "--resume --set train.steps=3") + " 2>/dev/null").c_str()),
            0);
  ASSERT_EQ(std::system((ctrl + " export hf --model " + checkpoint_path(dir + "/run", 3) + " --out " + dir +
                         "/hf 2>/dev/null").c_str()), 0);
  ASSERT_EQ(std::system((ctrl + " prepare --source Text=" + dir + "/text --out " + dir +
                         "/corpus --vocab-size 300 --valid-fraction 0 --threads 1 >/dev/null 2>&1").c_str()), 0);
  std::ifstream in(trace);
  std::string kind, path;
  std::vector<std::string> pending;  // directories renamed into, not yet synced
  std::set<std::string> renamed;
  while (in >> kind >> path) {
    if (kind == "rename") {
      pending.push_back(fs::path(path).parent_path().string());
      renamed.insert(fs::path(path).filename().string());
    } else {
      std::erase(pending, path);
    }
  }
  for (const auto& d : pending) ADD_FAILURE() << "renamed into " << d << " without an fsync of it after";
  for (const char* name : {"step-00000001.ckpt", "step-00000003.ckpt", "config.json", "hf",
                           "model.safetensors", "corpus", "manifest.json"})
    EXPECT_TRUE(renamed.count(name)) << name << " was not traced";
#endif
}

}  // namespace
}  // namespace ctrl
