// Real PyTorch (Debian's torch 1.13 at CTRUN_TORCH_PYTHON) under ctrun: the demo all_reduce, a restart that
// the agent's store serves with a fresh keyspace, and an @record worker's traceback in the summary.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/agent/run_ctrun.hpp"
#include "tests/support/torch.hpp"

namespace ctrun::agent::test {
namespace {

TEST(Torch, StandaloneAllReduceGivesTheRightSumOnEveryRank) {
  CTRUN_REQUIRE_TORCH();
  RunResult r =
      run_ctrun({"--standalone", "--nproc-per-node=4", std::string(CTRUN_SOURCE_DIR) + "/examples/torch_allreduce.py"},
                torch_worker_env(), std::chrono::seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(r.out.find("rank " + std::to_string(rank) + "/4 (local_rank " + std::to_string(rank) +
                         "): all_reduce sum = 10 ok"),
              std::string::npos)
        << r.out;
  }
}

TEST(Torch, FailsOnAttempt0SucceedsOnAttempt1WithFreshStore) {
  CTRUN_REQUIRE_TORCH();
  RunResult r =
      run_ctrun({"--standalone", "--nproc-per-node=2", "--max-restarts", "1", worker_script("torch_restart.py")},
                torch_worker_env(), std::chrono::seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("attempt 0 rank 0: failing on purpose"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("attempt 0 rank 1: failing on purpose"), std::string::npos) << r.out;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_NE(r.out.find("attempt 1 rank " + std::to_string(rank) + ": sum=3 expected=3 stale_key_seen=False"),
              std::string::npos)
        << r.out;
  }
}

TEST(Torch, RecordedTracebackAppearsInTheSummary) {
  CTRUN_REQUIRE_TORCH();
  RunResult r = run_ctrun({"--nproc-per-node=2", worker_script("torch_record.py")}, torch_worker_env(),
                          std::chrono::seconds(120));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  auto root = r.err.find("Root Cause (first observed failure):");
  ASSERT_NE(root, std::string::npos) << r.err;
  std::string part = r.err.substr(root);
  EXPECT_NE(part.find("rank      : 1 (local_rank: 1)"), std::string::npos) << r.err;
  EXPECT_NE(part.find("/attempt_0/1/error.json"), std::string::npos) << r.err;
  EXPECT_NE(part.find("traceback : Traceback (most recent call last):"), std::string::npos) << r.err;
  EXPECT_NE(part.find("ValueError: boom from rank 1"), std::string::npos) << r.err;
}

// torchrun's worker watchdog (issue 24 item 6): TORCHELASTIC_ENABLE_FILE_TIMER=1 makes ctrun serve the FIFO torch's
// FileTimerClient writes to; the worker that overstays expires(after=1) is SIGKILLed within a second of its
// deadline and the job fails naming it, as under torchrun.
TEST(Torch, FileTimerKillsTheWorkerThatOverstaysItsTimer) {
  CTRUN_REQUIRE_TORCH();
  const std::string dir = fresh_dir("file_timer");
  auto env = torch_worker_env();
  env["TORCHELASTIC_ENABLE_FILE_TIMER"] = "1";
  env["TORCHELASTIC_TIMER_FILE"] = dir + "/timer.fifo";
  env["TIMER_TEST_DIR"] = dir;
  RunResult r =
      run_ctrun({"--nproc-per-node=2", "--event-log", dir + "/events.jsonl", worker_script("torch_file_timer.py")}, env,
                std::chrono::seconds(120));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("rank 0 timer file " + dir + "/timer.fifo"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 1 left its timer in time"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("rank 0 was not stopped"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("overstayed its timer 'step'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sent SIGKILL"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exitcode  : -9"), std::string::npos) << r.err;
  std::ifstream events(dir + "/events.jsonl");
  std::string line;
  bool seen = false;
  while (std::getline(events, line)) {
    if (line.find("\"file_timer_expired\"") == std::string::npos) continue;
    seen = true;
    const auto at = line.find("\"overdue_s\":");
    ASSERT_NE(at, std::string::npos) << line;
    EXPECT_LT(std::stod(line.substr(at + 12)), 1.0) << line;  // stopped within a second of its deadline
  }
  EXPECT_TRUE(seen) << "no file_timer_expired event";
  EXPECT_FALSE(std::filesystem::exists(dir + "/timer.fifo")) << "the FIFO is removed when ctrun ends";
}

// Without TORCHELASTIC_ENABLE_FILE_TIMER nothing is served, but a TORCHELASTIC_TIMER_FILE the user set reaches the
// workers, as torch passes it on.
TEST(Torch, TimerFileIsPassedOnWithoutTheWatchdog) {
  CTRUN_REQUIRE_TORCH();
  auto env = torch_worker_env();
  env["TORCHELASTIC_TIMER_FILE"] = "/nonexistent/timer.fifo";
  RunResult r = run_ctrun({"--nproc-per-node=1", worker_script("torch_file_timer.py")}, env, std::chrono::seconds(60));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;  // the client cannot open the FIFO: BrokenPipeError
  EXPECT_NE(r.out.find("rank 0 timer file /nonexistent/timer.fifo"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("FileTimerServer is not available"), std::string::npos) << r.err;
}

// Issue 24 item 7: python3 on PATH has no torch (a venv without system site packages first on PATH) and
// PYTHON_EXEC is unset, as on a newcomer's machine: the workers die of "No module named 'torch'" and the
// summary says which python ran them and that CTRUN_TORCH_PYTHON has torch. Returns the venv's bin/, or "" when
// no such venv can be made here.
std::string bin_without_torch(const std::string& name) {
  const std::string dir = fresh_dir(name) + "/venv";
  const std::string make = std::string(CTRUN_TORCH_PYTHON) + " -m venv --without-pip " + dir + " >/dev/null 2>&1";
  if (std::system(make.c_str()) != 0) return "";
  const std::string check = dir + "/bin/python3 -c 'import torch' >/dev/null 2>&1";
  return std::system(check.c_str()) == 0 ? "" : dir + "/bin";
}

std::map<std::string, std::string> path_first(const std::string& bin) {
  const char* path = std::getenv("PATH");
  return {{"PATH", bin + ":" + (path ? path : "/usr/bin:/bin")}, {"CTRUN_LOG_LEVEL", "info"}};
}

TEST(Torch, MissingTorchNamesThePythonThatHasIt) {
  CTRUN_REQUIRE_TORCH();
  const std::string bin = bin_without_torch("missing_torch");
  if (bin.empty()) GTEST_SKIP() << "cannot make a venv without torch (python3-venv)";
  const std::string script = std::string(CTRUN_SOURCE_DIR) + "/examples/torch_allreduce.py";
  const std::string ran = "they ran " + bin + "/python3 (python3 on PATH), which has no torch. " + CTRUN_TORCH_PYTHON +
                          " has torch: run ctrun with PYTHON_EXEC=" + CTRUN_TORCH_PYTHON;
  // The workers' stderr goes to the console: ctrun saw nothing of it, and asks the pythons.
  RunResult r = run_ctrun({"--nproc-per-node=2", script}, path_first(bin), std::chrono::seconds(120));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("No module named 'torch'"), std::string::npos) << r.err;  // the workers' own words
  EXPECT_NE(r.err.find("workers' python: python3 (python3 on PATH)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("workers exited with code 1 and their output went to the console; " + ran), std::string::npos)
      << r.err;
  // Redirected, ctrun reads it in their stderr.log.
  r = run_ctrun({"--nproc-per-node=2", "--redirects=2", script}, path_first(bin), std::chrono::seconds(120));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("workers died of \"No module named 'torch'\": " + ran), std::string::npos) << r.err;
  // PYTHON_EXEC set: the user chose that python; no hint.
  auto env = path_first(bin);
  env["PYTHON_EXEC"] = bin + "/python3";
  r = run_ctrun({"--nproc-per-node=2", "--redirects=2", script}, env, std::chrono::seconds(120));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err.find("has torch"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("workers' python: " + bin + "/python3 (PYTHON_EXEC)"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ctrun::agent::test
