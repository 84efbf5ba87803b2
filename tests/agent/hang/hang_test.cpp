// The hang and straggler detector's parts (agent/hang/): the detector's rules table-tested over records with a
// fake clock; the region as workers write it (real shared memory, the writer comm uses); the sweep of regions a
// kill -9'd ctrun left; the node summary's encoding and pacing; the wording; and the stack dump of a real
// Python process through ctrun's sitecustomize.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "agent/hang/detector.hpp"
#include "agent/hang/region.hpp"
#include "agent/hang/stacks.hpp"
#include "agent/hang/status_server.hpp"
#include "agent/hang/summary.hpp"
#include "agent/hang/table.hpp"
#include "agent/hang/watch.hpp"
#include "common/http/client.hpp"
#include "common/progress.hpp"
#include "common/worker_env.hpp"

namespace ctrun::agent::hang {
namespace {

namespace fs = std::filesystem;
constexpr std::uint32_t kAllReduce = 2;

// A rank of a one-group job of `size` ranks (group 0, id 77).
RankRecord rank_in(int global, int size, std::uint64_t issued, bool running, double in_state_s, std::uint64_t done = 0,
                   double busy_s = 0) {
  RankRecord r;
  r.global_rank = global;
  r.host = "vm";
  r.local_rank = global;
  r.pid = 4711 + global;
  GroupRecord g;
  g.group_id = 77;
  g.group_rank = global;
  g.group_size = size;
  g.issued = issued;
  g.running = running;
  g.seq = running ? issued - 1 : (issued ? issued - 1 : 0);
  g.op = kAllReduce;
  g.in_state_s = in_state_s;
  g.done = done;
  g.busy_s = busy_s;
  r.groups.push_back(g);
  return r;
}

// Ranks 0,1,3 wait in all_reduce #3 for `waited` s; rank 2 finished #2 and has not issued #3.
std::vector<RankRecord> rank2_missing(double waited) {
  return {rank_in(0, 4, 4, true, waited), rank_in(1, 4, 4, true, waited - 0.5), rank_in(2, 4, 3, false, waited + 1),
          rank_in(3, 4, 4, true, waited - 0.2)};
}

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

TEST(HangTable, TextAndJsonShowEveryRank) {
  Detector d({.report_after_s = 10});
  auto ranks = rank2_missing(12);
  d.observe(0, ranks);
  const std::string text = table_text(ranks, d);
  EXPECT_NE(text.find("in op"), std::string::npos) << text;
  EXPECT_NE(text.find("between ops"), std::string::npos) << text;
  EXPECT_NE(text.find("hang: rank 2"), std::string::npos) << text;
  auto j = table_json(ranks, d);
  ASSERT_EQ(j["ranks"].size(), 4u);
  EXPECT_EQ(j["ranks"][2]["groups"][0]["state"], "between_ops");
  EXPECT_EQ(j["hangs"][0]["not_entered"][0]["rank"], 2);
}

// A pipeline: rank 1 waits in a recv from rank 0 while rank 0 is inside all_reduce #5 of another group.
std::vector<RankRecord> rank1_in_recv(double waited, std::uint64_t p2p_done = 4) {
  std::vector<RankRecord> ranks = {rank_in(0, 2, 5, false, 1), rank_in(1, 2, 5, false, waited)};
  GroupRecord& g = ranks[1].groups[0];
  g.p2p_pending = 1;
  g.p2p_recv = true;
  g.p2p_peer = 0;
  g.p2p_bytes = 4096;
  g.p2p_s = waited;
  g.p2p_done = p2p_done;
  GroupRecord other = rank_in(0, 1, 6, true, waited).groups[0];  // a group of its own: no collective hang
  other.group_id = 88;
  other.ordinal = 1;
  ranks[0].groups.push_back(other);
  return ranks;
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
  EXPECT_EQ(to_json(w)["event"], "p2p_wait");
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
  EXPECT_EQ(to_json(done.p2p[0])["event"], "p2p_wait_resolved");
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

TEST(HangTable, APendingPointToPointOpIsShownWithItsPeer) {
  Detector d({.report_after_s = 10});
  auto ranks = rank1_in_recv(3);
  d.observe(0, ranks);
  const std::string text = table_text(ranks, d);
  EXPECT_NE(text.find("in p2p      0     recv<-0"), std::string::npos) << text;
  auto j = table_json(ranks, d);
  EXPECT_EQ(j["ranks"][1]["groups"][0]["p2p"]["op"], "recv");
  EXPECT_EQ(j["ranks"][1]["groups"][0]["p2p"]["peer"], 0);
  EXPECT_EQ(j["ranks"][1]["groups"][0]["p2p"]["waited_s"], 3.0);
  EXPECT_TRUE(j["p2p_waits"].empty()) << "3 s is below the report threshold";
}

// ---- real memory ----

TEST(HangRegion, ReadsWhatTheWriterCommUsesWrites) {
  Region region(::getpid(), 7, 2, ::testing::TempDir());
  progress::Row* row = progress::row_of(region.mutable_header(), 1);
  progress::Slot& slot = row->slots[3];
  slot.identity.pid.store(::getpid());
  progress::begin_write(slot.identity);
  slot.identity.group_id.store(99);
  slot.identity.global_rank.store(5);
  slot.identity.group_rank.store(1);
  slot.identity.group_size.store(2);
  progress::end_write(slot.identity);
  progress::SlotWriter w(&slot);
  w.issued(0, kAllReduce, 0, 8);
  w.running(0, kAllReduce, 0, 8);
  w.finished(true);
  w.issued(1, kAllReduce, 0, 8);
  w.running(1, kAllReduce, 0, 8);
  w.waiting(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  RankRecord r = region.read(1);
  EXPECT_EQ(r.global_rank, 5);
  ASSERT_EQ(r.groups.size(), 1u);
  const GroupRecord& g = r.groups[0];
  EXPECT_EQ(g.group_id, 99u);
  EXPECT_EQ(g.issued, 2u);
  EXPECT_TRUE(g.running);
  EXPECT_EQ(g.seq, 1u);
  EXPECT_EQ(g.done, 1u);
  EXPECT_EQ(g.wait_peer, 0);
  EXPECT_EQ(g.wait_step, 1u);
  EXPECT_GE(g.in_state_s, 0.015);
  EXPECT_EQ(g.p2p_pending, 0u);
  // A pending send to group rank 0, posted 20 ms ago, after 3 finished p2p ops.
  w.p2p(1, progress::P2pKind::kSend, 0, 512, progress::now_ns() - 20'000'000, 3);
  const GroupRecord p = region.read(1).groups.at(0);
  EXPECT_EQ(p.p2p_pending, 1u);
  EXPECT_FALSE(p.p2p_recv);
  EXPECT_EQ(p.p2p_peer, 0);
  EXPECT_EQ(p.p2p_bytes, 512u);
  EXPECT_GE(p.p2p_s, 0.015);
  EXPECT_EQ(p.p2p_done, 3u);
  EXPECT_TRUE(region.read(0).groups.empty());
}

TEST(HangRegion, SweepRemovesOnlyRegionsOfDeadAgents) {
  const std::string dir = ::testing::TempDir() + "/sweep";
  fs::create_directories(dir);
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);  // a pid that is surely dead now
  const std::string dead = dir + "/" + progress::kRegionPrefix + std::to_string(child) + "-0";
  const std::string alive = dir + "/" + progress::kRegionPrefix + std::to_string(::getppid()) + "-3";
  const std::string other = dir + "/unrelated-" + std::to_string(child);
  for (const auto& p : {dead, alive, other}) std::ofstream(p) << "x";
  auto removed = sweep_stale_regions(dir);
  EXPECT_EQ(removed, std::vector<std::string>{dead});
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(alive));
  EXPECT_TRUE(fs::exists(other));
  fs::remove_all(dir);
}

TEST(HangStacks, ReadsCpuTimeAndCaughtSignals) {
  auto cpu = cpu_seconds(::getpid());
  ASSERT_TRUE(cpu);
  EXPECT_GE(*cpu, 0);
  EXPECT_FALSE(cpu_seconds(999999999));
  EXPECT_FALSE(catches_signal(::getpid(), stack_signal()));
  struct sigaction sa {};
  sa.sa_handler = [](int) {};
  struct sigaction old {};
  ::sigaction(stack_signal(), &sa, &old);
  EXPECT_TRUE(catches_signal(::getpid(), stack_signal()));
  ::sigaction(stack_signal(), &old, nullptr);
}

TEST(HangStacks, LastDumpLeavesOutCtrunsOwnThread) {
  const std::string path = ::testing::TempDir() + "/stack_dump_test.txt";
  std::ofstream(path) << "# ctrun: stack dumps of pid 42: signal 36, thread 43, ident 0x7f00000000aa\n"
                      << "old dump\n";
  const auto offset = file_size(path);
  std::ofstream(path, std::ios::app) << "Current thread 0x00007f00000000aa (most recent call first):\n"
                                     << "  File \"sitecustomize.py\", line 40 in idle\n\n"
                                     << "Thread 0x00007f0000000001 (most recent call first):\n"
                                     << "  File \"train.py\", line 7 in <module>\n";
  auto head = read_head(path, 42);
  ASSERT_TRUE(head);
  EXPECT_EQ(head->thread, 43);
  EXPECT_EQ(head->ident, 0x7f00000000aaull);
  const std::string dump = last_dump(path, offset, head->ident);
  EXPECT_EQ(dump, "Thread 0x00007f0000000001 (most recent call first):\n  File \"train.py\", line 7 in <module>\n");
  std::remove(path.c_str());
}

// A real Python worker through ctrun's sitecustomize: the dump shows the line it sleeps on, and the signal
// neither kills it nor interrupts it.
TEST(HangStacks, DumpsARealPythonWorkerWithNoCodeInIt) {
  const std::string python = CTRUN_TORCH_PYTHON;
  if (python.empty() || !fs::exists(python)) GTEST_SKIP() << "no python3";
  const std::string path = ::testing::TempDir() + "/stack_real.txt";
  std::remove(path.c_str());
  const std::string sitedir = std::string(CTRUN_SOURCE_DIR) + "/agent/hang/python";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("PYTHONPATH", sitedir.c_str(), 1);
    ::setenv(worker_env::kStackFile, path.c_str(), 1);
    ::setenv(worker_env::kStackSignal, std::to_string(stack_signal()).c_str(), 1);
    ::execl(python.c_str(), python.c_str(), "-c",
            "import time\nfor i in range(100):\n    time.sleep(0.05)  # the sleeping line\nprint('finished')", nullptr);
    ::_exit(127);
  }
  std::optional<StackFileHead> head;
  for (int i = 0; i < 100 && !(head = read_head(path, pid)); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(head) << "the worker never registered its handler";
  const auto offset = file_size(path);
  ASSERT_EQ(request_dump(pid, path), DumpRequest::kSent);
  std::string dump;
  for (int i = 0; i < 50 && (dump = last_dump(path, offset, head->ident)).empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(dump.find("line 3 in <module>"), std::string::npos) << dump;
  EXPECT_EQ(dump.find("in idle"), std::string::npos) << dump;
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  // A process without the handler is never sent the signal.
  EXPECT_EQ(request_dump(::getpid(), path), DumpRequest::kNoHandler);
  std::remove(path.c_str());
}

// Two builds' python dirs on PYTHONPATH (build/ and build-torch2/ both hold a copy of ctrun's sitecustomize): the
// second copy is not the sitecustomize ctrun's shadows (running it recursed without end); the real one runs once.
TEST(HangStacks, ASecondCopyOfCtrunsSitecustomizeIsNotTheShadowedOne) {
  const std::string python = CTRUN_TORCH_PYTHON;
  if (python.empty() || !fs::exists(python)) GTEST_SKIP() << "no python3";
  const fs::path dir = fs::path(::testing::TempDir()) / ("sitecustomize_copies_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "copy");
  fs::create_directories(dir / "user");
  fs::copy_file(std::string(CTRUN_SOURCE_DIR) + "/agent/hang/python/sitecustomize.py", dir / "copy/sitecustomize.py");
  std::ofstream(dir / "user/sitecustomize.py") << "open('" << (dir / "ran").string() << "', 'a').write('x')\n";
  const std::string cmd = "PYTHONPATH=" + std::string(CTRUN_SOURCE_DIR) +
                          "/agent/hang/python:" + (dir / "copy").string() + ":" + (dir / "user").string() + " " +
                          python + " -c 'print(1)' > " + (dir / "out").string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream out(dir / "out"), ran(dir / "ran");
  const std::string printed((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
  const std::string marks((std::istreambuf_iterator<char>(ran)), std::istreambuf_iterator<char>());
  EXPECT_EQ(printed, "1\n") << "nothing but the program's output";
  EXPECT_EQ(marks, "x") << "the user's sitecustomize runs once";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ctrun::agent::hang

namespace ctrun::agent::hang {
namespace {

// Plays worker `local_rank` of a two-rank group (id 5) in a HangWatch's region: `ops` all_reduces done, then
// (when `enter`) inside the next one.
void play_worker(const std::string& region_path, int local_rank, int global_rank, int ops, bool enter) {
  // The region is mapped again here, as a worker would (comm maps it once per process; the test maps by hand).
  const int fd = ::open(region_path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const std::size_t bytes = progress::region_bytes(2);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(p, MAP_FAILED);
  auto* h = static_cast<progress::RegionHeader*>(p);
  progress::Slot& slot = progress::row_of(h, local_rank)->slots[0];
  slot.identity.pid.store(4242);
  progress::begin_write(slot.identity);
  slot.identity.group_id.store(5);
  slot.identity.global_rank.store(global_rank);
  slot.identity.group_rank.store(global_rank);
  slot.identity.group_size.store(2);
  progress::end_write(slot.identity);
  progress::SlotWriter w(&slot);
  for (int i = 0; i < ops; ++i) {
    w.issued(i, kAllReduce, 0, 16);
    w.running(i, kAllReduce, 0, 16);
    w.finished(true);
  }
  if (enter) {
    w.issued(ops, kAllReduce, 0, 16);
    w.running(ops, kAllReduce, 0, 16);
  }
  ::munmap(p, bytes);
}

WatchConfig watch_config(const std::string& host, int pid) {
  WatchConfig c;
  c.detector.report_after_s = 0.2;
  c.detector.hang_timeout_s = 0.4;
  c.host = host;
  c.agent_pid = pid;
  c.local_ranks = 2;
  c.shm_dir = ::testing::TempDir();
  return c;
}

// `ctrun --status --stacks`: every local rank's stack on request, whatever its backend (this worker has no
// records at all), with the reason for a rank that has none.
TEST(HangWatch, StacksOnRequestForEveryLocalRank) {
  const std::string python = CTRUN_TORCH_PYTHON;
  if (python.empty() || !fs::exists(python)) GTEST_SKIP() << "no python3";
  const std::string stacks = ::testing::TempDir() + "/stack_on_request.txt";
  std::remove(stacks.c_str());
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("PYTHONPATH", (std::string(CTRUN_SOURCE_DIR) + "/agent/hang/python").c_str(), 1);
    ::setenv(worker_env::kStackFile, stacks.c_str(), 1);
    ::setenv(worker_env::kStackSignal, std::to_string(stack_signal()).c_str(), 1);
    ::execl(python.c_str(), python.c_str(), "-c", "import time\ntime.sleep(30)  # line 2\n", nullptr);
    ::_exit(127);
  }
  for (int i = 0; i < 100 && !read_head(stacks, pid); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(read_head(stacks, pid)) << "the worker never registered its handler";
  HangWatch watch(watch_config("vm", 1000003));
  watch.begin_attempt(0, 0);
  EXPECT_FALSE(watch.tick(0).requested_stacks) << "nothing asked, nothing answered";
  // Rank 1 is this test process: no handler, so it is never sent the signal.
  watch.set_workers({{0, 0, pid, stacks}, {1, 1, static_cast<int>(::getpid()), stacks}});
  watch.request_stacks(0);
  watch.request_stacks(0.1);  // joins the open request
  std::optional<std::string> answer;
  for (int i = 0; i < 50 && !(answer = watch.tick(0.1).requested_stacks); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(answer) << "every dump came in well before dump_wait_s";
  EXPECT_NE(answer->find("stack of rank 0 (host vm, local_rank 0, pid " + std::to_string(pid) + "):"),
            std::string::npos)
      << *answer;
  EXPECT_NE(answer->find("line 2 in <module>"), std::string::npos) << *answer;
  EXPECT_NE(answer->find("stack of rank 1 (host vm, local_rank 1"), std::string::npos) << *answer;
  EXPECT_NE(answer->find("(no stack handler: not a Python worker"), std::string::npos) << *answer;
  EXPECT_FALSE(watch.tick(0.2).requested_stacks) << "answered once";
  // No workers: said so at once.
  watch.set_workers({});
  watch.request_stacks(1);
  EXPECT_EQ(watch.tick(1).requested_stacks.value_or(""), "no workers are running on this node\n");
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  watch.end_attempt();
  std::remove(stacks.c_str());
}

TEST(HangWatch, OnOneNodeTheVerdictFailsTheLocalCulprit) {
  HangWatch watch(watch_config("vm", 1000001));
  watch.begin_attempt(0, 0);
  const std::string path = watch.env_for(0, "")[worker_env::kProgressFile];
  ASSERT_FALSE(path.empty());
  watch.set_workers({{0, 0, 111, ""}, {1, 1, 112, ""}});
  play_worker(path, 0, 0, 3, true);
  play_worker(path, 1, 1, 3, false);
  EXPECT_TRUE(watch.tick(0).warnings.empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(450));
  WatchOutput out = watch.tick(1);
  ASSERT_EQ(out.warnings.size(), 2u);  // the report and the verdict
  EXPECT_NE(out.warnings[1].find("rank 1 (host vm, local_rank 1, pid 112) has not entered all_reduce #3 of group 0"),
            std::string::npos)
      << out.warnings[1];
  EXPECT_EQ(out.fail_local_ranks, std::vector<int>{1});
  EXPECT_EQ(out.events.size(), 2u);
  EXPECT_NE(watch.table_text().find("hang: rank 1"), std::string::npos);
  watch.end_attempt();
  EXPECT_FALSE(fs::exists(path));
}

TEST(HangWatch, TwoNodesEachNameTheHangAndOnlyTheCulpritsNodeActs) {
  // Node A runs rank 0 (waiting in #3), node B rank 1 (not entered). They see each other through summaries.
  HangWatch a(watch_config("a", 1000002)), b(watch_config("b", 1000003));
  a.begin_attempt(0, 0);
  b.begin_attempt(0, 0);
  a.set_workers({{0, 0, 111, ""}});
  b.set_workers({{0, 1, 222, ""}});
  play_worker(a.env_for(0, "")[worker_env::kProgressFile], 0, 0, 3, true);
  play_worker(b.env_for(0, "")[worker_env::kProgressFile], 0, 1, 3, false);
  a.tick(0);
  b.tick(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(450));
  a.tick(0.45);
  b.tick(0.45);
  auto sa = a.summary_due(0.45, 2);
  auto sb = b.summary_due(0.45, 2);
  ASSERT_TRUE(sa && sb);
  a.remote("b", *sb, 0.5);
  b.remote("a", *sa, 0.5);
  WatchOutput oa = a.tick(0.5), ob = b.tick(0.5);
  ASSERT_EQ(oa.warnings.size(), 2u);
  EXPECT_NE(oa.warnings[0].find("rank 1 (host b, local_rank 0, pid 222) has not entered"), std::string::npos)
      << oa.warnings[0];
  EXPECT_TRUE(oa.fail_local_ranks.empty()) << "node A's agent never acts on node B's rank";
  ASSERT_EQ(ob.warnings.size(), 2u);
  EXPECT_EQ(ob.fail_local_ranks, std::vector<int>{0});
  EXPECT_FALSE(a.summary_due(0.6, 2)) << "paced: no second write within the interval";
}

}  // namespace
}  // namespace ctrun::agent::hang

namespace ctrun::agent::hang {
namespace {

TEST(HangStatusServer, ServesTheLatestSnapshotAsTextAndJson) {
  boost::asio::io_context io;  // the agent's loop, run here by a thread of the test
  StatusServer server(io);
  ASSERT_GT(server.port(), 0);
  std::thread loop([&] { io.run(); });                      // the server's pending accept keeps it running
  auto publish = [&](std::string text, std::string json) {  // on the loop, as the agent does
    std::promise<void> done;
    boost::asio::post(io, [&] {
      server.publish(text, json);
      done.set_value();
    });
    done.get_future().wait();
  };
  publish("rank 0 in op\n", R"({"ranks":[{"rank":0}]})");
  EXPECT_EQ(http::get("127.0.0.1", server.port(), "/"), "rank 0 in op\n");
  EXPECT_EQ(http::get("127.0.0.1", server.port(), "/status.json"), "{\"ranks\":[{\"rank\":0}]}\n");
  publish("rank 0 between ops\n", "{}");
  EXPECT_EQ(http::get("127.0.0.1", server.port(), "/"), "rank 0 between ops\n");
  EXPECT_THROW(http::get("127.0.0.1", server.port(), "/nope"), std::runtime_error);
  // A client that connects and sends nothing holds one of the server's places for at most its 2 s deadline.
  const int idle = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(server.port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(idle, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(http::get("127.0.0.1", server.port(), "/", 4000), "rank 0 between ops\n");
  ::close(idle);
  io.stop();
  loop.join();
}

}  // namespace
}  // namespace ctrun::agent::hang
