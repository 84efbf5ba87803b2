// The store with the job's secret (ServerOptions::secret, TcpStoreOptions::secret; docs/security.md): an agent that
// holds it is served, anything else is closed at its first bytes with nothing answered; an agent with another
// secret, or none, fails at once (not after its connect timeout) with the cause named; a store without a secret
// that an agent with one reaches says so on both sides.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>

#include "common/auth/secret.hpp"
#include "store/server.hpp"
#include "store/store.hpp"
#include "store/tcp_store.hpp"
#include "tests/store/raw_socket.hpp"

namespace ctrun::store {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::shared_ptr<const auth::Secret> secret(const char* text) { return std::make_shared<const auth::Secret>(text, "test"); }

struct Served {
  explicit Served(std::shared_ptr<const auth::Secret> s) {
    ServerOptions o;
    o.host = "127.0.0.1";
    o.secret = std::move(s);
    server = std::make_unique<Server>(o);
    server->start();
  }
  TcpStoreOptions client(std::shared_ptr<const auth::Secret> s) const {
    TcpStoreOptions o;
    o.host = "127.0.0.1";
    o.port = server->port();
    o.connect_timeout = 30s;
    o.timeout = 5s;
    o.secret = std::move(s);
    return o;
  }
  std::uint64_t refused_now(const std::string& reason) {
    for (const auto& [name, n] : server->stats().refused)
      if (name == reason) return n;
    return 0;
  }
  // The server counts a refusal on its loop, after the close that the client may already have seen: the count once
  // it reaches `at_least` (at most 5 s), so that a loaded machine's late count is not a wrong one.
  std::uint64_t refused(const std::string& reason, std::uint64_t at_least = 1) {
    const auto deadline = Clock::now() + 5s;
    while (refused_now(reason) < at_least && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
    return refused_now(reason);
  }
  std::unique_ptr<Server> server;
};

// A client that cannot be admitted fails within a second and with the cause, never after its 30 s connect timeout.
void expect_turned_away(const TcpStoreOptions& o, const std::string& cause) {
  const auto began = Clock::now();
  try {
    TcpStore store(o);
    ADD_FAILURE() << "admitted";
  } catch (const StoreAuthError& e) {
    EXPECT_NE(std::string(e.what()).find(cause), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - began, 5s);
}

TEST(StoreSecret, TheJobsAgentsAreServedAndEveryoneElseTurnedAway) {
  Served s(secret("the-job-secret-0123456789"));
  TcpStore agent(s.client(secret("the-job-secret-0123456789")));
  agent.set("round", "7");
  EXPECT_EQ(agent.get("round"), "7");
  agent.ping();

  expect_turned_away(s.client(secret("another-secret-0123456789")), "does not hold this job's secret");
  expect_turned_away(s.client(nullptr), "requires the job's secret and this agent has none");
  // torch >= 2.1's first bytes (VALIDATE, then a GET of the key): the 8-byte refusal, then the close; no value.
  test::RawSocket raw("127.0.0.1", s.server->port());
  raw.send_all(std::string("\x0d\xce\xf7\x85\x3c", 5));
  raw.send_all(std::string("\x05\x06\x00\x00\x00\x00\x00\x00\x00/round", 15));
  const std::string answer = raw.recv_exact(64, 5s);
  EXPECT_EQ(answer.size(), 8u);
  EXPECT_EQ(answer.substr(0, 4), "CTRA");
  EXPECT_EQ(answer.find('7'), std::string::npos);
  EXPECT_EQ(agent.get("round"), "7");
  EXPECT_EQ(agent.num_keys(), 1);  // nothing of the strangers' was kept
  EXPECT_GE(s.refused("unauthenticated", 3), 3u);
}

TEST(StoreSecret, AStoreWithoutOneSaysSoToAnAgentWithOne) {
  Served s(nullptr);
  expect_turned_away(s.client(secret("the-job-secret-0123456789")), "has no job secret");
  EXPECT_EQ(s.refused("bad_request"), 1u);
}

TEST(StoreSecret, ASilentClientIsCutAtTheDeadlineAndStopIsPrompt) {
  Served s(secret("the-job-secret-0123456789"));
  test::RawSocket silent("127.0.0.1", s.server->port());
  const auto began = Clock::now();
  EXPECT_EQ(silent.recv_exact(1, 15s), "");  // closed by the server after auth::kServerTimeout, nothing said
  EXPECT_GE(Clock::now() - began, 4s);
  EXPECT_EQ(s.refused("unauthenticated"), 1u);
  test::RawSocket another("127.0.0.1", s.server->port());
  const auto stopping = Clock::now();
  s.server->stop();  // a handshake in progress is cancelled, not waited for
  EXPECT_LT(Clock::now() - stopping, 2s);
  EXPECT_EQ(another.recv_exact(1, 5s), "");
}

}  // namespace
}  // namespace ctrun::store
