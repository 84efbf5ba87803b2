// A death signal in every phase of the agent (docs/cli.md, "Signals"): waiting for a node that never comes (as the
// rendezvous host and as a client), connecting to an endpoint nobody serves, running, stopping a failed group,
// waiting in the exit barrier, rejoining after a failure. The agent must be gone within a second (measured and
// printed; the bound in the test is generous, the machine is shared) and leave no process of the job behind.
// Also: SIGUSR1/SIGUSR2 are forwarded to the workers and recorded in the event log.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "tests/agent/run_ctrun.hpp"
#include "tests/support/port_reservation.hpp"

namespace ctrun::agent::test {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kGenerousBound = 5.0;  // seconds; the target (and the measured figure, printed) is < 1 s

using ctrun::test::PortReservation;

C10dJob sig_job(int nnodes, const std::string& dir, const std::string& worker) {
  return C10dJob(dir, nnodes, "sig", "join_timeout=120", worker_script(worker));
}

TEST(Signal, RunningGroupEndsWithinASecond) {
  std::string dir = fresh_dir("sig_running");
  CtrunProcess p({"--nproc-per-node=2", "--no-python", worker_script("wait_term.sh")}, {{"OUT_DIR", dir}});
  ASSERT_TRUE(wait_for_files(dir, "pid_", 2, std::chrono::seconds(20)));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto pids = worker_pids(dir);
  RunResult r;
  double s = signal_to_exit(p, SIGTERM, &r, "running (SIGTERM)");
  EXPECT_GE(s, 0) << r.err;
  EXPECT_LT(s, kGenerousBound);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  expect_no_worker_left(pids);
}

// Host and client both wait for a third node that never comes: each leaves at once on a signal.
TEST(Signal, WaitingForANodeThatNeverComesHostAndClient) {
  std::string dir = fresh_dir("sig_waiting");
  // The host binds a port of the kernel's choosing and reports it; the client is given that one.
  C10dJob job = sig_job(3, dir, "wait_term.sh");
  CtrunProcess& host = job.start("host", "127.0.0.1");
  const std::string endpoint = job.endpoint();
  ASSERT_NE(endpoint, "") << read_file(dir + "/host.jsonl");
  CtrunProcess& client = job.start("client", "127.0.0.2");
  ASSERT_TRUE(wait_for_text(dir + "/client.jsonl", "agent_start", std::chrono::seconds(20)));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  RunResult r;
  double s = signal_to_exit(client, SIGINT, &r, "rendezvous wait, client (SIGINT)");
  EXPECT_GE(s, 0) << r.err;
  EXPECT_LT(s, kGenerousBound);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  // It said what it waits for (after a second without a round).
  EXPECT_NE(
      r.err.find("waiting for the other nodes of rendezvous 'sig' (3 nodes, c10d backend, endpoint " + endpoint + ")"),
      std::string::npos)
      << r.err;
  s = signal_to_exit(host, SIGTERM, &r, "rendezvous wait, store host (SIGTERM)");
  EXPECT_GE(s, 0) << r.err;
  EXPECT_LT(s, kGenerousBound);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  for (const char* who : {"/host.jsonl", "/client.jsonl"}) {
    EXPECT_NE(read_file(dir + who).find("\"state\":\"rendezvous\""), std::string::npos) << read_file(dir + who);
  }
  EXPECT_TRUE(worker_pids(dir).empty());  // no worker ever started
}

// A static node whose master never answers is still connecting: SIGHUP ends it at once.
TEST(Signal, ConnectingToAnAbsentStaticMaster) {
  std::string dir = fresh_dir("sig_connect");
  PortReservation absent;  // bound, never listening: connections are refused, and no other server can take it
  CtrunProcess p(
      {"--nnodes=2", "--node-rank=1", "--master-addr=127.0.0.1", "--master-port=" + std::to_string(absent.port()),
       "--nproc-per-node=1", "--event-log=" + dir + "/e.jsonl", "--no-python", worker_script("wait_term.sh")},
      {{"OUT_DIR", dir}});
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  RunResult r;
  double s = signal_to_exit(p, SIGHUP, &r, "connecting to static master (SIGHUP)");
  EXPECT_GE(s, 0) << r.err;
  EXPECT_LT(s, kGenerousBound);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(read_file(dir + "/e.jsonl").find("\"state\":\"initialising\""), std::string::npos)
      << read_file(dir + "/e.jsonl") << r.err;
}

// Node A succeeds and waits in the exit barrier for node B, whose worker runs on: SIGTERM ends A at once.
TEST(Signal, ExitBarrier) {
  std::string dir = fresh_dir("sig_barrier");
  C10dJob job = sig_job(2, dir, "exit_or_wait.sh");
  CtrunProcess& b = job.start("b", "127.0.0.1", {{"MODE", "wait"}});  // b hosts: port 0
  ASSERT_NE(job.endpoint(), "") << read_file(dir + "/b.jsonl");
  CtrunProcess& a = job.start("a", "127.0.0.2", {{"MODE", "exit"}});
  ASSERT_TRUE(wait_for_text(dir + "/a.jsonl", "\"exitcode\":0", std::chrono::seconds(30)));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  RunResult r;
  double s = signal_to_exit(a, SIGTERM, &r, "exit barrier (SIGTERM)");
  EXPECT_NE(r.err.find("round 0 of rendezvous 'sig' formed: 2 node(s), world size 2; this node is group rank"),
            std::string::npos)
      << r.err;
  EXPECT_GE(s, 0) << r.err;
  EXPECT_LT(s, kGenerousBound);
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_NE(read_file(dir + "/a.jsonl").find("\"state\":\"exit_barrier\""), std::string::npos)
      << read_file(dir + "/a.jsonl");
  s = signal_to_exit(b, SIGTERM, &r, "running, peer gone (SIGTERM)");
  EXPECT_GE(s, 0) << r.err;
  EXPECT_LT(s, kGenerousBound);
  expect_no_worker_left(worker_pids(dir));
}

// --exit-barrier-timeout: node A succeeds, node B runs on; A gives up waiting after 1 s and exits 0 with a warning.
TEST(Signal, ExitBarrierTimeoutFlag) {
  std::string dir = fresh_dir("sig_barrier_timeout");
  C10dJob job = sig_job(2, dir, "exit_or_wait.sh");
  CtrunProcess& b = job.start("b", "127.0.0.1", {{"MODE", "wait"}});  // b hosts: port 0
  ASSERT_NE(job.endpoint(), "") << read_file(dir + "/b.jsonl");
  auto t0 = Clock::now();
  CtrunProcess& a = job.start("a", "127.0.0.2", {{"MODE", "exit"}}, {"--exit-barrier-timeout=1"});
  RunResult r = a.wait(std::chrono::seconds(60));
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GE(s, 1.0);
  EXPECT_LT(s, 30.0);  // far below the 300 s default
  EXPECT_NE(r.err.find("exit barrier timed out after 1 s"), std::string::npos) << r.err;
  signal_to_exit(b, SIGTERM, &r, "running, peer finished (SIGTERM)");
  expect_no_worker_left(worker_pids(dir));
}

// Node A's worker fails; A rejoins for its restart while node B's agent is stopped (SIGSTOP), so the round cannot
// form: A is waiting in the restart's rendezvous when SIGTERM comes.
TEST(Signal, DuringARestart) {
  std::string dir = fresh_dir("sig_restart");
  C10dJob job = sig_job(2, dir, "exit_or_wait.sh");
  CtrunProcess& b = job.start("b", "127.0.0.1", {{"MODE", "wait"}});  // b hosts: port 0
  ASSERT_NE(job.endpoint(), "") << read_file(dir + "/b.jsonl");
  CtrunProcess& a = job.start("a", "127.0.0.2", {{"MODE", "fail"}}, {"--max-restarts=3"});
  ASSERT_TRUE(wait_for_text(dir + "/b.jsonl", "worker_start", std::chrono::seconds(30)));
  // A too has the round (B serves the rendezvous store: stopped before A read it, A would wait on it instead).
  ASSERT_TRUE(wait_for_text(dir + "/a.jsonl", "\"rendezvous\"", std::chrono::seconds(30)));
  ::kill(b.pid(), SIGSTOP);
  ASSERT_TRUE(wait_for_text(dir + "/a.jsonl", "\"restart\"", std::chrono::seconds(30)));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  RunResult r;
  double s = signal_to_exit(a, SIGTERM, &r, "rendezvous of a restart (SIGTERM)");
  EXPECT_GE(s, 0) << r.err;
  EXPECT_LT(s, kGenerousBound);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(read_file(dir + "/a.jsonl").find("\"state\":\"rendezvous\""), std::string::npos)
      << read_file(dir + "/a.jsonl");
  ::kill(b.pid(), SIGCONT);
  s = signal_to_exit(b, SIGTERM, &r, "running after peer left (SIGTERM)");
  EXPECT_GE(s, 0) << r.err;
  expect_no_worker_left(worker_pids(dir));
}

// A failed group is being stopped and one worker ignores SIGTERM (--shutdown-timeout 60): the first SIGINT is
// forwarded, the second kills the workers at once.
TEST(Signal, SecondSigintKillsAtOnce) {
  std::string dir = fresh_dir("sig_twice");
  CtrunProcess p({"--nproc-per-node=2", "--shutdown-timeout=60", "--no-python", worker_script("ignore_stop.sh")},
                 {{"OUT_DIR", dir}});
  ASSERT_TRUE(wait_for_files(dir, "pid_", 2, std::chrono::seconds(20)));
  std::this_thread::sleep_for(std::chrono::milliseconds(800));  // rank 0 has failed: the group is being stopped
  auto pids = worker_pids(dir);
  ::kill(p.pid(), SIGINT);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_TRUE(alive(p.pid()));  // still waiting for the workers that ignore the signal
  RunResult r;
  double s = signal_to_exit(p, SIGINT, &r, "stopping, second SIGINT");
  EXPECT_GE(s, 0) << r.err;
  EXPECT_LT(s, kGenerousBound);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("again, killing workers now"), std::string::npos) << r.err;
  expect_no_worker_left(pids);
}

