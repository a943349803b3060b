// Does a signal handler that interrupts oneDNN's dnnl_sgemm corrupt the heap?
// (docs/reliability.md, "Signals"; oneDNN issue 4845.) The main thread runs
// small sgemm calls, with a heap allocation each, for a few seconds while a
// second thread sends it SIGUSR1 as fast as it can. Mode "stack": an empty
// handler on the thread's own stack (how a plain sigaction handler runs);
// "altstack": the same handler on an alternate signal stack; "blocked": the
// main thread blocks the signal (what ctrl does with its stop signals).
// Exit status 0: the heap survived; a crash (SIGABRT/SIGSEGV): it did not.
//   signal_storm stack|altstack|blocked [seconds]
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <signal.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {
std::atomic<long> g_handled{0};
void on_signal(int) { g_handled.fetch_add(1, std::memory_order_relaxed); }
}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "stack";
  const double seconds = argc > 2 ? std::atof(argv[2]) : 3.0;
  if (mode != "stack" && mode != "altstack" && mode != "blocked") {
    std::fprintf(stderr, "usage: signal_storm stack|altstack|blocked [seconds]\n");
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  std::vector<char> alt(1 << 16);
  if (mode == "altstack") {
    stack_t ss{};
    ss.ss_sp = alt.data();
    ss.ss_size = alt.size();
    sigaltstack(&ss, nullptr);
    sa.sa_flags |= SA_ONSTACK;
  }
  sigaction(SIGUSR1, &sa, nullptr);
  if (mode == "blocked") {
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &usr1, nullptr);
  }
  const pthread_t worker = pthread_self();
  std::atomic<bool> done{false};
  long sent = 0;
  std::thread sender([&] {
    while (!done) {
      pthread_kill(worker, SIGUSR1);
      ++sent;
    }
  });
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  double checksum = 0;
  long calls = 0;
  while (std::chrono::steady_clock::now() < end) {
    for (const auto& [m, n, k] : {std::array<int, 3>{32, 96, 32}, {32, 32, 64}, {64, 32, 32}, {16, 64, 96}}) {
      std::vector<float> a(size_t(m) * k, 0.5f), b(size_t(k) * n, 0.25f), c(size_t(m) * n);
      const std::string small(40 + calls % 50, 'x');  // small blocks of varying size beside oneDNN's workspace
      for (char ta : {'N', 'T'})
        for (char tb : {'N', 'T'}) {
          dnnl_sgemm(ta, tb, m, n, k, 1.f, a.data(), ta == 'N' ? k : m, b.data(), tb == 'N' ? n : k, 0.f, c.data(), n);
          checksum += c[0];
          ++calls;
        }
    }
  }
  done = true;
  sender.join();
  std::printf("%s: %ld sgemm calls, %ld signals sent, %ld handled, heap intact (checksum %g)\n", mode.c_str(), calls,
              sent, g_handled.load(), checksum);
  return 0;
}
