// Real processes and real signals: the env workers receive, failure handling and the summary, signal
// forwarding, the shutdown timeout, and no orphaned worker after `kill -9 ctrun`.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "tests/agent/run_ctrun.hpp"
#include "tests/support/ctstore.hpp"
#include "tests/support/port_reservation.hpp"

namespace ctrun::agent::test {
namespace {

std::map<std::string, std::string> parse_env(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    auto eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

pid_t read_pid(const std::string& path) { return static_cast<pid_t>(std::stol(read_file(path))); }

TEST(Process, FourWorkersGetExactlyTheExpectedEnv) {
  std::string dir = fresh_dir("env");
  RunResult r = run_ctrun({"--standalone", "--nproc-per-node=4", "--role", "trainer", "--max-restarts", "2",
                           "--no-python", worker_script("env_dump.sh")},
                          {{"OUT_DIR", dir}, {"CTRUN_TEST_MARKER", "inherited"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::set<std::string> ports;
  std::string run_id;
  for (int i = 0; i < 4; ++i) {
    auto env = parse_env(read_file(dir + "/env_" + std::to_string(i)));
    std::string li = std::to_string(i);
    EXPECT_EQ(env["LOCAL_RANK"], li);
    EXPECT_EQ(env["RANK"], li);
    EXPECT_EQ(env["ROLE_RANK"], li);
    EXPECT_EQ(env["GROUP_RANK"], "0");
    EXPECT_EQ(env["ROLE_NAME"], "trainer");
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "4");
    EXPECT_EQ(env["WORLD_SIZE"], "4");
    EXPECT_EQ(env["GROUP_WORLD_SIZE"], "1");
    EXPECT_EQ(env["ROLE_WORLD_SIZE"], "4");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "0");
    EXPECT_EQ(env["TORCHELASTIC_MAX_RESTARTS"], "2");
    EXPECT_EQ(env["TORCHELASTIC_USE_AGENT_STORE"], "True");
    EXPECT_EQ(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1");
    EXPECT_EQ(env["NCCL_ASYNC_ERROR_HANDLING"], "1");
    EXPECT_EQ(env["OMP_NUM_THREADS"], "1");
    EXPECT_EQ(env["CTRUN_TEST_MARKER"], "inherited");
    EXPECT_NE(env["TORCHELASTIC_ERROR_FILE"].find("/attempt_0/" + li + "/error.json"), std::string::npos);
    EXPECT_GT(std::stoi(env["MASTER_PORT"]), 0);
    ports.insert(env["MASTER_PORT"]);
    if (i == 0) run_id = env["TORCHELASTIC_RUN_ID"];
    EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], run_id);
  }
  EXPECT_EQ(ports.size(), 1u);
  EXPECT_EQ(run_id.size(), 36u);  // --standalone: a fresh uuid4
  EXPECT_NE(r.err.find("Setting OMP_NUM_THREADS environment variable for each process to be 1"), std::string::npos);
}

TEST(Process, OmpNumThreadsIsKeptWhenSet) {
  std::string dir = fresh_dir("omp");
  RunResult r = run_ctrun({"--nproc_per_node", "2", "--no_python", worker_script("env_dump.sh")},
                          {{"OUT_DIR", dir}, {"OMP_NUM_THREADS", "7"}, {"PET_RDZV_ID", "myjob"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto env = parse_env(read_file(dir + "/env_1"));
  EXPECT_EQ(env["OMP_NUM_THREADS"], "7");
  EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], "myjob");
  EXPECT_EQ(r.err.find("Setting OMP_NUM_THREADS"), std::string::npos);
}

TEST(Process, WorkerExit3StopsOthersAndIsTheRootCause) {
  std::string dir = fresh_dir("exit3");
  RunResult r = run_ctrun({"--standalone", "--nproc-per-node=4", "--no-python", worker_script("fail_one.sh")},
                          {{"OUT_DIR", dir}, {"FAIL_RANK", "2"}}, std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  for (int i : {0, 1, 3}) EXPECT_TRUE(std::ifstream(dir + "/term_" + std::to_string(i))) << "rank " << i;
  auto root = r.err.find("Root Cause (first observed failure):");
  ASSERT_NE(root, std::string::npos) << r.err;
  std::string root_part = r.err.substr(root);
  EXPECT_NE(root_part.find("rank      : 2 (local_rank: 2)"), std::string::npos) << r.err;
  EXPECT_NE(root_part.find("exitcode  : 3 (pid: " + std::to_string(read_pid(dir + "/pid_2")) + ")"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("fail_one.sh FAILED"), std::string::npos);
  EXPECT_NE(r.err.find("<NO_OTHER_FAILURES>"), std::string::npos) << r.err;
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(alive(read_pid(dir + "/pid_" + std::to_string(i))));
}

// Three ranks fail by themselves, one after the other: the summary names every one, the first as the root cause.
TEST(Process, EveryFailedRankIsInTheSummary) {
  std::string dir = fresh_dir("fail_all");
  RunResult r = run_ctrun({"--standalone", "--nproc-per-node=3", "--no-python", worker_script("fail_all.sh")},
                          {{"OUT_DIR", dir}}, std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  auto root = r.err.find("Root Cause (first observed failure):");
  ASSERT_NE(root, std::string::npos) << r.err;
  EXPECT_NE(r.err.substr(root).find("rank      : 0 (local_rank: 0)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.substr(root).find("exitcode  : 10"), std::string::npos) << r.err;
  std::string others = r.err.substr(0, root);
  EXPECT_NE(others.find("rank      : 1 (local_rank: 1)"), std::string::npos) << r.err;
  EXPECT_NE(others.find("exitcode  : 11"), std::string::npos) << r.err;
  EXPECT_NE(others.find("rank      : 2 (local_rank: 2)"), std::string::npos) << r.err;
  EXPECT_NE(others.find("exitcode  : 12"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("<NO_OTHER_FAILURES>"), std::string::npos) << r.err;
}

TEST(Process, DryRunPrintsEveryWorkerAndStartsNothing) {
  std::string dir = fresh_dir("dry_run");
  RunResult r = run_ctrun({"--dry-run", "--nproc-per-node=2", "--max-restarts=2", "--no-python",
                           worker_script("wait_term.sh"), "--lr", "0.1"},
                          {{"OUT_DIR", dir}}, std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("nothing is started"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("max_restarts=2"), std::string::npos) << r.out;
  for (const char* want :
       {"local_rank 0:", "local_rank 1:", "    RANK=1\n", "    WORLD_SIZE=2\n", "    LOCAL_RANK=0\n"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  }
  EXPECT_NE(r.out.find("command: " + worker_script("wait_term.sh") + " --lr 0.1"), std::string::npos) << r.out;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(std::ifstream(dir + "/pid_0")) << "--dry-run started a worker";
}

// One node without --standalone: the store is on torchrun's MASTER_PORT 29500, where a script that sets
// MASTER_PORT=29500 itself finds it. Run in a network namespace of its own (`unshare -n`) so that port 29500 cannot
// collide with anything else on this machine.
TEST(Process, SingleNodeStoreOnMasterPort29500) {
  std::string dir = fresh_dir("port29500");
  if (std::system("timeout 20 unshare -n true 2>/dev/null") != 0) {
    GTEST_SKIP() << "cannot create a network namespace here (unshare -n needs CAP_SYS_ADMIN)";
  }
  std::string cmd = "OUT_DIR=" + dir +
                    " timeout 60 unshare -n sh -c 'ip link set lo up 2>/dev/null || ifconfig lo up; exec " +
                    ctrun_binary() + " --nproc-per-node=2 --no-python " + worker_script("master_port_29500.sh") +
                    "' > " + dir + "/out 2> " + dir + "/err";
  int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status)) << read_file(dir + "/err");
  EXPECT_EQ(WEXITSTATUS(status), 0) << read_file(dir + "/err");
  for (int i = 0; i < 2; ++i)
    EXPECT_EQ(read_file(dir + "/got_" + std::to_string(i)), "connected\n") << read_file(dir + "/err");
}

// torchrun's static backend, one node: --rdzv-endpoint names the store (host as given), not --master-addr/port; the
// workers get it and the store listens there. --dry-run says the same.
TEST(Process, SingleNodeStaticStoreAtTheRdzvEndpoint) {
  std::string dir = fresh_dir("static_endpoint");
  ctrun::test::PortReservation port;  // the agent binds it (SO_REUSEADDR); nothing else can
  const std::string p = std::to_string(port.port());
  const std::vector<std::string> args = {"--nnodes=1",    "--nproc_per_node=2",
                                         "--rdzv_id=101", "--rdzv_endpoint=localhost:" + p,
                                         "--no-python",   worker_script("endpoint_env.sh")};
  RunResult r = run_ctrun(args, {{"OUT_DIR", dir}}, std::chrono::seconds(30));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int i = 0; i < 2; ++i)
    EXPECT_EQ(read_file(dir + "/got_" + std::to_string(i)), "localhost " + p + " connected\n") << r.err;
  auto dry = args;
  dry.insert(dry.begin(), "--dry-run");
  RunResult d = run_ctrun(dry, {{"OUT_DIR", dir}}, std::chrono::seconds(30));
  EXPECT_NE(d.out.find("MASTER_ADDR=localhost"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("MASTER_PORT=" + p), std::string::npos) << d.out;
}

// Static node rank 0 serves the store on MASTER_PORT itself; whatever else holds that port (a plain socket, a
// foreign ctstore) is an error that says what to do: never a store to join.
TEST(Process, StaticRankZeroRefusesAForeignServerOnMasterPort) {
  std::string dir = fresh_dir("static_foreign");
  const int plain = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(plain, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(plain, 16), 0);
  ASSERT_EQ(::getsockname(plain, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ctrun::test::CtstoreChild foreign({"--host", "127.0.0.1", "--port", "0"});
  const auto foreign_port = ctrun::test::listening_port(foreign);
  ASSERT_NE(foreign_port, 0);
  for (const auto port : {ntohs(a.sin_port), foreign_port}) {
    for (const std::string addr : {"127.0.0.1", "localhost"}) {
      RunResult r =
          run_ctrun({"--nnodes=2", "--node-rank=0", "--master-addr=" + addr, "--master-port=" + std::to_string(port),
                     "--rdzv-conf=timeout=20", "--no-python", worker_script("env_dump.sh")},
                    {{"OUT_DIR", dir}}, std::chrono::seconds(30));
      EXPECT_EQ(r.exit_code, 1) << r.err;
      EXPECT_NE(r.err.find("If another process holds that port, stop it or choose a free one with --master-port"),
                std::string::npos)
          << r.err;
      EXPECT_FALSE(std::filesystem::exists(dir + "/env_0")) << "a worker started: the agent joined the foreign server";
    }
  }
  ::close(plain);
}

TEST(Process, PropagateExitCodeReturnsTheWorkersCode) {
  std::string dir = fresh_dir("propagate");
  RunResult r = run_ctrun({"--nproc-per-node=2", "--propagate-exit-code", "--no-python", worker_script("fail_one.sh")},
                          {{"OUT_DIR", dir}, {"FAIL_RANK", "1"}, {"FAIL_CODE", "5"}}, std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 5) << r.err;
}

TEST(Process, SegfaultIsNamedInTheSummary) {
  std::string dir = fresh_dir("segv");
  RunResult r = run_ctrun({"--nproc-per-node=2", "--no-python", worker_script("fail_one.sh")},
                          {{"OUT_DIR", dir}, {"FAIL_RANK", "1"}, {"FAIL_SIGNAL", "SEGV"}}, std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("exitcode  : -11"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(SIGSEGV)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Signal 11 (SIGSEGV) received by PID"), std::string::npos) << r.err;
}

TEST(Process, SigtermToCtrunReachesWorkersAndCtrunExits) {
  std::string dir = fresh_dir("sigterm");
  CtrunProcess p({"--nproc-per-node=3", "--no-python", worker_script("wait_term.sh")}, {{"OUT_DIR", dir}});
  ASSERT_TRUE(wait_for_files(dir, "pid_", 3, std::chrono::seconds(20)));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let the traps be installed
  ::kill(p.pid(), SIGTERM);
  RunResult r = p.wait(std::chrono::seconds(20));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(read_file(dir + "/got_" + std::to_string(i)), "TERM\n");
  EXPECT_NE(r.err.find("Received SIGTERM death signal, shutting down workers"), std::string::npos) << r.err;
}

TEST(Process, SignalsToHandleForwardsSigusr1) {
  std::string dir = fresh_dir("usr1");
  CtrunProcess p(
      {"--nproc-per-node=2", "--signals-to-handle", "SIGTERM,SIGUSR1", "--no-python", worker_script("wait_term.sh")},
      {{"OUT_DIR", dir}});
  ASSERT_TRUE(wait_for_files(dir, "pid_", 2, std::chrono::seconds(20)));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ::kill(p.pid(), SIGUSR1);
  RunResult r = p.wait(std::chrono::seconds(20));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  for (int i = 0; i < 2; ++i) EXPECT_EQ(read_file(dir + "/got_" + std::to_string(i)), "USR1\n");
}

TEST(Process, Kill9OfCtrunLeavesNoWorker) {
  std::string dir = fresh_dir("kill9");
  std::vector<pid_t> pids;
  {
    CtrunProcess p({"--nproc-per-node=3", "--no-python", worker_script("sleep_forever.sh")}, {{"OUT_DIR", dir}});
    ASSERT_TRUE(wait_for_files(dir, "pid_", 3, std::chrono::seconds(20)));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (int i = 0; i < 3; ++i) pids.push_back(read_pid(dir + "/pid_" + std::to_string(i)));
    for (pid_t pid : pids) ASSERT_TRUE(alive(pid));
    ::kill(p.pid(), SIGKILL);
    p.wait(std::chrono::seconds(5));
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  for (pid_t pid : pids) {
    EXPECT_FALSE(alive(pid)) << "worker " << pid << " outlived ctrun";
    ::kill(pid, SIGKILL);  // do not leak it if the assertion failed
  }
}

TEST(Process, WorkerIgnoringSigtermIsKilledAfterShutdownTimeout) {
  std::string dir = fresh_dir("ignore");
  auto start = std::chrono::steady_clock::now();
  RunResult r =
      run_ctrun({"--nproc-per-node=2", "--shutdown-timeout", "1", "--no-python", worker_script("ignore_term.sh")},
                {{"OUT_DIR", dir}}, std::chrono::seconds(30));
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_GE(elapsed, 1.0);
  EXPECT_LT(elapsed, 10.0);  // far below the 60 s the worker would sleep
  EXPECT_FALSE(alive(read_pid(dir + "/pid_1")));
  EXPECT_NE(r.err.find("sending SIGKILL"), std::string::npos) << r.err;
}

TEST(Process, UsageErrorsExit2) {
  RunResult bad = run_ctrun({"--definitely-not-a-flag", "x.py"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("usage: ctrun"), std::string::npos);
  RunResult multi = run_ctrun({"--nnodes", "2", "--node-rank", "2", "x.py"});
  EXPECT_EQ(multi.exit_code, 2);
  EXPECT_NE(multi.err.find("--node-rank"), std::string::npos) << multi.err;
  RunResult help = run_ctrun({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--nproc-per-node"), std::string::npos);
  RunResult missing = run_ctrun({"--no-python", "/nonexistent/program"}, {}, std::chrono::seconds(20));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("/nonexistent/program"), std::string::npos) << missing.err;
}

TEST(Process, RestartsWithIncreasingRestartCount) {
  std::string dir = fresh_dir("restart");
  RunResult r = run_ctrun({"--nproc-per-node=2", "--max-restarts", "2", "--log-dir", dir, "-r", "1", "--no-python",
                           worker_script("restart_once.sh")},
                          {{"SUCCEED_AT", "2"}}, std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // torchrun's count: the attempts left before each restart uses one.
  EXPECT_NE(r.err.find("[default] Worker group FAILED. 2/2 attempts left"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("1/2 attempts left"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("0/2 attempts left"), std::string::npos) << r.err;
  // The failed rank is named at error level (shown by default) before each restart.
  EXPECT_NE(r.err.find("[error] failed (exitcode: "), std::string::npos) << r.err;
}

TEST(Process, RestartBudgetExhaustedGivesSummaryAndExit1) {
  RunResult r =
      run_ctrun({"--nproc-per-node=2", "--max-restarts", "1", "--no-python", worker_script("restart_once.sh")},
                {{"SUCCEED_AT", "5"}}, std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("exitcode  : 4"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("attempt 1 rank 0"), std::string::npos) << r.out;
  RunResult p = run_ctrun({"--nproc-per-node=2", "--max-restarts", "1", "--propagate-exit-code", "--no-python",
                           worker_script("restart_once.sh")},
                          {{"SUCCEED_AT", "5"}}, std::chrono::seconds(30));
  EXPECT_EQ(p.exit_code, 4) << p.err;
}

}  // namespace
}  // namespace ctrun::agent::test

namespace ctrun::agent::test {
namespace {

// A worker that died of SIGPIPE: the failure report says it died on a write error (EPIPE).
TEST(Process, WriteErrorIsNamed) {
  RunResult r = run_ctrun({"--standalone", "--nproc-per-node=1", "--no-python", worker_script("sigpipe.sh")}, {},
                          std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("Signal 13 (SIGPIPE)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("died on a write error: SIGPIPE"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ctrun::agent::test
