// Python stack dumps: CPU time and caught signals from /proc, the dump file's reading, and a real Python process
// through ctrun's sitecustomize.
#include "agent/hang/stacks.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/worker_env.hpp"

namespace ctrun::agent::hang {
namespace {
namespace fs = std::filesystem;

TEST(HangStacks, ReadsCpuTimeAndCaughtSignals) {
  auto cpu = cpu_seconds(::getpid());
  ASSERT_TRUE(cpu);
  EXPECT_GE(*cpu, 0);
  EXPECT_FALSE(cpu_seconds(999999999));
  EXPECT_FALSE(catches_signal(::getpid(), stack_signal()));
  struct sigaction sa {};
  sa.sa_handler = [](int) {};
  struct sigaction old {};
  ::sigaction(stack_signal(), &sa, &old);
  EXPECT_TRUE(catches_signal(::getpid(), stack_signal()));
  ::sigaction(stack_signal(), &old, nullptr);
}

TEST(HangStacks, LastDumpLeavesOutCtrunsOwnThread) {
  const std::string path = ::testing::TempDir() + "/stack_dump_test_" + std::to_string(::getpid()) + ".txt";
  std::ofstream(path) << "# ctrun: stack dumps of pid 42: signal 36, thread 43, ident 0x7f00000000aa\n"
                      << "old dump\n";
  const auto offset = file_size(path);
  std::ofstream(path, std::ios::app) << "Current thread 0x00007f00000000aa (most recent call first):\n"
                                     << "  File \"sitecustomize.py\", line 40 in idle\n\n"
                                     << "Thread 0x00007f0000000001 (most recent call first):\n"
                                     << "  File \"train.py\", line 7 in <module>\n";
  auto head = read_head(path, 42);
  ASSERT_TRUE(head);
  EXPECT_EQ(head->thread, 43);
  EXPECT_EQ(head->ident, 0x7f00000000aaull);
  const std::string dump = last_dump(path, offset, head->ident);
  EXPECT_EQ(dump, "Thread 0x00007f0000000001 (most recent call first):\n  File \"train.py\", line 7 in <module>\n");
  std::remove(path.c_str());
}

// A real Python worker through ctrun's sitecustomize: the dump shows the line it sleeps on, and the signal
// neither kills it nor interrupts it.
TEST(HangStacks, DumpsARealPythonWorkerWithNoCodeInIt) {
  const std::string python = CTRUN_TORCH_PYTHON;
  if (python.empty() || !fs::exists(python)) GTEST_SKIP() << "no python3";
  const std::string path = ::testing::TempDir() + "/stack_real_" + std::to_string(::getpid()) + ".txt";
  std::remove(path.c_str());
  const std::string sitedir = std::string(CTRUN_SOURCE_DIR) + "/agent/hang/python";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("PYTHONPATH", sitedir.c_str(), 1);
    ::setenv(worker_env::kStackFile, path.c_str(), 1);
    ::setenv(worker_env::kStackSignal, std::to_string(stack_signal()).c_str(), 1);
    ::execl(python.c_str(), python.c_str(), "-c",
            "import time\nfor i in range(100):\n    time.sleep(0.05)  # the sleeping line\nprint('finished')", nullptr);
    ::_exit(127);
  }
  std::optional<StackFileHead> head;
  for (int i = 0; i < 100 && !(head = read_head(path, pid)); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(head) << "the worker never registered its handler";
  const auto offset = file_size(path);
  ASSERT_EQ(request_dump(pid, path), DumpRequest::kSent);
  std::string dump;
  for (int i = 0; i < 50 && (dump = last_dump(path, offset, head->ident)).empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(dump.find("line 3 in <module>"), std::string::npos) << dump;
  EXPECT_EQ(dump.find("in idle"), std::string::npos) << dump;
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  // A process without the handler is never sent the signal.
  EXPECT_EQ(request_dump(::getpid(), path), DumpRequest::kNoHandler);
  std::remove(path.c_str());
}

// Two builds' python dirs on PYTHONPATH (build/ and build-torch2/ both hold a copy of ctrun's sitecustomize): the
// second copy is not the sitecustomize ctrun's shadows (running it recursed without end); the real one runs once.
TEST(HangStacks, ASecondCopyOfCtrunsSitecustomizeIsNotTheShadowedOne) {
  const std::string python = CTRUN_TORCH_PYTHON;
  if (python.empty() || !fs::exists(python)) GTEST_SKIP() << "no python3";
  const fs::path dir = fs::path(::testing::TempDir()) / ("sitecustomize_copies_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "copy");
  fs::create_directories(dir / "user");
  fs::copy_file(std::string(CTRUN_SOURCE_DIR) + "/agent/hang/python/sitecustomize.py", dir / "copy/sitecustomize.py");
  std::ofstream(dir / "user/sitecustomize.py") << "open('" << (dir / "ran").string() << "', 'a').write('x')\n";
  const std::string cmd = "PYTHONPATH=" + std::string(CTRUN_SOURCE_DIR) +
                          "/agent/hang/python:" + (dir / "copy").string() + ":" + (dir / "user").string() + " " +
                          python + " -c 'print(1)' > " + (dir / "out").string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream out(dir / "out"), ran(dir / "ran");
  const std::string printed((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
  const std::string marks((std::istreambuf_iterator<char>(ran)), std::istreambuf_iterator<char>());
  EXPECT_EQ(printed, "1\n") << "nothing but the program's output";
  EXPECT_EQ(marks, "x") << "the user's sitecustomize runs once";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ctrun::agent::hang
