// The one place that words the hang stack's findings: each finding's log line, level and event kind; stacks for the
// console and on request; failure notes; the verdicts other nodes read.
#include "agent/hang/wording.hpp"

#include <gtest/gtest.h>

#include "tests/agent/hang/records_fixture.hpp"

namespace ctrun::agent::hang {
namespace {
using namespace test;  // NOLINT: the fixture's records

TEST(HangWording, SecondsReadAsPeopleSayThem) {
  EXPECT_EQ(human_seconds(0.012), "12 ms");
  EXPECT_EQ(human_seconds(1.5), "1.5 s");
  EXPECT_EQ(human_seconds(123), "2 min 3 s");
}

TEST(HangWording, EveryFindingIsALineAndAnEventOfItsKind) {
  const DetectorConfig config{.report_after_s = 10, .hang_timeout_s = 20};
  Detector d(config);
  WatchOutput out;
  out.findings = d.observe(0, rank2_missing(30));
  ASSERT_EQ(out.findings.hangs.size(), 2u);
  out.findings.stragglers.push_back({.group_ordinal = 0, .global_rank = 2, .lag_s = 0.5, .ops = 10, .window_s = 60});
  out.quiet_s = 400;
  const auto said = say(out, rank2_missing(30), config);
  ASSERT_EQ(said.size(), 4u);
  EXPECT_EQ(said[0].event, Event::kHangSuspected);
  EXPECT_TRUE(said[0].warning);
  EXPECT_NE(said[0].line.find("(possible hang; reported after 10.0 s, not acted on)"), std::string::npos)
      << said[0].line;
  EXPECT_EQ(said[0].fields["not_entered"][0]["rank"], 2);
  EXPECT_FALSE(said[0].fields.contains("event")) << "the event log adds the kind's name itself";
  EXPECT_EQ(said[1].event, Event::kHangTimeout);
  EXPECT_NE(said[1].line.find("(hang timeout 20.0 s)"), std::string::npos) << said[1].line;
  EXPECT_EQ(said[2].event, Event::kStraggler);
  EXPECT_FALSE(said[2].warning) << "stragglers go to the log at info";
  EXPECT_EQ(said[2].line.rfind("rank 2 is last into the collectives of group 0", 0), 0u) << said[2].line;
  EXPECT_EQ(said[3].event, Event::kQuiet);
  EXPECT_EQ(said[3].fields["quiet_s"], 400);
  // The group moves on: resolved, at info.
  WatchOutput later;
  later.findings = d.observe(1, {rank_in(0, 4, 4, false, 0.1), rank_in(1, 4, 4, false, 0.1),
                                 rank_in(2, 4, 4, false, 0.1), rank_in(3, 4, 4, false, 0.1)});
  const auto resolved = say(later, {}, config);
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].event, Event::kHangResolved);
  EXPECT_FALSE(resolved[0].warning);
  EXPECT_EQ(resolved[0].line, "all_reduce #3 of group 0 went on after 30.0 s (reported as a possible hang)");
}

TEST(HangWording, PointToPointWaitsAreReportedNeverActedOn) {
  const DetectorConfig config{.report_after_s = 10};
  Detector d(config);
  WatchOutput out;
  out.findings = d.observe(0, rank1_in_recv(10.5));
  const auto said = say(out, rank1_in_recv(10.5), config);
  ASSERT_EQ(said.size(), 1u);
  EXPECT_EQ(said[0].event, Event::kP2pWait);
  EXPECT_NE(said[0].line.find("never acted on: point-to-point waits are only reported)"), std::string::npos);
  EXPECT_EQ(said[0].fields["op"], "recv");
}

TEST(HangWording, StacksSayWhoseAndWhyNone) {
  const LocalWorker w{.local_rank = 1, .global_rank = 5, .pid = 42, .stack_file = "/logs/5/stacks.txt"};
  EXPECT_EQ(stack_words({.worker = w, .text = "  File \"x.py\"\n"}),
            "stack of rank 5 (pid 42, /logs/5/stacks.txt):\n  File \"x.py\"\n");
  EXPECT_EQ(stack_words({.worker = w, .none = NoStack::kNotWritten}),
            "stack of rank 5 (pid 42, /logs/5/stacks.txt):\n(no stack was written)\n");
  const std::string asked = requested_stacks_words(
      {{.worker = w, .none = NoStack::kExited}, {.worker = w, .none = NoStack::kNotWritten}}, "vm", 2);
  EXPECT_NE(asked.find("stack of rank 5 (host vm, local_rank 1, pid 42):\n(the worker has exited)\n"),
            std::string::npos)
      << asked;
  EXPECT_NE(asked.find("(no stack was written within 2.0 s (is it stopped, or in uninterruptible I/O?))"),
            std::string::npos)
      << asked;
  EXPECT_EQ(requested_stacks_words({}, "vm", 2), "no workers are running on this node\n");
}

TEST(HangWording, OpenVerdictsAreWordedForTheOtherNodes) {
  Detector d({.report_after_s = 10, .hang_timeout_s = 20});
  d.observe(0, rank2_missing(30));
  const Verdicts v = verdicts_of(d, rank2_missing(30));
  EXPECT_EQ(v.ranks, std::vector<int>{2});
  ASSERT_EQ(v.notes.size(), 1u);
  EXPECT_EQ(v.notes[0].rfind("rank 2 (host vm, local_rank 2, pid 4713) has not entered all_reduce #3", 0), 0u);
  EXPECT_TRUE(verdicts_of(Detector({.report_after_s = 10}), {}).ranks.empty());
}

}  // namespace
}  // namespace ctrun::agent::hang
