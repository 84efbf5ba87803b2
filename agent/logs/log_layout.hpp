#pragma once
// torchrun's log directory layout (DefaultLogsSpecs): <log_dir>/<run_id>_<random>/attempt_<N>/<local_rank>/
// {stdout.log, stderr.log, error.json}. Without --log-dir the base is a fresh /tmp/torchelastic_<random>;
// --log-dir /dev/null disables every file (TORCHELASTIC_ERROR_FILE is then empty).

#include <optional>
#include <string>

namespace ctrun::agent {

class LogLayout {
 public:
  // Creates the run directory. Throws std::runtime_error when it cannot.
  LogLayout(const std::optional<std::string>& log_dir, const std::string& run_id);

  bool enabled() const { return !run_dir_.empty(); }
  const std::string& run_dir() const { return run_dir_; }

  // Wipes and recreates attempt_<N> with one folder per local rank (as torchrun, a reused N starts clean).
  void prepare_attempt(int attempt, int nproc) const;

  std::string attempt_dir(int attempt) const;
  std::string stdout_file(int attempt, int local_rank) const;
  std::string stderr_file(int attempt, int local_rank) const;
  std::string error_file(int attempt, int local_rank) const;  // "" when disabled

 private:
  std::string rank_dir(int attempt, int local_rank) const;
  std::string run_dir_;
};

}  // namespace ctrun::agent
