#pragma once
// Multi-node agreement (docs/checkpoint.md, "Several nodes"): before each attempt's workers start, every agent of
// the round writes one record into the round's rendezvous store, "<prefix><group rank>" = what this node holds (its
// ranks' snapshots and the replicas it received, whatever ranks it ran before) and where its replication endpoint
// listens, then reads every node's. Each agent thereby knows, the same as every other, which step every rank of the
// job holds somewhere (the resume step), where each snapshot is, and its ring of replication targets. The agent of
// group rank 0, which hosts the workers' store, lists the merged steps there for ck.load(). The pure part (records,
// merging, planning) is here, apart from the store calls, for tests.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/checkpoint/job_directory.hpp"

namespace ctrun::agent::checkpoint {

struct NodeRecord {
  int group_rank = 0;
  std::string endpoint;  // its replication endpoint, host:port ("" when it has none)
  std::string off;       // why checkpoints are off on that node ("" when on)
  NodeHoldings holdings;
};

std::string record_key(int group_rank);  // in the round's store (scoped to the round)
std::string encode_record(const NodeRecord& record);
// Throws std::runtime_error for a record this version cannot read.
NodeRecord decode_record(const std::string& text);

// Every step some node holds of each rank 0..world_size-1 (own snapshots and replicas together), oldest first.
std::map<int, std::vector<std::int64_t>> merged_steps(const std::vector<NodeRecord>& nodes, int world_size);

// Endpoints of the nodes (other than `self`) that hold `step` of `rank`: own snapshots first, then replicas.
std::vector<std::string> holders_of(const std::vector<NodeRecord>& nodes, int rank, std::int64_t step, int self);

// The replication targets of group rank `self` among `group_world_size` nodes: the next `count` group ranks on the
// ring (never itself; fewer when there are fewer other nodes).
std::vector<int> ring_targets(int self, int group_world_size, int count);

}  // namespace ctrun::agent::checkpoint
