#pragma once
// The command line: `ctrun [options] SCRIPT [script args...]` (argparse REMAINDER semantics: the first
// non-option word is SCRIPT and everything after it belongs to the script, even words starting with '-').
// Precedence of a flag's value: command line, then --config file, then PET_<NAME>, then the default.

#include <string>
#include <vector>

#include "agent/base/command_line.hpp"
#include "agent/base/launch_config.hpp"

namespace ctrun::agent {

// Splits argv (without argv[0]) into options and the script. Throws UsageError / HelpRequested.
CommandLine lex_command_line(const std::vector<std::string>& args);

// The whole pipeline: lex, read the --config file, apply PET_* and defaults, validate into a LaunchConfig.
// nproc_per_node is left unresolved for cpu/gpu/auto (see agent/config/nproc.hpp). Throws UsageError.
LaunchConfig parse_command_line(const std::vector<std::string>& args, const EnvLookup& env);

std::string usage_line();

}  // namespace ctrun::agent
