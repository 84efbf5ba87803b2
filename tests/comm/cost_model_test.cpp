// The shapes of the trees (binary_tree.hpp), the host layout, and the cost model's choices (cost_model.hpp):
// pure functions, no ranks.
#include <gtest/gtest.h>

#include <set>

#include "comm/algorithms/binary_tree.hpp"
#include "comm/algorithms/cost_model.hpp"
#include "comm/algorithms/two_level.hpp"

namespace ctrun::comm::algorithms {
namespace {

// Every tree is one tree: one root, parents and children agree, every rank reaches the root.
TEST(BinaryTree, EveryTreeIsConsistentAndSpansEveryRank) {
  for (int n = 1; n <= 300; ++n) {
    for (int which = 0; which < 2; ++which) {
      int roots = 0;
      for (int i = 0; i < n; ++i) {
        const TreeNode t = tree_node(n, i, which);
        if (t.parent < 0) ++roots;
        if (t.parent >= 0) {
          const TreeNode p = tree_node(n, t.parent, which);
          EXPECT_TRUE(p.children[0] == i || p.children[1] == i) << n << " " << i << " tree " << which;
        }
        for (int c : t.children) {
          if (c >= 0) {
            EXPECT_EQ(tree_node(n, c, which).parent, i) << n << " " << i;
          }
        }
        int steps = 0;
        for (int r = i; tree_node(n, r, which).parent >= 0 && steps <= n; r = tree_node(n, r, which).parent) ++steps;
        EXPECT_LE(steps, n) << "cycle at n=" << n;
      }
      EXPECT_EQ(roots, 1) << "n=" << n << " tree " << which;
    }
  }
}

// The double binary tree's point: no rank is interior (has children) in both trees.
TEST(BinaryTree, EveryRankIsInteriorInAtMostOneTree) {
  for (int n = 2; n <= 300; ++n) {
    for (int i = 0; i < n; ++i) {
      const bool a = tree_node(n, i, 0).child_count() > 0;
      const bool b = tree_node(n, i, 1).child_count() > 0;
      EXPECT_FALSE(a && b) << "rank " << i << " of " << n;
    }
    EXPECT_LE(tree_depth(n, 0), 9);  // log2(300) + 1
  }
}

TEST(HostLayout, GroupsRanksByIdentityInRankOrder) {
  const HostLayout l = HostLayout::from_identities({"b", "a", "b", "c", "a"});
  ASSERT_EQ(l.hosts.size(), 3u);
  EXPECT_EQ(l.hosts[0], (std::vector<int>{0, 2}));
  EXPECT_EQ(l.hosts[1], (std::vector<int>{1, 4}));
  EXPECT_EQ(l.hosts[2], (std::vector<int>{3}));
  EXPECT_EQ(l.local_index, (std::vector<int>{0, 0, 1, 0, 1}));
  EXPECT_EQ(l.max_ranks_per_host(), 2);
  EXPECT_FALSE(l.single_host());
  EXPECT_FALSE(l.one_rank_per_host());
}

// Latency-bound sizes pick a log-depth algorithm, bandwidth-bound ones at many nodes the double binary tree
// (a ring's bandwidth, a tree's latency), and the ring's latency grows linearly where the trees' does not.
TEST(CostModel, ChoosesByLatencyAndBandwidth) {
  const LinkCost net{50e-6, 1.25e9};  // 50 us, 10 Gbit/s
  const auto pick = [&](int nodes, std::size_t bytes) {
    return cheapest(OpKind::kAllReduce, Shape{nodes, 8, bytes, std::size_t{1} << 20}, net)->algorithm;
  };
  EXPECT_EQ(pick(8, 8), Algorithm::kRecursiveDoubling);
  EXPECT_EQ(pick(3072, 8), Algorithm::kRecursiveDoubling);
  EXPECT_EQ(pick(3072, std::size_t{1} << 30), Algorithm::kDoubleBinaryTree);
  EXPECT_EQ(pick(2, std::size_t{256} << 20), Algorithm::kRecursiveDoubling);  // one exchange of the buffer
  // Powers of two: halving/doubling moves the ring's bytes in 2 log2(N) steps instead of 2(N-1) x chunks; other
  // node counts pay it the fold of the extra nodes (the whole buffer twice), where the ring wins the large sizes.
  EXPECT_EQ(pick(16, std::size_t{1} << 20), Algorithm::kHalvingDoubling);
  EXPECT_EQ(pick(16, std::size_t{256} << 20), Algorithm::kHalvingDoubling);
  EXPECT_EQ(pick(12, std::size_t{256} << 20), Algorithm::kRing);
  EXPECT_EQ(pick(16, std::size_t{64} << 10), Algorithm::kRecursiveDoubling);
  for (OpKind op : {OpKind::kAllReduce, OpKind::kBroadcast, OpKind::kReduce, OpKind::kBarrier}) {
    EXPECT_NE(cheapest(op, Shape{16, 4, 4096, 1 << 20}, net), nullptr) << op_name(op);
  }
  EXPECT_EQ(cheapest(OpKind::kGather, Shape{16, 4, 4096, 1 << 20}, net), nullptr);  // never runs between hosts
  const auto row = [](Algorithm a) {
    for (const auto& r : cost_table()) {
      if (r.op == OpKind::kAllReduce && r.algorithm == a) return &r;
    }
    return static_cast<const CostRow*>(nullptr);
  };
  const Shape small{3072, 8, 8, 1 << 20};
  EXPECT_GT(row(Algorithm::kRing)->seconds(small, net), 100 * row(Algorithm::kDoubleBinaryTree)->seconds(small, net));
  // Every prediction grows with the bytes.
  for (const auto& r : cost_table()) {
    EXPECT_LE(r.seconds(Shape{16, 8, 1024, 1 << 20}, net), r.seconds(Shape{16, 8, 1 << 24, 1 << 20}, net));
  }
  EXPECT_GT(
      predict_two_level(OpKind::kAllReduce, Algorithm::kRing, Shape{4, 8, 1 << 20, 1 << 20}, net, LinkCost{3e-6, 4e9}),
      row(Algorithm::kRing)->seconds(Shape{4, 8, 1 << 20, 1 << 20}, net));
}

// Every op that runs in two levels is priced between hosts by its rows of the one cost table, and every row is of
// such an op: the cheapest is an algorithm that runs the op, a flat group (one rank per node) costs just its cross
// step, and the steps inside hosts add to it.
TEST(CostModel, EveryTwoLevelOpIsPricedByItsRows) {
  const LinkCost net{50e-6, 1.25e9};
  const LinkCost local{3e-6, 4e9};
  for (const auto& op : two_level_table()) {
    for (const Shape& shape :
         {Shape{2, 1, 8, 1 << 20}, Shape{16, 4, 4096, 1 << 20}, Shape{3072, 8, 1 << 30, 1 << 20}}) {
      const CostRow* best = cheapest(op.op, shape, net);
      ASSERT_NE(best, nullptr) << op_name(op.op);
      EXPECT_NE(find_row(op.op, best->algorithm), nullptr) << op_name(op.op) << " " << algorithm_name(best->algorithm);
      EXPECT_EQ(cost_row(op.op, best->algorithm), best);
      const double whole = predict_two_level(op.op, best->algorithm, shape, net, local);
      if (shape.ranks_per_node == 1) {
        EXPECT_EQ(whole, best->seconds(shape, net)) << op_name(op.op);
      } else {
        EXPECT_GT(whole, best->seconds(shape, net)) << op_name(op.op);
      }
    }
  }
  for (const auto& r : cost_table()) EXPECT_NE(find_two_level(r.op), nullptr) << op_name(r.op);
}

// all_gather and reduce_scatter between hosts: each host's R blocks to every other host at once; inside the
// hosts, shared-memory steps over the host's blocks and the other hosts' (all_gather), over every block and the
// host's (reduce_scatter).
TEST(CostModel, GathersAndScattersCrossAsOneDirectExchange) {
  const LinkCost net{10e-6, 125e6};
  const LinkCost local{3e-6, 4e9};
  const Shape shape{5, 3, 4096, 1 << 20};
  const double cross = 4 * net.latency_s + 4.0 * 3 * 4096 / net.bytes_per_s;
  const auto step = [&](double bytes) { return local.latency_s + 2 * bytes / local.bytes_per_s; };
  for (OpKind op : {OpKind::kAllGather, OpKind::kReduceScatter}) {
    const CostRow* row = cheapest(op, shape, net);
    ASSERT_NE(row, nullptr) << op_name(op);
    EXPECT_EQ(row->algorithm, Algorithm::kDirect);
    EXPECT_DOUBLE_EQ(row->seconds(shape, net), cross);
  }
  EXPECT_DOUBLE_EQ(predict_two_level(OpKind::kAllGather, Algorithm::kDirect, shape, net, local),
                   step(3 * 4096) + cross + step(4 * 3 * 4096));
  EXPECT_DOUBLE_EQ(predict_two_level(OpKind::kReduceScatter, Algorithm::kDirect, shape, net, local),
                   step(5 * 3 * 4096) + cross + step(3 * 4096));
}

// The tree's interior ranks take in a chunk from each child per step: two children, except the root of two
// nodes, whose one child makes every step one chunk's time (measured on two namespaced hosts, docs/benchmarks.md).
TEST(CostModel, TreeStepsCarryOneChunkPerChild) {
  const LinkCost net{10e-6, 125e6};
  const std::size_t mib = std::size_t{1} << 20;
  const auto tree = [&](int nodes) {
    for (const auto& r : cost_table()) {
      if (r.op == OpKind::kAllReduce && r.algorithm == Algorithm::kTree)
        return r.seconds(Shape{nodes, 1, 64 * mib, mib}, net);
    }
    return 0.0;
  };
  const double step = static_cast<double>(mib) / net.bytes_per_s;
  EXPECT_DOUBLE_EQ(tree(2), 2 * (tree_depth(2, 0) + 64 - 1) * (net.latency_s + step));
  EXPECT_DOUBLE_EQ(tree(5), 2 * (tree_depth(5, 0) + 64 - 1) * (net.latency_s + 2 * step));
}

}  // namespace
}  // namespace ctrun::comm::algorithms
