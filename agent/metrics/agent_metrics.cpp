#include "agent/metrics/agent_metrics.hpp"

#include "agent/metrics/liveness.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "agent/base/event_log.hpp"
#include "agent/hang/supervisor.hpp"
#include "agent/hang/watch.hpp"
#include "agent/launch/worker_store.hpp"
#include "agent/process/worker_group.hpp"
#include "common/log.hpp"
#include "common/metrics/endpoint.hpp"

namespace ctrun::agent {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr std::array<const char*, 5> kWorkerStates = {"not_started", "running", "succeeded", "failed", "stopped"};
constexpr std::array<const char*, 3> kExitOutcomes = {"succeeded", "failed", "stopped"};

std::size_t worker_state(const Worker& w) {
  if (w.running) return 1;
  if (w.pid <= 0 && w.exitcode == 0) return 0;
  if (w.stopped_by_us) return 4;
  return w.exitcode == 0 ? 2 : 3;
}

// A local rank's hang state: 0 none, 1 waiting inside a reported hang, 2 the hang's culprit (has not entered the
// collective the others wait in), 3 a culprit the verdict fails (--hang-timeout).
std::map<int, int> hang_states(const hang::Detector& detector) {
  std::map<int, int> out;
  auto raise = [&](int rank, int state) { out[rank] = std::max(out[rank], state); };
  for (const auto& h : detector.open_hangs()) {
    for (int r : h.waiting) raise(r, 1);
    for (const auto& c : h.culprits)
      if (c.global_rank >= 0) raise(c.global_rank, h.kind == hang::HangFinding::Kind::kVerdict ? 3 : 2);
    for (int r : h.to_fail) raise(r, 3);
  }
  return out;
}

struct RankRow {
  int rank = 0;
  int local_rank = 0;
  double lag_s = 0;
  int hang_state = 0;
  struct Group {
    int ordinal = 0;
    std::uint64_t issued = 0;
    bool running = false;
  };
  std::vector<Group> groups;
};

// What a scrape reads; written on the loop.
struct Snapshot {
  AgentState state = AgentState::kInitialising;
  std::uint64_t restarts = 0;
  std::uint64_t rounds = 0;
  double rendezvous_s = 0;                     // completed rendezvous time
  SteadyClock::time_point rendezvous_since{};  // while in kRendezvous
  double last_rendezvous_s = 0;
  std::array<std::uint64_t, kWorkerStates.size()> workers{};
  std::array<std::uint64_t, kExitOutcomes.size()> exits{};
  std::uint64_t teardown_crashes = 0;  // counted as succeeded too
  std::vector<RankRow> ranks;
  std::optional<CheckpointKeeper::Summary> checkpoints;  // none until the first tick with checkpoints read
  SteadyClock::time_point checkpoints_at{};              // when `checkpoints` was read (its age grows from there)
};

// The node's in-memory checkpoints; nothing while they are off and nothing is held.
void checkpoint_families(const Snapshot& s, SteadyClock::time_point now, metrics::Families& out) {
  using metrics::counter;
  using metrics::gauge;
  if (!s.checkpoints) return;
  const CheckpointKeeper::Summary& c = *s.checkpoints;
  if (!c.on && c.bytes == 0 && c.newest_step < 0) return;
  const auto d = [](auto v) { return static_cast<double>(v); };
  out.push_back(gauge("ctrun_checkpoint_newest_step",
                      "The newest step every local rank holds in memory, the step a restart resumes from (-1: none).")
                    .add(d(c.newest_step)));
  out.push_back(gauge("ctrun_checkpoint_oldest_step", "The oldest step some local rank holds in memory (-1: none).")
                    .add(d(c.oldest_step)));
  out.push_back(gauge("ctrun_checkpoint_bytes", "Memory this node's checkpoints take (own snapshots and replicas).")
                    .add(d(c.bytes)));
  out.push_back(
      gauge("ctrun_checkpoint_limit_bytes", "The node's limit for checkpoints (--checkpoint-memory).").add(d(c.limit)));
  if (c.replicas > 0) {
    out.push_back(
        gauge("ctrun_checkpoint_replicas", "Other nodes this node copies its newest step to.").add(d(c.replicas)));
    out.push_back(
        gauge("ctrun_checkpoint_replicated_step", "The newest step copied to every replication target (-1: none).")
            .add(d(c.replicated_step)));
    const std::int64_t lag = c.replicated_step >= 0 ? c.newest_step - c.replicated_step : c.newest_step + 1;
    out.push_back(gauge("ctrun_checkpoint_replication_lag_steps",
                        "Steps the newest held step is ahead of the newest replicated one.")
                      .add(d(lag < 0 ? 0 : lag)));
    if (c.replicated_age_s >= 0) {
      const double age = c.replicated_age_s + std::chrono::duration<double>(now - s.checkpoints_at).count();
      out.push_back(
          gauge("ctrun_checkpoint_replication_age_seconds", "Time since the last copy to another node completed.")
              .add(age));
    }
  }
  out.push_back(counter("ctrun_checkpoint_replication_sent_bytes_total", "Checkpoint bytes sent to other nodes.")
                    .add(d(c.bytes_sent)));
  out.push_back(
      counter("ctrun_checkpoint_replication_received_bytes_total", "Checkpoint bytes received from other nodes.")
          .add(d(c.bytes_received)));
  if (c.spilling)
    out.push_back(
        gauge("ctrun_checkpoint_spilled_step", "The newest step this run wrote to --checkpoint-dir (-1: none yet).")
            .add(d(c.spilled_step)));
}

metrics::Families families(const Snapshot& s, SteadyClock::time_point now) {
  using metrics::counter;
  using metrics::gauge;
  metrics::Families out;
  auto& state = out.emplace_back(gauge("ctrun_agent_state", "1 for the agent's current state, 0 for the others."));
  for (int i = 0; i < kAgentStateCount; ++i) {
    const auto st = static_cast<AgentState>(i);
    state.add(st == s.state ? 1 : 0, {{"state", std::string(state_name(st))}});
  }
  auto& workers = out.emplace_back(gauge("ctrun_workers", "This node's workers of the current attempt, by state."));
  for (std::size_t i = 0; i < kWorkerStates.size(); ++i)
    workers.add(static_cast<double>(s.workers[i]), {{"state", kWorkerStates[i]}});
  auto& exits = out.emplace_back(counter("ctrun_worker_exits_total", "This node's worker exits, by outcome."));
  for (std::size_t i = 0; i < kExitOutcomes.size(); ++i)
    exits.add(static_cast<double>(s.exits[i]), {{"outcome", kExitOutcomes[i]}});
  out.push_back(counter("ctrun_worker_teardown_crashes_total",
                        "Worker exits whose Python program ended with status 0 and that then died in native teardown "
                        "(counted as succeeded).")
                    .add(static_cast<double>(s.teardown_crashes)));
  out.push_back(counter("ctrun_restarts_total", "Worker-group restarts after a failure (--max-restarts used).")
                    .add(static_cast<double>(s.restarts)));
  out.push_back(counter("ctrun_rendezvous_rounds_total", "Rendezvous rounds this node joined that formed.")
                    .add(static_cast<double>(s.rounds)));
  double in_rendezvous = s.rendezvous_s;
  if (s.state == AgentState::kRendezvous)
    in_rendezvous += std::chrono::duration<double>(now - s.rendezvous_since).count();
  out.push_back(counter("ctrun_rendezvous_seconds_total",
                        "Time spent waiting for rounds (and the restart-count "
                        "agreement), the current wait included.")
                    .add(in_rendezvous));
  out.push_back(
      gauge("ctrun_last_rendezvous_seconds", "How long the last completed rendezvous took.").add(s.last_rendezvous_s));
  // Filled first and appended last: references into `out` would not survive its growth.
  auto seq =
      gauge("ctrun_rank_collective_seq", "Collectives a local rank has issued in a group (backend \"ctrun\" only).");
  auto in_op = gauge("ctrun_rank_in_collective", "1 while a local rank is inside a collective.");
  auto lag =
      gauge("ctrun_rank_lag_seconds", "A local rank's lag per collective behind the others' median, last window.");
  auto hang =
      gauge("ctrun_rank_hang_state",
            "0 no hang; 1 waiting in a reported hang; 2 its culprit; 3 a culprit being failed (--hang-timeout).");
  for (const auto& r : s.ranks) {
    const std::string rank = std::to_string(r.rank);
    const std::string local = std::to_string(r.local_rank);
    for (const auto& g : r.groups) {
      std::vector<std::pair<std::string, std::string>> labels = {
          {"rank", rank}, {"local_rank", local}, {"group", std::to_string(g.ordinal)}};
      seq.add(static_cast<double>(g.issued), labels);
      in_op.add(g.running ? 1 : 0, labels);
    }
    lag.add(r.lag_s, {{"rank", rank}, {"local_rank", local}});
    hang.add(r.hang_state, {{"rank", rank}, {"local_rank", local}});
  }
  for (auto* f : {&seq, &in_op, &lag, &hang}) out.push_back(std::move(*f));
  checkpoint_families(s, now, out);
  return out;
}

}  // namespace

