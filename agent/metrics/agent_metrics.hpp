#pragma once
// The agent's metrics (--metrics-port, docs/cli.md "Metrics"): its state, the local workers by state, restarts,
// rendezvous rounds and the time spent in them, and, from the hang watch (agent/hang/), each local rank's
// collective sequence, lag and hang state; and the node's in-memory checkpoints (agent/checkpoint/). Everything is
// recorded on the agent's loop into a snapshot under a mutex (a few small copies, never a wait); scrapes read the
// snapshot on the endpoint's own thread (common/metrics/endpoint.hpp), so a scrape can never stall the loop. Wiring:
// WorkerGroup hooks for exits and starts, HangSupervisor::on_tick for the ranks, and on_step() from the loop's one
// place that changes state.

#include <functional>
#include <memory>

#include "agent/base/launch_config.hpp"
#include "agent/checkpoint/keeper.hpp"
#include "agent/policy/agent_policy.hpp"

namespace ctrun::agent {

class EventLog;
class HangSupervisor;
class WorkerGroup;

class AgentMetrics {
 public:
  // Without --metrics-port nothing is served and every call is a no-op. With it: binds where the workers' store
  // binds (worker_store_bind_host) on that port (0: a free one), says where in the log and the event log
  // ("metrics" event), or throws std::runtime_error naming the address.
  // `loop_age`: seconds since the agent's loop last turned (liveness.hpp's LoopBeat), for GET /healthz; none: no
  // /healthz.
  AgentMetrics(const LaunchConfig& config, WorkerGroup& group, HangSupervisor& hang, EventLog& events,
               std::function<double()> loop_age = {});
  ~AgentMetrics();
  AgentMetrics(const AgentMetrics&) = delete;
  AgentMetrics& operator=(const AgentMetrics&) = delete;

  // What this node holds of the job's in-memory checkpoints (ctrun_checkpoint_*): read on the loop at each tick of
  // the hang watch, like the ranks.
  void watch_checkpoints(std::function<CheckpointKeeper::Summary()> read);

  // Every step the policy takes (state changes and actions): state, restarts, rounds, time in rendezvous.
  void on_step(AgentState from, AgentEvent event, const AgentStep& step);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ctrun::agent
