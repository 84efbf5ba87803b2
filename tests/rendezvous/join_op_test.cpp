// The join state machine against a fake clock: join, last call, timeouts, spares, membership change, closed ids.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "rendezvous/loss_watch.hpp"
#include "sim.hpp"
#include "store/counting_store.hpp"

using namespace ctrun::rdzv;
using namespace ctrun::rdzv::test;
using namespace std::chrono_literals;

namespace {

JoinConfig config(int min, int max) { return JoinConfig{"job", min, max, 600s, 30s}; }

std::set<int> ranks(Sim& sim, std::initializer_list<int> nodes) {
  std::set<int> out;
  for (int i : nodes) out.insert(sim.node(i).result->assignment.group_rank);
  return out;
}

// Nodes n0.. joining over one store, each through a store that counts its operations.
struct CountedJoins {
  std::vector<std::shared_ptr<ctrun::store::StoreTraffic>> traffic;
  std::vector<std::shared_ptr<ctrun::store::CountingStore>> stores;
  std::vector<std::unique_ptr<JoinOp>> ops;
  CountedJoins(const std::shared_ptr<ctrun::store::MemoryStore>& memory, const JoinConfig& cfg,
               const std::vector<std::optional<Membership>>& previous) {
    for (std::size_t i = 0; i < previous.size(); ++i) {
      traffic.push_back(std::make_shared<ctrun::store::StoreTraffic>());
      stores.push_back(std::make_shared<ctrun::store::CountingStore>(memory, traffic.back()));
      ops.push_back(std::make_unique<JoinOp>(
          *stores.back(), cfg,
          NodeRecord{"n" + std::to_string(i), 100 + static_cast<int>(i), 1, "default", "h", 7000, 0}, previous[i]));
    }
  }
};

}  // namespace

TEST(JoinOp, CompletesAtMaxAtOnce) {
  Sim sim(config(2, 3));
  sim.join("node1");
  sim.join("node2");
  sim.settle();
  EXPECT_EQ(sim.done_count(), 0);  // min reached: last call running
  sim.join("node3");
  sim.settle();  // no time passes: MAX completes the round at once
  ASSERT_EQ(sim.done_count(), 3);
  EXPECT_EQ(ranks(sim, {0, 1, 2}), (std::set<int>{0, 1, 2}));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(sim.node(i).result->round, 0u);
    EXPECT_EQ(sim.node(i).result->assignment.group_world_size, 3);
    EXPECT_EQ(sim.node(i).result->assignment.master_addr, "store-node1");
  }
}

TEST(JoinOp, LastCallCompletesAfterMinWithoutMax) {
  Sim sim(config(2, 4));
  sim.join("a");
  sim.settle();
  sim.clock().advance(100s);  // below MIN: no last call yet, however long
  sim.settle();
  EXPECT_EQ(sim.done_count(), 0);
  sim.join("b");
  sim.settle();
  sim.clock().advance(29s);
  sim.settle();
  EXPECT_EQ(sim.done_count(), 0);
  sim.clock().advance(2s);
  sim.settle();
  ASSERT_EQ(sim.done_count(), 2);
  EXPECT_EQ(sim.node(0).result->assignment.group_world_size, 2);
}

TEST(JoinOp, JoinTimeoutSaysWhoJoinedAndHowManyAreMissing) {
  Sim sim(config(3, 3));
  sim.join("node7");
  sim.join("node8");
  sim.settle();
  sim.clock().advance(601s);
  sim.settle();
  for (int i = 0; i < 2; ++i) {
    const auto& e = sim.node(i).error;
    EXPECT_NE(e.find("timed out"), std::string::npos) << e;
    EXPECT_NE(e.find("2 of min 3"), std::string::npos) << e;
    EXPECT_NE(e.find("node7"), std::string::npos) << e;
    EXPECT_NE(e.find("node8"), std::string::npos) << e;
    EXPECT_NE(e.find("1 more needed"), std::string::npos) << e;
  }
  // The round was aborted: a node arriving later is not counted with the two that gave up.
  int late = sim.join("node9");
  sim.settle();
  EXPECT_FALSE(sim.node(late).result);
  EXPECT_GE(sim.node(late).op->round(), 1u);
}

