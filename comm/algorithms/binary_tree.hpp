#pragma once
// Binary trees over the ranks 0..n-1 of a context, for the pipelined tree all_reduce and the double binary tree
// (NCCL's): an in-order tree whose leaves are every other rank, and a second tree over the same ranks mirrored
// (n even) or shifted by one (n odd), so that the leaves of one are the interior nodes of the other and every
// rank is interior in at most one tree: with half of the data on each tree, every rank's links carry about the
// same bytes as in a ring while the depth stays log2(n). Pure functions (tests/comm/cost_model_test.cpp checks
// the shapes).

namespace ctrun::comm::algorithms {

struct TreeNode {
  int parent = -1;             // -1: the root
  int children[2] = {-1, -1};  // -1: none
  int child_count() const { return (children[0] >= 0) + (children[1] >= 0); }
};

// Rank i's place in tree `which` (0 or 1) of the double binary tree over n ranks; tree 0 is the plain in-order
// binary tree (the "tree" algorithm's).
TreeNode tree_node(int n, int i, int which = 0);

// The number of edges on the longest path from the root to a leaf of tree `which`.
int tree_depth(int n, int which = 0);

}  // namespace ctrun::comm::algorithms
