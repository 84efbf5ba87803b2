#include "agent/logs/log_layout.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace ctrun::agent {
namespace {

std::string make_temp_dir(const std::string& prefix_path) {
  std::string pattern = prefix_path + "XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("cannot create log directory " + pattern + ": " + std::strerror(errno) +
                             " (use --log-dir to choose another place)");
  }
  return pattern;
}

}  // namespace

LogLayout::LogLayout(const std::optional<std::string>& log_dir, const std::string& run_id) {
  if (log_dir && *log_dir == "/dev/null") return;
  std::string base;
  if (log_dir) {
    // Absolute, since workers get paths under it (TORCHELASTIC_ERROR_FILE) and may change directory.
    base = std::filesystem::absolute(*log_dir).lexically_normal().string();
    std::error_code ec;
    std::filesystem::create_directories(base, ec);
    if (ec) throw std::runtime_error("cannot create --log-dir " + base + ": " + ec.message());
  } else {
    const char* tmp = std::getenv("TMPDIR");
    base = make_temp_dir(std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/torchelastic_");
  }
  run_dir_ = make_temp_dir(base + "/" + run_id + "_");
}

void LogLayout::prepare_attempt(int attempt, int nproc) const {
  if (!enabled()) return;
  std::error_code ec;
  std::filesystem::remove_all(attempt_dir(attempt), ec);
  for (int r = 0; r < nproc; ++r) {
    std::filesystem::create_directories(rank_dir(attempt, r), ec);
    if (ec) throw std::runtime_error("cannot create " + rank_dir(attempt, r) + ": " + ec.message());
  }
}

std::string LogLayout::attempt_dir(int attempt) const { return run_dir_ + "/attempt_" + std::to_string(attempt); }
std::string LogLayout::rank_dir(int attempt, int r) const { return attempt_dir(attempt) + "/" + std::to_string(r); }
std::string LogLayout::stdout_file(int attempt, int r) const { return rank_dir(attempt, r) + "/stdout.log"; }
std::string LogLayout::stderr_file(int attempt, int r) const { return rank_dir(attempt, r) + "/stderr.log"; }
std::string LogLayout::error_file(int attempt, int r) const {
  return enabled() ? rank_dir(attempt, r) + "/error.json" : std::string();
}

}  // namespace ctrun::agent