TEST(JoinOp, NaturalOrderOfAddressesGivesRanks) {
  Sim sim(config(3, 3));
  int n10 = sim.join("node10");
  int n2 = sim.join("node2");
  int n1 = sim.join("node1");
  sim.settle();
  EXPECT_EQ(sim.node(n1).result->assignment.group_rank, 0);
  EXPECT_EQ(sim.node(n2).result->assignment.group_rank, 1);
  EXPECT_EQ(sim.node(n10).result->assignment.group_rank, 2);
}

TEST(JoinOp, HeterogeneousLocalWorldSizes) {
  Sim sim(config(3, 3));
  int a = sim.join("n1", 4);
  int b = sim.join("n3", 1);
  int c = sim.join("n2", 2);
  sim.settle();
  EXPECT_EQ(sim.node(a).result->assignment.base_global_rank, 0);
  EXPECT_EQ(sim.node(c).result->assignment.base_global_rank, 4);
  EXPECT_EQ(sim.node(b).result->assignment.base_global_rank, 6);
  for (int i : {a, b, c}) EXPECT_EQ(sim.node(i).result->assignment.global_world_size, 7);
}

TEST(JoinOp, NodeArrivingWhileRoundRunsMakesEveryoneRejoin) {
  Sim sim(config(2, 3));
  sim.join("a");
  sim.join("b");
  sim.settle();
  sim.clock().advance(31s);
  sim.settle();
  ASSERT_EQ(sim.done_count(), 2);
  EXPECT_TRUE(sim.over(0).empty());
  int c = sim.join("c");
  sim.settle();
  EXPECT_EQ(sim.over(0).rfind("join: node c", 0), 0u) << sim.over(0);  // the members' num_nodes_waiting() > 0
  EXPECT_FALSE(sim.node(c).result);
  sim.rejoin(0);
  sim.settle();
  EXPECT_EQ(sim.done_count(), 1);  // round 1 waits for b to leave round 0 (the gate)
  sim.rejoin(1);
  sim.settle();  // all three in round 1 = MAX: at once
  ASSERT_EQ(sim.done_count(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(sim.node(i).result->round, 1u);
    EXPECT_EQ(sim.node(i).result->assignment.group_world_size, 3);
  }
  EXPECT_EQ(ranks(sim, {0, 1, 2}), (std::set<int>{0, 1, 2}));
}

TEST(JoinOp, SpareWaitsBeyondMaxWithoutTimeoutAndTriggersNothing) {
  Sim sim(config(1, 2));
  sim.join("a");
  sim.join("b");
  int spare = sim.join("c");
  sim.settle();
  EXPECT_EQ(sim.done_count(), 2);
  sim.clock().advance(3600s);  // far beyond join_timeout: a spare waits on
  sim.settle();
  EXPECT_TRUE(sim.node(spare).error.empty()) << sim.node(spare).error;
  EXPECT_FALSE(sim.node(spare).result);
  EXPECT_TRUE(sim.over(0).empty());  // a spare does not make the full round restart
}

TEST(JoinOp, WorkerFailureOnOneNodeRestartsAllIntoNextRound) {
  Sim sim(config(2, 2));
  sim.join("a");
  sim.join("b");
  sim.settle();
  sim.rejoin(1);  // b's workers failed: its agent re-rendezvous
  sim.settle();
  EXPECT_EQ(sim.over(0).rfind("rejoin: node b", 0), 0u) << sim.over(0);
  sim.rejoin(0);
  sim.settle();
  ASSERT_EQ(sim.done_count(), 2);
  EXPECT_EQ(sim.node(0).result->round, 1u);
  EXPECT_EQ(sim.node(1).result->round, 1u);
}

// A member lost while the others leave a round that is over already (the loss watch woke once, for the first death)
// is in the round's `lost` log: the members waiting for the round to drain read it when a wait slice passes, and its
// settler declares it dead. Before, they waited the whole join timeout (600 s) and failed.
TEST(JoinOp, AMemberLostWhileTheOthersLeaveIsSettledFromTheLostLog) {
  Sim sim(config(2, 3));
  sim.set_wait_slice(10s);
  sim.join("a");
  sim.join("b");
  sim.join("c");
  sim.settle();
  ASSERT_EQ(sim.done_count(), 3);
  const int c_rank = sim.node(2).result->assignment.group_rank;
  sim.kill(2);
  sim.store().set(sim.keys().lost(0), on_close_entry(c_rank));  // as the server's ON_CLOSE
  sim.rejoin(0);
  sim.rejoin(1);
  sim.settle();
  EXPECT_FALSE(sim.node(0).result);
  EXPECT_FALSE(sim.store().check({sim.keys().drained(0)}));
  sim.clock().advance(11s);  // a wait slice
  sim.settle();
  ASSERT_TRUE(sim.store().check({sim.keys().exit(0, c_rank)}));
  EXPECT_EQ(sim.store().get(sim.keys().exit(0, c_rank)).rfind("dead", 0), 0u);
  EXPECT_TRUE(sim.store().check({sim.keys().drained(0)}));
  sim.clock().advance(31s);  // the next round's last call (2 of MIN 2, MAX 3)
  sim.settle();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(sim.node(i).result) << sim.node(i).error;
    EXPECT_EQ(sim.node(i).result->round, 1u);
    EXPECT_EQ(sim.node(i).result->assignment.group_world_size, 2);
  }
}

