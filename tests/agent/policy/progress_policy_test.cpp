// --stop-without-progress (agent/policy/progress_policy.hpp): the rule over every kind of attempt, the count in a
// row, the stop, and the baseline's words.
#include "agent/policy/progress_policy.hpp"

#include <gtest/gtest.h>

namespace ctrun::agent {
namespace {

TEST(ProgressPolicy, TheRuleOverEveryCase) {
  using S = std::optional<std::int64_t>;
  // (start step, end step, collectives) -> progress
  EXPECT_TRUE(made_progress(S{}, S{3}, 0));     // a first checkpoint
  EXPECT_TRUE(made_progress(S{3}, S{4}, 0));    // a newer one
  EXPECT_FALSE(made_progress(S{3}, S{3}, 99));  // the same step: collectives do not count once checkpoints do
  EXPECT_FALSE(made_progress(S{3}, S{}, 99));   // nothing held any more
  EXPECT_FALSE(made_progress(S{}, S{}, kCollectivesForProgress - 1));
  EXPECT_TRUE(made_progress(S{}, S{}, kCollectivesForProgress));
}

TEST(ProgressPolicy, CountsFailedAttemptsInARowAndStops) {
  ProgressCount p;
  p.attempt_started(std::nullopt);
  p.attempt_ended(std::nullopt, 0, /*failure_seen=*/true);
  EXPECT_EQ(p.failed_in_a_row(), 1);
  EXPECT_FALSE(p.stalled(1));
  p.attempt_ended(std::nullopt, 0, /*failure_seen=*/false);  // a new round without failure: not counted
  EXPECT_EQ(p.failed_in_a_row(), 1);
  p.attempt_ended(std::nullopt, 0, true);
  EXPECT_EQ(p.failed_in_a_row(), 2);
  EXPECT_TRUE(p.stalled(1));
  EXPECT_FALSE(p.stalled(0));  // off
  EXPECT_FALSE(p.stalled(2));
  p.attempt_ended(std::int64_t{5}, 0, true);  // progress resets the count, failure or not
  EXPECT_EQ(p.failed_in_a_row(), 0);
}

TEST(ProgressPolicy, BaselineWords) {
  ProgressCount p;
  EXPECT_EQ(p.baseline(4),
            "no checkpoint step committed by every local rank, 4 collective(s) completed where 10 would count");
  p.attempt_started(std::int64_t{12});
  EXPECT_EQ(p.baseline(4), "no checkpoint step newer than 12");
}

}  // namespace
}  // namespace ctrun::agent
