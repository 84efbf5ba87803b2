#pragma once
// Turns the flags' sources (command line, config file, PET_* env, derived values, defaults) into a validated
// LaunchConfig: every row of the flag table applied, --standalone's replacements, the rules between flags and
// rendezvous' own checks. Every error is a UsageError whose message names the flag and says what is accepted.

#include <string>

#include "agent/base/launch_config.hpp"
#include "agent/config/flag_sources.hpp"

namespace ctrun::agent {

LaunchConfig build_launch_config(const FlagSources& sources);

std::string random_run_id();  // uuid4 text, as --standalone uses

}  // namespace ctrun::agent
