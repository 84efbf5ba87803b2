#pragma once
// The keys of the hang exchange in a round's store (docs/hang.md, "How ctrun uses the parts"), as
// rendezvous/keys.hpp lays out the rendezvous' own: each node's summary under its group rank, the one key where the
// agent of group rank 0 publishes its verdicts for the others, and each node's record for group rank 0's live view
// (per attempt: the static backend's round, and its store, is the same for every attempt).

#include <string>

namespace ctrun::agent::hang::keys {

inline std::string node_summary(int group_rank) { return "progress/node/" + std::to_string(group_rank); }
inline std::string verdicts() { return "progress/verdicts"; }
inline std::string node_record(int restart_count, int group_rank) {
  return "status/attempt_" + std::to_string(restart_count) + "/node/" + std::to_string(group_rank);
}

}  // namespace ctrun::agent::hang::keys
