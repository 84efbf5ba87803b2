#pragma once
// Which algorithm runs a collective: a table by message size and group size, overridable per op.
//
// Override syntax (ProcessGroupOptions::algorithm, else env CTRUN_COMM_ALGO):
//   "ring"                         every op that has a ring algorithm uses it
//   "all_reduce=recursive_doubling,broadcast=chain"
// Names: ring, recursive_doubling, tree, chain, direct, pairwise, dissemination, shm. Unknown names are an
// error; "shm" applies only where the transport has shared memory (else the table decides).

#include <cstddef>
#include <map>
#include <string>

namespace ctrun::comm::algorithms {

enum class OpKind : int {
  kSend = 0,
  kBroadcast,
  kAllReduce,
  kReduce,
  kAllGather,
  kGather,
  kScatter,
  kReduceScatter,
  kAllToAll,
  kBarrier,
};
const char* op_name(OpKind op);

enum class Algorithm { kAuto, kRing, kRecursiveDoubling, kTree, kChain, kDirect, kPairwise, kDissemination, kShm };
const char* algorithm_name(Algorithm a);

class Selector {
 public:
  Selector() = default;
  // Parses an override spec (see above); throws InvalidArgumentError naming the bad entry.
  explicit Selector(const std::string& spec);

  // bytes: the per-rank message size of the op (the buffer for all_reduce/broadcast/reduce, one rank's block
  // for the gathers and scatters). shared_memory: the transport offers a SharedWorkspace.
  Algorithm choose(OpKind op, std::size_t bytes, int group_size, bool shared_memory) const;

 private:
  std::map<OpKind, Algorithm> per_op_;
  Algorithm global_ = Algorithm::kAuto;
};

}  // namespace ctrun::comm::algorithms
