#include "agent/base/stale_files.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "common/text.hpp"

namespace ctrun::agent {

std::vector<std::string> sweep_files_of_dead_agents(const std::string& dir, std::string_view prefix) {
  namespace fs = std::filesystem;
  std::vector<std::string> removed;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(prefix)) continue;
    const std::string_view rest = std::string_view(name).substr(prefix.size());
    const auto dash = rest.find('-');
    if (dash == std::string_view::npos || dash == 0) continue;
    const int pid = text::parse_int<int>(rest.substr(0, dash)).value_or(0);
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to signal: leave it)
    if (::unlink(it->path().c_str()) == 0) removed.push_back(it->path().string());
  }
  return removed;
}

}  // namespace ctrun::agent
