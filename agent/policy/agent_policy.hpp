#pragma once
// The agent's state machine: its states, the events the event loop delivers, and the one pure function that
// decides what comes next. Everything the agent does between two events (fork workers, send signals, call the
// rendezvous on the helper thread) lives in agent.cpp; everything it *decides* lives here, so the whole policy
// can be read in one table and tested over every combination (tests/agent/agent_policy_test.cpp).
//
//   Initialising --HandlerReady--> Rendezvous --RoundFormed--> Running --GroupExited (all 0)--> ExitBarrier
//        |                            ^   |                    |  WorkerFailed / MembershipChanged / Signal
//        |                            |   |                    v
//        |      restart or new round  +---+-------------- Stopping --GroupExited--> Closing --Closed--> Done
//        +--RendezvousFailed------------> Done                            ExitBarrier --BarrierDone--> Closing
//                                     ^                    |  GroupExited (this node failing, the others go on)
//                                     |                    v
//                                     +--CooldownOver-- SteppedOut
//
// A death signal (SIGINT/SIGTERM/SIGHUP/SIGQUIT) is honoured in every state: with workers running it stops them
// (forwarding the signal, SIGKILL after --shutdown-timeout); while a blocking call runs on the helper thread
// (connect, rendezvous, restart agreement, exit barrier, close) the agent does not wait for it: it exits at once.
// A second death signal kills the workers at once.

#include <string_view>

namespace ctrun::agent {

enum class AgentState {
  kInitialising,  // making the rendezvous handler (connects to the rendezvous store): helper thread
  kRendezvous,    // waiting for a round, then the restart-count agreement: helper thread
  kRunning,       // the worker group runs; the loop waits for exits, signals and membership polls
  kStopping,      // workers were signalled (failure, membership change or death signal); waiting for them to exit
  kExitBarrier,   // every local worker succeeded; waiting for the other nodes: helper thread
  kClosing,       // closing the run (shutdown) or leaving it (signal): helper thread, bounded
  kSteppedOut,    // out of the job for a cooldown (this node kept failing): step_out() on the helper, then a timer
  kDone,          // terminal: the exit code is known
};
inline constexpr int kAgentStateCount = 8;

enum class AgentEvent {
  kHandlerReady,       // the rendezvous handler exists
  kRendezvousFailed,   // making the handler or joining a round failed (timeout, closed, store lost)
  kRoundFormed,        // a round completed and its members agreed on the restart count
  kWorkerFailed,       // a worker exited non-zero (or could not start) while the group was not being stopped
  kMembershipChanged,  // a node waits to join, a member left or died, or the rendezvous store was lost
  kGroupExited,        // the last local worker was reaped
  kSignal,             // the first death signal
  kSignalAgain,        // a further death signal
  kBarrierDone,        // the exit barrier passed or timed out (a timeout is logged, not fatal, as torchrun)
  kClosed,             // shutdown()/leave() returned or ran out of time
  kCooldownOver,       // a stepped-out node's cooldown ended
};
inline constexpr int kAgentEventCount = 11;

// What the agent must do on entering the next state.
enum class AgentAction {
  kNone,             // ignore the event (stale or irrelevant in this state)
  kJoinRound,        // next_rendezvous() on the helper thread (first round)
  kSpawnWorkers,     // start the worker group of the round just formed
  kStopWorkers,      // SIGTERM every worker's process group, SIGKILL after --shutdown-timeout
  kForwardSignal,    // send the death signal to every worker's process group, SIGKILL after --shutdown-timeout
  kKillWorkers,      // SIGKILL every worker's process group now (a second signal)
  kRestartGroup,     // count one restart (TORCHELASTIC_RESTART_COUNT+1), then join the next round
  kRejoin,           // join the next round without counting a restart (membership change, as torchrun)
  kWaitExitBarrier,  // exit_barrier(--exit-barrier-timeout) on the helper thread
  kCloseSucceeded,   // shutdown() the run (success)
  kCloseFailed,      // print the failure summary, then shutdown() the run (no restarts left)
  kCloseNoProgress,  // the summary and why the job stopped, then shutdown() the run; exit kNoProgressExitCode
  kLeave,            // leave() the round without closing the run (death signal; torchrun #67742)
  kStepOut,          // step_out() of the round (the others go on without this node), then wait out the cooldown
  kExitNow,          // a blocking call cannot be waited for: exit with the death signal's code at once
  kExit,             // done: exit with the code already decided
};

// What the agent knows when it decides: the outcome of the attempt, the budget, the signal.
struct AgentFacts {
  bool failure_seen = false;        // a worker of this attempt failed (not one stopped by ctrun)
  bool membership_changed = false;  // the round ended under this attempt
  bool restarts_left = false;       // --max-restarts not used up
  bool signalled = false;           // a death signal was received
  bool progress_stalled = false;    // --stop-without-progress restarts in a row made no progress
  // This node's workers failed first in their round --max-node-failures times within --node-failure-window.
  bool node_failing = false;
  // The round can go on without this node: an elastic rendezvous with >= MIN other members or a spare waiting.
  bool others_go_on = false;
};

// The exit code of a job stopped for making no progress: distinct from success (0), a failure with no restarts
// left or a death signal (1) and a bad command line (2), so a requeue script can tell "do not requeue" apart.
inline constexpr int kNoProgressExitCode = 3;
// The exit code of a node that --health-check kept out of every round until the rendezvous' join_timeout.
inline constexpr int kHealthCheckExitCode = 4;

struct AgentStep {
  AgentState next;
  AgentAction action;
  friend bool operator==(const AgentStep&, const AgentStep&) = default;
};

// The whole policy. Pure: no clock, no I/O. Events that do not apply to a state leave it unchanged (kNone).
AgentStep decide(AgentState state, AgentEvent event, const AgentFacts& facts);

std::string_view state_name(AgentState s);
std::string_view event_name(AgentEvent e);
std::string_view action_name(AgentAction a);

}  // namespace ctrun::agent
