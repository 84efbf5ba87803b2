#pragma once
// Where the agent gets its rendezvous handler: LocalRendezvous for a single-node job (--standalone, or one static
// node), otherwise rdzv::create_handler() (static or c10d, rendezvous/factory.hpp) from the launch config.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "agent/base/launch_config.hpp"
#include "rendezvous/handler.hpp"
#include "rendezvous/parameters.hpp"

namespace ctrun::agent {

// True when the job needs no other agent: the agent then uses LocalRendezvous and no store traffic at all.
bool is_single_node(const LaunchConfig& config);

// The address other nodes know this node by: --local-addr, else this host's fully qualified name (torchrun's
// socket.getfqdn()). It is the node's identity and rank sort key in the rendezvous.
std::string node_address(const LaunchConfig& config);

// "waiting for the other nodes of rendezvous 'ID' (N nodes, BACKEND backend, endpoint E): S s so far".
std::string waiting_for_nodes_message(const LaunchConfig& config, const std::string& run_id, const std::string& backend,
                                      long long waited_s);

// Throws std::invalid_argument for bad rendezvous settings (ctrun exits 2) and rdzv::RendezvousError when the
// rendezvous store cannot be reached. agent_store_port: where this agent serves its worker store, which static node
// rank 0 shares with the rendezvous (never "whatever holds the port").
std::unique_ptr<rdzv::Handler> make_rendezvous_handler(const LaunchConfig& config,
                                                       std::optional<std::uint16_t> agent_store_port = {});

// The parameters create_handler() gets; validated by the launch config builder without opening anything.
rdzv::RendezvousParameters rendezvous_parameters(const LaunchConfig& config);

}  // namespace ctrun::agent
