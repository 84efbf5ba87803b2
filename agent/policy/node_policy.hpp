#pragma once
// Failing nodes stepped out (--max-node-failures, --node-failure-window, --node-cooldown; docs/cli.md "Nodes"): when
// does this node's failure make it step out of the job, for how long, and when is a node back from a cooldown still
// on probation. Pure: time is handed in (a fake clock in tests/agent/policy/node_policy_test.cpp, which runs every
// case); the loop's room agent/round/node_step_out carries out what it decides.
//
// Only a failure that started on this node counts (its workers failed first in their round: the rendezvous' claim).
// A node that failed first --max-node-failures times within the window steps out for a cooldown of MIN, doubled at
// each step-out, at most MAX; back from one, a single failure of its own within a window steps it out again
// (Horovod's blacklist: a host that fails again after its cooldown goes out again, for twice as long).

#include <chrono>
#include <cstddef>
#include <deque>

namespace ctrun::agent {

struct NodeFailureSettings {
  int max_failures = 0;  // 0: never step out (one node, the static backend, or --max-node-failures 0)
  double window_s = 0;
  double cooldown_min_s = 0;
  double cooldown_max_s = 0;
};

// One step-out, as decided.
struct StepOutPlan {
  int step_outs = 0;          // this one included
  double cooldown_s = 0;      // how long the node stays out
  std::size_t failures = 0;   // first failures within the window that led to it
  bool again = false;         // back from a cooldown less than a window ago, out again on fewer failures
};

class NodeFailures {
 public:
  using Clock = std::chrono::steady_clock;

  explicit NodeFailures(NodeFailureSettings settings) : settings_(settings) {}

  bool enabled() const { return settings_.max_failures > 0; }
  const NodeFailureSettings& settings() const { return settings_; }
  // An attempt's workers are gone; `failed_first`: they failed, and first in their round. Counted within the window.
  void attempt_ended(bool failed_first, Clock::time_point now);
  // Whether this attempt's failure (`failed_first` as above) makes the node step out now.
  bool failing(bool failed_first, Clock::time_point now) const;
  // Steps out now: the cooldown, and the count of failures is reset.
  StepOutPlan step_out();
  // The cooldown is over: on probation for one window.
  void came_back(Clock::time_point now);
  int step_outs() const { return step_outs_; }

 private:
  Clock::duration window() const;

  NodeFailureSettings settings_;
  std::deque<Clock::time_point> first_failures_;  // within the window
  int step_outs_ = 0;
  Clock::time_point probation_until_{};
};

}  // namespace ctrun::agent
