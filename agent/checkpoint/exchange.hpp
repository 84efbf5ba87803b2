#pragma once
// Multi-node agreement (docs/checkpoint.md, "Several nodes"): before each attempt's workers start, every agent of
// the round writes one record into the round's rendezvous store, "<prefix><group rank>" = what this node holds (its
// ranks' snapshots and the replicas it received, whatever ranks it ran before) and where its replication endpoint
// listens, then reads every node's. Each agent thereby knows, the same as every other, which step every rank of the
// job holds somewhere (the resume step), where each snapshot is, and its ring of replication targets. The agent of
// group rank 0, which hosts the workers' store, lists the merged steps there for ck.load(). The pure part (records,
// merging, planning) is here, apart from the store calls, for tests.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "agent/checkpoint/job_directory.hpp"
#include "store/store.hpp"

namespace ctrun::agent::checkpoint {

struct NodeRecord {
  int group_rank = 0;
  std::string endpoint;  // its replication endpoint, host:port ("" when it has none)
  std::string off;       // why checkpoints are off on that node ("" when on)
  NodeHoldings holdings;
  // Its global ranks in this round: [first_rank, first_rank + ranks); first_rank -1: not said (an older ctrun).
  int first_rank = -1;
  int ranks = 0;
};

// In the round's store, per attempt: the static backend's round (and so its store) is the same for every attempt of
// the job, and a node's record of an earlier attempt must never be read as what it holds now.
std::string record_key(int restart_count, int group_rank);
std::string encode_record(const NodeRecord& record);
// Throws std::runtime_error for a record this version cannot read.
NodeRecord decode_record(const std::string& text);

// Blocking (the helper lane): writes `self` as this node's record of attempt `restart_count` and returns every one of
// the `nodes` nodes' records of that attempt, in group-rank order, once all are written (at most `timeout`: then
// std::runtime_error saying so).
std::vector<NodeRecord> exchange_records(store::Store& store, int restart_count, const NodeRecord& self, int nodes,
                                         std::chrono::milliseconds timeout);

// Every step some node holds of each rank 0..world_size-1 (own snapshots and replicas together), oldest first.
std::map<int, std::vector<std::int64_t>> merged_steps(const std::vector<NodeRecord>& nodes, int world_size);

// Endpoints of the nodes (other than `self`) that hold `step` of `rank`: own snapshots first, then replicas.
std::vector<std::string> holders_of(const std::vector<NodeRecord>& nodes, int rank, std::int64_t step, int self);

// The replication targets of group rank `self` among `group_world_size` nodes: the next `count` group ranks on the
// ring (never itself; fewer when there are fewer other nodes).
std::vector<int> ring_targets(int self, int group_world_size, int count);

// The ranks whose replicas `self` should receive in this round: those of every node whose ring targets it. nullopt
// when a record does not say its ranks (an older ctrun): then no rank is refused.
std::optional<std::set<int>> ranks_replicated_to(const std::vector<NodeRecord>& nodes, int self, int count);

// Whether some node must bring `step` of one of its ranks from elsewhere (it does not hold it as its own snapshot):
// the same answer on every node, so that all or none take part in exchange_failures.
bool anyone_brings(const std::vector<NodeRecord>& nodes, std::int64_t step);

// A (rank, step) that no node could bring intact (every copy failed its digest, or none could be fetched).
using Unbrought = std::vector<std::pair<int, std::int64_t>>;
// Blocking (the helper lane): writes what this node could not bring in round `round` of the attempt's bringing, and
// returns what every one of the `nodes` nodes could not (empty: every rank of the job now holds the resume step).
Unbrought exchange_failures(store::Store& store, int restart_count, int round, int self, const Unbrought& mine,
                            int nodes, std::chrono::milliseconds timeout);

}  // namespace ctrun::agent::checkpoint
