#pragma once
// The etcd backend's settings and their flag grammar, apart from the client that uses them, so that the agent
// checks --rdzv-endpoint and --rdzv-conf before anything is opened without pulling in the HTTP/TLS transport.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "rendezvous/parameters.hpp"
#include "store/store.hpp"

namespace ctrun::rdzv::etcd {

inline constexpr std::uint16_t kDefaultPort = 2379;

struct Options {
  std::vector<Endpoint> endpoints;
  bool https = false;
  std::string cacert, cert, key;  // PEM files (https): CA to verify the server, client certificate and key
  store::Duration request_timeout = std::chrono::seconds(60);  // one request, failover and retries included
  store::Duration attempt_timeout = std::chrono::seconds(3);   // one endpoint's answer
  // The run's keys vanish this long after its last agent is gone (etcd_lease.hpp). --rdzv-conf lease_ttl.
  std::chrono::seconds lease_ttl = std::chrono::seconds(600);
  // Each member's own lease (member_lease.hpp): the others declare it dead this long after its last keep-alive
  // (its agent was killed). 0: off, the heartbeat alone decides. --rdzv-conf member_ttl.
  std::chrono::seconds member_ttl = std::chrono::seconds(2);
};

// --rdzv-endpoint host:port[,host:port...] ("http://" or "https://" in front is accepted) and --rdzv-conf
// protocol=http|https, cacert=, cert=, key=, read_timeout=, lease_ttl=, member_ttl=. Throws std::invalid_argument (exit
// code 2).
Options parse_options(const RendezvousParameters& params);

}  // namespace ctrun::rdzv::etcd
