// A worker that cannot be killed (agent/process/worker_group.hpp, kUnkillableGrace): a process of a frozen cgroup v1
// freezer group sits in uninterruptible sleep ('D') and survives SIGKILL until thawed, as a process stuck on a hung
// file system does. ctrun must not wait for it without bound: it names the pid and state, marks the node unhealthy
// (event and failure summary) and ends. The freezer group is the test's own (named by its pid), thawed and removed
// at the end; without a cgroup v1 freezer (or root) the test skips.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "../run_ctrun.hpp"
#include "agent/process/worker_group.hpp"

namespace ctrun::agent::test {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

bool write_to(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text << std::flush;
  return static_cast<bool>(out);
}

// A freezer cgroup of this test: thawed and removed when it goes (its processes are killed once thawed).
struct Freezer {
  std::string dir = "/sys/fs/cgroup/freezer/ctrun_unkillable_" + std::to_string(::getpid());
  bool made = false;
  Freezer() {
    std::error_code ec;
    made = fs::exists("/sys/fs/cgroup/freezer/freezer.state") || fs::exists("/sys/fs/cgroup/freezer/tasks");
    made = made && fs::create_directory(dir, ec) && !ec;
  }
  bool add(pid_t pid) { return write_to(dir + "/cgroup.procs", std::to_string(pid)); }
  bool freeze() { return write_to(dir + "/freezer.state", "FROZEN"); }
  ~Freezer() {
    if (!made) return;
    write_to(dir + "/freezer.state", "THAWED");
    for (int i = 0; i < 100 && !read_file(dir + "/cgroup.procs").empty(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::error_code ec;
    fs::remove(dir, ec);
  }
};

TEST(UnkillableWorker, TheStateIsReadAfterTheLastParenthesisOfStat) {
  const std::string root = fresh_dir("ctrun_fake_proc");
  fs::create_directories(root + "/4711");
  write_to(root + "/4711/stat", "4711 (a (weird) name) D 1 4711 4711 0 -1 4194560");
  EXPECT_EQ(process_state(4711, root), 'D');
  EXPECT_EQ(process_state(4712, root), 0) << "gone";
  EXPECT_EQ(process_state(::getpid()), 'R');
  EXPECT_NE(process_state_words('D').find("uninterruptible sleep"), std::string::npos);
}

TEST(UnkillableWorker, NamedWithItsStateTheNodeMarkedUnhealthyAndCtrunGoesOn) {
  Freezer freezer;
  if (!freezer.made) GTEST_SKIP() << "needs root and a cgroup v1 freezer (/sys/fs/cgroup/freezer)";
  const std::string dir = fresh_dir("ctrun_unkillable");
  // Rank 1 writes its pid and sleeps; rank 0 fails after 3 s, so the group is stopped with rank 1 frozen.
  const std::string script = "if [ \"$LOCAL_RANK\" = 1 ]; then echo $$ > " + dir + "/pid.tmp && mv " + dir +
                             "/pid.tmp " + dir + "/pid; exec sleep 300; fi; sleep 3; exit 3";
  CtrunProcess p({"--standalone", "--nproc-per-node", "2", "--no-python", "--shutdown-timeout", "1", "--max-restarts",
                  "0", "--event-log", dir + "/events.jsonl", "sh", "-c", script});
  ASSERT_TRUE(ctrun::test::eventually([&] { return fs::exists(dir + "/pid"); }, std::chrono::seconds(30),
                                      std::chrono::milliseconds(50)));
  const pid_t stuck = std::stoi(read_file(dir + "/pid"));
  ASSERT_TRUE(freezer.add(stuck));
  ASSERT_TRUE(freezer.freeze());
  const auto t0 = Clock::now();
  RunResult r = p.wait(std::chrono::seconds(60));
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_NE(r.exit_code, -1) << "ctrun waited for the stuck worker\n" << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_LT(took, 3 + 1 + kUnkillableGrace.count() + 10) << r.err;
  EXPECT_NE(
      r.err.find("(rank 1, pid " + std::to_string(stuck) + ") survived SIGKILL for 5 s, state D (uninterruptible"),
      std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("node unhealthy: local_rank 1 (pid " + std::to_string(stuck) + ") survived SIGKILL, state D"),
            std::string::npos)
      << "the failure summary's line\n"
      << r.err;
  const std::string events = read_file(dir + "/events.jsonl");
  EXPECT_NE(events.find("\"event\":\"worker_unkillable\""), std::string::npos) << events;
  EXPECT_NE(events.find("\"state\":\"D\""), std::string::npos) << events;
  EXPECT_NE(events.find("\"event\":\"node_unhealthy\""), std::string::npos) << events;
  EXPECT_EQ(process_state(stuck), 'D') << "still stuck after ctrun ended: it went on without it";
}

}  // namespace
}  // namespace ctrun::agent::test
