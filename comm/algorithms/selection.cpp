#include "comm/algorithms/selection.hpp"

#include <sstream>
#include <vector>

#include "comm/types.hpp"

namespace ctrun::comm::algorithms {
namespace {

// Crossovers measured with ctbench (4 ranks, 2 cores, shm and tcp): below them the algorithm with fewer steps
// wins, above them the one that moves fewer bytes per rank. See docs/comm.md.
constexpr std::size_t kAllReduceRingFrom = 64 << 10;
constexpr std::size_t kBroadcastChainFrom = 256 << 10;
constexpr std::size_t kReduceChainFrom = 256 << 10;
constexpr std::size_t kAllGatherRingFrom = 16 << 10;
constexpr std::size_t kReduceScatterRingFrom = 16 << 10;

struct NameOf {
  const char* name;
  Algorithm algorithm;
};
constexpr NameOf kAlgorithms[] = {
    {"ring", Algorithm::kRing},
    {"recursive_doubling", Algorithm::kRecursiveDoubling},
    {"tree", Algorithm::kTree},
    {"chain", Algorithm::kChain},
    {"direct", Algorithm::kDirect},
    {"pairwise", Algorithm::kPairwise},
    {"dissemination", Algorithm::kDissemination},
    {"shm", Algorithm::kShm},
    {"auto", Algorithm::kAuto},
};

Algorithm parse_algorithm(const std::string& name) {
  for (const auto& a : kAlgorithms) {
    if (name == a.name) return a.algorithm;
  }
  throw InvalidArgumentError("unknown comm algorithm '" + name +
                             "' (CTRUN_COMM_ALGO); known: ring, recursive_doubling, tree, chain, direct, pairwise, "
                             "dissemination, shm, auto");
}

OpKind parse_op(const std::string& name) {
  for (int i = 0; i <= static_cast<int>(OpKind::kBarrier); ++i) {
    if (name == op_name(static_cast<OpKind>(i))) return static_cast<OpKind>(i);
  }
  throw InvalidArgumentError("unknown op '" + name + "' in the comm algorithm override (CTRUN_COMM_ALGO)");
}

// Whether `a` implements `op` (an override naming an algorithm an op lacks falls back to the table).
bool implements(OpKind op, Algorithm a) {
  if (a == Algorithm::kShm) {
    return op == OpKind::kAllReduce || op == OpKind::kBroadcast || op == OpKind::kAllGather ||
           op == OpKind::kReduceScatter;
  }
  switch (op) {
    case OpKind::kAllReduce:
      return a == Algorithm::kRing || a == Algorithm::kRecursiveDoubling;
    case OpKind::kBroadcast:
    case OpKind::kReduce:
      return a == Algorithm::kTree || a == Algorithm::kChain;
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
      return a == Algorithm::kRing || a == Algorithm::kDirect;
    case OpKind::kGather:
    case OpKind::kScatter:
      return a == Algorithm::kDirect;
    case OpKind::kAllToAll:
      return a == Algorithm::kPairwise;
    case OpKind::kBarrier:
      return a == Algorithm::kDissemination;
    case OpKind::kSend:
      return false;
  }
  return false;
}

}  // namespace

const char* op_name(OpKind op) {
  switch (op) {
    case OpKind::kSend:
      return "send";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kAllReduce:
      return "all_reduce";
    case OpKind::kReduce:
      return "reduce";
    case OpKind::kAllGather:
      return "all_gather";
    case OpKind::kGather:
      return "gather";
    case OpKind::kScatter:
      return "scatter";
    case OpKind::kReduceScatter:
      return "reduce_scatter";
    case OpKind::kAllToAll:
      return "all_to_all";
    case OpKind::kBarrier:
      return "barrier";
  }
  return "?";
}

const char* algorithm_name(Algorithm a) {
  for (const auto& n : kAlgorithms) {
    if (n.algorithm == a) return n.name;
  }
  return "?";
}

Selector::Selector(const std::string& spec) {
  std::stringstream in(spec);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos) {
      global_ = parse_algorithm(item);
      continue;
    }
    const OpKind op = parse_op(item.substr(0, eq));
    const Algorithm a = parse_algorithm(item.substr(eq + 1));
    if (a != Algorithm::kAuto && !implements(op, a)) {
      throw InvalidArgumentError(std::string("comm algorithm '") + algorithm_name(a) + "' does not implement " +
                                 op_name(op) + " (CTRUN_COMM_ALGO)");
    }
    per_op_[op] = a;
  }
}

Algorithm Selector::choose(OpKind op, std::size_t bytes, int group_size, bool shared_memory) const {
  const auto usable = [&](Algorithm a) { return a != Algorithm::kShm || shared_memory; };
  if (auto it = per_op_.find(op); it != per_op_.end() && it->second != Algorithm::kAuto && usable(it->second)) {
    return it->second;
  }
  if (global_ != Algorithm::kAuto && implements(op, global_) && usable(global_)) return global_;
  // With shared memory, reading peers' data in place beats passing messages at every size we measured.
  if (shared_memory && implements(op, Algorithm::kShm)) return Algorithm::kShm;
  switch (op) {
    case OpKind::kAllReduce:
      return bytes >= kAllReduceRingFrom && group_size > 2 ? Algorithm::kRing : Algorithm::kRecursiveDoubling;
    case OpKind::kBroadcast:
      return bytes >= kBroadcastChainFrom ? Algorithm::kChain : Algorithm::kTree;
    case OpKind::kReduce:
      return bytes >= kReduceChainFrom ? Algorithm::kChain : Algorithm::kTree;
    case OpKind::kAllGather:
      return bytes >= kAllGatherRingFrom ? Algorithm::kRing : Algorithm::kDirect;
    case OpKind::kReduceScatter:
      return bytes >= kReduceScatterRingFrom ? Algorithm::kRing : Algorithm::kDirect;
    case OpKind::kGather:
    case OpKind::kScatter:
      return Algorithm::kDirect;
    case OpKind::kAllToAll:
      return Algorithm::kPairwise;
    case OpKind::kBarrier:
      return Algorithm::kDissemination;
    case OpKind::kSend:
      break;
  }
  return Algorithm::kDirect;
}

}  // namespace ctrun::comm::algorithms
