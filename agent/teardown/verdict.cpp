#include "agent/teardown/verdict.hpp"

#include <csignal>

#include <fmt/format.h>

#include "agent/base/signal_names.hpp"

namespace ctrun::agent::teardown {
namespace {

std::string who(int rank, int local_rank, int pid) {
  return fmt::format("rank {} (local_rank {}, pid {})", rank, local_rank, pid);
}

// "aborted in native teardown: SIGABRT", "died in native teardown: SIGSEGV", "exited with 1 in native teardown".
std::string how(int exitcode) {
  if (exitcode >= 0) return fmt::format("exited with {} in native teardown", exitcode);
  const int sig = -exitcode;
  return fmt::format("{} in native teardown: {}", sig == SIGABRT ? "aborted" : "died", signal_name(sig));
}

}  // namespace

ExitJudgement judge_exit(const ExitRecord& record, int worker_pid, int exitcode) {
  ExitJudgement j;
  if (exitcode == 0 || !record.ended) return j;
  j.exit_called = record.exit_called;
  j.program_status = record.exit_called ? (record.exit_status & 0xFF) : record.status;
  if (record.pid != worker_pid) {
    j.why_not = fmt::format("its exit record was written by pid {}, not by the worker's own process", record.pid);
  } else if (record.flags & kFlushFailed) {
    j.why_not = "a file its program left open could not be flushed";
  } else if (j.program_status != 0) {
    j.why_not = fmt::format("its program ended with status {}{}", j.program_status,
                            record.exit_called           ? ""
                            : record.flags & kUncaught   ? " (an uncaught exception)"
                            : record.flags & kSystemExit ? " (SystemExit)"
                                                         : "");
  } else {
    j.teardown_crash = true;
  }
  return j;
}

std::string teardown_crash_words(int rank, int local_rank, int pid, int exitcode, const std::string& last_line,
                                 bool stderr_seen) {
  std::string line;
  if (!last_line.empty()) {
    line = fmt::format(", '{}'", last_line);
  } else if (!stderr_seen) {
    line = " (its stderr went to the console)";
  }
  return fmt::format(
      "{} finished its program (exit 0), then {}{}; counted as exit 0 (--fail-on-teardown-crash: as a failure)",
      who(rank, local_rank, pid), how(exitcode), line);
}

std::string teardown_hang_words(int rank, int local_rank, int pid, int program_status, double ended_s, double bound_s) {
  return fmt::format(
      "{} finished its program (exit {}) {:.1f} s ago and is still running: hung in native teardown; killing it "
      "(--shutdown-timeout {:g} s) and counting it as failed",
      who(rank, local_rank, pid), program_status, ended_s, bound_s);
}

}  // namespace ctrun::agent::teardown
