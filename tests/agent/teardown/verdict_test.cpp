// agent/teardown/verdict.hpp: the one rule that counts a worker's exit once its program ended, over every kind of
// record and exit, and its words.
#include "agent/teardown/verdict.hpp"

#include <gtest/gtest.h>

#include <csignal>

namespace ctrun::agent::teardown {
namespace {

constexpr int kPid = 4242;

ExitRecord ended(int status, std::uint32_t flags = 0) {
  ExitRecord r;
  r.ended = true;
  r.pid = kPid;
  r.status = status;
  r.flags = flags;
  r.ended_ns = 1;
  return r;
}

ExitRecord with_exit(ExitRecord r, int exit_status) {
  r.exit_called = true;
  r.exit_status = exit_status;
  return r;
}

struct Row {
  const char* what;
  ExitRecord record;
  int pid;
  int exitcode;
  bool teardown_crash;
  int program_status;
};

TEST(Verdict, EveryRecordAndExit) {
  const Row rows[] = {
      // The program ended with 0, then the process died: counted as exit 0.
      {"ended 0, SIGABRT while finalizing", ended(0), kPid, -SIGABRT, true, 0},
      {"ended 0, SIGSEGV", ended(0), kPid, -SIGSEGV, true, 0},
      {"ended 0, exit() reached with 0, then SIGABRT", with_exit(ended(0), 0), kPid, -SIGABRT, true, 0},
      {"ended 0, exit(0) reached, then a non-zero _exit in a handler", with_exit(ended(0), 0), kPid, 1, true, 0},
      {"SystemExit(0)", ended(0, kSystemExit), kPid, -SIGABRT, true, 0},
      {"sys.exit(256): status 0", with_exit(ended(0, kSystemExit), 256), kPid, -SIGABRT, true, 0},
      {"a caught sys.exit(2), then exit(0) reached: exit() is the truth", with_exit(ended(2, kSystemExit), 0), kPid,
       -SIGABRT, true, 0},
      {"killed after the end (the OOM killer)", ended(0), kPid, -SIGKILL, true, 0},
      // Counted as it exited.
      {"exit 0 needs nothing", ended(0), kPid, 0, false, 0},
      {"no record", ExitRecord{}, kPid, -SIGABRT, false, 0},
      {"another process's record", ended(0), kPid + 1, -SIGABRT, false, 0},
      {"an uncaught exception", ended(1, kUncaught), kPid, -SIGABRT, false, 1},
      {"sys.exit(1), crash before exit()", ended(1, kSystemExit), kPid, -SIGABRT, false, 1},
      {"sys.exit(1), exit(1) reached, then SIGABRT", with_exit(ended(1, kSystemExit), 1), kPid, -SIGABRT, false, 1},
      {"a caught sys.exit(2), crash before exit()", ended(2, kSystemExit), kPid, -SIGABRT, false, 2},
      {"Python decided 0, exit(120): stdout could not be flushed", with_exit(ended(0), 120), kPid, 120, false, 120},
      {"a file could not be flushed", ended(0, kFlushFailed), kPid, -SIGABRT, false, 0},
      {"exited 1 as its program asked", with_exit(ended(1, kSystemExit), 1), kPid, 1, false, 1},
  };
  for (const Row& row : rows) {
    const ExitJudgement j = judge_exit(row.record, row.pid, row.exitcode);
    EXPECT_EQ(j.teardown_crash, row.teardown_crash) << row.what;
    EXPECT_EQ(j.program_status, row.program_status) << row.what;
    EXPECT_EQ(j.exit_called, row.record.exit_called && row.exitcode != 0) << row.what;
    // Every record that does not count says why, for the debug log.
    if (row.record.ended && row.exitcode != 0 && !row.teardown_crash) {
      EXPECT_FALSE(j.why_not.empty()) << row.what;
    }
    if (row.teardown_crash) {
      EXPECT_TRUE(j.why_not.empty()) << row.what;
    }
  }
}

TEST(Verdict, WordsNameRankSignalAndLine) {
  EXPECT_EQ(teardown_crash_words(2, 1, 4242, -SIGABRT, "terminate called without an active exception", true),
            "rank 2 (local_rank 1, pid 4242) finished its program (exit 0), then aborted in native teardown: SIGABRT, "
            "'terminate called without an active exception'; counted as exit 0 (--fail-on-teardown-crash: as a "
            "failure)");
  EXPECT_EQ(teardown_crash_words(0, 0, 7, -SIGSEGV, "", false),
            "rank 0 (local_rank 0, pid 7) finished its program (exit 0), then died in native teardown: SIGSEGV (its "
            "stderr went to the console); counted as exit 0 (--fail-on-teardown-crash: as a failure)");
  EXPECT_EQ(teardown_crash_words(0, 0, 7, 1, "", true),
            "rank 0 (local_rank 0, pid 7) finished its program (exit 0), then exited with 1 in native teardown; "
            "counted as exit 0 (--fail-on-teardown-crash: as a failure)");
  EXPECT_EQ(teardown_hang_words(1, 1, 9, 0, 30.24, 30),
            "rank 1 (local_rank 1, pid 9) finished its program (exit 0) 30.2 s ago and is still running: hung in "
            "native teardown; killing it (--shutdown-timeout 30 s) and counting it as failed");
}

}  // namespace
}  // namespace ctrun::agent::teardown
