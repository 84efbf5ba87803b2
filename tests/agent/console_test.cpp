// --tee with a console nobody reads: the agent's loop never blocks on it. The workers' output reaches the log files
// in full, the console gets what fits in the bounded queue, ctrun says how many lines it dropped, and SIGTERM is
// handled at once.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include "run_ctrun.hpp"

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
    std::string bin = ctrun_binary(), ld = "--log-dir=" + logs, w = workers_dir() + "/flood.sh";
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

}  // namespace
}  // namespace ctrun::agent::test
