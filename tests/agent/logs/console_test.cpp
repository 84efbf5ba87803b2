// --tee with a console nobody reads: the agent's loop never blocks on it. The workers' output reaches the log files
// in full, the console gets what fits in the bounded queue, ctrun says how many lines it dropped, and SIGTERM is
// handled at once.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "tests/agent/run_ctrun.hpp"

namespace ctrun::agent::test {
namespace {

using Clock = std::chrono::steady_clock;

std::size_t count_lines(const std::string& path) {
  std::ifstream in(path);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

TEST(Console, UnreadConsoleNeverBlocksTheAgent) {
  std::string dir = fresh_dir("console_unread");
  std::string logs = dir + "/logs";
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(out[1], 1);
    int err = ::open((dir + "/stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(err, 2);
    ::close(out[0]);
    ::close(out[1]);
    ::setenv("OUT_DIR", dir.c_str(), 1);
    ::setenv("LINES", "200000", 1);  // 20 MB: far more than a pipe (64 KiB) and the console queue (8 MiB)
    std::string bin = ctrun_binary(), ld = "--log-dir=" + logs, w = worker_script("flood.sh");
    ::execl(bin.c_str(), bin.c_str(), "--nproc-per-node=1", "--tee=3", ld.c_str(), "--rdzv-id=c", "--no-python",
            w.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);  // the read end stays open and is never read: the console is stuck
  ASSERT_TRUE(wait_for_files(dir, "done_", 1, std::chrono::seconds(60)));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto t0 = Clock::now();
  ::kill(pid, SIGTERM);
  int status = 0;
  pid_t r = 0;
  while ((r = ::waitpid(pid, &status, WNOHANG)) == 0 && Clock::now() - t0 < std::chrono::seconds(30)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("[ signal-to-exit ] unread --tee console (SIGTERM)         %.3f s\n", s);
  if (r == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  ::close(out[0]);
  ASSERT_EQ(r, pid) << "ctrun did not exit on SIGTERM with an unread console";
  EXPECT_LT(s, 5.0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  std::string err = read_file(dir + "/stderr");
  EXPECT_NE(err.find("not shown on the console"), std::string::npos) << err;
  // The log file lost nothing.
  std::string run;
  for (const auto& e : std::filesystem::directory_iterator(logs)) {
    if (e.path().filename().string().rfind("c_", 0) == 0) run = e.path().string();
  }
  ASSERT_FALSE(run.empty());
  EXPECT_EQ(count_lines(run + "/attempt_0/0/stdout.log"), 200000u);
}

// Two nodes; node a's console is an unread pipe while its worker floods it. Node b's worker fails: both nodes must
// still restart into a new round and succeed (a's stuck console must not stop its loop from seeing the change).
TEST(Console, UnreadConsoleDoesNotStopAPeersRestart) {
  std::string dir = fresh_dir("console_peer");
  std::string endpoint = "127.0.0.1:0";  // node a hosts on a port of the kernel's choosing; b is given that one
  auto args = [&](const std::string& addr, const std::string& tag) {
    return std::vector<std::string>{"--nnodes=2",
                                    "--nproc-per-node=1",
                                    "--rdzv-backend=c10d",
                                    "--rdzv-endpoint=" + endpoint,
                                    "--rdzv-id=peer",
                                    "--local-addr=" + addr,
                                    "--max-restarts=1",
                                    "--monitor-interval=0.1",
                                    "--shutdown-timeout=5",
                                    "--tee=3",
                                    "--log-dir=" + dir + "/logs_" + tag,
                                    "--event-log=" + dir + "/" + tag + ".jsonl",
                                    "--no-python",
                                    worker_script("flood_or_fail.sh")};
  };
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const auto a_args = args("127.0.0.1", "a");
  pid_t a = ::fork();
  ASSERT_GE(a, 0);
  if (a == 0) {
    ::dup2(out[1], 1);
    int err = ::open((dir + "/a.err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(err, 2);
    ::close(out[0]);
    ::close(out[1]);
    ::setenv("OUT_DIR", dir.c_str(), 1);
    ::setenv("NODE_TAG", "a", 1);
    std::vector<std::string> argv_s = a_args;
    argv_s.insert(argv_s.begin(), ctrun_binary());
    std::vector<char*> argv;
    for (auto& w : argv_s) argv.push_back(w.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(out[1]);  // never read
  endpoint = served_rdzv_store(dir + "/a.jsonl", std::chrono::seconds(20));
  if (endpoint.empty()) ::kill(a, SIGKILL);
  ASSERT_NE(endpoint, "") << read_file(dir + "/a.err");
  CtrunProcess b(args("127.0.0.2", "b"), {{"OUT_DIR", dir}, {"NODE_TAG", "b"}});
  RunResult rb = b.wait(std::chrono::seconds(90));
  int status = 0;
  auto end = Clock::now() + std::chrono::seconds(30);
  pid_t r = 0;
  while ((r = ::waitpid(a, &status, WNOHANG)) == 0 && Clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (r == 0) {
    ::kill(a, SIGKILL);
    ::waitpid(a, &status, 0);
  }
  ::close(out[0]);
  std::string a_err = read_file(dir + "/a.err");
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  ASSERT_EQ(r, a) << "node a did not finish: " << a_err;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << a_err;
  std::string events_a = read_file(dir + "/a.jsonl");
  EXPECT_NE(events_a.find("membership_change"), std::string::npos) << events_a;
  EXPECT_NE(events_a.find("\"restart_count\":1"), std::string::npos) << events_a;  // a's workers ran attempt 1
}

}  // namespace
}  // namespace ctrun::agent::test
