// Two-level all_reduce: all_reduce inside each host (shared memory), all_reduce of the hosts' results among
// the hosts' lowest ranks (the cost model's algorithm), broadcast inside each host. Only one rank per host
// crosses the network, once per byte of the result in each direction of the cross algorithm.
#include "comm/algorithms/two_level.hpp"

namespace ctrun::comm::algorithms {

void two_level_all_reduce(Levels& lv, const OpArgs& args) {
  lv.run_local(OpKind::kAllReduce, args);
  if (lv.local_rank() == 0) lv.run_cross(OpKind::kAllReduce, args, lv.representatives());
  lv.run_local(OpKind::kBroadcast, {.buffer = args.buffer, .root = 0});
}

}  // namespace ctrun::comm::algorithms
