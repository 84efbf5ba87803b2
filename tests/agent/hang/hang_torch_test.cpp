// The whole path from a real torch worker to a named hang, with the agent's parts driven by the test: four
// torch 1.13 workers on backend "ctrun" (comm writes the records), the region and reader, the detector, and the
// stack dump through ctrun's sitecustomize. (ctrun's own wiring of these parts is tested in tests/agent.)
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "agent/hang/detector.hpp"
#include "agent/hang/region.hpp"
#include "agent/hang/stacks.hpp"
#include "agent/hang/table.hpp"
#include "common/worker_env.hpp"

namespace ctrun::agent::hang {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

bool torch_available() {
  return fs::exists(CTRUN_TORCH_PYTHON) && fs::exists(CTRUN_TORCH_MODULE_DIR) &&
         fs::exists(std::string(CTRUN_TORCH_MODULE_DIR) + "/sitecustomize.py");
}

struct Job {
  std::vector<pid_t> pids;
  std::vector<std::string> stack_files;
  ~Job() {
    for (pid_t p : pids) ::kill(p, SIGKILL);
    for (pid_t p : pids) ::waitpid(p, nullptr, 0);
  }
};

Job launch(const Region& region, int n, const std::map<std::string, std::string>& extra, bool cpp = false) {
  Job job;
  const std::string dir = ::testing::TempDir() + "/hang_torch_" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (int r = 0; r < n; ++r) {
    job.stack_files.push_back(dir + "/stack_" + std::to_string(r) + ".txt");
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("PYTHONPATH", CTRUN_TORCH_MODULE_DIR, 1);
      ::setenv(worker_env::kProgressFile, region.path().c_str(), 1);
      ::setenv(worker_env::kStackFile, job.stack_files.back().c_str(), 1);
      ::setenv(worker_env::kStackSignal, std::to_string(stack_signal()).c_str(), 1);
      ::setenv(worker_env::kRank, std::to_string(r).c_str(), 1);
      ::setenv(worker_env::kLocalRank, std::to_string(r).c_str(), 1);
      ::setenv(worker_env::kWorldSize, std::to_string(n).c_str(), 1);
      ::setenv("HANG_STORE_FILE", (dir + "/store").c_str(), 1);
      for (const auto& [k, v] : extra) ::setenv(k.c_str(), v.c_str(), 1);
      if (cpp) ::execl(HANG_CPP_WORKER, HANG_CPP_WORKER, nullptr);
      const std::string script = std::string(HANG_WORKERS_DIR) + "/hang_worker.py";
      ::execl(CTRUN_TORCH_PYTHON, CTRUN_TORCH_PYTHON, script.c_str(), nullptr);
      ::_exit(127);
    }
    job.pids.push_back(pid);
  }
  return job;
}

std::vector<RankRecord> read_all(const Region& region, const Job& job) {
  std::vector<RankRecord> out;
  for (int r = 0; r < region.local_ranks(); ++r) {
    RankRecord rec = region.read(r);
    rec.host = "test";
    if (rec.global_rank < 0) rec.global_rank = r;
    rec.pid = job.pids[static_cast<std::size_t>(r)];
    out.push_back(rec);
  }
  return out;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Reads the job's records every 100 ms into the detector until a verdict (or limit_s); *ranks: the last read.
std::optional<HangFinding> wait_for_verdict(const Region& region, const Job& job, Detector& detector, double limit_s,
                                            std::vector<RankRecord>* ranks) {
  const auto t0 = Clock::now();
  while (seconds_since(t0) < limit_s) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    *ranks = read_all(region, job);
    for (const auto& f : detector.observe(seconds_since(t0), *ranks).hangs) {
      if (f.kind == HangFinding::Kind::kVerdict) return f;
    }
  }
  return std::nullopt;
}

