#pragma once
// Which step every rank of the job holds. Each rank's complete steps are listed under its own key of the attempt's
// store keyspace, "<keys><rank>" = "3,4" (oldest first): the agent writes its local ranks' lists before it starts
// them, and each save rewrites that rank's list; ck.load() reads every rank's and takes the newest step common to
// all (ctrun_torch.checkpoint's _agreement.py, the same rule). The keyspace is fresh per attempt, so a list
// never outlives the attempt that wrote it, and the agents of other nodes can write theirs the same way.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ctrun::agent::checkpoint {

// The key prefix of an attempt: "<attempt keyspace>/ctrun/checkpoint/held/" (the rank is appended).
std::string held_keys(int restart_count);
std::string encode_steps(const std::vector<std::int64_t>& steps);
// The newest step in every list; nullopt when some list is empty or they share none.
std::optional<std::int64_t> newest_common_step(const std::vector<std::vector<std::int64_t>>& held_per_rank);

}  // namespace ctrun::agent::checkpoint
