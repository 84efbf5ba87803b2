// HangWatch over real regions and real processes: stacks on request, a verdict failing the local culprit, and
// two nodes that see each other through summaries (only the culprit's node acts).
#include "agent/hang/watch.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "agent/hang/stacks.hpp"
#include "agent/hang/table.hpp"
#include "agent/hang/wording.hpp"
#include "common/progress.hpp"
#include "common/worker_env.hpp"
#include "tests/agent/hang/records_fixture.hpp"

namespace ctrun::agent::hang {
namespace {
namespace fs = std::filesystem;
using namespace test;  // NOLINT: the fixture's records

// Plays worker `local_rank` of a two-rank group (id 5) in a HangWatch's region: `ops` all_reduces done, then
// (when `enter`) inside the next one.
void play_worker(const std::string& region_path, int local_rank, int global_rank, int ops, bool enter) {
  // The region is mapped again here, as a worker would (comm maps it once per process; the test maps by hand).
  const int fd = ::open(region_path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const std::size_t bytes = progress::region_bytes(2);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(p, MAP_FAILED);
  auto* h = static_cast<progress::RegionHeader*>(p);
  progress::Slot& slot = progress::row_of(h, local_rank)->slots[0];
  slot.identity.pid.store(4242);
  progress::begin_write(slot.identity);
  slot.identity.group_id.store(5);
  slot.identity.global_rank.store(global_rank);
  slot.identity.group_rank.store(global_rank);
  slot.identity.group_size.store(2);
  progress::end_write(slot.identity);
  progress::SlotWriter w(&slot);
  for (int i = 0; i < ops; ++i) {
    w.issued(i, kAllReduce, 0, 16);
    w.running(i, kAllReduce, 0, 16);
    w.finished(true);
  }
  if (enter) {
    w.issued(ops, kAllReduce, 0, 16);
    w.running(ops, kAllReduce, 0, 16);
  }
  ::munmap(p, bytes);
}

WatchConfig watch_config(const std::string& host, int pid) {
  WatchConfig c;
  c.detector.report_after_s = 0.2;
  c.detector.hang_timeout_s = 0.4;
  c.host = host;
  c.agent_pid = pid;
  c.local_ranks = 2;
  c.shm_dir = ::testing::TempDir();
  return c;
}

// `ctrun --status --stacks`: every local rank's stack on request, whatever its backend (this worker has no
// records at all), with the reason for a rank that has none.
TEST(HangWatch, StacksOnRequestForEveryLocalRank) {
  const std::string python = CTRUN_TORCH_PYTHON;
  if (python.empty() || !fs::exists(python)) GTEST_SKIP() << "no python3";
  // Named for this process: copies of the suite running at once must not share the file.
  const std::string stacks = ::testing::TempDir() + "/stack_on_request_" + std::to_string(::getpid()) + ".txt";
  // The worker registers its handler at start-up (sitecustomize) but is asked only once it sleeps in line 2: it
  // says so by creating `asleep` (a loaded machine may take seconds to get there).
  const std::string asleep = stacks + ".asleep";
  std::remove(stacks.c_str());
  std::remove(asleep.c_str());
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("PYTHONPATH", (std::string(CTRUN_SOURCE_DIR) + "/agent/hang/python").c_str(), 1);
    ::setenv(worker_env::kStackFile, stacks.c_str(), 1);
    ::setenv(worker_env::kStackSignal, std::to_string(stack_signal()).c_str(), 1);
    ::setenv("ASLEEP", asleep.c_str(), 1);
    ::execl(python.c_str(), python.c_str(), "-c",
            "import os, time\nopen(os.environ['ASLEEP'], 'w').close(); time.sleep(30)  # line 2\n", nullptr);
    ::_exit(127);
  }
  for (int i = 0; i < 600 && !(read_head(stacks, pid) && fs::exists(asleep)); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(read_head(stacks, pid)) << "the worker never registered its handler (30 s)";
  ASSERT_TRUE(fs::exists(asleep)) << "the worker never reached its sleep (30 s)";
  HangWatch watch(watch_config("vm", 1000003));
  watch.begin_attempt(0, 0);
  EXPECT_FALSE(watch.tick(0).requested_stacks) << "nothing asked, nothing answered";
  const auto words = [&](const std::vector<RankStack>& stacks) {
    return requested_stacks_words(stacks, watch.config().host, watch.config().dump_wait_s);
  };
  // Rank 1 is this test process: no handler, so it is never sent the signal.
  watch.set_workers({{0, 0, pid, stacks}, {1, 1, static_cast<int>(::getpid()), stacks}});
  watch.request_stacks(0);
  watch.request_stacks(0.1);  // joins the open request
  std::optional<std::vector<RankStack>> got;
  // The watch's clock stays at 0.1 s, far below dump_wait_s, so only the dumps can end this wait; a loaded machine
  // may take seconds to run the worker's handler.
  for (int i = 0; i < 750 && !(got = watch.tick(0.1).requested_stacks); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(got) << "the dump never came in (15 s)";
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[0].none, NoStack::kNone);
  EXPECT_EQ((*got)[1].none, NoStack::kNoHandler);
  const std::optional<std::string> answer = words(*got);
  EXPECT_NE(answer->find("stack of rank 0 (host vm, local_rank 0, pid " + std::to_string(pid) + "):"),
            std::string::npos)
      << *answer;
  EXPECT_NE(answer->find("line 2 in <module>"), std::string::npos) << *answer;
  EXPECT_NE(answer->find("stack of rank 1 (host vm, local_rank 1"), std::string::npos) << *answer;
  EXPECT_NE(answer->find("(no stack handler: not a Python worker"), std::string::npos) << *answer;
  EXPECT_FALSE(watch.tick(0.2).requested_stacks) << "answered once";
  std::remove(asleep.c_str());
  // No workers: said so at once.
  watch.set_workers({});
  watch.request_stacks(1);
  auto none = watch.tick(1).requested_stacks;
  ASSERT_TRUE(none);
  EXPECT_EQ(words(*none), "no workers are running on this node\n");
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  watch.end_attempt();
  std::remove(stacks.c_str());
}

TEST(HangWatch, OnOneNodeTheVerdictFailsTheLocalCulprit) {
  HangWatch watch(watch_config("vm", 1000001));
  watch.begin_attempt(0, 0);
  const std::string path = watch.env_for(0, "")[worker_env::kProgressFile];
  ASSERT_FALSE(path.empty());
  watch.set_workers({{0, 0, 111, ""}, {1, 1, 112, ""}});
  play_worker(path, 0, 0, 3, true);
  play_worker(path, 1, 1, 3, false);
  EXPECT_TRUE(watch.tick(0).findings.hangs.empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(450));
  WatchOutput out = watch.tick(1);
  ASSERT_EQ(out.findings.hangs.size(), 2u);  // the report and the verdict
  EXPECT_EQ(out.findings.hangs[1].kind, HangFinding::Kind::kVerdict);
  const auto said = say(out, watch.ranks(), watch.config().detector);
  ASSERT_EQ(said.size(), 2u);
  EXPECT_TRUE(said[0].warning && said[1].warning);
  EXPECT_EQ(said[1].event, Event::kHangTimeout);
  EXPECT_NE(said[1].line.find("rank 1 (host vm, local_rank 1, pid 112) has not entered all_reduce #3 of group 0"),
            std::string::npos)
      << said[1].line;
  EXPECT_NE(said[1].line.find("(hang timeout 400 ms)"), std::string::npos) << said[1].line;
  ASSERT_EQ(out.failures.size(), 1u);
  EXPECT_EQ(out.failures[0].worker.local_rank, 1);
  EXPECT_EQ(out.failures[0].worker.pid, 112);
  ASSERT_TRUE(out.failures[0].verdict);
  EXPECT_EQ(failure_note(out.failures[0], watch.ranks(), watch.config().detector),
            describe(*out.failures[0].verdict, watch.ranks()) + " (hang timeout 400 ms)");
  EXPECT_NE(table_text(watch.ranks(), watch.detector()).find("hang: rank 1"), std::string::npos);
  watch.end_attempt();
  EXPECT_FALSE(fs::exists(path));
}

TEST(HangWatch, TwoNodesEachNameTheHangAndOnlyTheCulpritsNodeActs) {
  // Node A runs rank 0 (waiting in #3), node B rank 1 (not entered). They see each other through summaries.
  HangWatch a(watch_config("a", 1000002)), b(watch_config("b", 1000003));
  a.begin_attempt(0, 0);
  b.begin_attempt(0, 0);
  a.set_workers({{0, 0, 111, ""}});
  b.set_workers({{0, 1, 222, ""}});
  play_worker(a.env_for(0, "")[worker_env::kProgressFile], 0, 0, 3, true);
  play_worker(b.env_for(0, "")[worker_env::kProgressFile], 0, 1, 3, false);
  a.tick(0);
  b.tick(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(450));
  a.tick(0.45);
  b.tick(0.45);
  auto sa = a.summary_due(0.45, 2);
  auto sb = b.summary_due(0.45, 2);
  ASSERT_TRUE(sa && sb);
  a.remote("b", *sb, 0.5);
  b.remote("a", *sa, 0.5);
  WatchOutput oa = a.tick(0.5), ob = b.tick(0.5);
  ASSERT_EQ(oa.findings.hangs.size(), 2u);
  const std::string line = describe(oa.findings.hangs[0], a.ranks());
  EXPECT_NE(line.find("rank 1 (host b, local_rank 0, pid 222) has not entered"), std::string::npos) << line;
  EXPECT_TRUE(oa.failures.empty()) << "node A's agent never acts on node B's rank";
  ASSERT_EQ(ob.findings.hangs.size(), 2u);
  ASSERT_EQ(ob.failures.size(), 1u);
  EXPECT_EQ(ob.failures[0].worker.local_rank, 0);
  EXPECT_FALSE(a.summary_due(0.6, 2)) << "paced: no second write within the interval";
}

// Several nodes: group rank 0's agent publishes its verdicts; another node's agent fails its own rank named there,
// once, and words why with the aggregator's note.
TEST(HangWatch, AVerdictFromGroupRankZerosAgentFailsTheLocalRankOnce) {
  HangWatch b(watch_config("b", 1000004));
  b.begin_attempt(0, 0);
  b.set_workers({{0, 1, 222, ""}});
  b.remote_verdicts({.ranks = {1, 7}, .notes = {"rank 1 has not entered all_reduce #3 of group 0"}}, 0);
  WatchOutput out = b.tick(0);
  ASSERT_EQ(out.failures.size(), 1u);
  EXPECT_FALSE(out.failures[0].verdict);
  EXPECT_EQ(failure_note(out.failures[0], b.ranks(), b.config().detector),
            "rank 1 has not entered all_reduce #3 of group 0 (the verdict of group rank 0's agent; its stack: )");
  b.remote_verdicts({.ranks = {1}, .notes = {"again"}}, 0.5);
  EXPECT_TRUE(b.tick(0.5).failures.empty()) << "a rank is failed once per attempt";
  b.end_attempt();
}

}  // namespace
}  // namespace ctrun::agent::hang
