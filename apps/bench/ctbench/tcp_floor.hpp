#pragma once
// The TCP floor of a collective: bare sockets between the benchmark's own rank processes (blocking, TCP_NODELAY,
// the socket buffers comm uses: CTRUN_COMM_TCP_BUFFER_BYTES, kernel autotuning by default), moving the bytes a
// bandwidth-optimal algorithm must move, with no framing, no reduction and no progress engine:
//   all_reduce, all_gather, reduce_scatter: a ring (rank r sends to r+1 and receives from r-1 at once) of
//     2(n-1)/n S (all_reduce) or (n-1)/n S per rank;
//   broadcast: a chain from rank 0 (each rank forwards what it receives as it arrives): S through every link,
//     (n-1) S in all. A ring of S per rank would move n S in all, which on a CPU-bound host (loopback: every byte
//     costs two kernel copies) is n/(n-1) times a broadcast's work, so it is no floor there (gloo's tree beat it).
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
  // The same for a chain of `bytes` from rank 0 to rank n-1 over the ring's sockets (the broadcast floor).
  double chain_time_us(comm::ProcessGroup& pg, std::size_t bytes, int reps);
  // The floor of `op` at Row::bytes `bytes`: the ring or the chain above (0: no model).
  double floor_us(comm::ProcessGroup& pg, const std::string& op, std::size_t bytes, int reps);

 private:
  int to_right_ = -1;
  int from_left_ = -1;
};

}  // namespace ctrun::bench
