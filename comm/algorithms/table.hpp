#pragma once
// comm's algorithm table (NCCL style): one row per (op, algorithm) the cpu backend implements, with the function
// that runs it, when the size table picks it and what it needs from the transport. Selection (selection.hpp),
// dispatch (cpu_backend.cpp), the override parser and docs/comm.md's table are all derived from these rows;
// tests/comm/tables_test.cpp checks that every op x size x group size picks an implemented row and that the
// documentation agrees with the table.

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "comm/algorithms/context.hpp"
#include "comm/buffer.hpp"
#include "comm/types.hpp"

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
inline constexpr int kNumOpKinds = static_cast<int>(OpKind::kBarrier) + 1;
const char* op_name(OpKind op);

enum class Algorithm {
  kAuto,
  kRing,
  kRecursiveDoubling,
  kHalvingDoubling,
  kTree,
  kDoubleBinaryTree,
  kChain,
  kDirect,
  kPairwise,
  kDissemination,
  kShm,
  kShmDirect
};
const char* algorithm_name(Algorithm a);
// Throws InvalidArgumentError listing the known names.
Algorithm parse_algorithm(const std::string& name);

// Where AVG's division (AVG runs as SUM, then divides once) applies after an op.
enum class AvgOn { kNothing, kBuffer, kBufferAtRoot, kOutput };

// Per op: its name, whether every rank must pass the same size, where AVG divides.
struct OpRow {
  OpKind op;
  const char* name;
  bool equal_sizes;
  AvgOn avg;
};
std::span<const OpRow> op_table();
const OpRow& op_row(OpKind op);

// Everything any algorithm of any op takes. buffer: the in-place buffer (all_reduce, broadcast, reduce), the
// input (all_gather, gather) or the output (scatter, reduce_scatter). op: the reduction, never AVG.
struct OpArgs {
  Buffer buffer;
  std::vector<Buffer> outputs;
  std::vector<Buffer> inputs;
  int root = 0;
  ReduceOp op = ReduceOp::kSum;
};
using RunFn = void (*)(Context& ctx, const OpArgs& args);

// What a row needs from the transport, in increasing order: a transport offering one level offers the lower ones.
enum class Needs { kAnyTransport, kSharedMemory, kPeerReads };

struct AlgorithmRow {
  OpKind op;
  Algorithm algorithm;
  RunFn run;
  // The size table picks the first row of the op, in table order, whose conditions hold: bytes (the per-rank
  // message: the buffer, or one rank's block of a gather/scatter) >= min_bytes, group size >= min_ranks, and the
  // transport provides what the row needs (needs <= what it has). Rows with automatic = false run only when overridden.
  std::size_t min_bytes;
  int min_ranks;
  Needs needs;
  bool automatic;
  const char* note;  // how it works and why it is chosen there (docs/comm.md)
};
std::span<const AlgorithmRow> algorithm_table();
// The row of (op, algorithm), or null when the algorithm does not implement the op.
const AlgorithmRow* find_row(OpKind op, Algorithm a);

// docs/comm.md's algorithm table, generated from algorithm_table().
std::string algorithm_markdown();

}  // namespace ctrun::comm::algorithms
