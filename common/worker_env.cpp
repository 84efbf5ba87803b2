#include "common/worker_env.hpp"

#include <cstdlib>

namespace ctrun::worker_env {

std::optional<std::string> get(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::optional<std::pair<std::string, std::string>> relay_endpoint(const std::string& value) {
  const auto colon = value.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == value.size()) return std::nullopt;
  std::string host = value.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return std::make_pair(host, value.substr(colon + 1));
}

}  // namespace ctrun::worker_env
