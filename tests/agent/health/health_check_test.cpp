// --health-check's runner (agent/health/health_check.hpp) with real /bin/sh commands on a real io_context: a pass,
// a failure with its output, a death by a signal, a timeout that kills the command's whole process group, and a
// cancel; the loop is never blocked (a timer ticks while a check runs).
#include "agent/health/health_check.hpp"

#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <optional>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

namespace ctrun::agent {
namespace {

// Runs `command` to its end on a fresh loop (bounded: the loop stops after `bound` in any case).
std::optional<HealthResult> check(const std::string& command, double timeout_s, int* ticks = nullptr,
                                  std::chrono::seconds bound = std::chrono::seconds(30)) {
  boost::asio::io_context io;
  HealthCheck hc(io, command, timeout_s);
  std::optional<HealthResult> got;
  hc.run([&](const HealthResult& r) {
    got = r;
    io.stop();
  });
  boost::asio::steady_timer guard(io), tick(io);
  guard.expires_after(bound);
  guard.async_wait([&](const boost::system::error_code& ec) {
    if (!ec) io.stop();
  });
  std::function<void()> again = [&] {
    tick.expires_after(std::chrono::milliseconds(50));
    tick.async_wait([&](const boost::system::error_code& ec) {
      if (ec) return;
      if (ticks) ++*ticks;
      again();
    });
  };
  again();
  io.run();
  return got;
}

TEST(HealthCheck, ExitZeroPasses) {
  auto r = check("echo fine", 10);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->passed);
  EXPECT_EQ(r->why, "exit 0");
  EXPECT_EQ(r->output, "fine\n");
}

TEST(HealthCheck, NonZeroExitFailsWithItsOutput) {
  auto r = check("echo out; echo disk full >&2; exit 3", 10);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->passed);
  EXPECT_EQ(r->why, "exit 3");
  EXPECT_NE(r->output.find("out\n"), std::string::npos);
  EXPECT_NE(r->output.find("disk full\n"), std::string::npos);
}

TEST(HealthCheck, DeathBySignalFails) {
  auto r = check("kill -SEGV $$", 10);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->passed);
  EXPECT_EQ(r->why, "killed by SIGSEGV");
}

TEST(HealthCheck, OnlyTheLastOutputIsKept) {
  auto r = check("head -c 100000 /dev/zero | tr '\\0' x; echo END", 10);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->passed);
  EXPECT_EQ(r->output.size(), HealthCheck::kOutputKept);
  EXPECT_EQ(r->output.substr(r->output.size() - 4), "END\n");
}

TEST(HealthCheck, TimeoutKillsTheWholeGroupWithoutBlockingTheLoop) {
  int ticks = 0;
  // A child in the background holds the output pipe too: the group's SIGKILL must end it as well.
  auto r = check("sleep 30 & sleep 30; echo never", 0.5, &ticks);
  ASSERT_TRUE(r) << "the check did not end within the bound";
  EXPECT_FALSE(r->passed);
  EXPECT_NE(r->why.find("timed out after 0.5 s"), std::string::npos) << r->why;
  EXPECT_LT(r->seconds, 5.0);
  EXPECT_GE(ticks, 5) << "the loop was blocked while the check ran";
}

TEST(HealthCheck, CancelKillsItAndNeverCallsBack) {
  boost::asio::io_context io;
  bool called = false;
  {
    HealthCheck hc(io, "sleep 30", 60);
    hc.run([&](const HealthResult&) { called = true; });
    const pid_t pid = hc.pid();
    ASSERT_GT(pid, 0);
    hc.cancel();
    EXPECT_EQ(::kill(pid, 0), -1) << "the command outlived cancel()";
    EXPECT_EQ(hc.pid(), -1);
  }
  io.run_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(called);
}

}  // namespace
}  // namespace ctrun::agent
