// Flag parsing shared by every subcommand: "--name value", "--name=value",
// boolean "--name" and repeatable flags. Unknown flags, stray positional
// arguments (no command takes any), missing values, malformed numbers and
// numbers outside a flag's range end in one ctrl::Error line that names the
// flag and the accepted range. An empty value is refused (unless the flag
// allows one: an empty --prompt), and so is one of the command's own flags
// where a value belongs (`--out --resume`).
#pragma once
#include <cstdint>
#include <climits>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ctrl::cli {

class Args {
 public:
  // `usage` is printed for --help. Flags are declared before parse(). Errors
  // name "ctrl <command>"; a program of its own (bench/) uses tool().
  Args(const std::string& command, std::string usage) : who_("ctrl " + command), usage_(std::move(usage)) {}
  static Args tool(const std::string& program, std::string usage) {
    Args args("", std::move(usage));
    args.who_ = program;
    return args;
  }
  void flag(const std::string& name);        // takes a value
  void repeated(const std::string& name);    // takes a value, may repeat
  void boolean(const std::string& name);     // takes no value
  void allow_empty(const std::string& name);  // a declared flag whose value may be ""
  // Returns false if --help was given (usage already printed to stdout).
  bool parse(const std::vector<std::string>& args);

  bool has(const std::string& name) const;
  std::string get(const std::string& name, const std::string& fallback = "") const;
  std::string require(const std::string& name) const;
  std::vector<std::string> all(const std::string& name) const;
  // An integer in [lo, hi], or fallback when the flag is absent.
  int64_t get_int(const std::string& name, int64_t fallback, int64_t lo = INT64_MIN, int64_t hi = INT64_MAX) const;
  // A finite number in the range (bounds open where asked), or fallback when absent.
  double get_double(const std::string& name, double fallback, double lo = -1e308, double hi = 1e308,
                    bool lo_open = false, bool hi_open = false) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::string who_, usage_;           // who_: the words errors start with
  std::map<std::string, int> kinds_;  // 0 value, 1 repeated, 2 boolean
  std::map<std::string, bool> may_be_empty_;
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positional_;
};

// A bench program's main(): run(argc, argv), with an exception's message as
// one line on stderr and exit status 1.
int run_tool(int argc, char** argv, int (*run)(int, char**));

}  // namespace ctrl::cli
