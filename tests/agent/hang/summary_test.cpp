// The node summary: its encoding (round trip, the bound), the pacer, remote ages, and the verdicts' encoding.
#include "agent/hang/summary.hpp"

#include <gtest/gtest.h>

#include "tests/agent/hang/records_fixture.hpp"

namespace ctrun::agent::hang {
namespace {
using namespace test;  // NOLINT: the fixture's records

TEST(HangSummary, RoundTripsAndStaysBounded) {
  NodeSummary s;
  s.counter = 3;
  s.restarts = 1;
  s.host = "node a";
  s.ranks = rank2_missing(12.345);
  for (auto& r : s.ranks) r.host = s.host, r.restarts = 1;
  auto back = decode(encode(s));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->host, "node a");
  ASSERT_EQ(back->ranks.size(), 4u);
  EXPECT_EQ(back->ranks[2].groups[0].issued, 3u);
  EXPECT_TRUE(back->ranks[0].groups[0].running);
  EXPECT_NEAR(back->ranks[0].groups[0].in_state_s, 12.345, 0.001);
  EXPECT_EQ(back->ranks[1].restarts, 1);
  // 64 ranks x 32 groups cannot fit 4 KiB: running groups are kept first, the rest is counted as cut.
  NodeSummary big;
  big.host = "h";
  for (int r = 0; r < 64; ++r) {
    RankRecord rr = rank_in(r, 64, 5, r == 7, 1);
    for (int g = 1; g < 32; ++g) rr.groups.push_back(rank_in(r, 64, 5, false, 1).groups[0]);
    big.ranks.push_back(rr);
  }
  const std::string text = encode(big, 4096);
  EXPECT_LE(text.size(), 4096u);
  auto small = decode(text);
  ASSERT_TRUE(small);
  EXPECT_GT(small->cut, 0u);
  bool running_kept = false;
  for (const auto& r : small->ranks) {
    for (const auto& g : r.groups) running_kept |= r.global_rank == 7 && g.running;
  }
  EXPECT_TRUE(running_kept);
  EXPECT_FALSE(decode("garbage"));
}

TEST(HangSummary, CarriesPointToPointWaitsAndReadsLinesWithoutThem) {
  NodeSummary s;
  s.host = "b";
  s.ranks = {rank_in(3, 4, 2, false, 1)};
  GroupRecord& g = s.ranks[0].groups[0];
  g.p2p_pending = 2;
  g.p2p_recv = true;
  g.p2p_peer = 2;
  g.p2p_bytes = 4096;
  g.p2p_s = 7.25;
  g.p2p_done = 11;
  auto back = decode(encode(s));
  ASSERT_TRUE(back);
  const GroupRecord& b = back->ranks[0].groups[0];
  EXPECT_EQ(b.p2p_pending, 2u);
  EXPECT_TRUE(b.p2p_recv);
  EXPECT_EQ(b.p2p_peer, 2);
  EXPECT_EQ(b.p2p_bytes, 4096u);
  EXPECT_NEAR(b.p2p_s, 7.25, 1e-9);
  EXPECT_EQ(b.p2p_done, 11u);
  // A group line of an agent built before the p2p fields: read, with none pending.
  auto old = decode("P1 1 0 a\nr 0 0 100 0\ng 77 0 2 0 3 0 2 2 0 16 1000 -1 0 3 0 12\n");
  ASSERT_TRUE(old);
  EXPECT_EQ(old->ranks[0].groups[0].p2p_pending, 0u);
  EXPECT_EQ(old->ranks[0].groups[0].issued, 3u);
  // Remote ages advance the pending p2p op's wait too.
  RemoteView v;
  s.counter = 1;
  v.update("node1", s, 100);
  EXPECT_NEAR(v.ranks(110)[0].groups[0].p2p_s, 17.25, 1e-9);
}

TEST(HangSummary, PacerWritesOnChangeAtABoundedRate) {
  PublishPacer p;
  p.min_interval_s = 2;
  p.max_writes_per_s = 20;
  p.heartbeat_s = 60;
  EXPECT_TRUE(p.due(0, 100, "a"));
  p.published(0, "a");
  EXPECT_FALSE(p.due(3, 100, "b"));  // 100 nodes: at most one write per node per 5 s
  EXPECT_TRUE(p.due(5, 100, "b"));
  p.published(5, "b");
  EXPECT_FALSE(p.due(30, 1, "b"));  // unchanged
  EXPECT_TRUE(p.due(65, 1, "b"));   // heartbeat
}

TEST(HangSummary, RemoteAgesAdvanceFromWhenTheSummaryWasFetched) {
  RemoteView v;
  NodeSummary s;
  s.counter = 1;
  s.host = "b";
  s.ranks = {rank_in(5, 8, 4, true, 10)};
  v.update("node1", s, 100);
  v.update("node1", s, 120);  // the same summary again: still aged from 100
  auto ranks = v.ranks(130);
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_NEAR(ranks[0].groups[0].in_state_s, 40, 1e-9);
}

TEST(HangSummary, VerdictsRoundTripAndNoneIsNothing) {
  const Verdicts v{.ranks = {3, 5}, .notes = {"rank 3 has not entered all_reduce #2 of group 0"}};
  EXPECT_EQ(encode(v), "3 5 \nrank 3 has not entered all_reduce #2 of group 0\n");
  auto back = decode_verdicts(encode(v));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->ranks, v.ranks);
  EXPECT_EQ(back->notes, v.notes);
  EXPECT_EQ(encode(Verdicts{}), "");
  EXPECT_FALSE(decode_verdicts(""));
  EXPECT_FALSE(decode_verdicts("\n"));
}

}  // namespace
}  // namespace ctrun::agent::hang
