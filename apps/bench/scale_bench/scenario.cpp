#include "apps/bench/scale_bench/scenario.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include <fmt/format.h>

namespace ctrun::scale_bench {

Job::Job(const BenchOptions& o, int n, const std::string& id) : options(o), nodes(n), run_id(id), master(o.ctstore) {
  if (n < 2) throw std::runtime_error("scale_bench: a job needs at least 2 nodes (one of them is the victim)");
  members = std::make_unique<Fleet>(fleet_options(0, n - 1));
  victim = std::make_unique<Fleet>(fleet_options(n - 1, 1));
}

Fleet::Options Job::fleet_options(int first, int count) const {
  Fleet::Options f;
  f.self = options.self;
  f.port = master.port();
  f.run_id = run_id;
  f.min_nodes = f.max_nodes = nodes;
  f.first = first;
  f.nodes = count;
  f.per_process = options.per_process;
  f.threads = options.threads;
  return f;
}

MasterSample quiet_sample(Job& job, bool* quiet) {
  const auto limit = static_cast<std::uint64_t>(std::max(4, job.nodes / 100));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  auto last = job.master.sample();
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    auto now = job.master.sample();
    const bool calm = now.requests - last.requests < limit;
    if (calm || std::chrono::steady_clock::now() >= deadline) {
      if (quiet) *quiet = calm;
      return now;
    }
    last = now;
  }
}

Exchange measure_exchange(Job& job, const std::string& command, const std::string& name) {
  bool quiet = false;
  const auto before = quiet_sample(job, &quiet);
  const auto net0 = net_sample(job.master.port());
  job.members->send(command);
  if (job.spare) job.spare->send(command);
  auto r = job.members->collect();
  if (job.spare) r.merge(job.spare->collect());
  const auto after = job.master.sample();
  auto row = measured(name, job.nodes, before, after, net0, net_sample(job.master.port()));
  if (r.failures)
    throw std::runtime_error(fmt::format("{}: {} of {} nodes failed: {}", name, r.failures, r.nodes, r.error));
  row.seconds = static_cast<double>(r.last_end_ns - r.first_start_ns) * 1e-9;
  if (!quiet) row.note = "; the master was not quiet before it (its count includes other traffic)";
  return {std::move(row), r};
}

Row measured(const std::string& scenario, int nodes, const MasterSample& before, const MasterSample& after,
             const NetSample& net_before, const NetSample& net_after) {
  Row r;
  r.scenario = scenario;
  r.nodes = nodes;
  r.connections = after.connections;
  r.requests = after.requests - before.requests;
  r.bytes = after.bytes - before.bytes;
  r.cpu_s = after.cpu_s - before.cpu_s;
  r.net = {net_after.backlog_drops - net_before.backlog_drops, net_after.timeouts - net_before.timeouts,
           net_after.retransmits - net_before.retransmits, net_after.syn_drops - net_before.syn_drops};
  return r;
}

std::vector<Scenario> scenarios() {
  return {
      {"round", round_scenario},           {"idle", idle_scenario},     {"kill", kill_scenario},
      {"checkpoint", checkpoint_scenario}, {"status", status_scenario}, {"hang", hang_scenario},
  };
}

std::vector<Standalone> standalone_scenarios() {
  return {
      {"init storm", init_storm},
      {"torchrun", torchrun_rounds},
      {"etcd", etcd_rounds},
  };
}

}  // namespace ctrun::scale_bench
