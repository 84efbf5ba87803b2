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
  auto [row, r] = measure_exchange(job, fmt::format("checkpoint {}", restart), "checkpoint exchange");
  row.note = fmt::format(
                 "{:.1f} requests/node, {:.0f} B/node at the master; nodes' calls {:.1f}/node, {:.0f} B/node; "
                 "group rank 0's part {:.3f} s",
                 static_cast<double>(row.requests) / r.nodes, static_cast<double>(row.bytes) / r.nodes,
                 static_cast<double>(r.ops) / r.nodes, static_cast<double>(r.bytes) / r.nodes,
                 static_cast<double>(r.rank0_ns) * 1e-9) +
             row.note;
  return {row};
}

}  // namespace ctrun::scale_bench
