#pragma once
// The rooms that talk to the rendezvous for the agent's loop, made together: the health gate, the joiner, the
// membership watch, the failing-node step-out and the round's end (connect, exit barrier, close, leave).

#include "agent/base/command_line.hpp"
#include "agent/base/launch_config.hpp"
#include "agent/health/health_gate.hpp"
#include "agent/policy/node_policy.hpp"
#include "agent/round/membership_watch.hpp"
#include "agent/round/node_step_out.hpp"
#include "agent/round/round_end.hpp"
#include "agent/round/round_joiner.hpp"

namespace ctrun::agent {

// One node and the static backend never step out (nobody could go on without them); else --max-node-failures,
// which defaults to --max-restarts.
NodeFailureSettings node_failure_settings(const LaunchConfig& config, bool static_multi_node);

struct Rounds {
  Rounds(boost::asio::io_context& io, const LaunchConfig& config, const EnvLookup& env, HelperLane& lane,
         EventLog& events, bool static_multi_node, RoundJoiner::Callbacks joined);
  // Every timer off and a running health command killed: the agent is done.
  void cancel();

  HealthGate health;
  RoundJoiner joiner;
  MembershipWatch membership;
  NodeStepOut step_out;
  RoundEnd end;
};

}  // namespace ctrun::agent
