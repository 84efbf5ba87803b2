// The closed-connection log of a round: which ranks are lost for good, and what a watcher records.
#include "rendezvous/loss_watch.hpp"

#include <gtest/gtest.h>

#include "rendezvous/records.hpp"
#include "store/memory_store.hpp"

namespace ctrun::rdzv {
namespace {

using namespace std::chrono_literals;

TEST(LossWatch, LostRanksAreThoseWithMoreClosesThanReconnects) {
  EXPECT_EQ(lost_ranks(""), std::set<int>{});
  EXPECT_EQ(lost_ranks("-1,"), std::set<int>{1});
  EXPECT_EQ(lost_ranks("-1,+1,"), std::set<int>{});  // a blip: closed and back
  EXPECT_EQ(lost_ranks("-1,-2,+1,"), std::set<int>{2});
  // A blip whose re-dial reached the server before the old connection's close (its FIN delayed by the drop).
  EXPECT_EQ(lost_ranks("+3,-3,"), std::set<int>{});
  EXPECT_EQ(lost_ranks("+3,"), std::set<int>{});         // the old connection's close not seen yet: alive
  EXPECT_EQ(lost_ranks("-3,+3,-3,"), std::set<int>{3});  // back after a blip, then dead
  EXPECT_EQ(lost_ranks("+3,-3,-3,"), std::set<int>{3});
  EXPECT_EQ(lost_ranks("x,-,-a,--1,-4"), std::set<int>{4});  // malformed entries skipped; the last needs no comma
  EXPECT_EQ(on_close_entry(7), "-7,");
  EXPECT_EQ(on_reconnect_entry(7), "+7,");
}

struct Round {
  store::MemoryStore store;
  Keys keys{"lw"};
  Round() {
    for (int r = 0; r < 3; ++r) store.set(keys.member(0, r), NodeRecord{"node" + std::to_string(r), 100 + r}.encode());
  }
  // What the handler does once the round's `lost` key appeared and the grace passed.
  LossWatch::Outcome watch(int as_rank) {
    LossWatch w(store, "lw");
    return w.settle(Membership{0, as_rank, 3}, 1ms);
  }
};

TEST(LossWatch, SettlersAreTheLowestLiveRankAndTheSuccessorsOfTheLost) {
  EXPECT_EQ(settlers({2}, 3), (std::set<int>{0}));  // 0 is both the lowest live rank and 2's successor
  EXPECT_EQ(settlers({5}, 16384), (std::set<int>{0, 6}));
  EXPECT_EQ(settlers({0}, 4), (std::set<int>{1}));
  EXPECT_EQ(settlers({0, 1, 7}, 8), (std::set<int>{2}));  // 7's successor round the ring is 0, lost too: 2
  EXPECT_EQ(settlers({3, 4}, 8), (std::set<int>{0, 5}));
  EXPECT_EQ(settlers({0, 1}, 2), (std::set<int>{}));  // nobody left
}

TEST(LossWatch, AClosedConnectionMarksItsMemberDead) {
  Round r;
  r.store.append(r.keys.lost(0), "-2,");
  EXPECT_EQ(r.watch(1), LossWatch::Outcome::kNothing);  // not a settler of rank 2: left to rank 0
  EXPECT_FALSE(r.store.check({r.keys.over(0)}));
  EXPECT_EQ(r.watch(0), LossWatch::Outcome::kDeclared);
  const auto over = r.store.get(r.keys.over(0));
  EXPECT_EQ(over.rfind("dead: node node2 (pid 102) (group rank 2) closed its connection", 0), 0u) << over;
  EXPECT_TRUE(r.store.check({r.keys.exit(0, 2)}));
  EXPECT_EQ(r.watch(0), LossWatch::Outcome::kBlip);  // settled again (a second settler): recorded already
}

TEST(LossWatch, ABlipALeaveOrAFinishedRoundIsNoDeath) {
  Round blip;
  blip.store.append(blip.keys.lost(0), "-1,+1,");
  EXPECT_EQ(blip.watch(0), LossWatch::Outcome::kBlip);
  EXPECT_FALSE(blip.store.check({blip.keys.over(0)}));

  Round redial_first;  // the re-dial came before the old connection's close reached the server
  redial_first.store.append(redial_first.keys.lost(0), "+1,-1,");
  EXPECT_EQ(redial_first.watch(0), LossWatch::Outcome::kBlip);
  EXPECT_FALSE(redial_first.store.check({redial_first.keys.over(0)}));

  Round left;
  left.store.set(left.keys.exit(0, 1), "left x");
  left.store.append(left.keys.lost(0), "-1,");
  EXPECT_EQ(left.watch(0), LossWatch::Outcome::kBlip);
  EXPECT_FALSE(left.store.check({left.keys.over(0)}));

  Round done;
  done.store.set(done.keys.exit_done(0), "1");
  done.store.append(done.keys.lost(0), "-1,");
  EXPECT_EQ(done.watch(0), LossWatch::Outcome::kBlip);
  EXPECT_FALSE(done.store.check({done.keys.over(0)}));
}

}  // namespace
}  // namespace ctrun::rdzv
