// In-order binary tree over positions 1..N: a position's level is its lowest set bit (odd positions are the
// leaves), the root is the largest power of two <= N, and a node whose parent in the complete tree would lie
// beyond N hangs under the nearest ancestor that does not.
#include "comm/algorithms/binary_tree.hpp"

#include <bit>

namespace ctrun::comm::algorithms {
namespace {

int lowbit(int p) { return p & -p; }

int parent_position(int n, int p) {
  if (p == static_cast<int>(std::bit_floor(static_cast<unsigned>(n)))) return 0;
  int cur = p;
  while (true) {
    const int b = lowbit(cur);
    const int q = (cur & (2 * b)) ? cur - b : cur + b;
    if (q <= n) return q;
    cur = q;
  }
}

int child_position(int n, int p, int side) {
  const int b = lowbit(p);
  if (b == 1) return 0;
  if (side == 0) return p - b / 2;
  int c = p + b / 2;
  while (c > n) {
    const int cb = lowbit(c);
    if (cb == 1) return 0;
    c -= cb / 2;
  }
  return c;
}

// Tree `which`'s position of rank i, and back.
int position_of(int n, int i, int which) {
  if (which == 0) return i + 1;
  return (n % 2 == 0 ? n - 1 - i : (i + 1) % n) + 1;
}
int rank_at(int n, int p, int which) {
  if (p == 0) return -1;
  const int j = p - 1;
  if (which == 0) return j;
  return n % 2 == 0 ? n - 1 - j : (j - 1 + n) % n;
}

}  // namespace

TreeNode tree_node(int n, int i, int which) {
  TreeNode t;
  if (n <= 1) return t;
  const int p = position_of(n, i, which);
  t.parent = rank_at(n, parent_position(n, p), which);
  t.children[0] = rank_at(n, child_position(n, p, 0), which);
  t.children[1] = rank_at(n, child_position(n, p, 1), which);
  return t;
}

int tree_depth(int n, int which) {
  int depth = 0;
  for (int i = 0; i < n; ++i) {
    int d = 0;
    for (int r = i; tree_node(n, r, which).parent >= 0; r = tree_node(n, r, which).parent) ++d;
    depth = d > depth ? d : depth;
  }
  return depth;
}

}  // namespace ctrun::comm::algorithms
