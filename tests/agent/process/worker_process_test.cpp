// start_worker (agent/process/worker_process.hpp): the child shares ctrun's memory until it execs, so what it
// inherits must be set in the child alone: an empty signal mask, default handlers, SIGPIPE not ignored. Exec's
// failure comes back as an error with its errno, and spawning from several threads at once holds.
#include "agent/process/worker_process.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/files.hpp"

namespace ctrun::agent {
namespace {

int wait_exit_code(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The value of a "Sig...:" line of /proc/<pid>/status, e.g. "0000000000000000".
std::string status_field(const std::string& status, const std::string& field) {
  const auto at = status.find(field + ":");
  if (at == std::string::npos) return "missing";
  const auto begin = status.find_first_not_of(" \t", at + field.size() + 1);
  return status.substr(begin, status.find('\n', begin) - begin);
}

TEST(WorkerProcess, AFailedExecIsAnErrorNamingItsCause) {
  const std::string file = test::fresh_dir("worker_process_exec") + "/data.txt";
  { std::ofstream(file) << "not a program\n"; }  // no x bits: exec fails with EACCES, even for root
  SpawnRequest request;
  request.argv = {file};
  try {
    spawn_worker(request);
    FAIL() << "exec of a file without x bits succeeded";
  } catch (const SpawnError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot execute '" + file + "': Permission denied"), std::string::npos)
        << e.what();
  }
}

TEST(WorkerProcess, TheWorkerGetsAnEmptyMaskAndDefaultSignalsWhateverCtrunHas) {
  // What ctrun's own thread has when it spawns: a handler, a blocked signal, SIGPIPE ignored.
  struct sigaction handler {};
  handler.sa_handler = [](int) {};
  struct sigaction old_usr1 {};
  ASSERT_EQ(::sigaction(SIGUSR1, &handler, &old_usr1), 0);
  auto old_pipe = ::signal(SIGPIPE, SIG_IGN);
  sigset_t blocked, old_mask;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGUSR2);
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &blocked, &old_mask), 0);

  const std::string out = test::fresh_dir("worker_process_signals") + "/status";
  SpawnRequest request;
  request.argv = {"/bin/sh", "-c", "exec cat /proc/self/status > " + out};
  request.env = {"PATH=/usr/bin:/bin"};
  const pid_t pid = spawn_worker(request);
  const int code = wait_exit_code(pid);

  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  ::signal(SIGPIPE, old_pipe);
  ::sigaction(SIGUSR1, &old_usr1, nullptr);

  ASSERT_EQ(code, 0);
  const std::string status = test::read_file(out);
  EXPECT_EQ(status_field(status, "SigBlk"), "0000000000000000") << status;
  // Signals ignored when the test started (a shell's nohup, glibc's 32 and 33 under some launchers) stay ignored
  // across exec as with fork; SIGPIPE, which ctrun ignores, must not.
  const auto ignored = std::stoull(status_field(status, "SigIgn"), nullptr, 16);
  EXPECT_EQ(ignored & (1ull << (SIGPIPE - 1)), 0u) << status;
  EXPECT_EQ(status_field(status, "SigCgt"), "0000000000000000") << status;
}

TEST(WorkerProcess, ManyThreadsSpawnAtOnce) {
  constexpr int kThreads = 4, kEach = 25;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        SpawnRequest request;
        request.argv = {"/bin/true"};
        if (wait_exit_code(spawn_worker(request)) == 0) ++ok;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kThreads * kEach);
}

}  // namespace
}  // namespace ctrun::agent
