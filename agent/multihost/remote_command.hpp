#pragma once
// What runs on each host of a multi-host launch, as one shell command line for ssh: change to the launcher's
// directory, set the exported environment, exec ctrun. Pure text functions, unit tested.

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/cluster/derived_defaults.hpp"

namespace ctrun::agent::multihost {

using EnvVars = std::vector<std::pair<std::string, std::string>>;

// 'text' for a POSIX shell (single quotes; ' becomes '\'').
std::string shell_quote(const std::string& text);

// `cd DIR && exec env NAME=VALUE ... ARGV...`, every word quoted.
std::string remote_shell_command(const std::string& cwd, const EnvVars& env, const std::vector<std::string>& argv);

// A .ctrun_env file (as DeepSpeed's .deepspeed_env): `NAME=VALUE` lines, `#` comments and blank lines.
// Throws std::invalid_argument naming the line.
EnvVars parse_env_file(const std::string& text, const std::string& source);

// --export NAME[=VALUE],...: NAME alone takes the launcher's value (an error when it has none); `,,` is a comma.
EnvVars parse_exports(const std::string& text, const cluster::EnvLookup& env);

// ~/.ctrun_env, then ./.ctrun_env, then --export: a later one overrides an earlier one of the same name.
EnvVars exported_environment(const std::string& exports, const cluster::EnvLookup& env, const std::string& home,
                             const std::string& cwd);

}  // namespace ctrun::agent::multihost
