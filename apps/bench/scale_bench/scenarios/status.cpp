// The live view's node records of one attempt (agent/status/node_records.hpp): every node but group rank 0 publishes
// its first record of the attempt (its record and its entry in the attempt's index), then group rank 0 reads the
// index and every listed record, as it does every 2 s while the attempt runs. Two rows: the publication (once per
// node per attempt, then each node rewrites its record every max(2 s, N/20 s)) and one read by group rank 0.
#include <fmt/format.h>

#include "apps/bench/scale_bench/scenario.hpp"

namespace ctrun::scale_bench {

namespace {

Row exchange(Job& job, const std::string& command, const char* name) {
  auto [row, r] = measure_exchange(job, command, name);
  row.note = fmt::format("{:.2f} requests/node, {:.0f} B/node at the master; nodes' calls {}, {:.0f} B/node",
                         static_cast<double>(row.requests) / job.nodes, static_cast<double>(row.bytes) / job.nodes,
                         r.ops, static_cast<double>(r.bytes) / job.nodes) +
             row.note;
  return row;
}

}  // namespace

std::vector<Row> status_scenario(Job& job) {
  const int restart = 1;
  auto publish = exchange(job, fmt::format("status {}", restart), "status records published");
  auto read = exchange(job, fmt::format("status-read {}", restart), "status read by group rank 0");
  return {publish, read};
}

}  // namespace ctrun::scale_bench
