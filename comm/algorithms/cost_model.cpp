#include "comm/algorithms/cost_model.hpp"

#include <algorithm>
#include <cmath>

#include "comm/algorithms/binary_tree.hpp"

namespace ctrun::comm::algorithms {
namespace {

double log2_ceil(int n) { return n <= 1 ? 0 : std::ceil(std::log2(static_cast<double>(n))); }
double m(const Shape& s) { return static_cast<double>(s.bytes); }
double chunks(const Shape& s, double bytes) {
  return std::max(1.0, std::ceil(bytes / static_cast<double>(std::max<std::size_t>(s.chunk_bytes, 1))));
}
// Depth of the in-order binary tree: computed exactly for small n, log2 beyond (the simulator's 32,768).
double depth(int n) { return n <= 4096 ? tree_depth(n, 0) : std::floor(std::log2(static_cast<double>(n))); }

double ring(const Shape& s, const LinkCost& l) {
  const double n = s.nodes;
  if (n <= 1) return 0;
  return 2 * (n - 1) * (l.latency_s * chunks(s, m(s) / n)) + 2 * (n - 1) / n * m(s) / l.bytes_per_s;
}
double doubling(const Shape& s, const LinkCost& l) {
  if (s.nodes <= 1) return 0;
  const bool pow2 = (s.nodes & (s.nodes - 1)) == 0;
  const double steps = std::floor(std::log2(static_cast<double>(s.nodes))) + (pow2 ? 0 : 2);
  return steps * (l.latency_s + m(s) / l.bytes_per_s);
}
// Rabenseifner's: log2(N') halving steps and as many doubling steps, each moving half the data of the one before
// (2(N'-1)/N' of the buffer in all), plus the fold and unfold of the extra ranks (the whole buffer each).
double halving(const Shape& s, const LinkCost& l) {
  if (s.nodes <= 1) return 0;
  const double lg = std::floor(std::log2(static_cast<double>(s.nodes)));
  const double p2 = std::exp2(lg);
  const bool pow2 = (s.nodes & (s.nodes - 1)) == 0;
  return 2 * lg * l.latency_s + 2 * (p2 - 1) / p2 * m(s) / l.bytes_per_s +
         (pow2 ? 0 : 2 * (l.latency_s + m(s) / l.bytes_per_s));
}
// Up and down the tree: depth + chunks - 1 pipelined steps each way; an interior rank takes in a chunk from each
// child per step and sends one down to each: two children, but the root of two nodes has one.
double tree(const Shape& s, const LinkCost& l) {
  if (s.nodes <= 1) return 0;
  const double c = chunks(s, m(s));
  const double children = std::min(2, s.nodes - 1);
  return 2 * (depth(s.nodes) + c - 1) * (l.latency_s + children * (m(s) / c) / l.bytes_per_s);
}
// Two trees, half of the data each: a rank is interior in one tree (two chunks of that tree in per step) and a
// leaf in the other (one chunk out), so its link carries about the whole buffer each way, as a ring's does.
double double_tree(const Shape& s, const LinkCost& l) {
  if (s.nodes <= 1) return 0;
  const double c = chunks(s, m(s) / 2);
  return 2 * (depth(s.nodes) + 1 + c - 1) * l.latency_s + 2 * m(s) / l.bytes_per_s;
}
double binomial(const Shape& s, const LinkCost& l) { return log2_ceil(s.nodes) * (l.latency_s + m(s) / l.bytes_per_s); }
double chain(const Shape& s, const LinkCost& l) {
  if (s.nodes <= 1) return 0;
  const double c = chunks(s, m(s));
  return (s.nodes - 1 + c - 1) * (l.latency_s + m(s) / c / l.bytes_per_s);
}
double dissemination(const Shape& s, const LinkCost& l) { return log2_ceil(s.nodes) * l.latency_s; }
// all_gather / reduce_scatter's direct cross step: every host's blocks (R of them) to every other host at once.
double exchange(const Shape& s, const LinkCost& l) {
  if (s.nodes <= 1) return 0;
  const double blocks = static_cast<double>(s.nodes - 1) * s.ranks_per_node;
  return (s.nodes - 1) * l.latency_s + blocks * m(s) / l.bytes_per_s;
}

using A = Algorithm;
using O = OpKind;
constexpr CostRow kRows[] = {
    {O::kAllReduce, A::kRecursiveDoubling, doubling, "floor(log2 N) (+2 unless N is a power of two) x (a + m/B)"},
    {O::kAllReduce, A::kHalvingDoubling, halving,
     "2 log2 N' x a + 2(N'-1)/N' x m/B (+2 x (a + m/B) unless N is a power of two), N' = 2^floor(log2 N)"},
    {O::kAllReduce, A::kRing, ring, "2(N-1) x a x ceil(m/(N k)) + 2(N-1)/N x m/B"},
    {O::kAllReduce, A::kTree, tree, "2(D + C - 1) x (a + min(2, N-1) m/(C B)), C = ceil(m/k), D = tree depth"},
    {O::kAllReduce, A::kDoubleBinaryTree, double_tree, "2(D + C) x a + 2 m/B, C = ceil(m/(2k))"},
    {O::kBroadcast, A::kTree, binomial, "ceil(log2 N) x (a + m/B)"},
    {O::kBroadcast, A::kChain, chain, "(N + C - 2) x (a + m/(C B)), C = ceil(m/k)"},
    {O::kReduce, A::kTree, binomial, "ceil(log2 N) x (a + m/B)"},
    {O::kReduce, A::kChain, chain, "(N + C - 2) x (a + m/(C B)), C = ceil(m/k)"},
    {O::kAllGather, A::kDirect, exchange, "(N-1) x a + (N-1) x R x m/B, R = ranks per host"},
    {O::kReduceScatter, A::kDirect, exchange, "(N-1) x a + (N-1) x R x m/B, R = ranks per host"},
    {O::kBarrier, A::kDissemination, dissemination, "ceil(log2 N) x a"},
};

}  // namespace

std::span<const CostRow> cost_table() { return kRows; }

const CostRow* cost_row(OpKind op, Algorithm algorithm) {
  for (const auto& r : kRows) {
    if (r.op == op && r.algorithm == algorithm) return &r;
  }
  return nullptr;
}

const CostRow* cheapest(OpKind op, const Shape& shape, const LinkCost& link) {
  const CostRow* best = nullptr;
  double best_s = 0;
  for (const auto& r : kRows) {
    if (r.op != op) continue;
    const double t = r.seconds(shape, link);
    if (!best || t < best_s) best = &r, best_s = t;
  }
  return best;
}

double local_step_seconds(const Shape& shape, const LinkCost& local, double bytes) {
  if (shape.ranks_per_node <= 1) return 0;
  return local.latency_s + 2 * bytes / local.bytes_per_s;
}

std::string cost_markdown() {
  std::string out = "| op | cross-level algorithm | predicted time of the cross step |\n|---|---|---|\n";
  for (const auto& r : kRows) {
    out += std::string("| ") + op_name(r.op) + " | `" + algorithm_name(r.algorithm) + "` | " + r.formula + " |\n";
  }
  return out;
}

}  // namespace ctrun::comm::algorithms
