#pragma once
// Turns the raw flag values (command line, config file, PET_* env, defaults) into a validated LaunchConfig.
// Every error is a UsageError whose message names the flag and says what is accepted.

#include <map>
#include <string>

#include "agent/base/command_line.hpp"
#include "agent/base/launch_config.hpp"

namespace ctrun::agent {

LaunchConfig build_launch_config(const CommandLine& cli, const std::map<std::string, std::string>& file_values,
                                 const EnvLookup& env);

// Pieces, exposed for tests.
StdSpec parse_std_spec(const std::string& flag, const std::string& text);
std::map<std::string, std::string> parse_rdzv_conf(const std::string& text);
std::pair<int, int> parse_nnodes(const std::string& text);
std::vector<std::string> parse_duplicate_filters(const std::string& text);
std::string random_run_id();  // uuid4 text, as --standalone uses

}  // namespace ctrun::agent
