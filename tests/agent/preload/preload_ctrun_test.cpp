// `ctrun --preload` end to end, the built ctrun with real Python (and torch) workers: the same results with and
// without it, restarts forked afresh from the one warm process, a refusal that starts the job cold, Ctrl-C within
// a second while the warm process imports, and kill -9 of ctrun leaving nothing behind.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include <gtest/gtest.h>

#include "tests/agent/run_ctrun.hpp"
#include "tests/support/torch.hpp"

namespace ctrun::agent::test {
namespace {

using namespace std::chrono_literals;

// The lines of `text` that contain `needle`, up to `until` if given, sorted: the ranks' output in a comparable order.
std::vector<std::string> lines_with(const std::string& text, const std::string& needle, const std::string& until = "") {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find(needle) != std::string::npos) out.push_back(until.empty() ? line : line.substr(0, line.find(until)));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// "PID PARENT" written by preloaded_rank.py.
std::pair<pid_t, pid_t> pids_of(const std::string& file) {
  std::ifstream in(file);
  pid_t pid = -1, parent = -1;
  in >> pid >> parent;
  return {pid, parent};
}

// Live processes whose command line holds both strings (a /proc scan: pgrep -f would match its own shell).
std::vector<pid_t> processes_with(const std::string& a, const std::string& b) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    if (cmd.find(a) != std::string::npos && cmd.find(b) != std::string::npos && alive(pid)) out.push_back(pid);
  }
  return out;
}

bool none_left(const std::string& a, const std::string& b, std::chrono::milliseconds within) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (!processes_with(a, b).empty()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// A preloaded job of 2 ranks that sleep until stopped, once both run: the ranks' pids and the warm process's.
struct SleepingJob {
  std::unique_ptr<CtrunProcess> ctrun;
  pid_t ranks[2] = {-1, -1};
  pid_t warm = -1;
};
SleepingJob start_sleeping_job(const std::string& dir) {
  SleepingJob job;
  job.ctrun =
      std::make_unique<CtrunProcess>(std::vector<std::string>{"--standalone", "--nproc-per-node=2", "--preload", "json",
                                                              worker_script("preload/preloaded_rank.py"), "sleep", dir},
                                     torch_worker_env());
  EXPECT_TRUE(wait_for_files(dir, "rank_", 2, 60s));
  std::this_thread::sleep_for(100ms);  // the files are written: the pids are in them
  pid_t warm_b = -1;
  std::tie(job.ranks[0], job.warm) = pids_of(dir + "/rank_0_attempt_0");
  std::tie(job.ranks[1], warm_b) = pids_of(dir + "/rank_1_attempt_0");
  EXPECT_EQ(job.warm, warm_b) << "one warm process forks every rank";
  return job;
}

class PreloadCtrun : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(CTRUN_TORCH_PYTHON).empty()) GTEST_SKIP() << "no python3";
  }
};

TEST_F(PreloadCtrun, AllReduceGivesTheSameResultsPreloaded) {
  CTRUN_REQUIRE_TORCH();
  const std::string script = std::string(CTRUN_SOURCE_DIR) + "/examples/torch_allreduce.py";
  auto env = torch_worker_env();
  env["CTRUN_LOG_LEVEL"] = "info";  // says when the warm process is ready
  RunResult cold = run_ctrun({"--standalone", "--nproc-per-node=4", script}, env, 180s);
  RunResult warm = run_ctrun({"--standalone", "--nproc-per-node=4", "--preload", "torch", script}, env, 180s);
  ASSERT_EQ(cold.exit_code, 0) << cold.err;
  ASSERT_EQ(warm.exit_code, 0) << warm.err;
  // Equal up to the store's address, which is a fresh port in each run.
  EXPECT_EQ(lines_with(warm.out, "all_reduce sum", " (store"), lines_with(cold.out, "all_reduce sum", " (store"));
  EXPECT_EQ(lines_with(warm.out, "all_reduce sum").size(), 4u) << warm.out;
  EXPECT_NE(warm.err.find("the warm process is ready"), std::string::npos) << warm.err;
  EXPECT_EQ(warm.err.find("cold"), std::string::npos) << warm.err;
}

