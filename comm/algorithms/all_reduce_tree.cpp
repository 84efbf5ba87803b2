// Pipelined binary-tree all_reduce: chunks reduced up an in-order binary tree and broadcast back down
// (tree_pipeline.hpp). 2 log2(n) latency steps plus one per chunk: the seeds' answer to the ring's latency,
// which grows with n; each interior rank receives twice the data of a ring, so the double binary tree is the
// one chosen for large messages.
#include "comm/algorithms/algorithms.hpp"
#include "comm/algorithms/tree_pipeline.hpp"

namespace ctrun::comm::algorithms {

void all_reduce_tree(Context& ctx, Buffer buffer, ReduceOp op) {
  if (ctx.size() == 1 || buffer.empty()) return;
  const TreeRegion tree{tree_node(ctx.size(), ctx.rank(), 0), buffer};
  pipelined_tree_all_reduce(ctx, std::span(&tree, 1), op);
}

}  // namespace ctrun::comm::algorithms
