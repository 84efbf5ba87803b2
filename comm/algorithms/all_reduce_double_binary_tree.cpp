// Double binary tree all_reduce (NCCL's since 2.4): two complementary binary trees over the ranks
// (binary_tree.hpp), each reducing and broadcasting half of the buffer in pipelined chunks. Every rank is
// interior in at most one tree, so its links carry about what a ring's do while the latency stays O(log n).
#include "comm/algorithms/algorithms.hpp"
#include "comm/algorithms/tree_pipeline.hpp"

namespace ctrun::comm::algorithms {

void all_reduce_double_binary_tree(Context& ctx, Buffer buffer, ReduceOp op) {
  if (ctx.size() == 1 || buffer.empty()) return;
  const std::size_t half = buffer.count() / 2;
  std::vector<TreeRegion> trees;
  if (half > 0) trees.push_back({tree_node(ctx.size(), ctx.rank(), 0), buffer.slice(0, half)});
  trees.push_back({tree_node(ctx.size(), ctx.rank(), 1), buffer.slice(half, buffer.count() - half)});
  pipelined_tree_all_reduce(ctx, trees, op);
}

}  // namespace ctrun::comm::algorithms
