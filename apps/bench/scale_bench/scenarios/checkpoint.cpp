// The checkpoint exchange of one attempt (agent/checkpoint/exchange.hpp: every node writes its record, group rank 0
// reads them all in one request, plans, and writes each node's part in one; every other node waits for and reads
// its own part) on every node of the job's current round at once, each node's record saying what a job that saved
// steps 10 and 20 holds (its 8 ranks' own snapshots, its ring predecessor's as replicas). The master's requests and
// bytes in all and per node (issue 44: O(N) in all), and how long group rank 0's part (its read and its plan) took.
#include <fmt/format.h>

#include "apps/bench/scale_bench/scenario.hpp"

namespace ctrun::scale_bench {

std::vector<Row> checkpoint_scenario(Job& job) {
  const int restart = 1;
  bool quiet = false;
  const auto before = quiet_sample(job, &quiet);
  const auto net0 = net_sample(job.master.port());
  const auto command = fmt::format("checkpoint {}", restart);
  job.members->send(command);
  if (job.spare) job.spare->send(command);
  auto r = job.members->collect();
  if (job.spare) r.merge(job.spare->collect());
  const auto after = job.master.sample();
  auto row = measured("checkpoint exchange", job.nodes, before, after, net0, net_sample(job.master.port()));
  if (r.failures)
    throw std::runtime_error(
        fmt::format("{} of {} nodes failed the checkpoint exchange: {}", r.failures, r.nodes, r.error));
  row.seconds = static_cast<double>(r.last_end_ns - r.first_start_ns) * 1e-9;
  row.note = fmt::format(
      "{:.1f} requests/node, {:.0f} B/node at the master; nodes' calls {:.1f}/node, {:.0f} B/node; "
      "group rank 0's part {:.3f} s",
      static_cast<double>(row.requests) / r.nodes, static_cast<double>(row.bytes) / r.nodes,
      static_cast<double>(r.ops) / r.nodes, static_cast<double>(r.bytes) / r.nodes,
      static_cast<double>(r.rank0_ns) * 1e-9);
  if (!quiet) row.note += "; the master was not quiet before it (its count includes other traffic)";
  return {row};
}

}  // namespace ctrun::scale_bench
