#pragma once
// The environment a flag test hands the parser: exactly these variables, nothing from the test's own process.

#include <map>
#include <optional>
#include <string>

#include "agent/base/command_line.hpp"

namespace ctrun::agent {

inline EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& k) -> std::optional<std::string> {
    auto it = vars.find(k);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace ctrun::agent
