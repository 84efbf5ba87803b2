// The ops that run in two levels (two_level.hpp): each one's function and the time of its steps inside the hosts,
// as that function takes them, in shared-memory steps (cost_model.hpp's local_step_seconds).
#include "comm/algorithms/two_level.hpp"
#include "comm/algorithms/cost_model.hpp"

namespace ctrun::comm::algorithms {
namespace {

double block(const Shape& s) { return static_cast<double>(s.bytes); }
// A host's blocks (one per rank) and every rank's: the gathers' and scatters' whole messages.
double host_blocks(const Shape& s) { return block(s) * s.ranks_per_node; }
double all_blocks(const Shape& s) { return host_blocks(s) * s.nodes; }

using O = OpKind;
constexpr TwoLevelRow kRows[] = {
    {O::kAllReduce, two_level_all_reduce,  // all_reduce inside, broadcast inside
     [](const Shape& s, const LinkCost& l) { return 2 * local_step_seconds(s, l, block(s)); }},
    {O::kBroadcast, two_level_broadcast,  // broadcast inside after the cross step
     [](const Shape& s, const LinkCost& l) { return local_step_seconds(s, l, block(s)); }},
    {O::kReduce, two_level_reduce,  // reduce inside before it
     [](const Shape& s, const LinkCost& l) { return local_step_seconds(s, l, block(s)); }},
    {O::kAllGather, two_level_all_gather,  // all_gather inside, broadcast of the other hosts' blocks inside
     [](const Shape& s, const LinkCost& l) {
       return local_step_seconds(s, l, host_blocks(s)) + local_step_seconds(s, l, all_blocks(s) - host_blocks(s));
     }},
    {O::kReduceScatter, two_level_reduce_scatter,  // reduce of every rank's inputs inside, scatter of the host's blocks
     [](const Shape& s, const LinkCost& l) {
       return local_step_seconds(s, l, all_blocks(s)) + local_step_seconds(s, l, host_blocks(s));
     }},
    {O::kBarrier, two_level_barrier,  // barrier inside, before and after
     [](const Shape& s, const LinkCost& l) { return 2 * local_step_seconds(s, l, 0); }},
};

}  // namespace

std::span<const TwoLevelRow> two_level_table() { return kRows; }

const TwoLevelRow* find_two_level(OpKind op) {
  for (const auto& r : kRows) {
    if (r.op == op) return &r;
  }
  return nullptr;
}

double predict_two_level(OpKind op, Algorithm algorithm, const Shape& shape, const LinkCost& net,
                         const LinkCost& local) {
  const TwoLevelRow* steps = find_two_level(op);
  const CostRow* cross = cost_row(op, algorithm);
  return (steps ? steps->local_seconds(shape, local) : 0) + (cross ? cross->seconds(shape, net) : 0);
}

}  // namespace ctrun::comm::algorithms
