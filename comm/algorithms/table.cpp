#include "comm/algorithms/table.hpp"

#include "comm/algorithms/algorithms.hpp"

namespace ctrun::comm::algorithms {
namespace {

constexpr std::size_t KiB = 1024;

constexpr OpRow kOps[] = {
    {OpKind::kSend, "send", false, AvgOn::kNothing},
    {OpKind::kBroadcast, "broadcast", true, AvgOn::kNothing},
    {OpKind::kAllReduce, "all_reduce", true, AvgOn::kBuffer},
    {OpKind::kReduce, "reduce", true, AvgOn::kBufferAtRoot},
    {OpKind::kAllGather, "all_gather", true, AvgOn::kNothing},
    {OpKind::kGather, "gather", false, AvgOn::kNothing},
    {OpKind::kScatter, "scatter", false, AvgOn::kNothing},
    {OpKind::kReduceScatter, "reduce_scatter", true, AvgOn::kOutput},
    {OpKind::kAllToAll, "all_to_all", false, AvgOn::kNothing},
    {OpKind::kBarrier, "barrier", false, AvgOn::kNothing},
};
static_assert(std::size(kOps) == kNumOpKinds);

struct NameOf {
  const char* name;
  Algorithm algorithm;
};
constexpr NameOf kNames[] = {
    {"ring", Algorithm::kRing},
    {"recursive_doubling", Algorithm::kRecursiveDoubling},
    {"halving_doubling", Algorithm::kHalvingDoubling},
    {"tree", Algorithm::kTree},
    {"double_binary_tree", Algorithm::kDoubleBinaryTree},
    {"chain", Algorithm::kChain},
    {"direct", Algorithm::kDirect},
    {"pairwise", Algorithm::kPairwise},
    {"dissemination", Algorithm::kDissemination},
    {"shm", Algorithm::kShm},
    {"shm_direct", Algorithm::kShmDirect},
    {"auto", Algorithm::kAuto},
};

using A = Algorithm;
using O = OpKind;
constexpr auto kAny = Needs::kAnyTransport;
constexpr auto kShmOnly = Needs::kSharedMemory;
constexpr auto kPeerReads = Needs::kPeerReads;
// The direct algorithms run only when overridden (automatic = false): on the 2-core VM, best of 3 alternated
// runs, they took 1.5-5x the time of the piecewise ones at 1-64 MiB with 4 and 8 ranks (docs/benchmarks.md):
// process_vm_readv pins and copies page by page in the kernel, slower here than memcpy through a cache-resident
// workspace. kDirectFrom is where they would apply on a machine where that measures the other way.
constexpr std::size_t kDirectFrom = 1024 * KiB;
constexpr bool kDirectAutomatic = false;

// Crossovers measured with ctbench (4 ranks, 2 cores, shm and tcp): below them the algorithm with fewer steps
// wins, above them the one that moves fewer bytes per rank (tcp all_reduce, 4 and 8 ranks: recursive doubling
// 0.7x the ring's time at 64 KiB, even at 256 KiB, ring ahead from 512 KiB-1 MiB, halving/doubling ahead of both
// in between, see kHalvingFrom; docs/benchmarks.md). With shared
// memory, reading peers' data in place beats passing messages at every size measured (docs/benchmarks.md).
// Halving/doubling between the two, fewer steps than the ring and fewer bytes than recursive doubling: over tcp
// with 4, 6 and 8 ranks (best of 3 alternated runs, docs/benchmarks.md) it took 0.6-0.9x the better of the other
// two's time from 64-128 KiB to 512 KiB, and tied the ring (0.97-1.03x; 0.83x at 8 ranks) from 1 MiB, where the
// ring, which overlaps its reductions with the transfers, stays the choice.
constexpr std::size_t kHalvingFrom = 64 * KiB;
constexpr std::size_t kRingFrom = 1024 * KiB;
constexpr AlgorithmRow kRows[] = {
    {O::kAllReduce, A::kShmDirect, [](Context& c, const OpArgs& a) { all_reduce_shm_direct(c, a.buffer, a.op); },
     kDirectFrom, 2, kPeerReads, kDirectAutomatic,
     "rank r reduces slice r straight out of every rank's buffer (process_vm_readv into an L2-sized scratch, rank "
     "order), writes it into its own buffer, then copies every other slice straight out of its owner's buffer; "
     "3 barriers per op"},
    {O::kAllReduce, A::kShm, [](Context& c, const OpArgs& a) { all_reduce_shm(c, a.buffer, a.op); }, 0, 1, kShmOnly,
     true,
     "pipelined through workspace slots with per-slot flags: each rank copies a piece in, rank r reduces slice r "
     "of it over all ranks once all published it and publishes the result, everyone copies the slices out; small "
     "pieces are reduced whole by every rank. Below CTRUN_COMM_SHM_PIPELINE_BYTES or with more ranks than cores: "
     "the same steps with one all-rank barrier per piece"},
    {O::kAllReduce, A::kRing, [](Context& c, const OpArgs& a) { all_reduce_ring(c, a.buffer, a.op); }, kRingFrom, 3,
     kAny, true, "reduce-scatter + all-gather around the ring, chunked and pipelined, every receive posted up front"},
    {O::kAllReduce, A::kHalvingDoubling,
     [](Context& c, const OpArgs& a) { all_reduce_halving_doubling(c, a.buffer, a.op); }, kHalvingFrom, 3, kAny, true,
     "Rabenseifner's: reduce-scatter by recursive halving, then all-gather by recursive doubling; 2 log2(n) steps "
     "moving the ring's 2(n-1)/n of the buffer; non-powers of two fold the extra ranks in first"},
    {O::kAllReduce, A::kRecursiveDoubling,
     [](Context& c, const OpArgs& a) { all_reduce_recursive_doubling(c, a.buffer, a.op); }, 0, 1, kAny, true,
     "log2(n) exchange steps; non-powers of two fold the extra ranks in first"},
    // The trees serve the level between hosts of a two-level group, where the cost model (cost_model.hpp)
    // picks among every all_reduce row that any transport runs; on one host the rows above stay the choice.
    {O::kAllReduce, A::kTree, [](Context& c, const OpArgs& a) { all_reduce_tree(c, a.buffer, a.op); }, 0, 1, kAny,
     false, "pipelined binary tree: chunks reduced up an in-order binary tree and sent back down; 2 log2(n) steps"},
    {O::kAllReduce, A::kDoubleBinaryTree,
     [](Context& c, const OpArgs& a) { all_reduce_double_binary_tree(c, a.buffer, a.op); }, 0, 1, kAny, false,
     "two complementary binary trees (every rank interior in at most one), half of the data each, chunks "
     "pipelined: a ring's bandwidth at a tree's O(log n) latency"},

    {O::kBroadcast, A::kShmDirect, [](Context& c, const OpArgs& a) { broadcast_shm_direct(c, a.buffer, a.root); },
     kDirectFrom, 2, kPeerReads, kDirectAutomatic,
     "every rank copies the root's buffer straight out of it (process_vm_readv); 2 barriers per op"},
    {O::kBroadcast, A::kShm, [](Context& c, const OpArgs& a) { broadcast_shm(c, a.buffer, a.root); }, 0, 1, kShmOnly,
     true,
     "pipelined: the root copies pieces into its workspace slots, every other rank copies each out once "
     "published (below CTRUN_COMM_SHM_PIPELINE_BYTES: one all-rank barrier per piece)"},
    {O::kBroadcast, A::kChain, [](Context& c, const OpArgs& a) { broadcast_chain(c, a.buffer, a.root); }, 256 * KiB, 1,
     kAny, true, "pipelined chain from the root: bandwidth for large messages"},
    {O::kBroadcast, A::kTree, [](Context& c, const OpArgs& a) { broadcast_tree(c, a.buffer, a.root); }, 0, 1, kAny,
     true, "binomial tree: log2(n) steps"},

    {O::kReduce, A::kChain, [](Context& c, const OpArgs& a) { reduce_chain(c, a.buffer, a.root, a.op); }, 256 * KiB, 1,
     kAny, true, "pipelined chain towards the root"},
    {O::kReduce, A::kTree, [](Context& c, const OpArgs& a) { reduce_tree(c, a.buffer, a.root, a.op); }, 0, 1, kAny,
     true, "binomial tree towards the root"},

    {O::kAllGather, A::kShmDirect, [](Context& c, const OpArgs& a) { all_gather_shm_direct(c, a.outputs, a.buffer); },
     kDirectFrom / 8, 2, kPeerReads, kDirectAutomatic,
     "every rank copies each peer's input straight into its output (process_vm_readv); 2 barriers per op"},
    {O::kAllGather, A::kShm, [](Context& c, const OpArgs& a) { all_gather_shm(c, a.outputs, a.buffer); }, 0, 1,
     kShmOnly, true,
     "pipelined: every rank copies pieces of its input into its workspace slots and copies every other rank's "
     "pieces out once published (below CTRUN_COMM_SHM_PIPELINE_BYTES: one all-rank barrier per piece)"},
    {O::kAllGather, A::kRing, [](Context& c, const OpArgs& a) { all_gather_ring(c, a.outputs, a.buffer); }, 16 * KiB, 1,
     kAny, true, "n-1 ring steps, chunked"},
    {O::kAllGather, A::kDirect, [](Context& c, const OpArgs& a) { all_gather_direct(c, a.outputs, a.buffer); }, 0, 1,
     kAny, true, "every rank sends its block to every other at once (between hosts: each host's blocks as one)"},

    {O::kReduceScatter, A::kShmDirect,
     [](Context& c, const OpArgs& a) { reduce_scatter_shm_direct(c, a.buffer, a.inputs, a.op); }, kDirectFrom / 8, 2,
     kPeerReads, kDirectAutomatic,
     "rank r reduces block r straight out of every rank's inputs (process_vm_readv into an L2-sized scratch, rank "
     "order) into its output; 2 barriers per op"},
    {O::kReduceScatter, A::kShm, [](Context& c, const OpArgs& a) { reduce_scatter_shm(c, a.buffer, a.inputs, a.op); },
     0, 1, kShmOnly, true,
     "pipelined: every rank copies a piece of each other rank's block into its workspace slots; rank r reduces "
     "block r in one pass once all published (below CTRUN_COMM_SHM_PIPELINE_BYTES or with more ranks than "
     "cores: one all-rank barrier per piece)"},
    {O::kReduceScatter, A::kRing, [](Context& c, const OpArgs& a) { reduce_scatter_ring(c, a.buffer, a.inputs, a.op); },
     16 * KiB, 1, kAny, true, "n-1 ring steps, chunked"},
    {O::kReduceScatter, A::kDirect,
     [](Context& c, const OpArgs& a) { reduce_scatter_direct(c, a.buffer, a.inputs, a.op); }, 0, 1, kAny, true,
     "every rank sends block j to rank j at once, each reduces what it receives (between hosts: each host's "
     "blocks as one)"},

    {O::kGather, A::kDirect, [](Context& c, const OpArgs& a) { gather_direct(c, a.outputs, a.buffer, a.root); }, 0, 1,
     kAny, true, "every rank sends to the root"},
    {O::kScatter, A::kDirect, [](Context& c, const OpArgs& a) { scatter_direct(c, a.buffer, a.inputs, a.root); }, 0, 1,
     kAny, true, "the root sends to every rank"},
    {O::kAllToAll, A::kPairwise, [](Context& c, const OpArgs& a) { all_to_all_pairwise(c, a.outputs, a.inputs); }, 0, 1,
     kAny, true, "all sends and receives posted at once"},
    {O::kBarrier, A::kDissemination, [](Context& c, const OpArgs&) { barrier_dissemination(c); }, 0, 1, kAny, true,
     "log2(n) rounds of empty messages"},
};

std::string size_text(std::size_t bytes) {
  if (bytes == 0) return "any size";
  if (bytes % (1024 * KiB) == 0) return ">= " + std::to_string(bytes / (1024 * KiB)) + " MiB";
  if (bytes % KiB == 0) return ">= " + std::to_string(bytes / KiB) + " KiB";
  return ">= " + std::to_string(bytes) + " B";
}

}  // namespace

std::span<const OpRow> op_table() { return kOps; }
const OpRow& op_row(OpKind op) { return kOps[static_cast<int>(op)]; }
const char* op_name(OpKind op) {
  const int i = static_cast<int>(op);
  return i >= 0 && i < kNumOpKinds ? kOps[i].name : "?";
}

const char* algorithm_name(Algorithm a) {
  for (const auto& n : kNames) {
    if (n.algorithm == a) return n.name;
  }
  return "?";
}

Algorithm parse_algorithm(const std::string& name) {
  std::string known;
  for (const auto& a : kNames) {
    if (name == a.name) return a.algorithm;
    known += (known.empty() ? "" : ", ") + std::string(a.name);
  }
  throw InvalidArgumentError("unknown comm algorithm '" + name + "' (CTRUN_COMM_ALGO); known: " + known);
}

std::span<const AlgorithmRow> algorithm_table() { return kRows; }

const AlgorithmRow* find_row(OpKind op, Algorithm a) {
  for (const auto& r : kRows) {
    if (r.op == op && r.algorithm == a) return &r;
  }
  return nullptr;
}

std::string algorithm_markdown() {
  std::string out =
      "| op | algorithm | picked by the table when (first match) | needs | how |\n|---|---|---|---|---|\n";
  for (const auto& r : kRows) {
    std::string when = r.automatic ? size_text(r.min_bytes) : "only when overridden";
    if (r.automatic && r.min_ranks > 1) when += ", >= " + std::to_string(r.min_ranks) + " ranks";
    out += std::string("| ") + op_name(r.op) + " | `" + algorithm_name(r.algorithm) + "` | " + when + " | " +
           (r.needs == Needs::kPeerReads      ? "shm + peer reads"
            : r.needs == Needs::kSharedMemory ? "shm transport"
                                              : "any transport") +
           " | " + r.note + " |\n";
  }
  return out;
}

}  // namespace ctrun::comm::algorithms
