#pragma once
// Multi-node agreement (docs/checkpoint.md, "Several nodes"): before each attempt's workers start, every agent of
// the round writes one record into the round's rendezvous store, "<prefix><group rank>" = what this node holds (its
// ranks' snapshots and the replicas it received, whatever ranks it ran before), where its replication endpoint
// listens and which ranks it runs now. The agent of group rank 0 reads every record (one request), works out the
// job's plan (the resume step: the newest step every rank holds somewhere; each node's replication targets on the
// ring; for each rank a node must bring, where that step is) and writes each node's part under its own key (one
// request); every other agent reads its own part only. So an attempt costs the store O(N) reads in all, never
// every node reading every record. Group rank 0, which hosts the workers' store, also lists every rank's steps
// there for ck.load(). The pure part (records, plans, merging) is here, apart from the store calls, for tests.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/checkpoint/job_directory.hpp"
#include "store/store.hpp"

namespace ctrun::agent::checkpoint {

struct NodeRecord {
  int group_rank = 0;
  std::string endpoint;  // its replication endpoint, host:port ("" when it has none)
  std::string off;       // why checkpoints are off on that node ("" when on)
  NodeHoldings holdings;
  int first_rank = 0;  // the global ranks it runs in this round: first_rank .. first_rank + ranks - 1
  int ranks = 0;
  int replicas = 1;  // --checkpoint-replicas: how many nodes after it on the ring it copies to
};

// One node's part of the job's plan, as group rank 0 worked it out.
struct NodePlan {
  std::string off;                     // checkpoints are off for the attempt, and why ("" when on)
  std::optional<std::int64_t> resume;  // the newest step every rank of the job holds on some node
  bool listed = false;                 // some rank of the job holds some step
  std::vector<std::string> targets;    // this node's replication targets (endpoints), nearest first
  // Each rank of this node whose `resume` step it does not hold: the nodes that hold it (own snapshots first).
  std::map<int, std::vector<std::string>> holders;
  std::set<int> accepts;  // the ranks whose replicas this node takes (those of the nodes whose ring targets it)
  bool brings = false;    // some node brings `resume` from elsewhere: every node then settles what could not be
};

// A (rank, step) that no node could bring intact (every copy failed its digest, or none could be fetched).
using Unbrought = std::vector<std::pair<int, std::int64_t>>;

// What group rank 0 keeps between the plan and the settling of what could not be brought (the records, and what no
// node could bring so far); empty on the other nodes.
struct Planner {
  std::vector<NodeRecord> records;
  Unbrought refused;
};

// In the round's store, per attempt: the static backend's round (and so its store) is the same for every attempt of
// the job, and a node's record of an earlier attempt must never be read as what it holds now.
std::string record_key(int restart_count, int group_rank);
std::string encode_record(const NodeRecord& record);
// Throws std::runtime_error for a record this version cannot read.
NodeRecord decode_record(const std::string& text);

std::string plan_key(int restart_count, int group_rank);
std::string encode_plan(const NodePlan& plan);
// Throws std::runtime_error for a plan this version cannot read.
NodePlan decode_plan(const std::string& text);

// Group rank 0's work, pure: every node's part of the plan (in the records' order), from every node's record, the
// steps in `refused` left out (no intact copy of them exists).
std::vector<NodePlan> plan_nodes(const std::vector<NodeRecord>& records, int world_size,
                                 const Unbrought& refused = {});

struct Exchanged {
  NodePlan plan;                                   // this node's part
  std::map<int, std::vector<std::int64_t>> steps;  // group rank 0 only: every rank's steps some node holds
  Planner planner;                                 // group rank 0 only
};
// Blocking (the helper lane): writes `self` as this node's record of attempt `restart_count`; group rank 0 waits for
// the `nodes` nodes' records of that attempt (at most `timeout`), plans and writes every node's part; the others
// wait for their part (at most `timeout` and a little more). Never a record of another attempt. A node that cannot
// take part (a record missing, no plan in time) gets a plan with `off` saying why; a store error is thrown.
Exchanged exchange_records(store::Store& store, int restart_count, const NodeRecord& self, int nodes,
                           int world_size, std::chrono::milliseconds timeout);

// After a plan with `brings`, every node says what it could not bring intact (`mine`); group rank 0 reads the
// `nodes` lists (one request), and when some step could not be brought anywhere plans again without it: the returned
// plan is this node's next (the job then resumes from an older step every rank holds intact, and the nodes bring
// that one), nullopt when every rank now holds the resume step. O(N) requests in all, as the plan's. Blocking (the
// helper lane); `iteration` counts the re-plans of the attempt (0 first); a node with no answer in time gets a plan
// with `off` saying why.
// `refused` gets what no node could bring in this iteration (every node learns it).
std::optional<NodePlan> settle_brings(store::Store& store, int restart_count, int iteration, int self,
                                      const Unbrought& mine, int nodes, int world_size, Planner& planner,
                                      std::chrono::milliseconds timeout, Unbrought& refused);

// Every step some node holds of each rank 0..world_size-1 (own snapshots and replicas together), oldest first.
std::map<int, std::vector<std::int64_t>> merged_steps(const std::vector<NodeRecord>& nodes, int world_size);

// Endpoints of the nodes (other than `self`) that hold `step` of `rank`: own snapshots first, then replicas.
std::vector<std::string> holders_of(const std::vector<NodeRecord>& nodes, int rank, std::int64_t step, int self);

// The replication targets of group rank `self` among `group_world_size` nodes: the next `count` group ranks on the
// ring (never itself; fewer when there are fewer other nodes).
std::vector<int> ring_targets(int self, int group_world_size, int count);

// The ranks whose replicas group rank `self` takes in this round: those of every node whose ring targets it.
std::set<int> ranks_replicated_to(const std::vector<NodeRecord>& nodes, int self);

// Whether some node must bring `step` of one of its ranks from elsewhere (it does not hold it as its own snapshot).
bool anyone_brings(const std::vector<NodeRecord>& nodes, std::int64_t step);

}  // namespace ctrun::agent::checkpoint
