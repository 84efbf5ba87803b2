#include "agent/policy/agent_policy.hpp"

namespace ctrun::agent {
namespace {

using S = AgentState;
using E = AgentEvent;
using A = AgentAction;

// The group has ended (every local worker reaped): the outcome, in torchrun's order of precedence. A death signal
// beats everything (leave, never close, the run: torchrun #67742); a failure beats a membership change (it uses up
// a restart, and the other nodes follow it as a membership change); a new round does not use up --max-restarts.
// A failure after too many restarts without progress stops the job whether or not restarts are left: the code
// says "restarting again will not help", which is what a requeue script must learn even from the last attempt.
// A node that keeps failing first steps out when the others can go on without it (Horovod's blacklist): whatever
// restarts it has left, since its restarts would only fail again, and its leaving costs the others no restart.
AgentStep after_group(const AgentFacts& f) {
  if (f.signalled) return {S::kClosing, A::kLeave};
  if (f.failure_seen) {
    if (f.progress_stalled) return {S::kClosing, A::kCloseNoProgress};
    if (f.node_failing && f.others_go_on) return {S::kSteppedOut, A::kStepOut};
    return f.restarts_left ? AgentStep{S::kRendezvous, A::kRestartGroup} : AgentStep{S::kClosing, A::kCloseFailed};
  }
  if (f.membership_changed) return {S::kRendezvous, A::kRejoin};
  return {S::kExitBarrier, A::kWaitExitBarrier};
}

// True in the states where the agent waits for a call on the helper thread that it cannot interrupt.
bool blocked_on_helper(S s) {
  return s == S::kInitialising || s == S::kRendezvous || s == S::kExitBarrier || s == S::kClosing ||
         s == S::kSteppedOut;
}

}  // namespace

AgentStep decide(AgentState state, AgentEvent event, const AgentFacts& facts) {
  const AgentStep stay{state, A::kNone};
  if (state == S::kDone) return stay;
  switch (event) {
    case E::kSignal:
      if (blocked_on_helper(state)) return {S::kDone, A::kExitNow};
      return {S::kStopping, A::kForwardSignal};  // running, or already stopping for a failure: forward it
    case E::kSignalAgain:
      if (blocked_on_helper(state)) return {S::kDone, A::kExitNow};
      return {S::kStopping, A::kKillWorkers};
    case E::kHandlerReady:
      return state == S::kInitialising ? AgentStep{S::kRendezvous, A::kJoinRound} : stay;
    case E::kRendezvousFailed:
      return state == S::kInitialising || state == S::kRendezvous ? AgentStep{S::kDone, A::kExit} : stay;
    case E::kRoundFormed:
      return state == S::kRendezvous ? AgentStep{S::kRunning, A::kSpawnWorkers} : stay;
    case E::kWorkerFailed:
    case E::kMembershipChanged:
      return state == S::kRunning ? AgentStep{S::kStopping, A::kStopWorkers} : stay;
    case E::kGroupExited:
      return state == S::kRunning || state == S::kStopping ? after_group(facts) : stay;
    case E::kBarrierDone:
      return state == S::kExitBarrier ? AgentStep{S::kClosing, A::kCloseSucceeded} : stay;
    case E::kClosed:
      return state == S::kClosing ? AgentStep{S::kDone, A::kExit} : stay;
    case E::kCooldownOver:  // back as a spare: a new round, not a restart
      return state == S::kSteppedOut ? AgentStep{S::kRendezvous, A::kRejoin} : stay;
  }
  return stay;
}

std::string_view state_name(AgentState s) {
  switch (s) {
    case S::kInitialising:
      return "initialising";
    case S::kRendezvous:
      return "rendezvous";
    case S::kRunning:
      return "running";
    case S::kStopping:
      return "stopping";
    case S::kExitBarrier:
      return "exit_barrier";
    case S::kClosing:
      return "closing";
    case S::kSteppedOut:
      return "stepped_out";
    case S::kDone:
      return "done";
  }
  return "?";
}

std::string_view event_name(AgentEvent e) {
  switch (e) {
    case E::kHandlerReady:
      return "handler_ready";
    case E::kRendezvousFailed:
      return "rendezvous_failed";
    case E::kRoundFormed:
      return "round_formed";
    case E::kWorkerFailed:
      return "worker_failed";
    case E::kMembershipChanged:
      return "membership_changed";
    case E::kGroupExited:
      return "group_exited";
    case E::kSignal:
      return "signal";
    case E::kSignalAgain:
      return "signal_again";
    case E::kBarrierDone:
      return "barrier_done";
    case E::kClosed:
      return "closed";
    case E::kCooldownOver:
      return "cooldown_over";
  }
  return "?";
}

std::string_view action_name(AgentAction a) {
  switch (a) {
    case A::kNone:
      return "none";
    case A::kJoinRound:
      return "join_round";
    case A::kSpawnWorkers:
      return "spawn_workers";
    case A::kStopWorkers:
      return "stop_workers";
    case A::kForwardSignal:
      return "forward_signal";
    case A::kKillWorkers:
      return "kill_workers";
    case A::kRestartGroup:
      return "restart_group";
    case A::kRejoin:
      return "rejoin";
    case A::kWaitExitBarrier:
      return "wait_exit_barrier";
    case A::kCloseSucceeded:
      return "close_succeeded";
    case A::kCloseFailed:
      return "close_failed";
    case A::kCloseNoProgress:
      return "close_no_progress";
    case A::kLeave:
      return "leave";
    case A::kStepOut:
      return "step_out";
    case A::kExitNow:
      return "exit_now";
    case A::kExit:
      return "exit";
  }
  return "?";
}

}  // namespace ctrun::agent
