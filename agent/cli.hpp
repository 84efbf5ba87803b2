#pragma once
// The command line: `ctrun [options] SCRIPT [script args...]` (argparse REMAINDER semantics: the first
// non-option word is SCRIPT and everything after it belongs to the script, even words starting with '-').
// Precedence of a flag's value: command line, then --config file, then PET_<NAME>, then the default.

#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "agent/launch_config.hpp"

namespace ctrun::agent {

// A bad command line: ctrun prints the usage line and the message and exits 2 (as argparse).
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// -h/--help: what() is the full help text; exit 0.
class HelpRequested : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_env();

// What the command line said, before merging: dest -> value ("1" for boolean flags that were given).
struct CommandLine {
  std::map<std::string, std::string> values;
  std::string script;
  std::vector<std::string> script_args;
};

// Splits argv (without argv[0]) into options and the script. Throws UsageError / HelpRequested.
CommandLine lex_command_line(const std::vector<std::string>& args);

// The whole pipeline: lex, read the --config file, apply PET_* and defaults, validate into a LaunchConfig.
// nproc_per_node is left unresolved for cpu/gpu/auto (see agent/nproc.hpp). Throws UsageError.
LaunchConfig parse_command_line(const std::vector<std::string>& args, const EnvLookup& env);

std::string usage_line();

}  // namespace ctrun::agent
