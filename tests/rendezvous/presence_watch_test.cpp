// The presence keys of a round (etcd's member leases): who watches whom, and when a vanished key is a death.
#include "rendezvous/presence_watch.hpp"

#include <gtest/gtest.h>

#include "rendezvous/records.hpp"
#include "store/memory_store.hpp"

namespace ctrun::rdzv {
namespace {

using namespace std::chrono_literals;

TEST(PresenceWatch, EachMemberWatchesTheNextRanksRoundTheRing) {
  EXPECT_EQ(PresenceWatch::watched(Membership{0, 0, 1}), std::vector<int>{});
  EXPECT_EQ(PresenceWatch::watched(Membership{0, 0, 2}), std::vector<int>{1});
  EXPECT_EQ(PresenceWatch::watched(Membership{0, 1, 2}), std::vector<int>{0});
  EXPECT_EQ(PresenceWatch::watched(Membership{0, 3, 5}), (std::vector<int>{4, 0}));
  // Every rank is watched by kWatchWindow others.
  std::map<int, int> watchers;
  for (int r = 0; r < 7; ++r)
    for (int w : PresenceWatch::watched(Membership{0, r, 7})) ++watchers[w];
  for (int r = 0; r < 7; ++r) EXPECT_EQ(watchers[r], PresenceWatch::kWatchWindow) << r;
}

struct Round {
  store::MemoryStore store;
  Keys keys{"pw"};
  explicit Round(int members = 3) {
    for (int r = 0; r < members; ++r) {
      store.set(keys.member(0, r), NodeRecord{"node" + std::to_string(r), 100 + r}.encode());
      store.set(keys.alive(0, r), "x");
    }
  }
  void expire(int rank) { store.delete_key(keys.alive(0, rank)); }  // what etcd does when the lease runs out
};

TEST(PresenceWatch, AVanishedKeyMarksItsMemberDeadOnce) {
  Round r;
  PresenceWatch w(r.store, "pw", 2s);
  const Membership m{0, 0, 3};
  EXPECT_EQ(w.poll(m), std::vector<int>{});
  r.expire(2);
  EXPECT_EQ(w.poll(m), std::vector<int>{2});
  const auto over = r.store.get(r.keys.over(0));
  EXPECT_EQ(over.rfind("dead: node node2 (pid 102) (group rank 2) is gone: its etcd lease expired", 0), 0u) << over;
  EXPECT_TRUE(r.store.check({r.keys.exit(0, 2)}));
  EXPECT_EQ(r.store.get(r.keys.gone(0)), "1");
  EXPECT_EQ(w.poll(m), std::vector<int>{});  // declared once
  PresenceWatch other(r.store, "pw", 2s);    // a second watcher (rank 1) finds the exit recorded
  other.poll(Membership{0, 1, 3});
  r.expire(2);
  EXPECT_EQ(other.poll(Membership{0, 1, 3}), std::vector<int>{});
  EXPECT_EQ(r.store.get(r.keys.gone(0)), "1");
}

TEST(PresenceWatch, AKeyNeverSeenIsLeftToTheHeartbeat) {
  Round r;
  r.expire(1);  // not written yet (or its agent died before writing it)
  PresenceWatch w(r.store, "pw", 2s);
  EXPECT_EQ(w.poll(Membership{0, 0, 3}), std::vector<int>{});
  EXPECT_FALSE(r.store.check({r.keys.over(0)}));
  r.store.set(r.keys.alive(0, 1), "x");  // written late
  EXPECT_EQ(w.poll(Membership{0, 0, 3}), std::vector<int>{});
  r.expire(1);
  EXPECT_EQ(w.poll(Membership{0, 0, 3}), std::vector<int>{1});
}

TEST(PresenceWatch, ALeaveAFinishedRoundOrAClosedRunIsNoDeath) {
  for (int how = 0; how < 3; ++how) {
    Round r;
    PresenceWatch w(r.store, "pw", 2s);
    w.poll(Membership{0, 0, 3});
    if (how == 0) r.store.set(r.keys.exit(0, 1), "left x");
    if (how == 1) r.store.set(r.keys.exit_done(0), "1");
    if (how == 2) r.store.set(r.keys.closed(), "closed by node1");
    r.expire(1);
    EXPECT_EQ(w.poll(Membership{0, 0, 3}), std::vector<int>{}) << how;
    EXPECT_FALSE(r.store.check({r.keys.over(0)})) << how;
  }
}

TEST(PresenceWatch, ANewRoundStartsAfresh) {
  Round r;
  PresenceWatch w(r.store, "pw", 2s);
  w.poll(Membership{0, 0, 3});
  // Round 1: rank 1's key not written yet; round 0's sightings do not count for it.
  EXPECT_EQ(w.poll(Membership{1, 0, 3}), std::vector<int>{});
  EXPECT_FALSE(r.store.check({r.keys.over(1)}));
}

}  // namespace
}  // namespace ctrun::rdzv