TEST_F(PreloadCtrun, DdpOnBackendCtrunGivesTheSameLossPreloaded) {
  CTRUN_REQUIRE_TORCH();
  const std::string script = std::string(CTRUN_SOURCE_DIR) + "/examples/torch_ctrun_backend.py";
  RunResult cold = run_ctrun({"--standalone", "--nproc-per-node=2", script}, torch_worker_env(), 180s);
  if (cold.err.find("No module named 'ctrun_torch'") != std::string::npos) GTEST_SKIP() << "ctrun_torch not built";
  RunResult warm =
      run_ctrun({"--standalone", "--nproc-per-node=2", "--preload", "torch", script}, torch_worker_env(), 180s);
  ASSERT_EQ(cold.exit_code, 0) << cold.err;
  ASSERT_EQ(warm.exit_code, 0) << warm.err;
  EXPECT_EQ(lines_with(warm.out, "mean loss"), lines_with(cold.out, "mean loss"));
  EXPECT_EQ(lines_with(warm.out, "mean loss").size(), 3u) << warm.out;
}

// Every attempt forks fresh workers from the one warm process; they see their attempt's restart count.
TEST_F(PreloadCtrun, RestartsForkFreshWorkersFromTheSameWarmProcess) {
  const std::string dir = fresh_dir("preload_restart");
  RunResult r = run_ctrun({"--standalone", "--nproc-per-node=2", "--max-restarts=1", "--preload", "json", "--event-log",
                           dir + "/events.jsonl", worker_script("preload/preloaded_rank.py"), "fail_once", dir},
                          torch_worker_env(), 120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_NE(r.out.find("rank " + std::to_string(rank) + " attempt " + std::to_string(attempt) + " preloaded=True"),
                std::string::npos)
          << r.out << r.err;
    }
  }
  std::set<pid_t> parents, pids;
  for (const auto& f : {"rank_0_attempt_0", "rank_1_attempt_0", "rank_0_attempt_1", "rank_1_attempt_1"}) {
    auto [pid, parent] = pids_of(dir + "/" + f);
    pids.insert(pid);
    parents.insert(parent);
  }
  EXPECT_EQ(parents.size(), 1u) << "one warm process for both attempts";
  EXPECT_EQ(pids.size(), 4u) << "a fresh process per rank and attempt";
  // The failure was seen with its code, and the forked workers' pids are the event log's.
  const std::string events = read_file(dir + "/events.jsonl");
  EXPECT_NE(events.find("\"exitcode\":3"), std::string::npos) << events;
  for (const auto& f : {"rank_0_attempt_0", "rank_1_attempt_1"}) {
    EXPECT_NE(events.find("\"pid\":" + std::to_string(pids_of(dir + "/" + f).first)), std::string::npos) << events;
  }
}

