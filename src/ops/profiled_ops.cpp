#include "ops/profiled_ops.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/decorator.h"

namespace ctrl {
namespace {

// An asynchronous backend's kernels are timed, not their launches: on a
// backend with a device clock (Ops::timer_mark) from a mark queued before
// the op to one after it, read in batches, so the step runs without a host
// wait per op; otherwise until the backend has finished the op
// (synchronize) on the host's clock.
class ProfiledOps final : public OpsDecorator {
 public:
  explicit ProfiledOps(std::unique_ptr<Ops> inner) : OpsDecorator(std::move(inner)) {}

  struct Entry {
    long calls = 0;
    double seconds = 0;
  };
  // Every op's entry so far, with the device marks still pending read;
  // throws the backend's error if one stopped the timing.
  const std::map<std::string, Entry>& entries() {
    if (failed_.empty()) read_marks();
    if (!failed_.empty()) throw Error("the op profile stopped at a backend error: " + failed_);
    return entries_;
  }
  // Forgets what was timed so far (the untimed warm-up steps, whose first
  // calls carry one-off set-up), after reading pending marks.
  void clear() {
    entries();
    entries_.clear();
  }

 protected:
  void enter(const char*) override {
    start_ = std::chrono::steady_clock::now();
    mark_ = failed_.empty() ? inner().timer_mark() : -1;
  }
  // Runs in a destructor (OpsDecorator's Scope), so it must not throw: a
  // backend error here (a fault of an earlier kernel that the clock or the
  // wait reports) stops the timing, and entries() throws it instead. An op
  // that is itself throwing is counted and not timed.
  void leave(const char* op) override {
    Entry& e = entries_[op];
    ++e.calls;
    if (!failed_.empty() || std::uncaught_exceptions() > 0) return;
    try {
      if (mark_ >= 0) {
        pending_.push_back({&e, mark_, inner().timer_mark()});
        if (pending_.size() >= kPendingMarks) read_marks();
        return;
      }
      inner().synchronize();
      e.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    } catch (const std::exception& error) {
      failed_ = error.what();
    }
  }

 private:
  static constexpr size_t kPendingMarks = 4096;  // op calls between two reads of the device clock
  struct Pending {
    Entry* entry;
    int from, to;
  };
  // Each pending mark is read once: the batch is taken out first, so an
  // error partway through cannot count its marks twice.
  void read_marks() {
    std::vector<Pending> batch;
    batch.swap(pending_);
    for (const Pending& p : batch) p.entry->seconds += inner().timer_seconds(p.from, p.to);
    inner().timer_reset();
  }
  std::map<std::string, Entry> entries_;
  std::vector<Pending> pending_;
  std::chrono::steady_clock::time_point start_;
  int mark_ = -1;
  std::string failed_;  // the backend error that stopped the timing
};

}  // namespace

std::unique_ptr<Ops> make_profiled_ops(std::unique_ptr<Ops> inner) {
  return std::make_unique<ProfiledOps>(std::move(inner));
}

void profile_clear(Ops& ops) {
  if (auto* p = dynamic_cast<ProfiledOps*>(&ops)) p->clear();
}

std::vector<OpTime> profile_times(Ops& ops) {
  auto* p = dynamic_cast<ProfiledOps*>(&ops);
  if (!p) return {};
  std::vector<OpTime> rows;
  double total = 0;
  for (const auto& [name, e] : p->entries()) rows.push_back({name, e.calls, e.seconds, 0}), total += e.seconds;
  for (OpTime& r : rows) r.share = total > 0 ? r.seconds / total : 0;
  std::sort(rows.begin(), rows.end(), [](const OpTime& a, const OpTime& b) { return a.seconds > b.seconds; });
  return rows;
}

std::string profile_report(const std::vector<OpTime>& rows) {
  std::string out = "op                      calls    seconds   share\n";
  char line[128];
  for (const OpTime& r : rows) {
    std::snprintf(line, sizeof line, "%-22s %6ld %10.3f %6.1f%%\n", r.op.c_str(), r.calls, r.seconds, 100.0 * r.share);
    out += line;
  }
  return out;
}

}  // namespace ctrl