TEST(HangTorch, ARankSleepingBeforeAllReduceIsNamedWithItsOpSeqAndStack) {
  if (!torch_available()) GTEST_SKIP() << "needs torch 1.13 and ctrun_torch (" << CTRUN_TORCH_MODULE_DIR << ")";
  Region region(::getpid(), 0, 4, ::testing::TempDir());
  Job job = launch(region, 4, {{"HANG_RANK", "2"}});
  Detector detector({.report_after_s = 2, .hang_timeout_s = 4});
  std::vector<RankRecord> ranks;
  const auto verdict = wait_for_verdict(region, job, detector, 90, &ranks);
  ASSERT_TRUE(verdict) << table_text(ranks, detector);
  EXPECT_EQ(verdict->to_fail, std::vector<int>{2});
  EXPECT_EQ(verdict->seq, 3u);
  EXPECT_EQ(verdict->waiting, (std::vector<int>{0, 1, 3}));
  const std::string line = describe(*verdict, ranks);
  EXPECT_NE(line.find("rank 2 (host test, local_rank 2, pid "), std::string::npos) << line;
  EXPECT_NE(line.find("has not entered all_reduce #3 of group 0; ranks 0,1,3 have waited"), std::string::npos) << line;
  std::printf("%s\n%s", line.c_str(), table_text(ranks, detector).c_str());

  // The culprit's stack shows the line it sleeps on; a waiter's shows the all_reduce.
  const std::string culprit_file = job.stack_files[2];
  auto head = read_head(culprit_file, job.pids[2]);
  ASSERT_TRUE(head);
  const auto offset = file_size(culprit_file);
  const auto waiter_offset = file_size(job.stack_files[0]);
  ASSERT_EQ(request_dump(job.pids[2], culprit_file), DumpRequest::kSent);
  ASSERT_EQ(request_dump(job.pids[0], job.stack_files[0]), DumpRequest::kSent);
  std::string dump, waiter;
  for (int i = 0; i < 100 && (dump.empty() || waiter.empty()); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    dump = last_dump(culprit_file, offset, head->ident);
    waiter = last_dump(job.stack_files[0], waiter_offset, 0);
  }
  EXPECT_NE(dump.find("hang_worker.py\", line 32 in <module>"), std::string::npos) << dump;
  EXPECT_NE(waiter.find("in all_reduce"), std::string::npos) << waiter;
  std::printf("culprit's stack:\n%s", dump.c_str());
}

// The same hang in C++ comm workers (no Python: the stack dump is not offered, and never sent).
TEST(HangCpp, ARankSleepingBeforeAllReduceIsNamed) {
  Region region(::getpid(), 2, 4, ::testing::TempDir());
  Job job = launch(region, 4, {{"HANG_RANK", "2"}}, /*cpp=*/true);
  Detector detector({.report_after_s = 1, .hang_timeout_s = 2});
  std::vector<RankRecord> ranks;
  const auto verdict = wait_for_verdict(region, job, detector, 60, &ranks);
  ASSERT_TRUE(verdict) << table_text(ranks, detector);
  EXPECT_EQ(verdict->to_fail, std::vector<int>{2});
  EXPECT_NE(describe(*verdict, ranks).find("has not entered all_reduce #3 of group 0; ranks 0,1,3 have waited"),
            std::string::npos)
      << describe(*verdict, ranks);
  EXPECT_EQ(request_dump(job.pids[2], job.stack_files[2]), DumpRequest::kNoHandler);
  EXPECT_EQ(::kill(job.pids[2], 0), 0) << "the C++ worker is still alive";
}

TEST(HangTorch, ASlowButProgressingRankIsNeverHungAndIsTheStraggler) {
  if (!torch_available()) GTEST_SKIP() << "needs torch 1.13 and ctrun_torch";
  Region region(::getpid(), 1, 4, ::testing::TempDir());
  Job job = launch(region, 4, {{"STEPS", "16"}, {"SLOW_RANK", "1"}, {"SLOW_S", "0.5"}});
  // A hang timeout shorter than the slow rank's whole run but longer than one of its steps.
  Detector detector({.report_after_s = 1.5, .hang_timeout_s = 2, .straggler_every_s = 3});
  const auto t0 = Clock::now();
  bool straggler = false;
  int exited = 0;
  // Bounded by the workers' whole run (16 steps of 0.5 s after torch's import, which a loaded machine stretches).
  while (exited < 4 && seconds_since(t0) < 100) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    auto f = detector.observe(seconds_since(t0), read_all(region, job));
    for (const auto& h : f.hangs) ADD_FAILURE() << describe(h, read_all(region, job));
    for (const auto& s : f.stragglers) {
      EXPECT_EQ(s.global_rank, 1) << describe(s);
      EXPECT_GT(s.lag_s, 0.3) << describe(s);
      straggler = true;
      std::printf("%s\n", describe(s).c_str());
    }
    exited = 0;
    for (pid_t p : job.pids) exited += ::kill(p, 0) != 0 || ::waitpid(p, nullptr, WNOHANG) == p;
  }
  EXPECT_TRUE(straggler);
}

}  // namespace
}  // namespace ctrun::agent::hang
