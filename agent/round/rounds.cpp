#include "agent/round/rounds.hpp"

#include "agent/launch/rendezvous_factory.hpp"

namespace ctrun::agent {

NodeFailureSettings node_failure_settings(const LaunchConfig& c, bool static_multi_node) {
  const bool alone = is_single_node(c) || static_multi_node;
  return {alone ? 0 : c.restarts.max_node_failures.value_or(c.restarts.max_restarts), c.restarts.node_failure_window_s,
          c.restarts.node_cooldown_min_s, c.restarts.node_cooldown_max_s};
}

Rounds::Rounds(boost::asio::io_context& io, const LaunchConfig& config, const EnvLookup& env, HelperLane& lane,
               EventLog& events, bool static_multi_node, RoundJoiner::Callbacks joined)
    : health(io, config, env, events),
      joiner(io, config, lane, events, health, std::move(joined)),
      membership(io, lane, config.restarts.monitor_interval),
      step_out(io, lane, config, events, node_failure_settings(config, static_multi_node)),
      end(io, lane, config) {}

void Rounds::cancel() {
  joiner.cancel();
  membership.cancel();
  step_out.cancel();
  end.cancel();
}

}  // namespace ctrun::agent
