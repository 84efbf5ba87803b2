#pragma once
// One row of an nccl-tests-style table, and the measurement of one (op, size) point on a process group.

#include <string>
#include <vector>

#include "comm/process_group.hpp"

namespace ctrun::bench {

struct Row {
  std::string op;
  std::size_t bytes = 0;  // nccl-tests' "size": the buffer for all_reduce/broadcast, the total for the gathers
  double time_us = 0;
  double algbw = 0;  // GB/s = bytes / time
  double busbw = 0;  // GB/s = algbw * nccl-tests' factor for the op
};

// nccl-tests' bus bandwidth factors (doc/PERFORMANCE.md).
double bus_factor(const std::string& op, int n);

// Runs `op` at `bytes` (float32) with warm-up, returns the slowest rank's mean time per op.
Row measure(comm::ProcessGroup& pg, const std::string& op, std::size_t bytes, int iters, int warmup);

// Single-thread memcpy bandwidth of a `bytes`-sized buffer, GB/s (the shared-memory limit of one core).
double memcpy_gbps(std::size_t bytes);

}  // namespace ctrun::bench
