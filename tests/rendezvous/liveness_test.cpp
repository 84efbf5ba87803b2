// Heartbeat loss against a fake clock: detection bound, monitor death, survivors' next round, spares moving in.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "rendezvous/liveness.hpp"
#include "rendezvous/membership.hpp"
#include "sim.hpp"
#include "store/mux_store.hpp"
#include "store/server.hpp"

using namespace ctrun::rdzv;
using namespace ctrun::rdzv::test;
using namespace std::chrono_literals;

namespace {

JoinConfig config(int min, int max) { return JoinConfig{"job", min, max, 600s, 30s}; }

// Runs until over(round) is set; returns how long that took (or `limit`).
ctrun::store::Duration time_to_over(Sim& sim, std::uint64_t round, ctrun::store::Duration limit) {
  ctrun::store::Duration t{0};
  while (sim.over(round).empty() && t < limit) {
    sim.run_for(250ms);
    t += 250ms;
  }
  return t;
}

}  // namespace

TEST(Liveness, NoFalseAlarmWhileEveryoneBeats) {
  Sim sim(config(3, 3));
  for (auto a : {"a", "b", "c"}) sim.join(a);
  sim.settle();
  ASSERT_EQ(sim.done_count(), 3);
  sim.run_for(120s);
  EXPECT_TRUE(sim.over(0).empty()) << sim.over(0);
}

TEST(Liveness, AStoreRestartedEmptyNeitherBlocksTheHeartbeatNorMakesADeath) {
  Sim sim(config(2, 2));  // its store's waits time out after 2 s (and throw: a blocked check would fail the test)
  for (auto a : {"a", "b"}) sim.join(a);
  sim.settle();
  ASSERT_EQ(sim.done_count(), 2);
  sim.run_for(3s);
  for (const auto& key : sim.store().list_keys()) sim.store().delete_key(key);  // the store restarted empty
  // Node a beats first and checks b's counter, which the store has lost and b has not written again yet.
  sim.run_for(30s);
  EXPECT_TRUE(sim.over(0).empty()) << sim.over(0);
}

TEST(Liveness, DeadMemberDetectedWithinIntervalTimesAttemptsThenSurvivorsRegroup) {
  Sim sim(config(2, 3));
  for (auto a : {"a", "b", "c"}) sim.join(a);
  sim.settle();
  sim.run_for(10s);
  sim.kill(2);  // c: its agent is SIGKILLed, its last heartbeat was at most now
  auto took = time_to_over(sim, 0, 60s);
  EXPECT_LE(took, 15s);  // keep_alive_interval 5 s x keep_alive_max_attempt 3
  auto over = sim.over(0);
  EXPECT_EQ(over_kind(over), kOverDead);
  EXPECT_NE(over.find("node c"), std::string::npos) << over;
  EXPECT_NE(over.find("lost heartbeat"), std::string::npos) << over;
  sim.rejoin(0);
  sim.rejoin(1);
  sim.run_for(31s);  // 2 of MAX 3: last call
  ASSERT_TRUE(sim.node(0).result);
  ASSERT_TRUE(sim.node(1).result);
  EXPECT_EQ(sim.node(0).result->round, 1u);
  EXPECT_EQ(sim.node(0).result->assignment.group_world_size, 2);
}

TEST(Liveness, DeathOfTheMonitorIsDetectedByTheOthers) {
  Sim sim(config(3, 3));
  for (auto a : {"a", "b", "c"}) sim.join(a);
  sim.settle();
  sim.run_for(6s);
  sim.kill(0);  // group rank 0: the monitor of everybody
  auto took = time_to_over(sim, 0, 60s);
  EXPECT_LE(took, 15s);
  EXPECT_NE(sim.over(0).find("node a"), std::string::npos) << sim.over(0);
}

TEST(Liveness, TwoDeathsIncludingTheMonitorStillDrainTheRound) {
  Sim sim(config(1, 4));
  for (auto a : {"a", "b", "c", "d"}) sim.join(a);
  sim.settle();
  ASSERT_EQ(sim.done_count(), 4);
  sim.kill(0);
  sim.kill(2);
  sim.run_for(20s);
  sim.rejoin(1);
  sim.rejoin(3);
  sim.run_for(40s);  // b's monitor role passes on: c is declared dead too, round 0 drains, last call
  ASSERT_TRUE(sim.node(1).result) << sim.node(1).error;
  EXPECT_EQ(sim.node(1).result->assignment.group_world_size, 2);
  EXPECT_TRUE(sim.store().check({sim.keys().drained(0)}));
}

TEST(Liveness, SpareTakesThePlaceOfADeadMember) {
  Sim sim(config(1, 2));
  sim.join("a");
  sim.join("b");
  int spare = sim.join("c");
  sim.settle();
  ASSERT_EQ(sim.done_count(), 2);
  sim.run_for(5s);
  sim.kill(1);
  sim.run_for(16s);
  ASSERT_EQ(over_kind(sim.over(0)), kOverDead);
  sim.rejoin(0);
  sim.settle();  // a and the spare c make MAX 2 of round 1: at once
  ASSERT_TRUE(sim.node(spare).result) << sim.node(spare).error;
  EXPECT_EQ(sim.node(spare).result->round, 1u);
  EXPECT_EQ(sim.node(0).result->round, 1u);
  EXPECT_EQ(sim.node(spare).result->assignment.group_world_size, 2);
}

