// Liveness for schedulers (agent/metrics/liveness.hpp): the rule, torch's reading of TORCHELASTIC_HEALTH_CHECK_PORT,
// the loop's beat, and under the real ctrun both doors (the health check port and /healthz on --metrics-port).
#include "agent/metrics/liveness.hpp"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>

#include "../run_ctrun.hpp"
#include "common/http/client.hpp"
#include "tests/support/port_reservation.hpp"

namespace ctrun::agent::test {
namespace {

EnvLookup env_with(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(AgentLiveness, AliveWithinTheTimeoutDeadPastIt) {
  EXPECT_EQ(health_answer(0.4).status, 200);
  EXPECT_EQ(health_answer(60).status, 200);
  const HealthAnswer dead = health_answer(61);
  EXPECT_EQ(dead.status, 503);
  EXPECT_NE(dead.body.find("has not turned for 61.0 s"), std::string::npos) << dead.body;
  EXPECT_EQ(health_answer(3, 2).status, 503);
}

TEST(AgentLiveness, TheHealthCheckPortIsReadAsTorchReadsIt) {
  EXPECT_FALSE(health_check_port(env_with({})));
  EXPECT_EQ(health_check_port(env_with({{kHealthCheckPortVariable, "8080"}})), 8080);
  EXPECT_EQ(health_check_port(env_with({{kHealthCheckPortVariable, " 0 "}})), 0);
  for (const char* bad : {"", "x", "80x", "-1", "70000"}) {
    EXPECT_THROW(health_check_port(env_with({{kHealthCheckPortVariable, bad}})), std::invalid_argument) << bad;
  }
}

TEST(AgentLiveness, TheBeatAgesWhileTheLoopDoesNotTurn) {
  boost::asio::io_context io;
  LoopBeat beat(io);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_GE(beat.age_s(), 0.25) << "nobody runs the loop: no beat";
  io.run_for(std::chrono::milliseconds(1200));  // the timer's next beat comes within a second
  EXPECT_LT(beat.age_s(), 1.1);
}

// Under ctrun: TORCHELASTIC_HEALTH_CHECK_PORT and /healthz on --metrics-port answer 200 while the job runs. The ports
// are held by reservations (never picked and released): the servers bind them with SO_REUSEADDR.
TEST(AgentLiveness, BothDoorsAnswerUnderCtrun) {
  ctrun::test::PortReservation health, metrics;
  const std::string dir = fresh_dir("ctrun_liveness");
  CtrunProcess p({"--standalone", "--nproc-per-node", "1", "--no-python", "--metrics-port",
                  std::to_string(metrics.port()), "--log-dir", dir + "/logs", "sleep", "20"},
                 {{kHealthCheckPortVariable, std::to_string(health.port())}});
  std::string answer;
  ASSERT_TRUE(ctrun::test::eventually(
      [&] {
        try {
          answer = http::get("127.0.0.1", health.port(), "/healthz");
          return true;
        } catch (const std::exception&) {
          return false;
        }
      },
      std::chrono::seconds(30), std::chrono::milliseconds(100)));
  EXPECT_NE(answer.find("ok: the agent's loop turned"), std::string::npos) << answer;
  EXPECT_NE(http::get("127.0.0.1", health.port(), "/").find("ok:"), std::string::npos);
  EXPECT_NE(http::get("127.0.0.1", metrics.port(), "/healthz").find("ok:"), std::string::npos);
  EXPECT_NE(http::get("127.0.0.1", metrics.port(), "/metrics").find("ctrun_"), std::string::npos);
  ::kill(p.pid(), SIGTERM);
  p.wait(std::chrono::seconds(30));
}

TEST(AgentLiveness, ABadPortIsSaidAndNothingStarts) {
  RunResult r = run_ctrun({"--standalone", "--nproc-per-node", "1", "--no-python", "true"},
                          {{kHealthCheckPortVariable, "eighty"}}, std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("Invalid healthcheck port value: 'eighty', expecting integer."), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ctrun::agent::test
