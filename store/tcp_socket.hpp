#pragma once
// What every TCPStore client does before its first byte: resolve, connect within a deadline, back off between
// attempts. Shared by TcpStore (one request at a time) and MuxStore (one connection shared by many callers).

#include <chrono>
#include <cstdint>
#include <random>
#include <string>

#include "store/store.hpp"

namespace ctrun::store {

// "host:port", "[v6]:port".
std::string format_endpoint(const std::string& host, std::uint16_t port);

// poll()'s timeout in ms until deadline, rounded up so that a sub-millisecond remainder is not a spin.
int poll_timeout(Clock::time_point deadline);

// One TCP connect to every resolved address in turn, bounded by deadline: a connected, non-blocking socket with
// TCP_NODELAY (requests are small; Nagle would add a delayed-ACK stall to each). Throws StoreError with the reason.
int connect_tcp(const std::string& host, std::uint16_t port, Clock::time_point deadline);

// The pause between connect attempts: starts short because the usual cause is a server a few ms from listening
// (an agent racing its rank-0 peer), grows so that thousands of clients do not hammer a loaded server, and is
// jittered so that they do not retry in lockstep.
class ConnectBackoff {
 public:
  ConnectBackoff() : rng_(std::random_device{}()) {}
  Duration next();

 private:
  std::minstd_rand rng_;
  Duration backoff_{50};
};

}  // namespace ctrun::store
