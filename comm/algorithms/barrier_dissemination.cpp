// Dissemination barrier: ceil(log2 n) rounds; in round k each rank signals rank+2^k and waits for rank-2^k.
// After the last round every rank has (transitively) heard from every other.
#include "comm/algorithms/algorithms.hpp"

namespace ctrun::comm::algorithms {

void barrier_dissemination(Context& ctx) {
  const int n = ctx.size();
  for (int dist = 1; dist < n; dist <<= 1) {
    char out = 1;
    char in = 0;
    auto r = ctx.irecv(ctx.peer(-dist), &in, 1);
    auto s = ctx.isend(ctx.peer(dist), &out, 1);
    ctx.wait({r, s});
  }
}

}  // namespace ctrun::comm::algorithms
