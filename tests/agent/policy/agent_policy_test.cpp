// The agent's decision table (agent/policy/agent_policy.hpp), over every state x event x facts combination: the
// transitions that mean something are listed explicitly; every other pair must leave the state alone.
#include "agent/policy/agent_policy.hpp"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <tuple>
#include <vector>

namespace ctrun::agent {
namespace {

using S = AgentState;
using E = AgentEvent;
using A = AgentAction;

std::vector<S> all_states() {
  std::vector<S> v;
  for (int i = 0; i < kAgentStateCount; ++i) v.push_back(static_cast<S>(i));
  return v;
}
std::vector<E> all_events() {
  std::vector<E> v;
  for (int i = 0; i < kAgentEventCount; ++i) v.push_back(static_cast<E>(i));
  return v;
}
constexpr int kFactCombinations = 128;
std::vector<AgentFacts> all_facts() {
  std::vector<AgentFacts> v;
  for (int bits = 0; bits < kFactCombinations; ++bits)
    v.push_back({(bits & 1) != 0, (bits & 2) != 0, (bits & 4) != 0, (bits & 8) != 0, (bits & 16) != 0,
                 (bits & 32) != 0, (bits & 64) != 0});
  return v;
}
std::string describe(S s, E e, const AgentFacts& f) {
  return std::string(state_name(s)) + " + " + std::string(event_name(e)) +
         " [failure=" + std::to_string(f.failure_seen) + " membership=" + std::to_string(f.membership_changed) +
         " restarts_left=" + std::to_string(f.restarts_left) + " signalled=" + std::to_string(f.signalled) +
         " stalled=" + std::to_string(f.progress_stalled) + " failing=" + std::to_string(f.node_failing) +
         " others_go_on=" + std::to_string(f.others_go_on) + "]";
}

// The outcome of an ended group, for each of the 16 combinations of the first four facts, written out by hand;
// then what progress_stalled changes (only a failure that is not overtaken by a signal: the job stops, restarts
// left or not); then what a failing node changes (only a failure, not overtaken by a signal or a stalled job, and
// only when the others can go on without it: it steps out, restarts left or not).
AgentStep expected_after_group(const AgentFacts& f) {
  static const std::map<std::tuple<bool, bool, bool, bool>, AgentStep> stalled = {
      // failure, membership, restarts_left, signalled
      {{true, false, false, false}, {S::kClosing, A::kCloseNoProgress}},
      {{true, false, true, false}, {S::kClosing, A::kCloseNoProgress}},  // stops with restarts left
      {{true, true, false, false}, {S::kClosing, A::kCloseNoProgress}},
      {{true, true, true, false}, {S::kClosing, A::kCloseNoProgress}},
  };
  if (f.progress_stalled) {
    if (auto it = stalled.find({f.failure_seen, f.membership_changed, f.restarts_left, f.signalled});
        it != stalled.end())
      return it->second;
  }
  if (f.node_failing && f.others_go_on && f.failure_seen && !f.signalled && !f.progress_stalled)
    return {S::kSteppedOut, A::kStepOut};
  static const std::map<std::tuple<bool, bool, bool, bool>, AgentStep> table = {
      // failure, membership, restarts_left, signalled
      {{false, false, false, false}, {S::kExitBarrier, A::kWaitExitBarrier}},
      {{false, false, true, false}, {S::kExitBarrier, A::kWaitExitBarrier}},
      {{false, true, false, false}, {S::kRendezvous, A::kRejoin}},  // a new round costs no restart
      {{false, true, true, false}, {S::kRendezvous, A::kRejoin}},
      {{true, false, false, false}, {S::kClosing, A::kCloseFailed}},
      {{true, false, true, false}, {S::kRendezvous, A::kRestartGroup}},
      {{true, true, false, false}, {S::kClosing, A::kCloseFailed}},  // failure beats membership change
      {{true, true, true, false}, {S::kRendezvous, A::kRestartGroup}},
      {{false, false, false, true}, {S::kClosing, A::kLeave}},  // a signal beats everything: leave, not close
      {{false, false, true, true}, {S::kClosing, A::kLeave}},
      {{false, true, false, true}, {S::kClosing, A::kLeave}},
      {{false, true, true, true}, {S::kClosing, A::kLeave}},
      {{true, false, false, true}, {S::kClosing, A::kLeave}},
      {{true, false, true, true}, {S::kClosing, A::kLeave}},
      {{true, true, false, true}, {S::kClosing, A::kLeave}},
      {{true, true, true, true}, {S::kClosing, A::kLeave}},
  };
  return table.at({f.failure_seen, f.membership_changed, f.restarts_left, f.signalled});
}

// Every (state, event) pair that changes something, with what it must do (independent of the facts unless noted).
std::map<std::pair<S, E>, AgentStep> meaningful() {
  return {
      {{S::kInitialising, E::kHandlerReady}, {S::kRendezvous, A::kJoinRound}},
      {{S::kInitialising, E::kRendezvousFailed}, {S::kDone, A::kExit}},
      {{S::kInitialising, E::kSignal}, {S::kDone, A::kExitNow}},
      {{S::kInitialising, E::kSignalAgain}, {S::kDone, A::kExitNow}},
      {{S::kRendezvous, E::kRoundFormed}, {S::kRunning, A::kSpawnWorkers}},
      {{S::kRendezvous, E::kRendezvousFailed}, {S::kDone, A::kExit}},
      {{S::kRendezvous, E::kSignal}, {S::kDone, A::kExitNow}},
      {{S::kRendezvous, E::kSignalAgain}, {S::kDone, A::kExitNow}},
      {{S::kRunning, E::kWorkerFailed}, {S::kStopping, A::kStopWorkers}},
      {{S::kRunning, E::kMembershipChanged}, {S::kStopping, A::kStopWorkers}},
      {{S::kRunning, E::kSignal}, {S::kStopping, A::kForwardSignal}},
      {{S::kRunning, E::kSignalAgain}, {S::kStopping, A::kKillWorkers}},
      {{S::kStopping, E::kSignal}, {S::kStopping, A::kForwardSignal}},  // a failure stop is overtaken by the signal
      {{S::kStopping, E::kSignalAgain}, {S::kStopping, A::kKillWorkers}},
      {{S::kExitBarrier, E::kBarrierDone}, {S::kClosing, A::kCloseSucceeded}},
      {{S::kExitBarrier, E::kSignal}, {S::kDone, A::kExitNow}},
      {{S::kExitBarrier, E::kSignalAgain}, {S::kDone, A::kExitNow}},
      {{S::kClosing, E::kClosed}, {S::kDone, A::kExit}},
      {{S::kClosing, E::kSignal}, {S::kDone, A::kExitNow}},
      {{S::kClosing, E::kSignalAgain}, {S::kDone, A::kExitNow}},
      {{S::kSteppedOut, E::kCooldownOver}, {S::kRendezvous, A::kRejoin}},  // back as a spare: no restart counted
      {{S::kSteppedOut, E::kSignal}, {S::kDone, A::kExitNow}},
      {{S::kSteppedOut, E::kSignalAgain}, {S::kDone, A::kExitNow}},
  };
}

TEST(AgentPolicy, EveryCombination) {
  const auto table = meaningful();
  int checked = 0;
  for (S s : all_states()) {
    for (E e : all_events()) {
      for (const AgentFacts& f : all_facts()) {
        SCOPED_TRACE(describe(s, e, f));
        AgentStep got = decide(s, e, f);
        AgentStep want{s, A::kNone};
        if ((s == S::kRunning || s == S::kStopping) && e == E::kGroupExited) {
          want = expected_after_group(f);
        } else if (auto it = table.find({s, e}); it != table.end()) {
          want = it->second;
        }
        EXPECT_EQ(state_name(got.next), state_name(want.next));
        EXPECT_EQ(action_name(got.action), action_name(want.action));
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, kAgentStateCount * kAgentEventCount * kFactCombinations);
}

// The promises the docs make, checked over every combination rather than by example.
TEST(AgentPolicy, NeverDeafToASignal) {
  for (S s : all_states()) {
    if (s == S::kDone) continue;
    for (const AgentFacts& f : all_facts()) {
      for (E e : {E::kSignal, E::kSignalAgain}) {
        SCOPED_TRACE(describe(s, e, f));
        AgentStep step = decide(s, e, f);
        EXPECT_NE(step.action, A::kNone);
        // Either the workers are being stopped, or the agent is finished at once.
        EXPECT_TRUE(step.next == S::kStopping || step.next == S::kDone);
      }
    }
  }
}

TEST(AgentPolicy, DoneIsTerminalAndSignalledGroupsNeverRestartOrClose) {
  for (E e : all_events()) {
    for (const AgentFacts& f : all_facts()) {
      EXPECT_EQ(decide(S::kDone, e, f), (AgentStep{S::kDone, A::kNone}));
      if (!f.signalled) continue;
      for (S s : {S::kRunning, S::kStopping}) {
        AgentStep step = decide(s, E::kGroupExited, f);
        EXPECT_NE(step.action, A::kRestartGroup);
        EXPECT_NE(step.action, A::kRejoin);
        EXPECT_NE(step.action, A::kCloseFailed);
        EXPECT_NE(step.action, A::kCloseNoProgress);
        EXPECT_NE(step.action, A::kCloseSucceeded);
      }
    }
  }
}

// A job that makes no progress never restarts again, and a job that made progress is never stopped for it.
TEST(AgentPolicy, NoProgressStopsOnlyAFailedUnsignalledGroup) {
  for (const AgentFacts& f : all_facts()) {
    for (S s : {S::kRunning, S::kStopping}) {
      SCOPED_TRACE(describe(s, E::kGroupExited, f));
      AgentStep step = decide(s, E::kGroupExited, f);
      if (f.progress_stalled && f.failure_seen && !f.signalled) {
        EXPECT_EQ(step, (AgentStep{S::kClosing, A::kCloseNoProgress}));
      } else {
        EXPECT_NE(step.action, A::kCloseNoProgress);
      }
      if (f.progress_stalled) {
        EXPECT_NE(step.action, A::kRestartGroup);
      }
    }
  }
}

// Stepping out never strands the job (only with others to go on) and never hides a signal, and a node that is not
// failing never steps out.
TEST(AgentPolicy, OnlyAFailingNodeStepsOutAndOnlyWhenTheOthersGoOn) {
  for (const AgentFacts& f : all_facts()) {
    for (S s : all_states()) {
      for (E e : all_events()) {
        SCOPED_TRACE(describe(s, e, f));
        const AgentStep step = decide(s, e, f);
        if (step.action != A::kStepOut) continue;
        EXPECT_TRUE(f.node_failing && f.others_go_on && f.failure_seen);
        EXPECT_FALSE(f.signalled);
        EXPECT_EQ(e, E::kGroupExited);
      }
    }
  }
}

TEST(AgentPolicy, NamesAreDistinct) {
  std::set<std::string_view> states, events;
  for (S s : all_states()) states.insert(state_name(s));
  for (E e : all_events()) events.insert(event_name(e));
  EXPECT_EQ(states.size(), static_cast<std::size_t>(kAgentStateCount));
  EXPECT_EQ(events.size(), static_cast<std::size_t>(kAgentEventCount));
  EXPECT_EQ(states.count("?"), 0u);
  EXPECT_EQ(events.count("?"), 0u);
}

}  // namespace
}  // namespace ctrun::agent
