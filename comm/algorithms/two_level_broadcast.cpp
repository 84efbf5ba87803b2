// Two-level broadcast: the root sends to one rank of every other host (the cross level's algorithm, with the
// root representing its own host), then each host broadcasts from its representative in shared memory.
#include "comm/algorithms/two_level.hpp"

namespace ctrun::comm::algorithms {

void two_level_broadcast(Levels& lv, const OpArgs& args) {
  const auto& l = lv.layout();
  const auto root = static_cast<std::size_t>(args.root);
  const std::vector<int> reps = lv.representatives(args.root);
  const int mine = reps[static_cast<std::size_t>(lv.host())];
  if (lv.rank() == mine) lv.run_cross(OpKind::kBroadcast, {.buffer = args.buffer, .root = l.host_of[root]}, reps);
  lv.run_local(OpKind::kBroadcast, {.buffer = args.buffer, .root = l.local_index[static_cast<std::size_t>(mine)]});
}

}  // namespace ctrun::comm::algorithms
