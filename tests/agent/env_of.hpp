#pragma once
// A parent environment for the agent's pure functions (EnvLookup) from a map, for unit tests.

#include <map>
#include <optional>
#include <string>

#include "agent/base/command_line.hpp"

namespace ctrun::agent::test {

inline EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& k) -> std::optional<std::string> {
    auto it = vars.find(k);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace ctrun::agent::test
