#include "cli/args.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "core/parse.h"

namespace ctrl::cli {

void Args::flag(const std::string& name) { kinds_[name] = 0; }
void Args::repeated(const std::string& name) { kinds_[name] = 1; }
void Args::boolean(const std::string& name) { kinds_[name] = 2; }
void Args::allow_empty(const std::string& name) { may_be_empty_[name] = true; }

bool Args::parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::printf("%s", usage_.c_str());
      return false;
    }
    if (a.rfind("--", 0) != 0 || a == "--")
      fail(who_ + ": unexpected argument '" + a + "' (every input is a --flag; see " + who_ + " --help)");
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto it = kinds_.find(name);
    if (it == kinds_.end()) fail(who_ + ": unknown flag --" + name + " (see " + who_ + " --help)");
    if (it->second == 2) {
      if (has_value) fail(who_ + ": --" + name + " takes no value");
      values_[name].push_back("1");
      continue;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) fail(who_ + ": --" + name + " needs a value");
      value = args[++i];
      // `--out --resume`: the value forgotten, the next flag taken for it (a run directory named --resume).
      const std::string next = value.rfind("--", 0) == 0 ? value.substr(2, value.find('=') - 2) : "";
      if (!next.empty() && (kinds_.count(next) || next == "help"))
        fail(who_ + ": --" + name + " needs a value; got the flag " + value + " (--" + name + "=" + value +
             " if that is the value)");
    }
    if (value.empty() && !may_be_empty_.count(name)) fail(who_ + ": --" + name + ": expected a value, got ''");
    if (it->second == 0 && values_.count(name)) fail(who_ + ": --" + name + " given twice");
    values_[name].push_back(value);
  }
  return true;
}

bool Args::has(const std::string& name) const { return values_.count(name) != 0; }

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second.back();
}

std::string Args::require(const std::string& name) const {
  if (!has(name)) fail(who_ + ": missing --" + name + " (see " + who_ + " --help)");
  return get(name);
}

std::vector<std::string> Args::all(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

int64_t Args::get_int(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const {
  if (!has(name)) return fallback;
  const std::string v = get(name);
  const std::string range = "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  const auto x = parse_whole_int(v);
  if (!x || *x < lo || *x > hi) fail(who_ + ": --" + name + " " + v + ": expected " + range);
  return *x;
}

double Args::get_double(const std::string& name, double fallback, double lo, double hi, bool lo_open,
                        bool hi_open) const {
  if (!has(name)) return fallback;
  const std::string v = get(name);
  auto bound = [](double b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", b);
    return std::string(buf);
  };
  const bool unbounded = lo <= -1e308 && hi >= 1e308;
  const std::string range = unbounded ? "a finite number"
                                      : "a number in " + std::string(lo_open ? "(" : "[") + bound(lo) + ", " +
                                            bound(hi) + (hi_open ? ")" : "]");
  const double x = parse_whole_double(v).value_or(NAN);
  const bool inside = std::isfinite(x) && (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);
  if (!inside) fail(who_ + ": --" + name + " " + v + ": expected " + range);
  return x;
}

int run_tool(int argc, char** argv, int (*run)(int, char**)) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}

}  // namespace ctrl::cli
