// Two-level reduce: each host reduces into its representative (the root on the root's host, else its lowest
// rank) in shared memory, then the representatives reduce into the root (the cross level's algorithm).
#include "comm/algorithms/two_level.hpp"

namespace ctrun::comm::algorithms {

void two_level_reduce(Levels& lv, const OpArgs& args) {
  const auto& l = lv.layout();
  const std::vector<int> reps = lv.representatives(args.root);
  const int mine = reps[static_cast<std::size_t>(lv.host())];
  lv.run_local(OpKind::kReduce,
               {.buffer = args.buffer, .root = l.local_index[static_cast<std::size_t>(mine)], .op = args.op});
  if (lv.rank() == mine) {
    lv.run_cross(OpKind::kReduce,
                 {.buffer = args.buffer, .root = l.host_of[static_cast<std::size_t>(args.root)], .op = args.op}, reps);
  }
}

}  // namespace ctrun::comm::algorithms
