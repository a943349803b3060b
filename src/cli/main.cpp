// ctrl: the command-line front end. Dispatches to the registered subcommands
// and turns every ctrl::Error into one line on stderr and exit status 1.
#include <omp.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/error.h"
#include "core/signals.h"
#include "core/sysinfo.h"

namespace ctrl::cli {

std::map<std::string, Command>& command_registry() {
  static std::map<std::string, Command> registry;
  return registry;
}

std::string version_string();

}  // namespace ctrl::cli

static void print_help() {
  std::printf(
      "ctrl %s: train CTRL (conditional transformer) language models from scratch\n\n"
      "usage: ctrl <command> [flags]   (ctrl <command> --help for its flags)\n\ncommands:\n",
      CTRL_VERSION);
  for (const auto& [name, cmd] : ctrl::cli::command_registry())
    std::printf("  %-10s %s\n", name.c_str(), cmd.summary.c_str());
}

// libgomp reads its wait policy from the environment when it loads, before
// main, and offers no call to change it. Its default has every idle worker
// spin for up to 300,000 pause instructions (milliseconds) at each barrier: on
// a machine where another process holds a core, the spinning thread takes the
// time the working one needs (issue 15: 0.41x of quiet throughput). So when
// the user set neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT, ctrl sets
// GOMP_SPINCOUNT=kSpinCount and runs itself again, once (docs/training.md, "Threads").
static void reexec_with_short_spin(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  setenv("GOMP_SPINCOUNT", ctrl::kDefaultSpinCount, 1);
  execv("/proc/self/exe", argv);
  // Not re-executed (no /proc): carry on with libgomp's default spinning.
}

int main(int argc, char** argv) {
  reexec_with_short_spin(argv);
  // A file size limit (ulimit -f) past which a write would kill the process
  // with SIGXFSZ and no word: ignored, the write fails with EFBIG instead and
  // is reported as every failed write is (the file named, the temporary
  // removed, a run stopped with its last checkpoint).
  std::signal(SIGXFSZ, SIG_IGN);
  ctrl::install_signal_thread();  // before any other thread (core/signals.h)
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() >= 2 && args[0] == "help") args = {args[1], "--help"};  // `ctrl help train`
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_help();
    return args.empty() ? 2 : 0;
  }
  // OpenMP's default is the affinity mask; a container's CPU quota (docker
  // --cpus 2 on a 64-core host) would otherwise get 64 threads on 2 CPUs.
  // OMP_NUM_THREADS and --threads / train.threads still decide when given.
  if (!std::getenv("OMP_NUM_THREADS")) omp_set_num_threads(ctrl::usable_cpus());
  if (args[0] == "--version") {
    std::printf("%s\nOpenMP: %d threads, idle wait %s\n", ctrl::cli::version_string().c_str(), omp_get_max_threads(),
                ctrl::openmp_wait_setting().c_str());
    return 0;
  }
  auto& registry = ctrl::cli::command_registry();
  auto it = registry.find(args[0]);
  if (it == registry.end()) {
    std::string known;
    for (const auto& entry : registry) known += (known.empty() ? "" : ", ") + entry.first;
    std::fprintf(stderr, "ctrl: unknown command '%s' (commands: %s; see ctrl --help)\n", args[0].c_str(),
                 known.c_str());
    return 2;
  }
  // A closed pipe on stdout or stderr (`ctrl train ... 2>&1 | head`, a dead `tee`) would kill a
  // long job with SIGPIPE: no checkpoint, prepare's temporary directory left. Its output is only
  // progress, so train and prepare go on without it; generate and the rest stop as usual.
  if (args[0] == "train" || args[0] == "prepare") std::signal(SIGPIPE, SIG_IGN);
  try {
    const int rc = it->second.run(std::vector<std::string>(args.begin() + 1, args.end()));
    // What a command printed is its result (bench --json > bench.json, plan, eval): a full disk or a
    // closed file under stdout fails the command instead of leaving an empty file behind an exit 0.
    // train's and prepare's stdout is only progress; their results are files, checked as written.
    if (args[0] != "train" && args[0] != "prepare" && (std::fflush(stdout) != 0 || std::ferror(stdout))) {
      std::fprintf(stderr, "ctrl %s: writing the output failed: %s\n", args[0].c_str(),
                   std::strerror(errno ? errno : EIO));
      return rc ? rc : 1;
    }
    return rc;
  } catch (const ctrl::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "ctrl %s: out of memory\n", args[0].c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ctrl %s: %s\n", args[0].c_str(), e.what());
  }
  return 1;
}
