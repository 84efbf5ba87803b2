#pragma once
// TCP transport: one socket per pair of ranks, connected lazily on first use (a 1000-rank job where each rank
// talks to two ring neighbours opens 2 sockets per rank, not 999). Each rank listens on an ephemeral port and
// publishes "tcp/<rank>" = host:port in the group's store; of a pair, the lower rank connects and says hello,
// the higher one accepts. Sockets are nonblocking with TCP_NODELAY; events come from poll().

#include <memory>
#include <string>

#include "comm/transport/transport.hpp"
#include "comm/types.hpp"
#include "store/store.hpp"

namespace ctrun::comm::transport::tcp {

struct Options {
  std::string advertise_host;                   // address peers connect to; empty -> pick_advertise_host(route_to)
  std::string route_to;                         // the job's MASTER_ADDR (empty: none)
  Duration timeout = std::chrono::seconds(30);  // connecting and waiting for a peer's address
  std::size_t buffer_bytes = 0;                 // SO_SNDBUF/SO_RCVBUF (0: autotuning): CTRUN_COMM_TCP_BUFFER_BYTES
  std::size_t lowat_bytes = 0;                  // cap of SO_RCVLOWAT (0: off): CTRUN_COMM_TCP_LOWAT_BYTES
};

// The local address of the route to `master_addr` (no packet is sent), else 127.0.0.1 (CTRUN_COMM_IFADDR,
// resolved into Options::advertise_host by the caller, comes first).
std::string pick_advertise_host(const std::string& master_addr);

std::unique_ptr<Transport> create(std::shared_ptr<store::Store> store, int rank, int size, Options options);

}  // namespace ctrun::comm::transport::tcp
