#include "common/worker_env.hpp"

#include <charconv>
#include <cstdlib>
#include <cstring>

namespace ctrun::worker_env {

std::optional<std::string> get(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::optional<int> get_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  int out = 0;
  auto [end, ec] = std::from_chars(v, v + std::strlen(v), out);
  if (ec != std::errc() || *end != '\0' || out < 0) return std::nullopt;
  return out;
}

}  // namespace ctrun::worker_env
