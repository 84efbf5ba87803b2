#pragma once
// A store relay (issue 44): a node's door to the job's store. The node's workers connect to it on loopback as to the
// job's TCPStore (torch 1.13's legacy dialect or torch 2.x's v2, unchanged clients); it runs their requests on the
// store that holds the keys (a ctrun store: the agent's, or ctstore) over ONE connection in ctrun's tagged mode, and
// answers identical reads, waits and adds of its clients with one upstream request where the store's semantics allow
// (the rules: store/relay_core.hpp). The store then holds one connection per node instead of one or two per rank.
//
// It is the store's server (store/server.hpp: connections, both dialects, limits, flow control) with its requests
// run against the upstream (relay.cpp's backend) instead of a keyspace of its own. When the upstream is lost, every
// client is disconnected at once, as losing the store would; clients that come afterwards are turned away until
// connect() names a store again. Several relays may share one io_context (a bench's simulated nodes).

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "store/protocol.hpp"
#include "store/relay_core.hpp"
#include "store/server.hpp"

namespace boost::asio {
class io_context;
}

namespace ctrun::store {

struct RelayOptions {
  // Where the node's workers connect (they are on this node: loopback; port 0, the kernel picks and Relay::port()
  // says which) and what each connection may hold: the store's own limits (a request the relay takes, the store
  // takes too), the relay's memory bounded as the store's. on_failure is the relay's own.
  ServerOptions server{.host = "127.0.0.1", .max_total_bytes = 1ull << 30};
  // How long connect() keeps dialing a store that does not answer before the relay gives up (its clients then
  // fail as they would against an unreachable store).
  std::chrono::milliseconds connect_timeout{60000};
  // The job's secret (common/auth/secret.hpp): the relay proves it to the store (common/auth/handshake.hpp) before
  // its first request, as every agent does to a store that requires it. Null: the store must take anyone.
  std::shared_ptr<const auth::Secret> upstream_secret;
};

struct RelayStats {
  ServerStats server;              // its client connections (connections_open: the node's workers' connections)
  detail::RelayCounters counters;  // requests from clients, upstream, combined
  bool upstream_ready = false;     // connected and in tagged mode
  std::string upstream;            // "host:port" (empty before connect())
  std::uint64_t upstream_bytes_out = 0;
  std::uint64_t upstream_bytes_in = 0;
};

class Relay {
 public:
  // io: run on that context (the caller runs it and makes every call from its thread, and destroys the Relay after
  // the context stopped running); null: on a thread of its own.
  explicit Relay(RelayOptions options, boost::asio::io_context* io = nullptr);
  ~Relay();
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  // Binds and serves (throws StoreError naming the address). Clients are turned away until connect().
  void start();
  void stop();
  std::uint16_t port() const;
  // "host:port" the workers connect to.
  std::string endpoint() const;

  // Points the relay at the store that holds the keys: the connections of the previous store's clients are closed
  // (an attempt's workers are gone when the next starts), and the new store is dialed (asynchronously, retried
  // until connect_timeout; requests that arrive meanwhile go up once it answers). Callable from any thread.
  void connect(const std::string& host, std::uint16_t port);

  RelayStats stats();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ctrun::store
