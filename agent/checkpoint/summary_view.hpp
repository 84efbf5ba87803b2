#pragma once
// What this node holds of the job's in-memory checkpoints (CheckpointKeeper::summary()), as the live view words it
// (`ctrun --status`: a few lines under the ranks' table, and "checkpoints" in /status.json). The same figures are
// /metrics' ctrun_checkpoint_* gauges (agent/metrics/). On several nodes each agent also publishes its summary as a
// small record (node_record), and the live view of group rank 0's agent adds one line per other node.

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "agent/checkpoint/keeper.hpp"

namespace ctrun::agent::checkpoint {

// "" when checkpoints are off and nothing is held; else lines ending in '\n'.
std::string summary_text(const CheckpointKeeper::Summary& s);
// Every field, steps -1 when none; null when checkpoints are off and nothing is held.
nlohmann::json summary_json(const CheckpointKeeper::Summary& s);

// Whether the node holds anything (a step or bytes): only then does it publish its record (a job that saves no
// checkpoints pays no store op for the other nodes' lines).
bool holds_something(const CheckpointKeeper::Summary& s);
// This node's summary as the record other agents read (summary_json's text: a few hundred bytes, "null" when off).
std::string node_record(const CheckpointKeeper::Summary& s);

// The other nodes of the round, for group rank 0's live view: `records` holds what each node published (by group
// rank; a node missing there has not published yet in this attempt). One line per node other than `self`, after a
// heading; "" when `nodes` is 1.
std::string nodes_text(const std::map<int, std::string>& records, int self, int nodes);
// The same, one object per other node: {"group_rank", "published", and summary_json's fields when published}.
nlohmann::json nodes_json(const std::map<int, std::string>& records, int self, int nodes);

}  // namespace ctrun::agent::checkpoint
