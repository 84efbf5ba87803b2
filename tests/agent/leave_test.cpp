// A death signal while the agent is blocked in the rendezvous handler (joining a round, or in the exit barrier)
// leaves that round cleanly (Handler::abandon() on a connection of its own, within the 1 s budget): the other
// agents see "left" at once, not a heartbeat timeout. Heartbeats are set to time out only after 100 s here, so
// anything the survivor does within the test's bounds comes from the leave.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include "tests/agent/run_ctrun.hpp"
#include "tests/support/port_reservation.hpp"

namespace ctrun::agent::test {
namespace {

using Clock = std::chrono::steady_clock;

using ctrun::test::PortReservation;

// heartbeat timeout 5 s x 20 = 100 s: far beyond every bound below
constexpr const char* kLeaveConf = "join_timeout=120,keep_alive_interval=5,keep_alive_max_attempt=20";

C10dJob leave_job(int nnodes, const std::string& dir) {
  return C10dJob(dir, nnodes, "leave", kLeaveConf, worker_script("exit_or_wait.sh"));
}

// Node A succeeded and waits in the exit barrier; node B's worker runs on. SIGTERM to A: B restarts for a round
// that A "left" within seconds.
TEST(Leave, FromTheExitBarrier) {
  std::string dir = fresh_dir("leave_barrier");
  C10dJob job = leave_job(2, dir);
  CtrunProcess& b = job.start("b", "127.0.0.1", {{"MODE", "wait"}});  // b hosts: port 0
  ASSERT_NE(job.endpoint(), "") << read_file(job.events_path("b"));
  CtrunProcess& a = job.start("a", "127.0.0.2", {{"MODE", "exit"}});
  ASSERT_TRUE(wait_for_text(dir + "/a.jsonl", "\"exitcode\":0", std::chrono::seconds(30)));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto t0 = Clock::now();
  RunResult r;
  double exit_s = signal_to_exit(a, SIGTERM, &r, "leave: exit barrier (SIGTERM)");
  EXPECT_GE(exit_s, 0) << r.err;
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_LT(exit_s, 5.0) << r.err;
  EXPECT_TRUE(wait_for_text(dir + "/b.jsonl", "left (its agent was stopped)", std::chrono::seconds(15)))
      << read_file(dir + "/b.jsonl") << r.err;
  double seen_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("[ leave ] exit barrier: agent gone in %.3f s, peer saw \"left\" after %.3f s\n", exit_s, seen_s);
  EXPECT_EQ(read_file(dir + "/b.jsonl").find("lost heartbeat"), std::string::npos) << read_file(dir + "/b.jsonl");
  ::kill(b.pid(), SIGTERM);
  b.wait(std::chrono::seconds(30));
  expect_no_worker_left(worker_pids(dir));
}

// Three nodes needed; A and B wait for the third when A gets SIGTERM. A withdraws from the round, so when C and D
// come, the round forms with B, C, D at once (without the leave it would form with A in it and break only when
// A's heartbeats time out, 100 s here).
TEST(Leave, WhileWaitingForNodes) {
  std::string dir = fresh_dir("leave_waiting");
  C10dJob job = leave_job(3, dir);
  CtrunProcess& b = job.start("b", "127.0.0.1", {{"MODE", "wait"}});  // b hosts: port 0
  ASSERT_NE(job.endpoint(), "") << read_file(job.events_path("b"));
  CtrunProcess& a = job.start("a", "127.0.0.2", {{"MODE", "wait"}});
  ASSERT_TRUE(wait_for_text(dir + "/a.jsonl", "agent_start", std::chrono::seconds(20)));
  std::this_thread::sleep_for(std::chrono::seconds(1));  // both have arrived in round 0
  RunResult r;
  double exit_s = signal_to_exit(a, SIGTERM, &r, "leave: waiting for nodes (SIGTERM)");
  EXPECT_GE(exit_s, 0) << r.err;
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_LT(exit_s, 5.0) << r.err;
  EXPECT_EQ(r.err.find("did not answer"), std::string::npos) << r.err;
  std::printf("[ leave ] waiting for nodes: agent gone in %.3f s\n", exit_s);
  CtrunProcess& c = job.start("c", "127.0.0.3", {{"MODE", "wait"}});
  CtrunProcess& d = job.start("d", "127.0.0.4", {{"MODE", "wait"}});
  EXPECT_TRUE(wait_for_text(dir + "/b.jsonl", "worker_start", std::chrono::seconds(30))) << read_file(dir + "/b.jsonl");
  EXPECT_TRUE(wait_for_text(dir + "/d.jsonl", "worker_start", std::chrono::seconds(30))) << read_file(dir + "/d.jsonl");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  // the round that formed is whole: nobody restarts for a dead member
  EXPECT_EQ(read_file(dir + "/b.jsonl").find("membership_change"), std::string::npos) << read_file(dir + "/b.jsonl");
  EXPECT_EQ(std::filesystem::exists(dir + "/pid_a_0"), false);
  for (auto* p : {&b, &c, &d}) ::kill(p->pid(), SIGTERM);
  for (auto* p : {&b, &c, &d}) p->wait(std::chrono::seconds(30));
  expect_no_worker_left(worker_pids(dir));
}

}  // namespace
}  // namespace ctrun::agent::test

