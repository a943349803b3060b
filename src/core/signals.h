// The stop signals (SIGINT, SIGTERM, SIGHUP) in a process full of compute
// threads.
//
// A signal handler runs on the stack of whichever thread the kernel picks,
// and its frame goes below that thread's stack pointer. oneDNN's JIT GEMM
// kernels (dnnl_sgemm with AVX-512 in Debian 12's oneDNN 2.6.3; oneDNN issue
// 4845, fixed in 3.11) point the stack pointer into the heap while they run,
// so a handler that interrupts one writes its frame into the heap: a SIGTERM
// during training crashed `ctrl train` later in free() about once in 150 runs,
// and a storm of signals to a process in dnnl_sgemm corrupts its heap within
// a second. So ctrl never runs a handler for these signals:
// install_signal_thread() blocks them before any other thread exists (threads
// inherit the mask: OpenMP's, MPI's, CUDA's) and one thread takes them with
// sigwait. Outside a StopSignals scope that thread gives each signal its
// default action, as if ctrl had never caught it.
#pragma once
#include <csignal>
#include <string>

namespace ctrl {

// The stop signals, in the order a tie between ranks is settled (run_dir.h, agree_on_stop).
inline constexpr int kStopSignals[3] = {SIGINT, SIGTERM, SIGHUP};

// Call first in main(), before any thread starts; later calls do nothing.
// Signals ignored at that point (nohup, a background job) stay ignored.
void install_signal_thread();

// While an object lives, SIGINT, SIGTERM and SIGHUP do not end the process:
// the first is recorded (requested()) and acknowledged with one line on
// stderr, and a second one ends the process at once by its default action.
// Needs install_signal_thread(); without it the signals keep their defaults.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  // The first signal received since construction, or 0.
  static int requested();
};

// While an object lives, the calling thread does not block the stop signals,
// so that a child process it starts (popen inherits the caller's mask) can be
// interrupted as usual. A stop signal delivered to this thread meanwhile gets
// its default action: use it only outside training.
class StopSignalsUnblocked {
 public:
  StopSignalsUnblocked();
  ~StopSignalsUnblocked();
  StopSignalsUnblocked(const StopSignalsUnblocked&) = delete;
  StopSignalsUnblocked& operator=(const StopSignalsUnblocked&) = delete;
};

// "SIGINT", "SIGTERM", "SIGHUP" (else "signal N").
std::string signal_name(int signal);

}  // namespace ctrl