// A member rejoining after its round ended: it reads whether the round exists with its first reads, waits for the
// round to drain directly, and takes each wake-up for its key: 10 store operations for a member that does not decide,
// 9 when it saw the round's over key set (17 before; at 16,384 nodes each one is a herd of 16,384 requests).
TEST(JoinOp, AMembersRejoinCostsNineOrTenOperations) {
  auto memory = std::make_shared<ctrun::store::MemoryStore>(2s);
  const auto cfg = config(3, 3);
  const Keys keys(cfg.run_id);
  FakeClock clock;
  std::vector<Membership> held;
  {
    std::vector<std::unique_ptr<JoinOp>> first;
    for (int i = 0; i < 3; ++i)
      first.push_back(std::make_unique<JoinOp>(
          *memory, cfg, NodeRecord{"n" + std::to_string(i), 100 + i, 1, "default", "h", 7000, 0}, std::nullopt));
    for (int i = 0; i < 2; ++i) first[i]->step(clock.now());
    first[2]->step(clock.now());
    for (int i = 0; i < 3; ++i) {
      first[i]->woken(keys.done(0));
      auto s = first[i]->step(clock.now());
      ASSERT_TRUE(std::holds_alternative<JoinResult>(s)) << "node " << i;
      const auto& a = std::get<JoinResult>(s).assignment;
      held.push_back(Membership{0, a.group_rank, a.group_world_size});
    }
  }
  memory->set(keys.over(0), "dead: a member's agent is gone");  // node 0 saw it; node 1 did not look
  held[0].over_known = true;
  CountedJoins joins(memory, cfg, {held[0], held[1], held[2]});
  auto& ops = joins.ops;
  auto& traffic = joins.traffic;
  // Below MAX (MIN == MAX) a member waits for the next round itself: only the MAX-th arrival waits for the drain.
  for (int i = 0; i < 2; ++i) {
    auto s = ops[i]->step(clock.now());
    ASSERT_TRUE(std::holds_alternative<JoinWait>(s));
    EXPECT_EQ(std::get<JoinWait>(s).key, keys.done(1)) << "node " << i;
  }
  auto last = ops[2]->step(clock.now());  // the last to leave drains the round, and is the MAX-th arrival
  ASSERT_TRUE(std::holds_alternative<JoinWait>(last));
  EXPECT_EQ(std::get<JoinWait>(last).key, keys.drained(0));
  ASSERT_TRUE(memory->check({keys.drained(0)}));
  ops[2]->woken(keys.drained(0));
  ASSERT_TRUE(std::holds_alternative<JoinResult>(ops[2]->step(clock.now())));
  for (int i = 0; i < 2; ++i) {
    ops[i]->woken(keys.done(1));
    auto s = ops[i]->step(clock.now());
    ASSERT_TRUE(std::holds_alternative<JoinResult>(s)) << "node " << i;
    EXPECT_EQ(std::get<JoinResult>(s).round, 1u);
    EXPECT_LE(traffic[i]->ops.load(), i == 0 ? 9u : 10u) << "node " << i;
  }
}

