// The detector's rules table-tested over records with a fake clock: hangs (report, verdict, resolved, victims,
// unseen members), point-to-point waits, stragglers, and the quiet rule of workers without records.
#include "agent/hang/detector.hpp"

#include <gtest/gtest.h>

#include "agent/hang/table.hpp"
#include "agent/hang/wording.hpp"
#include "tests/agent/hang/records_fixture.hpp"

namespace ctrun::agent::hang {
namespace {
using namespace test;  // NOLINT: the fixture's records

TEST(HangDetector, NamesTheRankThatHasNotEnteredOnceTheWaitPassesTheThreshold) {
  Detector d({.report_after_s = 10});
  EXPECT_TRUE(d.observe(100, rank2_missing(9.9)).hangs.empty());
  auto f = d.observe(101, rank2_missing(10.2));
  ASSERT_EQ(f.hangs.size(), 1u);
  const HangFinding& h = f.hangs[0];
  EXPECT_EQ(h.kind, HangFinding::Kind::kReport);
  EXPECT_EQ(h.seq, 3u);
  ASSERT_EQ(h.culprits.size(), 1u);
  EXPECT_EQ(h.culprits[0].global_rank, 2);
  EXPECT_EQ(h.waiting, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(describe(h, rank2_missing(10.2)),
            "rank 2 (host vm, local_rank 2, pid 4713) has not entered all_reduce #3 of group 0; ranks 0,1,3 have "
            "waited 10.2 s");
  // Reported once per episode; no verdict without a hang timeout.
  EXPECT_TRUE(d.observe(102, rank2_missing(11)).hangs.empty());
  EXPECT_TRUE(d.observe(5000, rank2_missing(4000)).hangs.empty());
  ASSERT_EQ(d.open_hangs().size(), 1u);
}

TEST(HangDetector, HangTimeoutGivesAVerdictNamingTheCulpritToFail) {
  Detector d({.report_after_s = 300, .hang_timeout_s = 20});
  EXPECT_TRUE(d.observe(0, rank2_missing(19)).hangs.empty());
  auto f = d.observe(1, rank2_missing(20.5));
  ASSERT_EQ(f.hangs.size(), 1u);
  EXPECT_EQ(f.hangs[0].kind, HangFinding::Kind::kVerdict);
  EXPECT_EQ(f.hangs[0].to_fail, std::vector<int>{2});
  EXPECT_TRUE(d.observe(2, rank2_missing(21.5)).hangs.empty());
}

TEST(HangDetector, MovingOnEndsTheEpisodeAndSaysSo) {
  Detector d({.report_after_s = 10});
  ASSERT_EQ(d.observe(0, rank2_missing(12)).hangs.size(), 1u);
  // Rank 2 arrives: everyone finished #3.
  std::vector<RankRecord> after = {rank_in(0, 4, 4, false, 0.1), rank_in(1, 4, 4, false, 0.1),
                                   rank_in(2, 4, 4, false, 0.1), rank_in(3, 4, 4, false, 0.1)};
  auto f = d.observe(1, after);
  ASSERT_EQ(f.hangs.size(), 1u);
  EXPECT_EQ(f.hangs[0].kind, HangFinding::Kind::kResolved);
  EXPECT_TRUE(d.open_hangs().empty());
}

TEST(HangDetector, SlowButProgressingRankIsNeverCalledHung) {
  // Rank 2 takes 0.5 s per step; the others wait up to 0.5 s in each all_reduce, then all move on.
  Detector d({.report_after_s = 2, .hang_timeout_s = 3, .straggler_every_s = 10});
  double now = 0;
  std::uint64_t done = 0;
  bool straggler_named = false;
  for (int step = 0; step < 60; ++step, now += 0.5) {
    done = static_cast<std::uint64_t>(step);
    std::vector<RankRecord> ranks;
    for (int r = 0; r < 4; ++r) {
      const bool slow = r == 2;
      // Sampled mid-step: the fast ones wait in #step, the slow one computes before it.
      ranks.push_back(rank_in(r, 4, slow ? done : done + 1, !slow, 0.25, done, slow ? 0.001 * done : 0.5 * done));
    }
    auto f = d.observe(now, ranks);
    EXPECT_TRUE(f.hangs.empty()) << "step " << step;
    for (const auto& s : f.stragglers) {
      EXPECT_EQ(s.global_rank, 2);
      EXPECT_NEAR(s.lag_s, 0.5, 0.01);
      straggler_named = true;
    }
  }
  EXPECT_TRUE(straggler_named);
  EXPECT_NEAR(d.lag_of(2), 0.5, 0.01);
  EXPECT_NEAR(d.lag_of(0), 0.0, 0.01);
}

TEST(HangDetector, EvenRanksHaveNoStraggler) {
  Detector d({.straggler_every_s = 5});
  for (int t = 0; t <= 20; ++t) {
    std::vector<RankRecord> ranks;
    for (int r = 0; r < 4; ++r) {
      ranks.push_back(rank_in(r, 4, 10u * t, false, 0, 10u * t, 0.01 * t * (1 + 0.05 * r)));
    }
    EXPECT_TRUE(d.observe(t, ranks).stragglers.empty());
  }
}

TEST(HangDetector, ACulpritWaitingInAnotherGroupIsAVictimNotTheOneToFail) {
  // Group 77 (ranks 0-3): rank 2 and 3 missing. Rank 2 itself waits in group 88's all_reduce #0 for rank 3,
  // which waits nowhere (the root cause).
  auto ranks = rank2_missing(30);
  ranks[3] = rank_in(3, 4, 3, false, 31);
  const GroupRecord other{.group_id = 88,
                          .group_rank = 0,
                          .group_size = 2,
                          .ordinal = 1,
                          .issued = 1,
                          .running = true,
                          .op = kAllReduce,
                          .in_state_s = 29};
  ranks[2].groups.push_back(other);
  GroupRecord other3 = other;
  other3.group_rank = 1;
  other3.issued = 0;
  other3.running = false;
  ranks[3].groups.push_back(other3);
  Detector d({.report_after_s = 10, .hang_timeout_s = 20});
  auto f = d.observe(0, ranks);
  ASSERT_EQ(f.hangs.size(), 4u);  // a report and a verdict for each group
  for (const auto& h : f.hangs) {
    if (h.kind != HangFinding::Kind::kVerdict) continue;
    EXPECT_EQ(h.to_fail, std::vector<int>{3}) << describe(h, ranks);
  }
  bool victim_named = false;
  for (const auto& h : f.hangs) {
    if (h.group_id == 77 && h.kind == HangFinding::Kind::kReport) {
      EXPECT_NE(describe(h, ranks).find("itself waiting in all_reduce #0 of group 1"), std::string::npos)
          << describe(h, ranks);
      victim_named = true;
    }
  }
  EXPECT_TRUE(victim_named);
}

TEST(HangDetector, EveryRankInsideTheOpNamesWhomTheyWaitFor) {
  std::vector<RankRecord> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(rank_in(r, 2, 6, true, 50));
    ranks.back().groups[0].wait_peer = 1 - r;
  }
  Detector d({.report_after_s = 10});
  auto f = d.observe(0, ranks);
  ASSERT_EQ(f.hangs.size(), 1u);
  EXPECT_TRUE(f.hangs[0].culprits.empty());
  EXPECT_EQ(f.hangs[0].waited_for, (std::vector<int>{0, 1}));
  EXPECT_NE(describe(f.hangs[0], ranks).find("every rank of group 0 (0,1) is inside all_reduce #5"), std::string::npos);
}

TEST(HangDetector, AMemberWithNoRecordIsNamedByGroupRankAndNeverFailed) {
  auto ranks = rank2_missing(30);
  ranks.erase(ranks.begin() + 2);
  Detector d({.report_after_s = 10, .hang_timeout_s = 20});
  auto f = d.observe(0, ranks);
  ASSERT_EQ(f.hangs.size(), 2u);
  EXPECT_EQ(f.hangs[1].kind, HangFinding::Kind::kVerdict);
  EXPECT_TRUE(f.hangs[1].to_fail.empty());
  EXPECT_NE(describe(f.hangs[0], ranks).find("group rank 2 (no record"), std::string::npos);
}

TEST(HangDetector, QuietWatchCountsTimeWithNoCpuAndNoOutput) {
  QuietWatch w;
  EXPECT_EQ(w.observe(0, {{0, 1.0, -1}, {1, 1.0, -1}}), 0);
  EXPECT_EQ(w.observe(1, {{0, 1.5, -1}, {1, 1.0, -1}}), 0);     // rank 0 computes
  EXPECT_EQ(w.observe(2, {{0, 1.5, -1}, {1, 1.0, -1}}), 1);     // from here on both are blocked
  EXPECT_EQ(w.observe(3, {{0, 1.5, -1}, {1, 1.0001, -1}}), 2);  // a trace of CPU is not activity
  EXPECT_EQ(w.observe(5, {{0, 1.5, -1}, {1, 1.0001, -1}}), 4);
  EXPECT_EQ(w.observe(6, {{0, 1.5, 5.5}, {1, 1.0001, -1}}), 0);  // rank 0 printed
}

TEST(HangDetector, ALongPointToPointWaitIsReportedOnceNeverFailedAndResolved) {
  Detector d({.report_after_s = 10, .hang_timeout_s = 20});
  EXPECT_TRUE(d.observe(0, rank1_in_recv(9)).p2p.empty());
  Findings f = d.observe(1, rank1_in_recv(10.5));
  ASSERT_EQ(f.p2p.size(), 1u);
  const P2pFinding& w = f.p2p[0];
  EXPECT_EQ(w.kind, P2pFinding::Kind::kReport);
  EXPECT_EQ(w.global_rank, 1);
  EXPECT_TRUE(w.recv);
  EXPECT_EQ(w.peer, 0);
  EXPECT_EQ(describe(w, rank1_in_recv(10.5)),
            "rank 1 (host vm, local_rank 1, pid 4712) has waited 10.5 s in recv from rank 0 of group 0 (4096 bytes); "
            "rank 0: inside all_reduce #5 of group 1 for 10.5 s");
  EXPECT_EQ(event_of(w), Event::kP2pWait);
  EXPECT_TRUE(f.hangs.empty()) << "no collective is waited in by the group's members";
  Findings later = d.observe(2, rank1_in_recv(25));
  EXPECT_TRUE(later.p2p.empty()) << "reported once";
  EXPECT_TRUE(later.hangs.empty()) << "never a verdict: point-to-point waits are only reported";
  EXPECT_EQ(d.open_p2p_waits().size(), 1u);
  EXPECT_NE(table_text(rank1_in_recv(25), d).find("p2p wait: rank 1"), std::string::npos);
  // The recv finished (one more p2p op done; another pending since 0.1 s): resolved.
  Findings done = d.observe(3, rank1_in_recv(0.1, 5));
  ASSERT_EQ(done.p2p.size(), 1u);
  EXPECT_EQ(done.p2p[0].kind, P2pFinding::Kind::kResolved);
  EXPECT_EQ(event_of(done.p2p[0]), Event::kP2pWaitResolved);
  EXPECT_TRUE(d.open_p2p_waits().empty());
}

TEST(HangDetector, ACulpritWaitingInAPointToPointOpSaysSo) {
  // Ranks 0,1,3 wait in all_reduce #3; rank 2 has not entered it: it waits in a recv from rank 1 (group 1).
  Detector d({.report_after_s = 10});
  auto ranks = rank2_missing(12);
  GroupRecord pipe = rank_in(2, 4, 0, false, 12).groups[0];
  pipe.group_id = 99;
  pipe.ordinal = 1;
  pipe.p2p_pending = 1;
  pipe.p2p_recv = true;
  pipe.p2p_peer = 0;
  pipe.p2p_s = 12;
  ranks[2].groups.push_back(pipe);
  GroupRecord pipe1 = pipe;
  pipe1.group_rank = 0;
  pipe1.p2p_pending = 0;
  ranks[1].groups.push_back(pipe1);
  Findings f = d.observe(0, ranks);
  ASSERT_EQ(f.hangs.size(), 1u);
  EXPECT_NE(describe(f.hangs[0], ranks)
                .find("rank 2 (host vm, local_rank 2, pid 4713) (itself waiting in recv from "
                      "rank 1 of group 1) has not entered all_reduce #3 of group 0"),
            std::string::npos)
      << describe(f.hangs[0], ranks);
}

}  // namespace
}  // namespace ctrun::agent::hang
