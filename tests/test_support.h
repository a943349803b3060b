// Helpers shared by the engine tests.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/file_io.h"
#include "data/shard.h"
#include "model/config.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/ops.h"
#include "train/trainer.h"

namespace test_support {

// Runs a shell command; returns its exit status (128 + the signal if one ended
// it) and what it printed on stdout (add 2>&1 to the command for stderr too).
inline int run_shell(const std::string& cmd, std::string* out) {
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return -1;
  char buf[4096];
  size_t n;
  out->clear();
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out->append(buf, n);
  const int status = pclose(f);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A command run under a hard limit, so that a broken job (an MPI rank that
// hangs) cannot hang the test: run_shell's exit status (137 when the limit
// killed it), its stdout and stderr together, and its wall time.
struct LimitedRun {
  int exit_code = -1;
  std::string output;
  double seconds = 0;
};
inline LimitedRun run_with_limit(const std::string& command, int limit_seconds) {
  LimitedRun r;
  const auto start = std::chrono::steady_clock::now();
  r.exit_code = run_shell("timeout -s KILL " + std::to_string(limit_seconds) + " " + command + " 2>&1", &r.output);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

// Sets (or, with nullptr, unsets) an environment variable for its lifetime
// and restores what was there before, also when an assertion returns early.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* before = std::getenv(name)) had_ = true, before_ = before;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_.c_str(), before_.c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, before_;
  bool had_ = false;
};

// The source tree and the ctrl binary: compiled in, or CTRL_TEST_SOURCE_DIR /
// CTRL_TEST_BINARY when the tests run from a bundle unpacked elsewhere
// (scripts/gpu_check.sh on a GPU machine).
// The peak memory `ctrl train` prints on its last line ("done: DIR (peak
// memory N MiB); ..."), in MiB; -1 when the output has none.
inline double peak_memory_mib(const std::string& output) {
  const std::string key = "(peak memory ";
  const size_t at = output.find(key);
  return at == std::string::npos ? -1.0 : std::atof(output.c_str() + at + key.size());
}

inline std::string source_dir() {
  const char* e = std::getenv("CTRL_TEST_SOURCE_DIR");
  return e && *e ? e : CTRL_SOURCE_DIR;
}
inline std::string ctrl_binary() {
  const char* e = std::getenv("CTRL_TEST_BINARY");
  return e && *e ? e : CTRL_BINARY;
}

// The backend that model-level tests run on: cpu, or the one CTRL_DEVICE names
// (ctest's checked_* entries run the suite on the checked backend).
// The message of the ctrl::Error that f throws ("" if it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const ctrl::Error& e) {
    return e.what();
  }
  return "";
}

inline std::unique_ptr<ctrl::Ops> make_test_ops() { return ctrl::make_ops("cpu"); }
// Whether that backend is a GPU (CTRL_DEVICE=cuda: ctest's cuda_suite), as the
// engine decides it (Ops::gpu() >= 0). A GPU runs bf16 natively, so neither
// train.cpu_bf16 nor ctrl bench's bf16 probe applies, and its buffers are not
// host memory: tests of those expect the GPU's behaviour or skip.
inline bool test_backend_is_gpu() { return make_test_ops()->gpu() >= 0; }
// The CPU reference itself, for op-level tests that pass host arrays to ops.
inline std::unique_ptr<ctrl::Ops> make_cpu_reference() { return std::make_unique<ctrl::cpu::CpuOps>(); }

// An empty path under the system's temporary folder, unique to this process
// (the directory itself is not created: the trainer makes its run directory).
inline std::string fresh_dir(const std::string& prefix, const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / (prefix + "_" + name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(p);
  return p.string();
}

// Central difference of f with respect to x[i], over the step actually
// representable in float; x[i] is restored bit-exactly.
inline double central_difference(float* x, size_t i, float h, const std::function<double()>& f) {
  const float x0 = x[i], xp = x0 + h, xm = x0 - h;
  x[i] = xp;
  const double fp = f();
  x[i] = xm;
  const double fm = f();
  x[i] = x0;
  return (fp - fm) / (double(xp) - double(xm));
}

// The trainer tests' model and schedule: vocabulary 64 (the two-code corpus
// below), 2 layers of width 32, context 16, so a step takes milliseconds.
inline ctrl::Config tiny_trainer_config(int64_t steps, int64_t checkpoint_every) {
  ctrl::Config c = ctrl::load_config("tiny");
  for (const char* s : {"model.vocab_size=64", "model.n_layer=2", "model.d_model=32", "model.n_head=2",
                        "model.d_ff=64", "model.n_ctx=16", "train.micro_batch=2", "train.global_batch=4",
                        "train.eval_every=0", "train.warmup_steps=2", "train.lr=0.01", "train.log_every=1"})
    ctrl::apply_override(c, s);
  c.train.steps = steps;
  c.train.checkpoint_every = checkpoint_every;
  return c;
}

// Resume is bit-exact: `c` trains without a break in `whole_dir`, and in
// `parts_dir` for `split` steps, then resumed to c.train.steps. The resumed
// steps' losses, the loss scale and every parameter must equal the unbroken
// run's. `between` (may be empty) runs after the first part, e.g. to look at
// its checkpoint. `what` labels failures. Returns the unbroken run's losses.
inline std::vector<double> expect_resume_bit_exact(const ctrl::Config& c, int64_t split, const std::string& whole_dir,
                                                   const std::string& parts_dir, const std::string& what,
                                                   const std::function<void()>& between = {},
                                                   const std::function<void(ctrl::Config&)>& resumed_with = {}) {
  ctrl::Trainer full(c, ctrl::TrainerOptions{whole_dir, false, true});
  full.run();
  ctrl::Config first = c;
  first.train.steps = split;
  ctrl::Trainer(first, ctrl::TrainerOptions{parts_dir, false, true}).run();
  if (between) between();
  ctrl::Config resumed = c;  // what the resuming command gives (resumed_with leaves settings out)
  if (resumed_with) resumed_with(resumed);
  ctrl::Trainer rest(resumed, ctrl::TrainerOptions{parts_dir, true, true});
  EXPECT_EQ(rest.state().step, split) << what;
  rest.run();
  const std::vector<double> tail(full.step_losses().begin() + split, full.step_losses().end());
  EXPECT_EQ(rest.step_losses(), tail) << what;
  EXPECT_EQ(rest.state().scaler.scale, full.state().scaler.scale) << what;
  const std::vector<float> pr = rest.model().params.to_host(), pf = full.model().params.to_host();
  EXPECT_TRUE(pr == pf) << what << ": the parameters differ";
  return full.step_losses();
}

// A prepared corpus in `dir` with two control codes: A (token 3) trains on
// `a` and holds `a` out too, B (token 4) trains on `b` and holds nothing out.
inline void write_two_code_corpus(const std::string& dir, const std::vector<uint32_t>& a,
                                  const std::vector<uint32_t>& b, uint32_t vocab_size) {
  ctrl::make_directories(dir);
  ctrl::write_shard(dir + "/train-A.tok", a, 1, vocab_size);
  ctrl::write_shard(dir + "/train-B.tok", b, 1, vocab_size);
  ctrl::write_shard(dir + "/valid-A.tok", a, 1, vocab_size);
  ctrl::Manifest m;
  m.vocab_size = vocab_size;
  m.eos_id = 2;
  m.codes = {{"A", 3, 1, 1, {"train-A.tok"}, {"valid-A.tok"}}, {"B", 4, 1, 0, {"train-B.tok"}, {}}};
  m.write(dir);
}

}  // namespace test_support
