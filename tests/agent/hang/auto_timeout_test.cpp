// `--hang-timeout auto` (agent/hang/auto_timeout.hpp): the learner on a fake clock, and the watch applying it.
#include "agent/hang/auto_timeout.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

#include "agent/hang/detector.hpp"
#include "records_fixture.hpp"

namespace ctrun::agent::hang::test {
namespace {

// Four ranks that complete one all_reduce every `step_s` (rank 0 computes while ranks 1-3 wait inside the op),
// looked at twice a second from t0 to t1; `done0` ops done at t0.
struct Job {
  double step_s = 1;
  std::vector<RankRecord> at(double t) const {
    const auto done = static_cast<std::uint64_t>(t / step_s);
    const double since = t - static_cast<double>(done) * step_s;  // since the last op ended
    std::vector<RankRecord> ranks;
    ranks.push_back(rank_in(0, 4, done, false, since, done));
    for (int r = 1; r < 4; ++r) ranks.push_back(rank_in(r, 4, done + 1, true, since, done));
    return ranks;
  }
};

Learned run(TimeoutLearner& l, const Job& job, double t0, double t1) {
  Learned out;
  for (double t = t0; t <= t1 + 1e-9; t += 0.5) out = l.observe(t, job.at(t));
  return out;
}

TEST(AutoTimeoutParse, AutoAloneFloorAndCeiling) {
  EXPECT_FALSE(parse_auto_timeout("30"));
  EXPECT_FALSE(parse_auto_timeout("0"));
  auto a = parse_auto_timeout("auto");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->floor_s, 120);
  EXPECT_EQ(a->ceiling_s, 1200);
  EXPECT_EQ(a->multiple, 4);
  a = parse_auto_timeout("auto:5");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->floor_s, 5);
  EXPECT_EQ(a->ceiling_s, 1200);
  a = parse_auto_timeout("auto:0.5:60");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->floor_s, 0.5);
  EXPECT_EQ(a->ceiling_s, 60);
}

TEST(AutoTimeoutParse, BadSpellingsSayWhatToGive) {
  for (const char* bad : {"auto:", "auto:x", "auto:-1", "auto:0", "auto:1:2:3", "auto:10:5", "auto:5s"}) {
    EXPECT_THROW(parse_auto_timeout(bad), std::invalid_argument) << bad;
  }
  try {
    parse_auto_timeout("auto:10:5");
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("above the ceiling"), std::string::npos) << e.what();
  }
}

TEST(TimeoutLearner, TheCeilingUntilTheWarmUpIsOver) {
  TimeoutLearner l(AutoTimeout{.floor_s = 1, .ceiling_s = 100, .warmup = 10});
  Learned x = run(l, Job{.step_s = 1}, 0, 9.5);  // nine ops done since the first look
  EXPECT_FALSE(x.warm);
  EXPECT_EQ(x.timeout_s, 100);
  x = run(l, Job{.step_s = 1}, 10, 10.5);
  EXPECT_TRUE(x.warm);
  EXPECT_EQ(x.completed, 10u);
  EXPECT_NEAR(x.longest_gap_s, 1, 1e-9);
  EXPECT_NEAR(x.timeout_s, 4, 1e-9);
}

