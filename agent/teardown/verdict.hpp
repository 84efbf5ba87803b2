#pragma once
// How a worker's exit is counted once its program ended (exit_record.hpp): the one rule, pure, and its words.
//
// A worker whose program ended with exit status 0 and that then died by a signal or exited non-zero in native
// teardown (interpreter finalization, C++ static destructors: torch's gloo threads, CUDA or NCCL teardown) counts as
// exit 0, with a warning. Everything else is counted as it exited, as torchrun counts it: no record (a crash before
// the end, a process killed before it, a worker that is not Python), a record another process wrote (a Python child
// of a --no-python worker), a program that raised or asked for a non-zero status, a file it left open that could
// not be flushed.

#include <string>

#include "agent/teardown/exit_record.hpp"

namespace ctrun::agent::teardown {

struct ExitJudgement {
  bool teardown_crash = false;  // counted as exit 0
  // The status the program ended with: exit()'s argument when exit() was reached (the truth), else the one Python
  // had decided on (its last SystemExit's code, 1 after an uncaught exception, else 0). Meaningful with a record.
  int program_status = 0;
  bool exit_called = false;
  std::string why_not;  // with a record and an exit counted as it was: why (for the debug log)
};

// exitcode: torchrun's convention (-N: signal N). worker_pid: the process ctrun started.
ExitJudgement judge_exit(const ExitRecord& record, int worker_pid, int exitcode);

// "rank 2 (local_rank 2, pid 4242) finished its program (exit 0), then aborted in native teardown: SIGABRT,
// 'terminate called without an active exception'; counted as exit 0 (--fail-on-teardown-crash: as a failure)".
// last_line: the last line of its stderr ("" when ctrun could not see it: stderr not redirected or tee'd).
std::string teardown_crash_words(int rank, int local_rank, int pid, int exitcode, const std::string& last_line,
                                 bool stderr_seen);

// A worker whose program ended `ended_s` seconds ago and that still runs: "rank 1 (local_rank 1, pid 4242) finished
// its program (exit 0) 30.2 s ago and is still running: hung in native teardown; killing it (--shutdown-timeout
// 30 s) and counting it as failed".
std::string teardown_hang_words(int rank, int local_rank, int pid, int program_status, double ended_s, double bound_s);

}  // namespace ctrun::agent::teardown