TEST(Liveness, RandomDeathsThenSurvivorsRegroupConsistently) {
  for (unsigned seed = 1; seed <= 200; ++seed) {
    std::mt19937 rng(seed);
    const int min = 1 + static_cast<int>(rng() % 3), max = min + static_cast<int>(rng() % 4);
    const int n = max;
    Sim sim(config(min, max));
    for (int i = 0; i < n; ++i) sim.join("node" + std::to_string(i));
    sim.settle();
    ASSERT_EQ(sim.done_count(), n) << "seed " << seed;
    sim.run_for(std::chrono::seconds(rng() % 10));
    std::vector<int> survivors;
    for (int i = 0; i < n; ++i) {
      if (rng() % 3 == 0)
        sim.kill(i);
      else
        survivors.push_back(i);
    }
    if (survivors.empty() || static_cast<int>(survivors.size()) == n) continue;  // nobody to detect, or nothing
    sim.run_for(16s);
    ASSERT_FALSE(sim.over(0).empty()) << "seed " << seed << ": a death went unnoticed";
    for (int i : survivors) sim.rejoin(i);
    sim.run_for(60s);  // the rest of the dead are declared (several dead low ranks: up to 2 x 15 s), last call
    std::set<int> ranks;
    for (int i : survivors) {
      auto& node = sim.node(i);
      if (static_cast<int>(survivors.size()) < min) {
        EXPECT_FALSE(node.result) << "seed " << seed;
        continue;
      }
      ASSERT_TRUE(node.result) << "seed " << seed << ": " << node.error;
      EXPECT_EQ(node.result->round, 1u) << "seed " << seed;
      EXPECT_EQ(node.result->assignment.group_world_size, static_cast<int>(survivors.size())) << "seed " << seed;
      ranks.insert(node.result->assignment.group_rank);
    }
    if (static_cast<int>(survivors.size()) >= min) {
      EXPECT_EQ(ranks.size(), survivors.size()) << "seed " << seed;
    }
  }
}

namespace {

// ctrun's own store on loopback (ON_CLOSE and ON_SILENCE) and the agents' one-connection client of it.
struct CtrunStore {
  ctrun::store::Server server{ctrun::store::ServerOptions{.host = "127.0.0.1"}};
  CtrunStore() { server.start(); }
  std::unique_ptr<ctrun::store::MuxStore> connect() {
    ctrun::store::MuxStore::Options o;
    o.host = "127.0.0.1";
    o.port = server.port();
    o.timeout = 10s;
    return std::make_unique<ctrun::store::MuxStore>(o);
  }
  // The last of `members` members of round 0 of run `run`, every member's counter beaten once, after its first tick
  // (its connection registered).
  static std::unique_ptr<Liveness> last_member(ctrun::store::Store& client, const std::string& run, int members,
                                               TimePoint t) {
    const Keys keys(run);
    for (int r = 0; r < members; ++r) client.set(keys.heartbeat(0, r), "1");
    auto member = std::make_unique<Liveness>(client, LivenessConfig{run, 200ms, 3});
    member->follow(Membership{0, members - 1, members}, t);
    member->tick(t);
    return member;
  }
  // The reads the server answered so far (the counters a member times).
  std::uint64_t reads() {
    std::uint64_t n = 0;
    for (const auto& [op, count] : server.stats().ops)
      if (op == "COMPARE_SET" || op == "GET" || op == "MULTI_GET" || op == "CHECK" || op == "PEEK") n += count;
    return n;
  }
};

}  // namespace

// Over ctrun's store (ON_CLOSE and ON_SILENCE) a member reads no counter: the server reports a closed or silent
// connection on the round's `lost` key, and the loss watch wakes once. When that wake-up finds no death (a member
// silent under load that spoke again), the handler hands the round to the heartbeat: from then on this member
// times its watched ranks itself, and a later death is noticed (it went unnoticed before: issue 44's rendezvous
// test, a member killed after such a blip).
TEST(Liveness, OverCtrunsStoreTheCountersAreTimedOnceTheLossWatchIsSpent) {
  CtrunStore store;
  auto a = store.connect(), b = store.connect();
  const Keys keys("spent");
  for (int r = 0; r < 2; ++r) a->set(keys.member(0, r), NodeRecord{"node" + std::to_string(r), 100 + r}.encode());
  for (int r = 0; r < 2; ++r) a->set(keys.heartbeat(0, r), std::string(Keys::kUnbeaten));  // as the completion
  const LivenessConfig config{"spent", 200ms, 3};
  Liveness la(*a, config), lb(*b, config);
  TimePoint t{};
  la.follow(Membership{0, 0, 2}, t);
  lb.follow(Membership{0, 1, 2}, t);
  la.tick(t);
  lb.tick(t);
  ASSERT_TRUE(la.reports_closes());
  // b stops beating (its connection stays open): a reads nothing, the server is trusted to tell.
  for (int i = 0; i < 40; ++i) la.tick(t += 100ms);
  EXPECT_FALSE(a->check({keys.over(0)}));
  // The loss watch is spent: a times b's counter, which does not move.
  la.time_heartbeats(0);
  for (int i = 0; i < 10 && !a->check({keys.over(0)}); ++i) la.tick(t += 100ms);
  ASSERT_TRUE(a->check({keys.over(0)}));
  const auto over = a->get(keys.over(0));
  EXPECT_NE(over.find("node node1 (pid 101) (group rank 1) lost heartbeat"), std::string::npos) << over;
  la.time_heartbeats(7);  // another round's: ignored
}