TEST(TimeoutLearner, AMultipleOfTheLongestGapWithinTheBounds) {
  TimeoutLearner l(AutoTimeout{.floor_s = 1, .ceiling_s = 100, .warmup = 3});
  Learned x = run(l, Job{.step_s = 2}, 0, 20);
  EXPECT_NEAR(x.longest_gap_s, 2, 1e-9);
  EXPECT_NEAR(x.timeout_s, 8, 1e-9);
  // A longer healthy gap (a slow step that finished) raises it; shorter ones never lower it.
  std::vector<RankRecord> later;  // op #10 ended at 27 s, 7 s after op #9
  later.push_back(rank_in(0, 4, 11, false, 0.5, 11));
  for (int r = 1; r < 4; ++r) later.push_back(rank_in(r, 4, 12, true, 0.5, 11));
  for (double t = 20.5; t < 27.5; t += 0.5) l.observe(t, Job{.step_s = 2}.at(20));
  x = l.observe(27.5, later);
  EXPECT_NEAR(x.longest_gap_s, 7, 1e-9);
  EXPECT_NEAR(x.timeout_s, 28, 1e-9);
  x = run(l, Job{.step_s = 0.5}, 28, 40);
  EXPECT_NEAR(x.timeout_s, 28, 1e-9);

  TimeoutLearner fast(AutoTimeout{.floor_s = 5, .ceiling_s = 100, .warmup = 3});
  EXPECT_EQ(run(fast, Job{.step_s = 0.5}, 0, 10).timeout_s, 5) << "the floor";
  TimeoutLearner slow_job(AutoTimeout{.floor_s = 5, .ceiling_s = 30, .warmup = 3});
  EXPECT_EQ(run(slow_job, Job{.step_s = 10}, 0, 60).timeout_s, 30) << "the ceiling";
}

TEST(TimeoutLearner, AGapIsNeverShorterThanTheRealOne) {
  // Steps of 1.3 s looked at every 0.5 s: each op is seen done up to 0.5 s late, but its end is taken from the
  // record (in_state_s), so the gap is 1.3 s, not a tick-rounded 1.0 or 1.5.
  TimeoutLearner l(AutoTimeout{.floor_s = 0.1, .ceiling_s = 100, .warmup = 3});
  Learned x = run(l, Job{.step_s = 1.3}, 0, 30);
  EXPECT_NEAR(x.longest_gap_s, 1.3, 1e-6);
  // Many ops between two looks (bursts of small collectives): the gap is the whole time since the last op seen,
  // an upper bound.
  TimeoutLearner burst(AutoTimeout{.floor_s = 0.1, .ceiling_s = 100, .warmup = 3});
  burst.observe(0, Job{.step_s = 0.1}.at(0));
  x = burst.observe(0.5, Job{.step_s = 0.1}.at(0.5));
  x = burst.observe(1.0, Job{.step_s = 0.1}.at(1.0));
  EXPECT_GE(x.longest_gap_s, 0.1);
}

TEST(TimeoutLearner, AHangIsNotLearnedAndResetForgets) {
  TimeoutLearner l(AutoTimeout{.floor_s = 1, .ceiling_s = 100, .warmup = 3});
  run(l, Job{.step_s = 1}, 0, 10);
  // Rank 2 stops before op #11: nobody completes anything for 60 s; the wait is no gap.
  Learned x;
  for (double t = 10.5; t < 70; t += 0.5) x = l.observe(t, rank2_missing(t - 10));
  EXPECT_NEAR(x.longest_gap_s, 1, 1e-9);
  EXPECT_NEAR(x.timeout_s, 4, 1e-9);
  l.reset();
  EXPECT_FALSE(l.current().warm);
  EXPECT_EQ(l.current().timeout_s, 100);
}

TEST(TimeoutLearner, TheDetectorFailsAHangPastTheLearnedTimeout) {
  TimeoutLearner l(AutoTimeout{.floor_s = 1, .ceiling_s = 100, .warmup = 3});
  Detector d(DetectorConfig{.report_after_s = 300});
  d.set_hang_timeout(run(l, Job{.step_s = 1}, 0, 10).timeout_s);  // 4 s
  EXPECT_TRUE(d.observe(13, rank2_missing(3.5)).hangs.empty());
  const auto f = d.observe(14.5, rank2_missing(4.5)).hangs;
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].kind, HangFinding::Kind::kVerdict);
  EXPECT_EQ(f[0].to_fail, std::vector<int>{2});
}

}  // namespace
}  // namespace ctrun::agent::hang::test
