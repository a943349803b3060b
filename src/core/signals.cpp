#include "core/signals.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>

namespace ctrl {

namespace {

std::atomic<bool> g_installed{false};
std::atomic<bool> g_stopping_allowed{false};  // a StopSignals object lives
std::atomic<int> g_requested{0};
sigset_t g_taken;  // the stop signals the signal thread takes (those not ignored at installation)

[[noreturn]] void end_by_default_action(int sig) {
  std::signal(sig, SIG_DFL);  // ctrl installs no handler for it; a library might have
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  raise(sig);  // terminates the process (the default action of all three)
  _exit(128 + sig);
}

// The same signal again within this long is the same request: GNU timeout sends its
// signal to the process and then to its process group, so one `timeout` delivers two.
constexpr auto kRepeatWindow = std::chrono::milliseconds(200);

void take_signals() {
  std::chrono::steady_clock::time_point first_at;
  for (;;) {
    int sig = 0;
    if (sigwait(&g_taken, &sig) != 0) continue;
    const auto now = std::chrono::steady_clock::now();
    if (g_stopping_allowed && g_requested == sig && now - first_at < kRepeatWindow) continue;
    int none = 0;
    if (!g_stopping_allowed || !g_requested.compare_exchange_strong(none, sig)) end_by_default_action(sig);
    first_at = now;
    const std::string line =
        "ctrl train: " + signal_name(sig) + " received; stopping after this step (again to quit at once)\n";
    const ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
    (void)ignored;
  }
}

}  // namespace

void install_signal_thread() {
  if (g_installed.exchange(true)) return;
  sigemptyset(&g_taken);
  for (int s : kStopSignals) {
    struct sigaction current {};
    sigaction(s, nullptr, &current);
    if (current.sa_handler != SIG_IGN) sigaddset(&g_taken, s);
  }
  pthread_sigmask(SIG_BLOCK, &g_taken, nullptr);
  std::thread(take_signals).detach();
}

StopSignals::StopSignals() {
  g_requested = 0;
  g_stopping_allowed = true;
}

StopSignals::~StopSignals() { g_stopping_allowed = false; }

int StopSignals::requested() { return g_requested.load(); }

StopSignalsUnblocked::StopSignalsUnblocked() {
  if (g_installed) pthread_sigmask(SIG_UNBLOCK, &g_taken, nullptr);
}

StopSignalsUnblocked::~StopSignalsUnblocked() {
  if (g_installed) pthread_sigmask(SIG_BLOCK, &g_taken, nullptr);
}

std::string signal_name(int signal) {
  switch (signal) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "signal " + std::to_string(signal);
  }
}

}  // namespace ctrl
