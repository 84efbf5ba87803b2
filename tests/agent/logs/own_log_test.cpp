// ctrun's own log lines go through a bounded queue (agent/logs/log_sink.hpp): a stderr nobody reads never blocks the
// agent. A worker that fails at once, restarted again and again, makes ctrun log several lines per restart; with
// stderr an unread pipe (64 KiB) the old synchronous logging blocked the loop in write(2) within a few hundred
// restarts, and SIGTERM was never handled.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include "tests/agent/run_ctrun.hpp"

namespace ctrun::agent::test {
namespace {

using Clock = std::chrono::steady_clock;

TEST(OwnLog, UnreadStderrNeverBlocksTheAgent) {
  std::string dir = fresh_dir("own_log");
  const std::string events = dir + "/e.jsonl";
  int err[2];
  ASSERT_EQ(::pipe(err), 0);
  std::vector<std::string> args{ctrun_binary(),          "--nproc-per-node=1", "--max-restarts=1000000",
                                "--event-log=" + events, "--no-python",        "/bin/false"};
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(err[1], 2);
    int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::close(err[0]);
    ::setenv("LOGLEVEL", "INFO", 1);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(err[1]);
  // Enough restarts that their log lines (> 150 bytes each, several per restart) overfill the 64 KiB pipe.
  auto end = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < end && count_of(read_file(events), "\"restart\"") < 600)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto restarts_before = count_of(read_file(events), "\"restart\"");
  EXPECT_GE(restarts_before, 600u) << "the agent stopped restarting: blocked on its stderr?";
  auto t0 = Clock::now();
  ::kill(pid, SIGTERM);
  int status = 0;
  pid_t r = 0;
  while ((r = ::waitpid(pid, &status, WNOHANG)) == 0 && Clock::now() - t0 < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("[ own log ] %zu restarts with an unread stderr; SIGTERM to exit %.3f s\n", restarts_before, s);
  if (r == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  EXPECT_EQ(r, pid) << "ctrun did not exit within 10 s of SIGTERM with an unread stderr";
  EXPECT_LT(s, 5.0);
  ::close(err[0]);
}

}  // namespace
}  // namespace ctrun::agent::test
