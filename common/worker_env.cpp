#include "common/worker_env.hpp"

#include <cstdlib>

namespace ctrun::worker_env {

std::optional<std::string> get(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

}  // namespace ctrun::worker_env