namespace ctrun::agent::test {
namespace {

// Two agents (--local-addr 127.0.0.2 and .3) with the same c10d endpoint, each one worker that exits 0: both
// end 0 in one round of two nodes — without an agent hosting the store neither could have joined.
void expect_two_agents_form_one_round(const std::string& endpoint, const std::string& dir) {
  auto args = [&](const std::string& addr, const std::string& tag) {
    return c10d_agent_flags(2, "leave", "join_timeout=60", endpoint, addr, dir + "/" + tag + ".jsonl",
                            worker_script("exit_or_wait.sh"));
  };
  CtrunProcess x(args("127.0.0.2", "x"), {{"OUT_DIR", dir}, {"MODE", "exit"}, {"NODE_TAG", "x"}});
  CtrunProcess y(args("127.0.0.3", "y"), {{"OUT_DIR", dir}, {"MODE", "exit"}, {"NODE_TAG", "y"}});
  RunResult rx = x.wait(std::chrono::seconds(60));
  RunResult ry = y.wait(std::chrono::seconds(60));
  EXPECT_EQ(rx.exit_code, 0) << rx.err;
  EXPECT_EQ(ry.exit_code, 0) << ry.err;
  EXPECT_NE(rx.err.find("formed: 2 node(s), world size 2"), std::string::npos) << rx.err;
}

// torchrun 2.x's host choice: the endpoint "localhost" is this machine whatever --local-addr says, so both agents
// try to host the c10d store; the one whose bind fails becomes the other's client, and the job forms.
TEST(HostChoice, LocalhostEndpointWithOtherLocalAddrs) {
  std::string dir = fresh_dir("host_localhost");
  PortReservation port;  // both agents try to bind it; the first wins, the other becomes its client
  std::string endpoint = "localhost:" + std::to_string(port.port());
  expect_two_agents_form_one_round(endpoint, dir);
  EXPECT_NE(read_file(dir + "/x.jsonl").find("\"group_world_size\":2"), std::string::npos)
      << read_file(dir + "/x.jsonl");
}

// The same over IPv6: the endpoint [::1] is this machine too.
TEST(HostChoice, Ipv6LoopbackEndpointWithOtherLocalAddrs) {
  std::optional<PortReservation> port;
  try {
    port.emplace("::1");
  } catch (const std::exception&) {
    GTEST_SKIP() << "no IPv6 loopback (::1) on this machine";
  }
  std::string dir = fresh_dir("host_ipv6");
  std::string endpoint = "[::1]:" + std::to_string(port->port());
  expect_two_agents_form_one_round(endpoint, dir);
}

}  // namespace
}  // namespace ctrun::agent::test