struct AgentMetrics::Impl {
  WorkerGroup& group;
  std::mutex mutex;
  Snapshot snapshot;  // guarded by mutex
  std::unique_ptr<metrics::Endpoint> endpoint;
  std::function<CheckpointKeeper::Summary()> read_checkpoints;  // called on the loop only

  void count_workers() {
    std::array<std::uint64_t, kWorkerStates.size()> counts{};
    for (const auto& w : group.workers()) ++counts[worker_state(w)];
    std::lock_guard<std::mutex> lock(mutex);
    snapshot.workers = counts;
  }

  void on_exit(const Worker& w) {
    const std::size_t outcome = w.stopped_by_us ? 2 : w.exitcode == 0 ? 0 : 1;
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++snapshot.exits[outcome];
      if (w.teardown_exitcode) ++snapshot.teardown_crashes;
    }
    count_workers();
  }

  void on_tick(const hang::HangWatch& watch) {
    const auto states = hang_states(watch.detector());
    std::vector<RankRow> rows;
    for (const auto& r : watch.local_ranks()) {
      RankRow row{r.global_rank, r.local_rank, watch.detector().lag_of(r.global_rank), 0, {}};
      if (auto it = states.find(r.global_rank); it != states.end()) row.hang_state = it->second;
      for (const auto& g : r.groups) row.groups.push_back({g.ordinal, g.issued, g.running});
      rows.push_back(std::move(row));
    }
    std::optional<CheckpointKeeper::Summary> held;
    if (read_checkpoints) held = read_checkpoints();
    std::lock_guard<std::mutex> lock(mutex);
    snapshot.ranks.swap(rows);
    if (held) {
      snapshot.checkpoints = held;
      snapshot.checkpoints_at = SteadyClock::now();
    }
  }

  metrics::Families collect() {
    Snapshot copy;
    {
      std::lock_guard<std::mutex> lock(mutex);
      copy = snapshot;
    }
    return families(copy, SteadyClock::now());
  }
};

