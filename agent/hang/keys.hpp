#pragma once
// The keys of the hang exchange in a round's store (docs/hang.md, "How ctrun uses the parts"), as
// rendezvous/keys.hpp lays out the rendezvous' own: each node's summary under its group rank, the list of nodes
// whose summary changed since group rank 0 last read it, and the one key where the agent of group rank 0 publishes
// its verdicts for the others.

#include <string>

namespace ctrun::agent::hang::keys {

inline std::string node_summary(int group_rank) { return "progress/node/" + std::to_string(group_rank); }
inline std::string changed() { return "progress/changed"; }
inline std::string verdicts() { return "progress/verdicts"; }

}  // namespace ctrun::agent::hang::keys
