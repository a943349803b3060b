// The checked backend: the CPU backend, except that host code cannot touch its
// memory. Every allocation is its own anonymous mapping, kept PROT_NONE except
// while one of the backend's own calls runs (then all are readable and
// writable) or while a communicator holds it (begin_host_access). A stray host
// read or write faults; the SIGSEGV handler names the buffer and the process
// dies. Every pointer an op receives must also be this backend's memory: a
// host pointer (e.g. tokens straight from a std::vector) throws ctrl::Error
// naming the op and the argument. So any host access that would break on a
// GPU fails loudly in CPU CI (docs/design-backend.md).
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "core/error.h"
#include "ops/checked/checked_ops.h"
#include "ops/decorator.h"

namespace ctrl {
namespace {

// The allocations of every checked backend in the process. A fixed table, so
// the signal handler can read it without allocating or locking.
struct Region {
  uintptr_t begin = 0;  // 0: free slot
  size_t bytes = 0, mapped = 0;
  int opens = 0;  // calls and host-access windows holding it open
  char name[64] = {};
};
constexpr int kMaxRegions = 4096;
Region g_regions[kMaxRegions];
std::mutex g_mutex;

size_t page_size() {
  static const size_t p = size_t(sysconf(_SC_PAGESIZE));
  return p;
}

void protect(Region& r, bool open) {
  if (mprotect(reinterpret_cast<void*>(r.begin), r.mapped, open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0)
    std::abort();
}

// Writes a decimal number into buf (async-signal-safe); returns the end.
char* put_number(char* buf, size_t v) {
  char tmp[24];
  int n = 0;
  do tmp[n++] = char('0' + v % 10), v /= 10;
  while (v);
  while (n) *buf++ = tmp[--n];
  return buf;
}

void on_segv(int, siginfo_t* info, void*) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(info->si_addr);
  for (const Region& r : g_regions) {
    if (r.begin == 0 || a < r.begin || a >= r.begin + r.mapped) continue;
    char msg[512], *p = msg;
    auto put = [&](const char* s) {
      const size_t n = std::min(std::strlen(s), size_t(msg + sizeof msg - 32 - p));
      std::memcpy(p, s, n), p += n;
    };
    put("ctrl: checked backend: host code touched backend buffer '");
    put(r.name);
    put("' (byte ");
    p = put_number(p, a - r.begin);
    put(" of ");
    p = put_number(p, r.bytes);
    put(") outside the backend's calls; use upload/download (on a GPU this is device memory)\n");
    if (write(STDERR_FILENO, msg, size_t(p - msg)) < 0) {
    }
    break;
  }
  // Returning re-runs the access under the default action: the process dies of SIGSEGV.
  signal(SIGSEGV, SIG_DFL);
}

void install_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, nullptr);
  });
}

class CheckedOps final : public OpsDecorator {
 public:
  explicit CheckedOps(std::unique_ptr<Ops> inner) : OpsDecorator(std::move(inner)) { install_handler(); }
  const char* name() const override { return "checked"; }

  void* allocate(size_t bytes, const char* name) override {
    const size_t mapped = std::max<size_t>(1, (bytes + page_size() - 1) / page_size()) * page_size();
    void* p = mmap(nullptr, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    std::lock_guard<std::mutex> lock(g_mutex);
    for (Region& r : g_regions)
      if (r.begin == 0) {
        r.bytes = bytes, r.mapped = mapped, r.opens = 0;
        std::strncpy(r.name, name ? name : "?", sizeof r.name - 1);
        r.begin = reinterpret_cast<uintptr_t>(p);
        if (open_calls_ > 0) {  // allocated while a call runs (another thread): open like the rest
          r.opens = open_calls_;
          protect(r, true);
        }
        return p;
      }
    fail("checked backend: more than " + std::to_string(kMaxRegions) + " live allocations");
  }
  void release(void* p) override {
    std::lock_guard<std::mutex> lock(g_mutex);
    Region* r = find(p);
    CTRL_ASSERT(r && r->begin == reinterpret_cast<uintptr_t>(p));
    munmap(p, r->mapped);
    *r = Region{};
  }
  void begin_host_access(const void* p) override {
    std::lock_guard<std::mutex> lock(g_mutex);
    Region* r = find(p);
    if (!r) fail("checked backend: begin_host_access on memory that is not this backend's");
    if (r->opens++ == 0) protect(*r, true);
  }
  void end_host_access(const void* p) override {
    std::lock_guard<std::mutex> lock(g_mutex);
    Region* r = find(p);
    CTRL_ASSERT(r && r->opens > 0);
    if (--r->opens == 0) protect(*r, false);
  }

 protected:
  void enter(const char*) override {
    std::lock_guard<std::mutex> lock(g_mutex);
    ++open_calls_;
    for (Region& r : g_regions)
      if (r.begin && r.opens++ == 0) protect(r, true);
  }
  void leave(const char*) override {
    std::lock_guard<std::mutex> lock(g_mutex);
    --open_calls_;
    for (Region& r : g_regions)
      if (r.begin && --r.opens == 0) protect(r, false);
  }
  void argument(const void* p, const char* op, const char* what) override {
    if (!p) return;
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!find(p))
      fail(std::string("checked backend: ") + op + ": argument '" + what +
           "' is host memory, not this backend's (allocate it with the backend and upload)");
  }

 private:
  static Region* find(const void* p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    for (Region& r : g_regions)
      if (r.begin && a >= r.begin && a < r.begin + std::max<size_t>(r.bytes, 1)) return &r;
    return nullptr;
  }
  static inline int open_calls_ = 0;  // calls running now, in all checked backends
};

}  // namespace

std::unique_ptr<Ops> make_checked_ops(std::unique_ptr<Ops> cpu) { return std::make_unique<CheckedOps>(std::move(cpu)); }

}  // namespace ctrl
