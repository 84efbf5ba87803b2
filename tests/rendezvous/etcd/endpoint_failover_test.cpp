// The failover between etcd members on a fake clock, without sockets: the attempts are lambdas that answer, fail
// transiently (advancing the clock as a timeout would) or fail for good.
#include "rendezvous/etcd/endpoint_failover.hpp"

#include <gtest/gtest.h>

#include <fmt/format.h>

using namespace ctrun;
using namespace ctrun::rdzv;
using namespace ctrun::rdzv::etcd;
using namespace std::chrono_literals;

namespace {

class EndpointFailoverTest : public ::testing::Test {
 protected:
  EndpointFailover make(std::size_t members, std::size_t first = 0) {
    Options o;
    for (std::size_t i = 0; i < members; ++i) o.endpoints.push_back(Endpoint{fmt::format("m{}", i), 2379});
    o.request_timeout = 10s;
    o.attempt_timeout = 3s;
    return EndpointFailover(o, first, clock, [this](std::chrono::steady_clock::duration d) {
      sleeps.push_back(std::chrono::duration_cast<std::chrono::milliseconds>(d));
      clock.advance(d);
    });
  }

  FakeClock clock;
  std::vector<std::chrono::milliseconds> sleeps;
  std::vector<std::string> tried;  // the hosts the attempts saw, in order
};

}  // namespace

TEST_F(EndpointFailoverTest, AnswerFromTheCurrentMember) {
  auto f = make(3, 1);
  const auto start = clock.now();
  auto answer = f.run("put", [&](EndpointFailover::Tries& t) {
    tried.push_back(t.endpoint().host);
    EXPECT_EQ(t.deadline(), start + 3s);  // attempt_timeout
    return 42;
  });
  EXPECT_EQ(answer, 42);
  EXPECT_EQ(tried, std::vector<std::string>{"m1"});
  EXPECT_EQ(f.current(), 1u);
  EXPECT_TRUE(sleeps.empty());
  EXPECT_EQ(f.endpoints(), "m0:2379,m1:2379,m2:2379");
}

TEST_F(EndpointFailoverTest, MovesToTheNextMemberAndStaysThere) {
  auto f = make(3, 2);
  auto answer = f.run("put", [&](EndpointFailover::Tries& t) {
    tried.push_back(t.endpoint().host);
    if (t.endpoint().host == "m2") throw TransientError("connection refused");
    return std::string("ok");
  });
  EXPECT_EQ(answer, "ok");
  EXPECT_EQ(tried, (std::vector<std::string>{"m2", "m0"}));  // wraps around
  EXPECT_EQ(f.current(), 0u);
  EXPECT_TRUE(sleeps.empty());  // no full pass failed
}

TEST_F(EndpointFailoverTest, BacksOffAfterEachFullPassThenGivesUpNamingEveryMember) {
  auto f = make(2);
  const auto start = clock.now();
  try {
    f.run("range", [&](EndpointFailover::Tries& t) -> int {
      tried.push_back(t.endpoint().host);
      throw TransientError("no leader");
    });
    ADD_FAILURE() << "no error";
  } catch (const store::StoreError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("etcd range failed"), std::string::npos) << what;
    EXPECT_NE(what.find("m0:2379,m1:2379"), std::string::npos) << what;
    EXPECT_NE(what.find("no leader"), std::string::npos) << what;
    EXPECT_NE(what.find("Check that the etcd cluster is up"), std::string::npos) << what;
  }
  // 50 ms doubling to 1 s, the last one cut to what was left of request_timeout (10 s).
  std::vector<std::chrono::milliseconds> expected{50ms, 100ms, 200ms, 400ms, 800ms};
  expected.insert(expected.end(), 8, 1000ms);
  expected.push_back(450ms);
  EXPECT_EQ(sleeps, expected);
  EXPECT_EQ(clock.now() - start, 10s);
  EXPECT_EQ(tried.size(), 2 * expected.size() + 1);  // and one last try at the give-up time
  EXPECT_EQ(tried[0], "m0");
  EXPECT_EQ(tried[1], "m1");
}

TEST_F(EndpointFailoverTest, TryDeadlinesNeverPassTheGiveUpTime) {
  auto f = make(3);
  const auto start = clock.now();
  std::vector<TimePoint> deadlines;
  EXPECT_THROW(f.run("txn",
                     [&](EndpointFailover::Tries& t) -> int {
                       deadlines.push_back(t.deadline());
                       clock.advance(t.deadline() - clock.now());  // no answer until the try's deadline
                       throw TransientError("timed out");
                     }),
               store::StoreError);
  EXPECT_EQ(deadlines, (std::vector<TimePoint>{start + 3s, start + 6s, start + 9s, start + 10s}));
  EXPECT_EQ(sleeps, std::vector<std::chrono::milliseconds>{50ms});  // after the first full pass
}

TEST_F(EndpointFailoverTest, RequestErrorsPassThroughAtOnce) {
  auto f = make(3);
  EXPECT_THROW(f.run("put",
                     [&](EndpointFailover::Tries& t) -> int {
                       tried.push_back(t.endpoint().host);
                       throw EtcdError(GrpcStatus::kNotFound, "requested lease not found");
                     }),
               EtcdError);
  EXPECT_EQ(tried.size(), 1u);
  EXPECT_EQ(f.current(), 0u);  // the member is fine
}

TEST_F(EndpointFailoverTest, RunUntilStopsQuietlyAtItsDeadline) {
  auto f = make(2);
  const auto until = clock.now() + 2s;
  auto seen = f.run_until("watch of 'k'", until, [&](EndpointFailover::Tries& t) -> bool {
    EXPECT_LE(t.deadline(), until);
    clock.advance(t.deadline() - clock.now());
    throw TransientError("timed out");
  });
  EXPECT_FALSE(seen.has_value());
  EXPECT_EQ(clock.now(), until);
}

