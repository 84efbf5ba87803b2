#pragma once
// An address of this node that the other nodes can reach, for its worker store (MASTER_ADDR when it is group rank
// 0). ctrun publishes the host name, as torchrun does, but Debian's and Ubuntu's default /etc/hosts maps it to
// 127.0.1.1: on another host, every worker would dial its own loopback and hang in init_process_group saying
// nothing. When the name resolves to loopback here and the job spans hosts, the agent publishes instead the
// address the other nodes already reach it by:
//   - the rendezvous endpoint is on another host: the local address of this node's route to it (the address the
//     agent's own connection to the endpoint leaves from; found with a connected UDP socket: no packet is sent);
//   - it is this node's: the endpoint's host as given, which every other agent dials to join.
// Before starting workers, every node but group rank 0's dials MASTER_ADDR:MASTER_PORT once (bounded) and says so
// when it cannot be reached (workers would hang).

#include <chrono>
#include <optional>
#include <string>

#include "agent/base/launch_config.hpp"

namespace ctrun::agent {

// The first address `host` resolves to (what a client dialing it tries first) is a loopback address. Numeric
// addresses are not looked up.
bool resolves_to_loopback(const std::string& host);

// The numeric local address this host's packets to host:port leave from; nullopt when there is no route or the
// host does not resolve.
std::optional<std::string> local_address_towards(const std::string& host, std::uint16_t port);

struct PublishedAddress {
  std::string host;  // what to publish
  std::string why;   // empty: `store_host` as it was; else one line for the log, said once
};

// What this agent publishes for its worker store, given the address it would publish (`store_host`, the host name
// unless --local-addr). Only a job on several hosts with a c10d or etcd endpoint and no --local-addr is changed.
// May resolve names (blocking: call it off the agent's loop).
PublishedAddress publishable_store_host(const LaunchConfig& config, const std::string& store_host);

// The address other nodes reach this node's own listeners at (its checkpoint replication endpoint). With c10d or
// etcd that is where its worker store is published (`store_host`, already made publishable). With the static
// backend node rank 0 serves the one store, so `store_host` is the master's: --local-addr, else this host's name
// unless it resolves to loopback here, else the local address of this node's route to the master. May resolve
// names (blocking: call it off the agent's loop).
std::string node_listen_host(const LaunchConfig& config, const std::string& store_host, bool static_multi_node);

// Empty when a TCP connection to host:port is made within `timeout`; else why not ("connection refused",
// "timed out after 2 s", "does not resolve").
std::string unreachable_reason(const std::string& host, std::uint16_t port, std::chrono::milliseconds timeout);

// "the workers' store at HOST:PORT (MASTER_ADDR of group rank 0's node) cannot be reached from this node: WHY. ..."
std::string unreachable_store_message(const std::string& host, std::uint16_t port, const std::string& why);

}  // namespace ctrun::agent
