#pragma once
// The pipelined tree all_reduce both tree algorithms run (all_reduce_tree.cpp: one tree, the whole buffer;
// all_reduce_double_binary_tree.cpp: two trees, half of the buffer each). Every region is cut into chunks
// (Context::chunk_bytes); each chunk is reduced up its tree (children into parent, every receive posted up
// front) and the root's result sent back down, so a chunk near the root overlaps the next chunk near the leaves.
//
// Message order between two ranks: a rank sends everything it sends up (for every chunk and tree, chunk-major)
// before anything it sends down, and posts its receives in the same order (all up-receives, chunk-major, then
// all down-receives), so FIFO matching on the collective's one tag pairs them even when two ranks are linked
// in both trees.

#include <span>

#include "comm/algorithms/binary_tree.hpp"
#include "comm/algorithms/context.hpp"
#include "comm/buffer.hpp"

namespace ctrun::comm::algorithms {

struct TreeRegion {
  TreeNode node;  // this rank's place in the region's tree
  Buffer region;  // the part of the buffer this tree reduces
};

void pipelined_tree_all_reduce(Context& ctx, std::span<const TreeRegion> trees, ReduceOp op);

}  // namespace ctrun::comm::algorithms
