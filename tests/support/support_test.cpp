// The shared helpers keep their promises: every wait ends by its deadline (false) or when its condition holds (true),
// a reserved port is taken by no other bind, start_ctstore() reports the port ctstore listens on, and a child process
// goes with its process group.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "tests/support/child_process.hpp"
#include "tests/support/ctstore.hpp"
#include "tests/support/files.hpp"
#include "tests/support/port_reservation.hpp"
#include "tests/support/proc.hpp"
#include "tests/support/wait.hpp"

namespace ctrun::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

TEST(Wait, EventuallyIsFalseAtItsDeadlineAndTrueOnceThePredicateHolds) {
  auto t0 = Clock::now();
  EXPECT_FALSE(eventually([] { return false; }, 200ms));
  EXPECT_GE(seconds_since(t0), 0.2);
  EXPECT_LT(seconds_since(t0), 5.0);
  int calls = 0;
  EXPECT_TRUE(eventually([&] { return ++calls == 3; }, 5s, 1ms));
  EXPECT_EQ(calls, 3);
}

TEST(Wait, TextAndFilesThatAnotherThreadWrites) {
  const std::string dir = fresh_dir("support_wait");
  EXPECT_FALSE(wait_for_text(dir + "/log", "ready", 100ms));  // no file yet: not an error, just not there
  std::thread writer([&] {
    std::this_thread::sleep_for(100ms);
    std::ofstream(dir + "/log") << "starting\nready\n";
    std::ofstream(dir + "/pid_0") << 1;
    std::ofstream(dir + "/pid_1") << 2;
  });
  EXPECT_TRUE(wait_for_text(dir + "/log", "ready", 10s));
  EXPECT_TRUE(wait_for_files(dir, "pid_", 2, 10s));
  writer.join();
  EXPECT_FALSE(wait_for_files(dir, "pid_", 3, 100ms));
  EXPECT_EQ(read_file(dir + "/log"), "starting\nready\n");
  EXPECT_EQ(count_of(read_file(dir + "/log"), "r"), 2u);
  std::filesystem::remove_all(dir);
}

TEST(PortReservation, NoOtherBindTakesTheReservedPort) {
  PortReservation reserved("127.0.0.1");
  ASSERT_GT(reserved.port(), 0);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(reserved.port());
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_NE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ::close(fd);
}

TEST(ChildProcess, ALineWithinTheDeadlineAndTheGroupKilledWithIt) {
  pid_t grandchild = -1;
  {
    // The grandchild holds no pipe of the test's: only the kill of the whole group ends it.
    ChildProcess p({"/bin/sh", "-c", "sleep 60 >/dev/null 2>&1 & echo \"child $!\"; exec sleep 60"});
    auto pid = p.wait_for_line(std::regex(R"(^child (\d+)$)"), 10s);
    ASSERT_TRUE(pid) << p.output();
    grandchild = std::stoi(*pid);
    EXPECT_TRUE(alive(grandchild));
    EXPECT_FALSE(p.wait_for_line(std::regex("never"), 100ms));
    EXPECT_FALSE(p.wait_exit(100ms));
  }
  EXPECT_TRUE(eventually([&] { return !alive(grandchild); }, 10s)) << "the child's group outlived it";
}

TEST(Ctstore, StartCtstoreReportsThePortItServes) {
  auto served = start_ctstore();
  ASSERT_GT(served.port, 0);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(served.port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << served.process->output();
  ::close(fd);
  EXPECT_TRUE(alive(served.process->pid()));
}

}  // namespace
}  // namespace ctrun::test
