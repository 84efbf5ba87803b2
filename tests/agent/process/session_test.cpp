// Where workers live: each leads its own process group (ctrun signals the group), in ctrun's session when ctrun's
// stdin is not a terminal (batch jobs: as torch 1.13's torchrun, sharing ctrun's CPU autogroup) and in a session of
// its own when it is (so a breakpoint() in a worker can read the terminal, as under torch 2.x's torchrun).
// Cold (fork+exec by ctrun) and preloaded (forked by the warm process) workers alike.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <pty.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "tests/agent/run_ctrun.hpp"

namespace ctrun::agent::test {
namespace {

using namespace std::chrono_literals;

struct Ids {
  pid_t pid = -1, pgid = -1, sid = -1, parent = -1;
};

// Runs 2 python workers of session.py under ctrun with the given stdin; the ids each recorded.
std::vector<Ids> run_workers(bool preload, int stdin_fd) {
  std::string dir = fresh_dir(preload ? "session_preload" : "session_cold");
  std::vector<std::string> args = {"--standalone", "--nproc-per-node=2"};
  if (preload) args.insert(args.end(), {"--preload", "json"});
  args.insert(args.end(), {worker_script("session.py"), dir});
  CtrunProcess p(args, {{"PYTHON_EXEC", CTRUN_TORCH_PYTHON}}, stdin_fd);
  RunResult r = p.wait(120s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<Ids> out;
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream in(dir + "/session_" + std::to_string(rank));
    Ids ids;
    in >> ids.pid >> ids.pgid >> ids.sid >> ids.parent;
    EXPECT_GT(ids.pid, 0) << "local_rank " << rank << " wrote nothing; ctrun said:\n" << r.err;
    if (preload) {
      EXPECT_NE(ids.parent, p.pid()) << "not forked by the warm process (started cold):\n" << r.err;
    }
    out.push_back(ids);
  }
  return out;
}

class WorkerSession : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (std::string(CTRUN_TORCH_PYTHON).empty()) GTEST_SKIP() << "no python3";
  }
};

TEST_P(WorkerSession, InCtrunsSessionWhenStdinIsNotATerminal) {
  for (const Ids& w : run_workers(GetParam(), -1)) {
    EXPECT_EQ(w.pgid, w.pid) << "a worker leads its own process group";
    EXPECT_EQ(w.sid, ::getsid(0)) << "a worker stays in ctrun's session (this test's: ctrun does not setsid)";
  }
}

TEST_P(WorkerSession, InASessionOfItsOwnWhenStdinIsATerminal) {
  int leader = -1, follower = -1;
  ASSERT_EQ(::openpty(&leader, &follower, nullptr, nullptr, nullptr), 0);
  std::vector<Ids> workers = run_workers(GetParam(), follower);
  ::close(follower);
  ::close(leader);
  for (const Ids& w : workers) {
    EXPECT_EQ(w.pgid, w.pid);
    EXPECT_EQ(w.sid, w.pid) << "a worker leads its own session";
  }
}

INSTANTIATE_TEST_SUITE_P(ColdAndPreloaded, WorkerSession, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Preloaded" : "Cold"; });

}  // namespace
}  // namespace ctrun::agent::test
