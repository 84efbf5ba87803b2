#include "agent/base/command_line.hpp"

#include <cstdlib>

namespace ctrun::agent {

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

}  // namespace ctrun::agent
