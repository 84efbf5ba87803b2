// One c10d round of N nodes (--nnodes N:N, so it completes at MAX): from releasing every node (all connected, the
// measure starts after) to every node holding its round. The master's requests are those of the round and of the
// first heartbeat each member sends when its round completes.
#include <fmt/format.h>

#include "apps/bench/scale_bench/scenario.hpp"

namespace ctrun::scale_bench {

std::vector<Row> round_scenario(Job& job) {
  const auto net0 = net_sample(job.master.port());
  const auto before = job.master.sample();
  job.members->send("join");
  job.victim->send("join");
  auto r = job.members->collect();
  r.merge(job.victim->collect());
  const auto after = job.master.sample();
  auto row = measured("round", job.nodes, before, after, net0, net_sample(job.master.port()));
  if (r.failures)
    throw std::runtime_error(fmt::format("{} of {} nodes failed the round: {}", r.failures, r.nodes, r.error));
  row.seconds = static_cast<double>(r.last_end_ns - r.first_start_ns) * 1e-9;
  row.note = fmt::format("published after {:.3f} s; {:.1f} requests/node",
                         static_cast<double>(r.first_end_ns - r.first_start_ns) * 1e-9,
                         static_cast<double>(row.requests) / job.nodes);
  return {row};
}

}  // namespace ctrun::scale_bench