TEST(JoinOp, MembersOfARoundThatAStoreRestartForgotMeetInTheNextRound) {
  Sim sim(config(2, 2));
  sim.join("a");
  sim.join("b");
  sim.settle();
  ASSERT_EQ(sim.done_count(), 2);
  for (const auto& key : sim.store().list_keys()) sim.store().delete_key(key);  // the store restarted empty
  sim.rejoin(0);
  sim.rejoin(1);
  sim.settle();  // no time passes: neither waits for a round 0 the store no longer knows
  ASSERT_EQ(sim.done_count(), 2) << sim.node(0).error << sim.node(1).error;
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(sim.node(i).result->round, 1u);
    EXPECT_EQ(sim.node(i).result->assignment.group_world_size, 2);
  }
  EXPECT_EQ(ranks(sim, {0, 1}), (std::set<int>{0, 1}));
}

TEST(JoinOp, ClosedRunIdGivesClearError) {
  Sim sim(config(1, 1));
  sim.join("a");
  sim.settle();
  sim.store().set(sim.keys().closed(), "closed by a");
  int again = sim.join("a");
  sim.settle();
  EXPECT_TRUE(sim.node(again).closed);
  EXPECT_NE(sim.node(again).error.find("new --rdzv-id"), std::string::npos) << sim.node(again).error;
}

TEST(JoinOp, GateTimeoutNamesMembersStillRunning) {
  Sim sim(config(2, 2));
  sim.join("a");
  sim.join("b");
  sim.settle();
  sim.rejoin(0);  // a leaves; b never does and its heartbeats are not ticked in this test
  sim.settle();
  sim.clock().advance(601s);
  sim.settle();
  const auto& e = sim.node(0).error;
  EXPECT_NE(e.find("waiting for round 0 to end"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 1: b"), std::string::npos) << e;
}

TEST(JoinOp, ManyNodesArrivingInReverseOrderGetNaturalOrderRanks) {
  for (int n : {8, 64}) {
    Sim sim(config(n, n));
    for (int i = 0; i < n; ++i) sim.join("node" + std::to_string(n - i));
    sim.settle();
    ASSERT_EQ(sim.done_count(), n);
    std::set<int> seen;
    for (int i = 0; i < n; ++i) {
      const auto& a = sim.node(i).result->assignment;
      seen.insert(a.group_rank);
      EXPECT_EQ(a.group_rank, n - 1 - i);  // node1..nodeN in natural order
    }
    EXPECT_EQ(static_cast<int>(seen.size()), n);
  }
}

TEST(JoinOp, RandomArrivalsAndTimingKeepEveryRoundConsistent) {
  for (unsigned seed = 1; seed <= 300; ++seed) {
    std::mt19937 rng(seed);
    const int min = 1 + static_cast<int>(rng() % 4), max = min + static_cast<int>(rng() % 5);
    const int n = 1 + static_cast<int>(rng() % 12);
    Sim sim(config(min, max));
    for (int i = 0; i < n; ++i) {
      sim.join("node" + std::to_string(rng() % 50));
      if (rng() % 3 == 0) sim.settle();
      if (rng() % 4 == 0) sim.clock().advance(std::chrono::seconds(rng() % 40));
    }
    sim.settle();
    sim.clock().advance(31s);  // every last call has expired
    sim.settle();
    std::map<std::uint64_t, std::set<int>> ranks;
    std::map<std::uint64_t, int> sizes;
    int held = 0;
    for (int i = 0; i < n; ++i) {
      auto& node = sim.node(i);
      ASSERT_TRUE(node.error.empty()) << "seed " << seed << ": " << node.error;
      if (!node.result) continue;  // a spare behind a full round
      ++held;
      const auto& a = node.result->assignment;
      EXPECT_TRUE(ranks[node.result->round].insert(a.group_rank).second) << "seed " << seed << ": duplicate rank";
      auto it = sizes.try_emplace(node.result->round, a.group_world_size).first;
      EXPECT_EQ(it->second, a.group_world_size) << "seed " << seed;
      EXPECT_LE(a.group_world_size, max);
    }
    for (auto& [round, set] : ranks) EXPECT_EQ(static_cast<int>(set.size()), sizes[round]) << "seed " << seed;
    if (n >= min) {
      EXPECT_GE(held, min) << "seed " << seed;  // nobody is left waiting for nothing
    }
  }
}

// MIN == MAX has no last call: the MAX-th arrival completes the round in its own step, and the others wait for the
// round itself (done), not for MIN. Waking them at MIN would make all N contend for `decided` and wait again (two
// herds of N wake-ups instead of one), which is what made the store operations per node grow with N.
TEST(JoinOp, AtMinEqualMaxTheLastArrivalDecidesAndTheOthersWaitForTheRound) {
  auto memory = std::make_shared<ctrun::store::MemoryStore>(2s);
  const auto cfg = config(3, 3);
  const Keys keys(cfg.run_id);
  CountedJoins joins(memory, cfg, {std::nullopt, std::nullopt, std::nullopt});
  auto& ops = joins.ops;
  auto& traffic = joins.traffic;
  FakeClock clock;
  for (int i = 0; i < 2; ++i) {
    auto s = ops[i]->step(clock.now());
    ASSERT_TRUE(std::holds_alternative<JoinWait>(s));
    EXPECT_EQ(std::get<JoinWait>(s).key, keys.done(0)) << "node " << i;
  }
  auto last = ops[2]->step(clock.now());  // nobody else steps: the last arrival decides on its own
  ASSERT_TRUE(std::holds_alternative<JoinResult>(last));
  std::set<int> ranks{std::get<JoinResult>(last).assignment.group_rank};
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(memory->check({keys.done(0)}));
    auto s = ops[i]->step(clock.now());
    ASSERT_TRUE(std::holds_alternative<JoinResult>(s)) << "node " << i;
    ranks.insert(std::get<JoinResult>(s).assignment.group_rank);
    // Arrive (closed, latest, joined, node record) and wait; after the wake-up closed, done and the assignment,
    // every read one store operation. The old protocol took 11 here, and more as N grew.
    EXPECT_LE(traffic[i]->ops.load(), 7u) << "node " << i;
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2}));

  // MIN < MAX still wakes at MIN: that starts the last call.
  auto memory2 = std::make_shared<ctrun::store::MemoryStore>(2s);
  JoinOp early(*memory2, config(2, 3), NodeRecord{"a", 1, 1, "default", "h", 7000, 0}, std::nullopt);
  auto s = early.step(clock.now());
  ASSERT_TRUE(std::holds_alternative<JoinWait>(s));
  EXPECT_EQ(std::get<JoinWait>(s).key, keys.min_reached(0));
}

