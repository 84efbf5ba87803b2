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
  double floor_us = 0;  // tcp: the bare socket ring's time for the same bytes (tcp_floor.hpp); 0: not measured
};

// nccl-tests' bus bandwidth factors (doc/PERFORMANCE.md).
double bus_factor(const std::string& op, int n);

// Runs `op` at `bytes` (float32) with warm-up, returns the slowest rank's mean time per op.
Row measure(comm::ProcessGroup& pg, const std::string& op, std::size_t bytes, int iters, int warmup);

// Bytes one rank must read plus write in its own buffers, whatever the algorithm, for `bytes` as in Row::bytes
// (S): all_reduce 2S (read the input, write the result), all_gather S/n + S, reduce_scatter S + S/n, broadcast
// S (the root reads it, the others write it). At >= 16 MiB these buffers live in DRAM while a shared-memory
// algorithm's workspace stays in cache, so this traffic at the machine's aggregate memcpy bandwidth is a floor
// no algorithm can beat (any extra copy through the workspace only adds to it). 0 for ops without a model.
double shm_rw_bytes_per_rank(const std::string& op, int n, std::size_t bytes);

// The time floor of that traffic: n ranks' bytes at the aggregate read+write bandwidth of `copy_gbps` (memcpy
// GB/s with as many threads as the ranks can run on at once; one memcpy byte = 1 read + 1 write).
double shm_floor_us(const std::string& op, int n, std::size_t bytes, double copy_gbps);

// Aggregate memcpy bandwidth of `threads` threads each copying its own `bytes` at once, GB/s.
double memcpy_gbps_parallel(std::size_t bytes, int threads);

// Single-thread memcpy bandwidth of a `bytes`-sized buffer, GB/s (the shared-memory limit of one core).
double memcpy_gbps(std::size_t bytes);

}  // namespace ctrun::bench
