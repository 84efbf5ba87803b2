#pragma once
// The keys of the live view's exchange in a round's store: each node's record for group rank 0's view, per attempt
// (the static backend's round, and its store, is the same for every attempt).

#include <string>

namespace ctrun::agent::status::keys {

inline std::string node_record(int restart_count, int group_rank) {
  return "status/attempt_" + std::to_string(restart_count) + "/node/" + std::to_string(group_rank);
}
// The group ranks that published a record in the attempt ("3,0,7,"): each node appends itself once, so that group
// rank 0 reads the index and every listed record in two requests, whatever the number of nodes.
inline std::string published(int restart_count) {
  return "status/attempt_" + std::to_string(restart_count) + "/published";
}

}  // namespace ctrun::agent::status::keys
