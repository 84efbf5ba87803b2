#pragma once
// The rules between flags, each named and checked once every flag has its value: a combination that cannot run
// is a usage error (exit 2) before anything starts.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/base/launch_config.hpp"

namespace ctrun::agent {

struct FlagRule {
  std::string_view name;
  // What is wrong, said so the user knows what to change; nullopt when `c` keeps the rule.
  std::optional<std::string> (*broken)(const LaunchConfig& c);
};

const std::vector<FlagRule>& flag_rules();

// Throws UsageError with the first broken rule's message.
void check_flag_rules(const LaunchConfig& c);

}  // namespace ctrun::agent