TEST(Signal, Sigusr1AndSigusr2AreForwardedAndLogged) {
  std::string dir = fresh_dir("sig_usr");
  CtrunProcess p(
      {"--nproc-per-node=2", "--event-log=" + dir + "/e.jsonl", "--no-python", worker_script("record_usr.sh")},
      {{"OUT_DIR", dir}});
  ASSERT_TRUE(wait_for_files(dir, "pid_", 2, std::chrono::seconds(20)));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::kill(p.pid(), SIGUSR1);
  ASSERT_TRUE(wait_for_text(dir + "/got_0", "USR1", std::chrono::seconds(10)));
  ASSERT_TRUE(wait_for_text(dir + "/got_1", "USR1", std::chrono::seconds(10)));
  ::kill(p.pid(), SIGUSR2);
  RunResult r = p.wait(std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 0) << r.err;  // the job goes on after USR1 and ends cleanly through USR2
  for (int i = 0; i < 2; ++i) EXPECT_EQ(read_file(dir + "/got_" + std::to_string(i)), "USR1\nUSR2\n");
  std::string events = read_file(dir + "/e.jsonl");
  EXPECT_NE(events.find("\"event\":\"signal_forwarded\""), std::string::npos) << events;
  EXPECT_NE(events.find("\"signal\":\"SIGUSR1\""), std::string::npos) << events;
  EXPECT_NE(events.find("\"signal\":\"SIGUSR2\""), std::string::npos) << events;
}

}  // namespace
}  // namespace ctrun::agent::test
