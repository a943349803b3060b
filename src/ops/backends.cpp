// The backend factory: the one place that knows which backends exist.
#include <cstdlib>

#include "core/error.h"
#include "ops/checked/checked_ops.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/ops.h"

namespace ctrl {

std::vector<std::string> available_devices() { return {"cpu", "checked"}; }

std::unique_ptr<Ops> make_ops(const std::string& device, int threads) {
  std::string name = device;
  const char* env = std::getenv("CTRL_DEVICE");
  if (env && *env && (name == "cpu" || name.empty())) name = env;
  if (name == "cpu" || name.empty()) return std::make_unique<cpu::CpuOps>(threads);
  if (name == "checked") return make_checked_ops(std::make_unique<cpu::CpuOps>(threads));
  std::string known;
  for (const auto& d : available_devices()) known += (known.empty() ? "" : ", ") + d;
  fail("unknown device '" + name + "'" + (env && name == env ? " (from CTRL_DEVICE)" : "") + ": this build has " +
       known);
}

}  // namespace ctrl
