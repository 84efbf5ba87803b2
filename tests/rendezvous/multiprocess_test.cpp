// The failure-detection scenario end to end with real processes, real TCP and real SIGKILL: rdzv_node agents on
// distinct loopback addresses (the first one hosts the store), --nnodes 2:3.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "store/server.hpp"
#include "tests/support/port_reservation.hpp"

namespace {

using namespace std::chrono_literals;

// One rdzv_node child: its stdin (close = finish) and stdout lines.
class Node {
 public:
  Node(const std::vector<std::string>& args) {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // no orphans if the test dies
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      std::vector<char*> argv;
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    stdin_ = in[1];
    stdout_ = out[0];
  }
  ~Node() {
    finish();
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (stdout_ >= 0) ::close(stdout_);
  }
  // Next stdout line, or "" after `limit`.
  std::string line(std::chrono::milliseconds limit = 20s) {
    auto end = std::chrono::steady_clock::now() + limit;
    for (;;) {
      if (auto nl = buf_.find('\n'); nl != std::string::npos) {
        auto l = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return l;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return "";
      pollfd p{stdout_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[512];
      auto n = ::read(stdout_, chunk, sizeof chunk);
      if (n <= 0) return "";
      buf_.append(chunk, static_cast<std::size_t>(n));
    }
  }
  void finish() {
    if (stdin_ >= 0) ::close(stdin_);
    stdin_ = -1;
  }
  int wait_exit() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  void signal(int sig) { ::kill(pid_, sig); }
  void kill9() {
    ::kill(pid_, SIGKILL);
    wait_exit();
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1, stdout_ = -1;
  std::string buf_;
};

}  // namespace

TEST(MultiProcess, NodeJoinsMidRunThenKill9AndSurvivorsFinishInTwoNodeRound) {
  ctrun::test::PortReservation port;  // node a binds it (SO_REUSEADDR); nothing else can
  const std::string endpoint = "127.0.0.2:" + std::to_string(port.port());
  const std::string conf = "last_call_timeout=0.5,keep_alive_interval=0.2,keep_alive_max_attempt=3,join_timeout=20";
  auto node = [&](const std::string& addr) {
    return std::make_unique<Node>(std::vector<std::string>{CTRUN_RDZV_NODE, endpoint, "mp", "2:3", addr, conf});
  };
  auto a = node("127.0.0.2");  // matches the endpoint: hosts the store
  auto b = node("127.0.0.3");
  EXPECT_EQ(a->line(), "ROUND 0 0 2");
  EXPECT_EQ(b->line(), "ROUND 0 1 2");
  auto c = node("127.0.0.4");  // arrives mid-run: everybody re-rendezvous into a 3-node round
  EXPECT_EQ(a->line().rfind("RESTART join: node 127.0.0.4", 0), 0u);
  EXPECT_EQ(b->line().rfind("RESTART join: node 127.0.0.4", 0), 0u);
  EXPECT_EQ(a->line(), "ROUND 1 0 3");
  EXPECT_EQ(b->line(), "ROUND 1 1 3");
  EXPECT_EQ(c->line(), "ROUND 1 2 3");
  const auto killed_at = std::chrono::steady_clock::now();
  b->kill9();  // its heartbeats stop; nothing else is written
  auto ra = a->line(), rc = c->line();
  EXPECT_LT(std::chrono::steady_clock::now() - killed_at, 3s);  // 0.2 s x 3 attempts, plus scheduling slack
  EXPECT_NE(ra.find("127.0.0.3"), std::string::npos) << ra;
  // Its agent's store connection closed (the store is ctrun's) or its heartbeats stopped: whichever came first.
  EXPECT_TRUE(ra.find("lost heartbeat") != std::string::npos || ra.find("closed its connection") != std::string::npos)
      << ra;
  EXPECT_EQ(rc.rfind("RESTART dead:", 0), 0u) << rc;
  EXPECT_EQ(a->line(), "ROUND 2 0 2");
  EXPECT_EQ(c->line(), "ROUND 2 1 2");
  a->finish();
  c->finish();
  EXPECT_EQ(c->wait_exit(), 0);
  EXPECT_EQ(a->wait_exit(), 0);
}

TEST(MultiProcess, StandaloneStoreOutlivesTheJobAndRefusesAClosedRunId) {
  ctrun::store::ServerOptions o;
  o.host = "127.0.0.1";
  ctrun::store::Server ctstore(o);  // as a standalone ctstore serving the rendezvous
  ctstore.start();
  const std::string endpoint = "127.0.0.1:" + std::to_string(ctstore.port());
  const std::string conf = "last_call_timeout=0.2,is_host=0";
  auto node = [&](const std::string& addr) {
    return std::make_unique<Node>(std::vector<std::string>{CTRUN_RDZV_NODE, endpoint, "closed", "2", addr, conf});
  };
  auto a = node("node10"), b = node("node9");
  EXPECT_EQ(a->line(), "ROUND 0 1 2");  // natural order: node9 before node10
  EXPECT_EQ(b->line(), "ROUND 0 0 2");
  a->finish();
  b->finish();
  EXPECT_EQ(a->wait_exit(), 0);
  EXPECT_EQ(b->wait_exit(), 0);
  auto again = node("node1");  // a new job that forgot a new --rdzv-id
  auto err = again->line();
  EXPECT_EQ(err.rfind("ERROR rendezvous 'closed' is closed", 0), 0u) << err;
  EXPECT_NE(err.find("new --rdzv-id"), std::string::npos) << err;
  EXPECT_EQ(again->wait_exit(), 1);
}

// Two active agents and a spare on a standalone ctstore, heartbeats slow (15 s to notice): the kill -9 of an active
// agent is noticed from its closed store connection, and the survivor and the spare form the next round at once.
TEST(MultiProcess, Kill9OfAnActiveAgentIsNoticedFromItsClosedConnection) {
  ctrun::store::Server ctstore(ctrun::store::ServerOptions{.host = "127.0.0.1"});
  ctstore.start();
  const std::string endpoint = "127.0.0.1:" + std::to_string(ctstore.port());
  const std::string conf = "last_call_timeout=0.2,is_host=0,keep_alive_interval=5,keep_alive_max_attempt=3";
  auto node = [&](const std::string& addr) {
    return std::make_unique<Node>(std::vector<std::string>{CTRUN_RDZV_NODE, endpoint, "k9", "2", addr, conf});
  };
  auto a = node("127.0.0.2"), b = node("127.0.0.3");
  EXPECT_EQ(a->line(), "ROUND 0 0 2");
  EXPECT_EQ(b->line(), "ROUND 0 1 2");
  auto spare = node("127.0.0.4");  // a spare: round 0 is full
  EXPECT_EQ(spare->line(500ms), "");
  const auto killed_at = std::chrono::steady_clock::now();
  b->kill9();
  const auto ra = a->line(10s);
  EXPECT_EQ(ra.rfind("RESTART dead: node 127.0.0.3", 0), 0u) << ra;
  EXPECT_NE(ra.find("closed its connection"), std::string::npos) << ra;
  EXPECT_EQ(a->line(10s), "ROUND 1 0 2");
  EXPECT_EQ(spare->line(10s), "ROUND 1 1 2");
  const auto took = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  std::printf("kill -9 to the next round on the survivor and the spare: %.2f s\n", took);
  EXPECT_LT(took, 5.0);  // ~0.6 s alone (0.5 s of it the reconnect grace); generous for a loaded machine
  a->finish();
  spare->finish();
  EXPECT_EQ(a->wait_exit(), 0);
  EXPECT_EQ(spare->wait_exit(), 0);
}

// A stopped agent closes nothing: the heartbeat notices it, as before.
TEST(MultiProcess, StoppedAgentIsFoundByItsHeartbeat) {
  ctrun::store::Server ctstore(ctrun::store::ServerOptions{.host = "127.0.0.1"});
  ctstore.start();
  const std::string endpoint = "127.0.0.1:" + std::to_string(ctstore.port());
  const std::string conf = "last_call_timeout=0.2,is_host=0,keep_alive_interval=0.3,keep_alive_max_attempt=3";
  auto node = [&](const std::string& addr) {
    return std::make_unique<Node>(std::vector<std::string>{CTRUN_RDZV_NODE, endpoint, "stop", "1:2", addr, conf});
  };
  auto a = node("127.0.0.2"), b = node("127.0.0.3");
  EXPECT_EQ(a->line(), "ROUND 0 0 2");
  EXPECT_EQ(b->line(), "ROUND 0 1 2");
  b->signal(SIGSTOP);
  const auto ra = a->line(10s);
  EXPECT_EQ(ra.rfind("RESTART dead: node 127.0.0.3", 0), 0u) << ra;
  EXPECT_NE(ra.find("lost heartbeat"), std::string::npos) << ra;
  EXPECT_EQ(a->line(10s), "ROUND 1 0 1");
  b->kill9();
  a->finish();
  EXPECT_EQ(a->wait_exit(), 0);
}