AgentMetrics::AgentMetrics(const LaunchConfig& config, WorkerGroup& group, HangSupervisor& hang, EventLog& events,
                           std::function<double()> loop_age) {
  if (!config.metrics_port) return;
  impl_.reset(new Impl{group, {}, {}, {}, {}});
  metrics::EndpointOptions options;
  options.host = worker_store_bind_host(config);
  options.port = static_cast<std::uint16_t>(*config.metrics_port);
  if (loop_age) {
    options.healthz = [loop_age = std::move(loop_age)] {
      const HealthAnswer a = health_answer(loop_age());
      return std::make_pair(a.status, a.body);
    };
  }
  impl_->endpoint = std::make_unique<metrics::Endpoint>(options, [impl = impl_.get()] { return impl->collect(); });
  log::get("agent")->info("serving Prometheus metrics at {}", impl_->endpoint->url());
  events.emit(Event::kMetrics,
              {{"url", impl_->endpoint->url()}, {"host", options.host}, {"port", impl_->endpoint->port()}});
  WorkerHooks hooks;
  hooks.after_start = [impl = impl_.get()](const std::vector<Worker>&) { impl->count_workers(); };
  hooks.on_exit = [impl = impl_.get()](const Worker& w) { impl->on_exit(w); };
  group.add_hooks(std::move(hooks));
  hang.on_tick([impl = impl_.get()](const hang::HangWatch& watch) { impl->on_tick(watch); });
}

void AgentMetrics::watch_checkpoints(std::function<CheckpointKeeper::Summary()> read) {
  if (impl_) impl_->read_checkpoints = std::move(read);
}

AgentMetrics::~AgentMetrics() {
  if (impl_) impl_->endpoint.reset();  // its thread stops before the snapshot goes
}

void AgentMetrics::on_step(AgentState from, AgentEvent event, const AgentStep& step) {
  if (!impl_) return;
  const auto now = SteadyClock::now();
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    Snapshot& s = impl_->snapshot;
    if (step.action == AgentAction::kRestartGroup) ++s.restarts;
    if (from != AgentState::kRendezvous && step.next == AgentState::kRendezvous) s.rendezvous_since = now;
    if (from == AgentState::kRendezvous && step.next != AgentState::kRendezvous) {
      s.last_rendezvous_s = std::chrono::duration<double>(now - s.rendezvous_since).count();
      s.rendezvous_s += s.last_rendezvous_s;
      if (event == AgentEvent::kRoundFormed) ++s.rounds;
    }
    s.state = step.next;
  }
  impl_->count_workers();
}

}  // namespace ctrun::agent
