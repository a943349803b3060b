// Subcommands register themselves: each cli/cmd_*.cpp defines one static
// CommandRegistration, so adding a subcommand touches no other file.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ctrl::cli {

struct Command {
  std::string name;     // e.g. "train", or "export hf" style names are handled by the command itself
  std::string summary;  // one line for `ctrl --help`
  std::function<int(const std::vector<std::string>& args)> run;  // args after the name
};

std::map<std::string, Command>& command_registry();

struct CommandRegistration {
  explicit CommandRegistration(Command c) { command_registry()[c.name] = std::move(c); }
};

}  // namespace ctrl::cli
