// Failing nodes stepped out (agent/policy/node_policy.hpp), on a fake clock: every case of the rule (failed first
// or not, on probation or not, how many failures within the window), the window sliding, the cooldown's doubling
// and cap, and the "again" wording's condition.
#include "agent/policy/node_policy.hpp"

#include <gtest/gtest.h>

namespace ctrun::agent {
namespace {

using Clock = NodeFailures::Clock;
using std::chrono::seconds;

constexpr NodeFailureSettings kThreeIn60{3, 60.0, 10.0, 100.0};

Clock::time_point at(int s) { return Clock::time_point{} + seconds(1000 + s); }

TEST(NodePolicy, DisabledNeverFails) {
  NodeFailures off(NodeFailureSettings{0, 60.0, 10.0, 100.0});
  EXPECT_FALSE(off.enabled());
  for (int i = 0; i < 10; ++i) off.attempt_ended(true, at(i));
  EXPECT_FALSE(off.failing(true, at(10)));
  EXPECT_FALSE(off.failing(false, at(10)));
}

TEST(NodePolicy, EveryCaseOfTheRule) {
  // (failures within the window before this one, failed first now, on probation) -> failing
  struct Case {
    int earlier;
    bool failed_first;
    bool probation;
    bool failing;
  };
  const Case cases[] = {
      {0, false, false, false}, {0, true, false, false}, {1, true, false, false}, {2, true, false, true},
      {3, true, false, true},   {2, false, false, false}, {0, false, true, false}, {0, true, true, true},
      {1, true, true, true},    {5, false, true, false},
  };
  for (const auto& c : cases) {
    NodeFailures n(kThreeIn60);
    if (c.probation) {
      for (int i = 0; i < 3; ++i) n.attempt_ended(true, at(i));
      ASSERT_TRUE(n.failing(true, at(3)));
      n.step_out();
      n.came_back(at(5));  // probation until at(65)
    }
    for (int i = 0; i < c.earlier; ++i) n.attempt_ended(true, at(10 + i));
    n.attempt_ended(c.failed_first, at(20));
    EXPECT_EQ(n.failing(c.failed_first, at(20)), c.failing)
        << "earlier=" << c.earlier << " first=" << c.failed_first << " probation=" << c.probation;
  }
}

TEST(NodePolicy, OnlyFailuresWithinTheWindowCount) {
  NodeFailures n(kThreeIn60);
  n.attempt_ended(true, at(0));
  n.attempt_ended(true, at(30));
  n.attempt_ended(true, at(70));  // the first is 70 s old: out of the window
  EXPECT_FALSE(n.failing(true, at(70)));
  n.attempt_ended(true, at(80));
  EXPECT_TRUE(n.failing(true, at(80)));
  n.attempt_ended(false, at(81));  // not first: not counted
  EXPECT_TRUE(n.failing(true, at(81)));
}

TEST(NodePolicy, CooldownDoublesUpToItsCapAndProbationEnds) {
  NodeFailures n(kThreeIn60);
  const double expected[] = {10, 20, 40, 80, 100, 100};
  for (int k = 0; k < 6; ++k) {
    for (int i = 0; i < 3; ++i) n.attempt_ended(true, at(1000 * k + i));
    const StepOutPlan plan = n.step_out();
    EXPECT_EQ(plan.step_outs, k + 1);
    EXPECT_DOUBLE_EQ(plan.cooldown_s, expected[k]);
    EXPECT_EQ(plan.failures, 3u);
    EXPECT_FALSE(plan.again);  // out on the full count each time
    n.came_back(at(1000 * k + 500));
  }
  // Back from a cooldown: one failure of its own within the window steps it out again, worded as such.
  n.attempt_ended(true, at(5510));
  EXPECT_TRUE(n.failing(true, at(5510)));
  const StepOutPlan again = n.step_out();
  EXPECT_TRUE(again.again);
  EXPECT_EQ(again.failures, 1u);
  // After the probation window, one failure is one failure.
  n.came_back(at(6000));
  n.attempt_ended(true, at(6061));
  EXPECT_FALSE(n.failing(true, at(6061)));
}

}  // namespace
}  // namespace ctrun::agent
