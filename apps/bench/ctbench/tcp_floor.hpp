#pragma once
// The TCP floor of a collective: a bare ring of sockets between the benchmark's own rank processes (rank r sends
// to r+1 and receives from r-1 at once, blocking sockets, TCP_NODELAY, comm's 4 MiB socket buffers), moving the
// bytes a bandwidth-optimal algorithm must move per rank: all_reduce 2(n-1)/n S, all_gather and reduce_scatter
// (n-1)/n S, broadcast S (a pipelined chain forwards all of it). No framing, no reduction, no progress engine.
#include <cstddef>
#include <memory>
#include <string>

#include "comm/process_group.hpp"

namespace ctrun::bench {

class TcpRing {
 public:
  // Collective over pg: every rank listens on 127.0.0.1 (or host), ports are exchanged with an all_gather.
  explicit TcpRing(comm::ProcessGroup& pg, const std::string& host = "127.0.0.1");
  ~TcpRing();
  TcpRing(const TcpRing&) = delete;
  TcpRing& operator=(const TcpRing&) = delete;

  // Bytes per rank of the floor ring for `op` at Row::bytes `bytes` (0: no model).
  static std::size_t ring_bytes(const std::string& op, int n, std::size_t bytes);
  // Slowest rank's best-of-`reps` time of one ring pass of `bytes` per rank, microseconds.
  double time_us(comm::ProcessGroup& pg, std::size_t bytes, int reps);

 private:
  int to_right_ = -1;
  int from_left_ = -1;
};

}  // namespace ctrun::bench
