#pragma once
// The node's in-memory checkpoints in the live view (`ctrun --status`, /status.json "checkpoints"): this node's lines
// under the ranks' table; on several nodes this node's summary is also published as its record (only once it holds
// something), and group rank 0's view adds a line per other node.

#include <functional>

#include "rendezvous/handler.hpp"

namespace ctrun::agent {

class CheckpointKeeper;
class JobStatus;

// `round`: the round of the attempt that runs (read on the loop at each tick).
void show_checkpoints(JobStatus& status, const CheckpointKeeper& keeper,
                      std::function<const rdzv::RoundInfo&()> round);

}  // namespace ctrun::agent
