#pragma once
// What this node holds of the job's in-memory checkpoints (CheckpointKeeper::summary()), as the live view words it
// (`ctrun --status`: a few lines under the ranks' table, and "checkpoints" in /status.json). The same figures are
// /metrics' ctrun_checkpoint_* gauges (agent/metrics/).

#include <string>

#include <nlohmann/json.hpp>

#include "agent/checkpoint/keeper.hpp"

namespace ctrun::agent::checkpoint {

// "" when checkpoints are off and nothing is held; else lines ending in '\n'.
std::string summary_text(const CheckpointKeeper::Summary& s);
// Every field, steps -1 when none; null when checkpoints are off and nothing is held.
nlohmann::json summary_json(const CheckpointKeeper::Summary& s);

}  // namespace ctrun::agent::checkpoint