// A member killed after the round completed but before its first tick never registered its connection: nothing
// reports its close. Its counter still reads as the completion wrote it, and the others time it until it moves.
TEST(Liveness, OverCtrunsStoreAMemberThatNeverBeatIsTimed) {
  CtrunStore store;
  auto client = store.connect();
  auto& a = *client;
  const Keys keys("unbeaten");
  for (int r = 0; r < 3; ++r) {
    a.set(keys.member(0, r), NodeRecord{"node" + std::to_string(r), 100 + r}.encode());
    a.set(keys.heartbeat(0, r), std::string(Keys::kUnbeaten));
  }
  a.set(keys.heartbeat(0, 1), "1");  // rank 1 beat once (and registered before that); rank 2 never did
  Liveness la(a, LivenessConfig{"unbeaten", 200ms, 3});
  TimePoint t{};
  la.follow(Membership{0, 0, 3}, t);
  la.tick(t);
  ASSERT_TRUE(la.reports_closes());
  for (int i = 0; i < 20 && !a.check({keys.over(0)}); ++i) la.tick(t += 100ms);
  ASSERT_TRUE(a.check({keys.over(0)}));
  const auto over = a.get(keys.over(0));
  EXPECT_NE(over.find("(group rank 2) lost heartbeat"), std::string::npos) << over;
  EXPECT_EQ(over.find("group rank 1"), std::string::npos) << over;  // beating: the server times it
}

// Once the ranks of its window have beaten, a member over ctrun's store reads nothing more: one look at its window
// (kWatchWindow counters in one PEEK), never the ranks beyond it (a window chosen after leaving out the timed ranks walked down
// every rank below it, 3 per check: 2.6 requests per node per second at 16,384 nodes).
TEST(Liveness, OverCtrunsStoreAMemberLooksAtItsWindowOnce) {
  CtrunStore store;
  auto client = store.connect();
  auto& a = *client;
  const Keys keys("window");
  auto reads = [&] { return store.reads(); };
  TimePoint t{};
  auto member = CtrunStore::last_member(a, "window", 12, t);
  auto& la = *member;
  ASSERT_TRUE(la.reports_closes());
  const auto before = reads();
  for (int i = 0; i < 40; ++i) la.tick(t += 100ms);  // 80 checks' worth of time
  EXPECT_EQ(reads() - before, 1u);  // one PEEK of its kWatchWindow counters
  EXPECT_FALSE(a.check({keys.over(0)}));
}

// A round whose `over` key is set ends: its members rejoin. Over ctrun's store a member that times its watched ranks
// (the loss watch was spent) stops reading their counters then: at 16,384 nodes those reads were ~40,000 requests a
// second for as long as the next round took to form (the kill -9 row of scale_bench: 50 reads per node).
TEST(Liveness, OverCtrunsStoreNoCounterIsReadOnceTheRoundIsOver) {
  CtrunStore store;
  auto client = store.connect();
  auto& a = *client;
  const Keys keys("ending");
  constexpr int kMembers = 4;
  auto reads = [&] { return store.reads(); };
  TimePoint t{};
  auto member = CtrunStore::last_member(a, "ending", kMembers, t);
  auto& la = *member;
  ASSERT_TRUE(la.reports_closes());
  la.time_heartbeats(0);
  auto before = reads();
  for (int i = 0; i < 4; ++i) la.tick(t += 100ms);
  EXPECT_GT(reads(), before);  // timing: it reads its window
  la.round_over(0);
  before = reads();
  for (int i = 0; i < 40; ++i) la.tick(t += 100ms);
  EXPECT_EQ(reads(), before);
  // The next round is timed again, after its own loss watch is spent.
  la.follow(Membership{1, kMembers - 1, kMembers}, t);
  for (int r = 0; r < kMembers; ++r) a.set(keys.heartbeat(1, r), "1");
  la.tick(t);
  la.time_heartbeats(1);
  before = reads();
  for (int i = 0; i < 4; ++i) la.tick(t += 100ms);
  EXPECT_GT(reads(), before);
}
