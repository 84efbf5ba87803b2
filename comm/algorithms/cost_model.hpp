#pragma once
// comm's cost model (NCCL's tuning model, from a table): per (op, algorithm) a time formula in the number of
// nodes, ranks per node and bytes, from each level's per-message latency and bandwidth. Every op that runs in two
// levels (two_level.hpp, which also predicts a whole two-level op) has rows here: the two-level groups' cross level runs the cheapest row of its op (unless
// CTRUN_COMM_ALGO names another of its rows: Selector::choose_cross), the simulator (apps/bench/comm_sim) prints
// the same formulas from 2 to 32,768 ranks, docs/comm.md's cost table is generated from them, and
// tests/comm/cost_model_test.cpp checks the choice. Latency and bandwidth come from settings (CTRUN_COMM_NET_*,
// CTRUN_COMM_SHM_* in comm/config.cpp) or are measured between two hosts when a two-level group is created
// (comm/cpu/link_probe.cpp).

#include <cstddef>
#include <span>
#include <string>

#include "comm/algorithms/table.hpp"

namespace ctrun::comm::algorithms {

// One level's link: seconds per message and bytes per second per rank.
struct LinkCost {
  double latency_s = 0;
  double bytes_per_s = 1;
};

struct Shape {
  int nodes = 1;           // participants of the level the formula prices (hosts on the cross level)
  int ranks_per_node = 1;  // ranks on each host (the local steps)
  std::size_t bytes = 0;   // the op's per-rank message
  std::size_t chunk_bytes = std::size_t{1} << 20;  // pipelining unit of the chunked algorithms
};

struct CostRow {
  OpKind op;
  Algorithm algorithm;
  double (*seconds)(const Shape& shape, const LinkCost& link);  // the cross level's part
  const char* formula;                                          // docs/comm.md
};
std::span<const CostRow> cost_table();
// The row of (op, algorithm), or null when the algorithm has no price between hosts for the op.
const CostRow* cost_row(OpKind op, Algorithm algorithm);

// The row of `op` with the smallest predicted time over `link` (first in table order on ties), null when the
// op has no row (it never runs between hosts: send, gather, scatter, all_to_all).
const CostRow* cheapest(OpKind op, const Shape& shape, const LinkCost& link);

// One shared-memory step over a host's ranks (every rank writes and reads `bytes` once); 0 with one rank per node.
double local_step_seconds(const Shape& shape, const LinkCost& local, double bytes);

// docs/comm.md's cost table, generated from cost_table().
std::string cost_markdown();

}  // namespace ctrun::comm::algorithms
