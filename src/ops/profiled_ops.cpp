#include "ops/profiled_ops.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "ops/decorator.h"

namespace ctrl {
namespace {

// Each op's time runs until the backend has finished it (synchronize), so an
// asynchronous backend's kernels are timed, not their launches.
class ProfiledOps final : public OpsDecorator {
 public:
  explicit ProfiledOps(std::unique_ptr<Ops> inner) : OpsDecorator(std::move(inner)) {}

  struct Entry {
    long calls = 0;
    double seconds = 0;
  };
  std::map<std::string, Entry> entries;

 protected:
  void enter(const char*) override { start_ = std::chrono::steady_clock::now(); }
  void leave(const char* op) override {
    inner().synchronize();
    Entry& e = entries[op];
    ++e.calls;
    e.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

std::unique_ptr<Ops> make_profiled_ops(std::unique_ptr<Ops> inner) {
  return std::make_unique<ProfiledOps>(std::move(inner));
}

std::string profile_report(const Ops& ops) {
  const auto* p = dynamic_cast<const ProfiledOps*>(&ops);
  if (!p) return "";
  std::vector<std::pair<std::string, ProfiledOps::Entry>> rows(p->entries.begin(), p->entries.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double total = 0;
  for (const auto& r : rows) total += r.second.seconds;
  std::string out = "op                      calls    seconds   share\n";
  char line[128];
  for (const auto& [name, e] : rows) {
    std::snprintf(line, sizeof line, "%-22s %6ld %10.3f %6.1f%%\n", name.c_str(), e.calls, e.seconds,
                  total > 0 ? 100.0 * e.seconds / total : 0.0);
    out += line;
  }
  return out;
}

}  // namespace ctrl