// The MAX-th arrival stops between its arrival and its decision: the others, back from a wait slice, see MAX
// arrivals and complete the round themselves.
TEST(JoinOp, AtMinEqualMaxALastArrivalThatStopsBeforeDecidingIsCoveredByTheOthers) {
  ctrun::store::MemoryStore memory(2s);
  const auto cfg = config(3, 3);
  const Keys keys(cfg.run_id);
  FakeClock clock;
  std::vector<std::unique_ptr<JoinOp>> ops;
  for (int i = 0; i < 2; ++i) {
    ops.push_back(std::make_unique<JoinOp>(
        memory, cfg, NodeRecord{"n" + std::to_string(i), 100 + i, 1, "default", "h", 7000, 0}, std::nullopt));
    ASSERT_TRUE(std::holds_alternative<JoinWait>(ops.back()->step(clock.now())));
  }
  // What the third node wrote before it stopped: its arrival and its record.
  const auto k = memory.add(keys.joined(0), 1);
  memory.set(keys.node(0, k), NodeRecord{"n2", 102, 1, "default", "h", 7000, k}.encode());
  clock.advance(10s);  // the handler's wait slice passed
  std::set<int> ranks;
  for (auto& op : ops) {
    auto s = op->step(clock.now());
    if (std::holds_alternative<JoinWait>(s)) s = op->step(clock.now());  // the round was completed by the other
    ASSERT_TRUE(std::holds_alternative<JoinResult>(s));
    EXPECT_EQ(std::get<JoinResult>(s).assignment.group_world_size, 3);
    ranks.insert(std::get<JoinResult>(s).assignment.group_rank);
  }
  EXPECT_EQ(ranks.size(), 2u);
}
