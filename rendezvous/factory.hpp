#pragma once
// create_handler(): the agent's one entry point into rendezvous. It picks the backend, opens (and if this node is
// the host, serves) the rendezvous store, and returns the handler.
//
//   rdzv::RendezvousParameters p;                      // from the flags:
//   p.backend = "c10d"; p.endpoint = "node0:29400"; p.run_id = "job1";
//   std::tie(p.min_nodes, p.max_nodes) = rdzv::parse_nnodes("2:4");
//   p.config = rdzv::parse_rdzv_conf("join_timeout=60,last_call_timeout=5");
//   p.local_addr = local_addr_flag;                       // --local-addr as given ("" if not)
//   auto h = rdzv::create_handler(p, rdzv::NodeSpec{local_addr, nproc, role});

#include <cstdint>
#include <memory>
#include <optional>

#include "rendezvous/clock.hpp"
#include "rendezvous/handler.hpp"
#include "rendezvous/parameters.hpp"

namespace ctrun::rdzv {

struct HandlerOptions {
  // Use this store instead of connecting to the endpoint (tests, or an agent that already holds one).
  std::shared_ptr<store::Store> store;
  std::shared_ptr<const Clock> clock;
  // Static backend, node rank 0: the port on which the agent already serves its worker store at the master
  // address (one store for the rendezvous and the workers, as torchrun). The handler uses that store and binds
  // nothing. Unset: the handler serves the store itself, and fails if anything else holds the port.
  std::optional<std::uint16_t> agent_store_port;
};

// Throws std::invalid_argument for bad parameters (exit code 2 in the agent), RendezvousError otherwise.
std::unique_ptr<Handler> create_handler(const RendezvousParameters& params, const NodeSpec& node,
                                        const HandlerOptions& options = {});

// torchrun's _matches_machine_hostname: "localhost", a loopback address, this host's name, or any address of a
// local interface. Decides which agent hosts the c10d store when --rdzv-conf is_host is not given.
bool is_local_host(const std::string& host);

// True if the two host names or addresses resolve to a common address (no lookup for numeric addresses).
bool same_host(const std::string& a, const std::string& b);

}  // namespace ctrun::rdzv
