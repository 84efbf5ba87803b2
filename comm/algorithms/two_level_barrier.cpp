// Two-level barrier: every host's ranks meet, the hosts' lowest ranks meet, every host's ranks meet again
// (nobody leaves before every rank of every host arrived).
#include "comm/algorithms/two_level.hpp"

namespace ctrun::comm::algorithms {

void two_level_barrier(Levels& lv, const OpArgs& args) {
  lv.run_local(OpKind::kBarrier, args);
  if (lv.local_rank() == 0) lv.run_cross(OpKind::kBarrier, args, lv.representatives());
  lv.run_local(OpKind::kBarrier, args);
}

}  // namespace ctrun::comm::algorithms