// Log routing is the same for forked workers: --tee with torchrun's prefixes on the console, --log-dir files.
TEST_F(PreloadCtrun, TeeAndLogFilesReachPreloadedWorkersOutput) {
  const std::string dir = fresh_dir("preload_logs");
  const std::string logs = dir + "/logs";
  RunResult r = run_ctrun({"--nproc-per-node=2", "--rdzv-id", "pl", "--log-dir", logs, "--tee", "1", "--preload",
                           "json", worker_script("preload/preloaded_rank.py"), "ok", dir},
                          torch_worker_env(), 120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("[default0]:rank 0 attempt 0 preloaded=True"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[default1]:rank 1 attempt 0 preloaded=True"), std::string::npos) << r.out;
  std::string run;
  for (const auto& e : std::filesystem::directory_iterator(logs)) {
    if (e.path().filename().string().rfind("pl_", 0) == 0) run = e.path().string();
  }
  ASSERT_FALSE(run.empty());
  EXPECT_EQ(read_file(run + "/attempt_0/1/stdout.log"), "rank 1 attempt 0 preloaded=True\n");
}

// The warm process dies mid-job: its workers die with it, ctrun says so, and the restart starts cold.
TEST_F(PreloadCtrun, AWarmProcessThatDiesIsReplacedByColdStarts) {
  const std::string dir = fresh_dir("preload_warm_dies");
  RunResult r = run_ctrun({"--standalone", "--nproc-per-node=2", "--max-restarts=1", "--preload", "json",
                           worker_script("preload/preloaded_rank.py"), "kill_warm", dir},
                          torch_worker_env(), 120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rank 0 attempt 0 preloaded=True"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 0 attempt 1 preloaded=False"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 1 attempt 1 preloaded=False"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("died (killed by SIGKILL); workers start cold from now on"), std::string::npos) << r.err;
}

// A module that starts a thread when imported: the warm process refuses, ctrun says why and runs the job cold.
TEST_F(PreloadCtrun, AThreadAtImportStartsTheJobCold) {
  const std::string dir = fresh_dir("preload_refused");
  RunResult r = run_ctrun({"--standalone", "--nproc-per-node=2", "--preload", "starts_thread",
                           worker_script("preload/preloaded_rank.py"), "ok", dir},
                          torch_worker_env(), 120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("importing starts_thread started 1 thread(s): started-at-import"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("rank 1 attempt 0 preloaded=False"), std::string::npos) << r.out;
}

// A per-rank value of a job-wide variable: that rank cannot be preloaded exactly, so it starts cold.
TEST_F(PreloadCtrun, APerRankJobWideVariableStartsThatRankCold) {
  const std::string dir = fresh_dir("preload_virtual");
  RunResult r = run_ctrun({"--standalone", "--nproc-per-node=2", "--virtual-local-rank", "--preload", "json",
                           worker_script("preload/preloaded_rank.py"), "ok", dir},
                          torch_worker_env(), 120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rank 0 attempt 0 preloaded=True"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 1 attempt 0 preloaded=False"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("CUDA_VISIBLE_DEVICES (warm process: '0', this rank: '1')"), std::string::npos) << r.err;
}

// kill -9 of ctrun: the guardian and the parent-death signals leave no worker and no warm process.
TEST_F(PreloadCtrun, KillNineOfCtrunLeavesNothing) {
  SleepingJob job = start_sleeping_job(fresh_dir("preload_kill9"));
  const pid_t a = job.ranks[0], b = job.ranks[1], warm = job.warm;
  ASSERT_TRUE(alive(a) && alive(b) && alive(warm));
  ::kill(job.ctrun->pid(), SIGKILL);
  job.ctrun->wait(10s);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while ((alive(a) || alive(b) || alive(warm)) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(alive(warm)) << "the warm process outlived ctrun";
  EXPECT_FALSE(alive(a) || alive(b)) << "a worker outlived ctrun";
}

// Ctrl-C while the warm process is still importing torch: ctrun is gone within a second, and so is the warm process.
TEST_F(PreloadCtrun, CtrlCWhileImportingEndsWithinASecond) {
  CTRUN_REQUIRE_TORCH();
  const std::string dir = fresh_dir("preload_sigint");
  CtrunProcess p({"--standalone", "--nproc-per-node=2", "--preload", "torch",
                  worker_script("preload/preloaded_rank.py"), "sleep", dir},
                 torch_worker_env());
  std::this_thread::sleep_for(500ms);  // torch takes seconds to import
  ASSERT_FALSE(wait_for_files(dir, "rank_", 1, 0ms)) << "the workers started before the signal";
  const auto sent = std::chrono::steady_clock::now();
  ::kill(p.pid(), SIGINT);
  RunResult r = p.wait(10s);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
  EXPECT_LT(s, 1.0) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(none_left("ctrun_warm.py", dir, 2s)) << "a warm process is left";
}

// Ctrl-C while preloaded workers run: forwarded to them, ctrun gone within a second, the warm process too.
TEST_F(PreloadCtrun, CtrlCWhileRunningEndsWithinASecond) {
  SleepingJob job = start_sleeping_job(fresh_dir("preload_sigint_running"));
  const pid_t a = job.ranks[0], warm = job.warm;
  const auto sent = std::chrono::steady_clock::now();
  ::kill(job.ctrun->pid(), SIGINT);
  RunResult r = job.ctrun->wait(10s);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
  EXPECT_LT(s, 1.0) << r.err;
  EXPECT_NE(r.err.find("Received SIGINT death signal"), std::string::npos) << r.err;
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  while ((alive(a) || alive(warm)) && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(alive(a));
  EXPECT_FALSE(alive(warm));
}

}  // namespace
}  // namespace ctrun::agent::test
