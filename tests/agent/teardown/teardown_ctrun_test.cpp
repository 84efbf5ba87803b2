// A finished program is a finished job (issue 42, agent/teardown/): the real ctrun with Python workers
// (workers/ending.py) whose program ends one way and whose process then dies in teardown another way. A worker
// whose program ended with exit status 0 counts as exit 0, with a warning and an event; every real failure stays one.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/agent/run_ctrun.hpp"

namespace ctrun::agent::test {
namespace {

namespace fs = std::filesystem;

std::string ending() { return std::string(TEARDOWN_WORKERS_DIR) + "/ending.py"; }

struct Job {
  RunResult r;
  std::string dir;     // the test's folder: logs/, events.jsonl, out/
  std::string events;  // the event log
  std::string all() const { return r.out + r.err; }
  int events_of(const std::string& kind) const { return count_of(events, "\"event\":\"" + kind + "\""); }
};

// ctrun --standalone --nproc-per-node N --tee 3 (or `streams`) --log-dir D --event-log E EXTRA ending.py END TEARDOWN
// OUT: the workers' program, with torch's python (no torch imported).
Job run_job(const std::string& name, int nproc, const std::string& end, const std::string& teardown,
            std::vector<std::string> extra = {}, std::vector<std::string> streams = {"--tee", "3"},
            std::map<std::string, std::string> env = {}) {
  Job job;
  job.dir = fresh_dir("teardown_" + name);
  fs::create_directories(job.dir + "/out");
  std::vector<std::string> args = {"--standalone",    "--nproc-per-node", std::to_string(nproc),    "--log-dir",
                                   job.dir + "/logs", "--event-log",      job.dir + "/events.jsonl"};
  args.insert(args.end(), streams.begin(), streams.end());
  args.insert(args.end(), extra.begin(), extra.end());
  const bool no_python = std::find(extra.begin(), extra.end(), "--no-python") != extra.end();
  if (!no_python) args.push_back(ending());
  for (const auto& a : {end, teardown, job.dir + "/out"}) args.push_back(a);
  auto full_env = torch_worker_env();
  for (const auto& [k, v] : env) full_env[k] = v;
  job.r = run_ctrun(args, full_env, std::chrono::seconds(90));
  job.events = read_file(job.dir + "/events.jsonl");
  return job;
}

// The unclosed 1 MiB result each rank wrote is complete.
void expect_results_complete(const Job& job, int nproc) {
  for (int r = 0; r < nproc; ++r) {
    const std::string text = read_file(job.dir + "/out/result-" + std::to_string(r) + ".txt");
    EXPECT_EQ(text.size(), (1u << 20) - 1) << "rank " << r;
    EXPECT_TRUE(text.ends_with("end\n")) << "rank " << r;
  }
}

TEST(Job, CrashWhileFinalizingAfterACleanEndCountsAsExit0) {
  const Job job = run_job("finalize", 2, "return", "finalize");
  ASSERT_EQ(job.r.exit_code, 0) << job.all();
  EXPECT_EQ(count_of(job.r.out, ": ended"), 2);
  EXPECT_EQ(count_of(job.all(), "terminate called without an active exception"), 4)  // tee'd, then quoted
      << job.all();
  for (int rank : {0, 1}) {
    EXPECT_NE(job.r.err.find("rank " + std::to_string(rank) + " (local_rank " + std::to_string(rank)),
              std::string::npos);
  }
  EXPECT_EQ(count_of(job.r.err,
                     "finished its program (exit 0), then aborted in native teardown: SIGABRT, 'terminate "
                     "called without an active exception'; counted as exit 0"),
            2)
      << job.r.err;
  EXPECT_EQ(job.r.err.find("ChildFailedError"), std::string::npos);
  EXPECT_EQ(job.events_of("teardown_crash"), 2) << job.events;
  EXPECT_EQ(count_of(job.events, "\"exit_called\":false"), 2) << job.events;  // it never reached exit()
  EXPECT_EQ(count_of(job.events, "\"teardown_exitcode\":-6"), 2) << job.events;
  EXPECT_EQ(count_of(job.events, "\"stderr_last_line\":\"terminate called without an active exception\""), 2);
  EXPECT_EQ(job.events_of("restart"), 0);
  EXPECT_EQ(job.events_of("failed"), 0);
  expect_results_complete(job, 2);
}

TEST(Job, CrashInAnExitHandlerCountsAsExit0) {
  const Job job = run_job("exit_handler", 1, "exit0", "exit_handler");
  ASSERT_EQ(job.r.exit_code, 0) << job.all();
  EXPECT_EQ(job.events_of("teardown_crash"), 1) << job.events;
  EXPECT_NE(job.events.find("\"exit_called\":true"), std::string::npos) << job.events;
  EXPECT_NE(job.r.err.find("then aborted in native teardown: SIGABRT"), std::string::npos) << job.r.err;
}

// With restarts left, the group is not restarted for it: one attempt, exit 0.
TEST(Job, NoRestartForATeardownCrash) {
  const Job job = run_job("no_restart", 2, "return", "finalize", {"--max-restarts", "2"});
  ASSERT_EQ(job.r.exit_code, 0) << job.all();
  EXPECT_EQ(job.events_of("worker_start"), 2) << job.events;
  EXPECT_EQ(job.events_of("restart"), 0);
}

// A program that caught a sys.exit(2) and went on: exit()'s 0 is the truth when it is reached; without it, the
// caught code counts (as today).
TEST(Job, ExitCalledIsTheTruth) {
  const Job reached = run_job("caught_reached", 1, "caught_exit2", "exit_handler");
  EXPECT_EQ(reached.r.exit_code, 0) << reached.all();
  EXPECT_EQ(reached.events_of("teardown_crash"), 1);
  const Job not_reached = run_job("caught_not_reached", 1, "caught_exit2", "finalize");
  EXPECT_EQ(not_reached.r.exit_code, 1) << not_reached.all();
  EXPECT_EQ(not_reached.events_of("teardown_crash"), 0);
}

// Never a hidden failure: each fails the job as it does without the exit record (ChildFailedError, exit 1), the
// crash in teardown after it notwithstanding.
struct Failure {
  const char* end;
  const char* teardown;
  int exitcode;  // the failure summary's, the worker's real one
};

// ctest's names show the case, not the struct's bytes.
void PrintTo(const Failure& f, std::ostream* os) { *os << f.end << " then " << f.teardown; }

class JobFailure : public ::testing::TestWithParam<Failure> {};

TEST_P(JobFailure, FailsAsToday) {
  const Failure f = GetParam();
  const Job job = run_job(std::string(f.end) + "_" + f.teardown, 1, f.end, f.teardown);
  EXPECT_EQ(job.r.exit_code, 1) << job.all();
  EXPECT_NE(job.r.err.find("ChildFailedError"), std::string::npos) << job.r.err;
  EXPECT_NE(job.r.err.find("exitcode  : " + std::to_string(f.exitcode)), std::string::npos) << job.r.err;
  EXPECT_EQ(job.events_of("teardown_crash"), 0) << job.events;
  EXPECT_EQ(job.r.err.find("counted as exit 0"), std::string::npos) << job.r.err;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, JobFailure,
    ::testing::Values(Failure{"raise", "finalize", -6},        // an uncaught exception
                      Failure{"exit1", "finalize", -6},        // sys.exit(1), a crash before exit()
                      Failure{"exit1", "exit_handler", -6},    // sys.exit(1), exit(1) reached, then the crash
                      Failure{"raise_exit3", "finalize", -6},  // raise SystemExit(3) written directly
                      Failure{"kill", "none", -9},             // killed before its end
                      Failure{"abort", "none", -6},            // a crash before the record is written
                      Failure{"raise", "none", 1}),            // and plain failures stay what they were
    [](const auto& info) { return std::string(info.param.end) + "_" + info.param.teardown; });

TEST(Job, HangInTeardownIsKilledAfterTheShutdownTimeoutAndFails) {
  const auto t0 = std::chrono::steady_clock::now();
  const Job job = run_job("hang", 1, "return", "hang", {"--shutdown-timeout", "2"});
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(job.r.exit_code, 1) << job.all();
  EXPECT_LT(secs, 60) << "the hang was not bounded";
  EXPECT_EQ(job.events_of("teardown_hang"), 1) << job.events;
  EXPECT_NE(job.r.err.find("finished its program (exit 0)"), std::string::npos) << job.r.err;
  EXPECT_NE(job.r.err.find("is still running: hung in native teardown; killing it (--shutdown-timeout 2 s)"),
            std::string::npos)
      << job.r.err;
  EXPECT_NE(job.r.err.find("exitcode  : -9"), std::string::npos) << job.r.err;
  EXPECT_NE(job.r.err.find("traceback : rank 0 (local_rank 0, pid"), std::string::npos)  // the summary says why
      << job.r.err;
}

// --fail-on-teardown-crash (and PET_) restores torchrun's count.
TEST(Job, StrictFlagCountsTheCrashAsFailed) {
  const Job flag = run_job("strict", 1, "return", "finalize", {"--fail-on-teardown-crash"});
  EXPECT_EQ(flag.r.exit_code, 1) << flag.all();
  EXPECT_EQ(flag.events_of("teardown_crash"), 0);
  EXPECT_NE(flag.r.err.find("exitcode  : -6"), std::string::npos) << flag.r.err;
  const Job pet =
      run_job("strict_pet", 1, "return", "finalize", {}, {"--tee", "3"}, {{"PET_FAIL_ON_TEARDOWN_CRASH", "1"}});
  EXPECT_EQ(pet.r.exit_code, 1) << pet.all();
  EXPECT_EQ(pet.events_of("teardown_crash"), 0);
}

// --no-python: a program that is the interpreter by exec counts like a Python worker; one that runs Python as a
// child is judged by its exit status alone (the record is not its own).
TEST(Job, NoPythonWorkersAreJudgedByTheirOwnProcess) {
  const std::string python = CTRUN_TORCH_PYTHON;
  const std::string wrapper = std::string(TEARDOWN_WORKERS_DIR) + "/run_python.sh";
  const Job exec =
      run_job("no_python_exec", 1, "return", "finalize", {"--no-python", wrapper, "exec", python, ending()});
  EXPECT_EQ(exec.r.exit_code, 0) << exec.all();
  EXPECT_EQ(exec.events_of("teardown_crash"), 1);
  const Job child =
      run_job("no_python_child", 1, "return", "finalize", {"--no-python", wrapper, "child", python, ending()});
  EXPECT_EQ(child.r.exit_code, 1) << child.all();
  EXPECT_EQ(child.events_of("teardown_crash"), 0);
  EXPECT_NE(child.r.err.find("exitcode  : 134"), std::string::npos) << child.r.err;  // the shell's 128+6
}

// --preload: workers forked from the warm process record their end as cold ones do.
TEST(Job, PreloadedWorkers) {
  const Job ok = run_job("preload_ok", 2, "return", "finalize", {"--preload", "json"});
  EXPECT_EQ(ok.r.exit_code, 0) << ok.all();
  EXPECT_EQ(ok.events_of("teardown_crash"), 2) << ok.events;
  EXPECT_EQ(ok.r.err.find("launched cold"), std::string::npos) << ok.r.err;
  expect_results_complete(ok, 2);
  const Job failed = run_job("preload_exit3", 1, "raise_exit3", "finalize", {"--preload", "json"});
  EXPECT_EQ(failed.r.exit_code, 1) << failed.all();
  EXPECT_EQ(failed.events_of("teardown_crash"), 0);
}

// Where ctrun does not see stderr the warning says so; redirected to a file, its last line is read back.
TEST(Job, LastStderrLine) {
  const Job console = run_job("console", 1, "return", "finalize", {}, {});
  EXPECT_EQ(console.r.exit_code, 0) << console.all();
  EXPECT_NE(console.r.err.find("SIGABRT (its stderr went to the console)"), std::string::npos) << console.r.err;
  const Job file = run_job("redirect", 1, "return", "finalize", {}, {"--redirects", "2"});
  EXPECT_EQ(file.r.exit_code, 0) << file.all();
  EXPECT_NE(file.r.err.find("SIGABRT, 'terminate called without an active exception'"), std::string::npos)
      << file.r.err;
}

// A clean job: no warning, no event, and the attempt's exit-record file is gone with ctrun.
TEST(Job, CleanJobLeavesNothing) {
  const std::string root = fresh_dir("teardown_root");
  CtrunProcess ctrun({"--standalone", "--nproc-per-node", "2", ending(), "return", "none"},
                     {{"PYTHON_EXEC", CTRUN_TORCH_PYTHON}, {"CTRUN_EXIT_RECORD_ROOT", root}});
  const RunResult r = ctrun.wait(std::chrono::seconds(90));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.err.find("teardown"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::is_empty(root)) << "an exit-record file outlived ctrun in " << root;
}

}  // namespace
}  // namespace ctrun::agent::test