// A watch streams for longer than request_timeout, then loses its member: that failure starts a new stretch.
TEST_F(EndpointFailoverTest, AnAnswerStartsANewStretchOfFailures) {
  auto f = make(2);
  int calls = 0;
  auto seen = f.run_until("watch of 'k'", TimePoint::max(), [&](EndpointFailover::Tries& t) {
    ++calls;
    tried.push_back(t.endpoint().host);
    if (calls == 1) {
      t.answered();
      clock.advance(60s);
      throw TransientError("m0 ended the watch");
    }
    if (calls == 2) throw TransientError("connection refused");
    return true;
  });
  EXPECT_EQ(seen, std::optional<bool>(true));
  EXPECT_EQ(tried, (std::vector<std::string>{"m0", "m1", "m0"}));
  EXPECT_EQ(sleeps, std::vector<std::chrono::milliseconds>{50ms});
}

// Requests share the member in use: one that failed a member moves every request on, and a second failure on the
// same member does not skip the next one.
TEST_F(EndpointFailoverTest, RequestsShareTheMemberInUse) {
  auto f = make(3);
  int outer_calls = 0;
  auto answer = f.run("outer", [&](EndpointFailover::Tries& t) {
    if (++outer_calls == 1) {
      EXPECT_EQ(t.endpoint().host, "m0");
      // Meanwhile another request finds m0 dead and moves on to m1.
      f.run("inner", [&](EndpointFailover::Tries& inner) {
        if (inner.endpoint().host == "m0") throw TransientError("refused");
        return 0;
      });
      EXPECT_EQ(f.current(), 1u);
      throw TransientError("reset");
    }
    return t.endpoint().host;
  });
  EXPECT_EQ(answer, "m1");
  EXPECT_EQ(f.current(), 1u);
}

// The cluster has been down for request_timeout: the next request tries each member once, of its share of
// request_timeout, and gives up without waiting request_timeout again.
TEST_F(EndpointFailoverTest, ARequestInAnOutageOlderThanRequestTimeoutGivesUpAfterOnePass) {
  auto f = make(3);
  auto refused = [&](EndpointFailover::Tries& t) -> int {
    tried.push_back(t.endpoint().host);
    throw TransientError("connection refused");
  };
  EXPECT_THROW(f.run("range", refused), store::StoreError);
  tried.clear();
  sleeps.clear();
  const auto start = clock.now();
  std::vector<TimePoint> deadlines;
  try {
    f.run("put", [&](EndpointFailover::Tries& t) -> int {
      deadlines.push_back(t.deadline());
      return refused(t);
    });
    ADD_FAILURE() << "no error";
  } catch (const store::StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("connection refused"), std::string::npos) << e.what();
  }
  EXPECT_EQ(tried.size(), 3u);  // each member once
  EXPECT_TRUE(sleeps.empty());
  EXPECT_EQ(clock.now(), start);
  for (const auto& d : deadlines) EXPECT_EQ(d, start + 3s);  // min(attempt_timeout, 10 s / 3 members)
}

// An answer ends the outage: the next failing request has all of request_timeout again.
TEST_F(EndpointFailoverTest, AnAnswerEndsTheOutage) {
  auto f = make(2);
  auto refused = [&](EndpointFailover::Tries&) -> int { throw TransientError("connection refused"); };
  EXPECT_THROW(f.run("range", refused), store::StoreError);
  EXPECT_EQ(f.run("range", [](EndpointFailover::Tries&) { return 1; }), 1);
  const auto start = clock.now();
  EXPECT_THROW(f.run("put", refused), store::StoreError);
  EXPECT_EQ(clock.now() - start, 10s);
}

// A request that started before the outage keeps its own stretch; one started within the first request_timeout
// of an outage gives up when the outage is request_timeout old.
TEST_F(EndpointFailoverTest, ARequestGivesUpWhenTheOutageIsRequestTimeoutOld) {
  auto f = make(2);
  const auto t0 = clock.now();
  int calls = 0;
  EXPECT_THROW(f.run("outer",
                     [&](EndpointFailover::Tries&) -> int {
                       if (++calls == 1) {
                         clock.advance(4s);  // the outage starts here: this try fails at t=4
                       }
                       throw TransientError("connection refused");
                     }),
               store::StoreError);
  // outer's own stretch began at t=0 (its start); the outage at t=4.
  EXPECT_EQ(clock.now(), t0 + 10s);
  // inner starts at t=12: the outage is 8 s old, so it has 2 s left.
  clock.advance(2s);
  EXPECT_THROW(f.run("inner", [&](EndpointFailover::Tries&) -> int { throw TransientError("reset"); }),
               store::StoreError);
  EXPECT_EQ(clock.now(), t0 + 14s);
}

TEST_F(EndpointFailoverTest, AbandonEndsTheRequestUnderWayAndLaterOnes) {
  auto f = make(2);
  int calls = 0;
  try {
    f.run("keepalive", [&](EndpointFailover::Tries&) -> int {
      if (++calls == 3) f.abandon();  // from another thread, in an agent; here, between two tries
      throw TransientError("connection refused");
    });
    ADD_FAILURE() << "no error";
  } catch (const store::StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("the client is closing"), std::string::npos) << e.what();
  }
  EXPECT_EQ(calls, 3);
  EXPECT_THROW(f.run("range", [](EndpointFailover::Tries&) { return 1; }), store::StoreError);
}

TEST_F(EndpointFailoverTest, NeedsAnEndpoint) {
  EXPECT_THROW(make(0), store::StoreError);
  EXPECT_THROW(make(2, 2), std::out_of_range);
}
