#pragma once
// Which algorithm runs a collective: the first matching row of the algorithm table (table.hpp), unless overridden;
// on a two-level group's cross level (two_level.hpp), the op's cheapest row of the cost table (cost_model.hpp).
//
// Override syntax (ProcessGroupOptions::algorithm, else CTRUN_COMM_ALGO, resolved into Config::algorithm):
//   "ring"                         every op that has a ring algorithm uses it
//   "all_reduce=recursive_doubling,broadcast=chain"
// Unknown names, and per-op entries naming an algorithm the op lacks, are errors; an algorithm that needs shared
// memory applies only where the transport has it (else the table decides), and between hosts only where the cost
// table prices it for the op (else the cost model decides).

#include <cstddef>
#include <map>
#include <string>

#include "comm/algorithms/cost_model.hpp"
#include "comm/algorithms/table.hpp"

namespace ctrun::comm::algorithms {

class Selector {
 public:
  Selector() = default;
  // Parses an override spec (see above); throws InvalidArgumentError naming the bad entry.
  explicit Selector(const std::string& spec);

  // bytes: the per-rank message size of the op (the buffer for all_reduce/broadcast/reduce, one rank's block
  // for the gathers and scatters). available: what the transport offers (kSharedMemory: a SharedWorkspace;
  // kPeerReads: one whose peer_reads() holds). Never null for an op of op_table() other than kSend.
  const AlgorithmRow* choose(OpKind op, std::size_t bytes, int group_size, Needs available) const;
  // The cross level's algorithm for `op` (shape: hosts, ranks per host, the op's per-rank message): the
  // overriding row when it has a cost row for the op, else the cost row with the smallest predicted time over
  // `link`. Null only for an op without cost rows (one that never runs between hosts).
  const CostRow* choose_cross(OpKind op, const Shape& shape, const LinkCost& link) const;

 private:
  // The overriding row for `op` when the spec names one usable with `available`, else null.
  const AlgorithmRow* overridden(OpKind op, Needs available) const;

  std::map<OpKind, Algorithm> per_op_;
  Algorithm global_ = Algorithm::kAuto;
};

}  // namespace ctrun::comm::algorithms
