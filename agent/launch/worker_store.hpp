#pragma once
// The workers' TCPStore, hosted by the agent (torchrun 2.4+'s agent store): started on an ephemeral port
// before any worker, so there is no port race and it outlives worker rank 0; wiped before every attempt so no
// key of a failed attempt (an old NCCL unique id, torch issue #135712) is seen by the next one.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "agent/base/launch_config.hpp"
#include "agent/launch/store_relay.hpp"

namespace ctrun::store {
class Server;
}

namespace ctrun::agent {

class WorkerStore {
 public:
  // Called once, on the store's thread, if the server loop fails (it then answers nothing): the agent must not
  // go on with workers that can no longer reach their store.
  using FailureHandler = std::function<void(const std::string& what)>;

  // Binds host:port (port 0: the kernel picks) and serves on its own thread. Throws with the address.
  // secret: only clients that prove it are served (workers_store_needs_secret); null: anyone.
  WorkerStore(const std::string& host, std::uint16_t port, FailureHandler on_failure = {},
              std::shared_ptr<const auth::Secret> secret = nullptr);
  ~WorkerStore();

  std::uint16_t port() const;
  // Drops every key: the next attempt starts from an empty keyspace.
  void clear();
  // Writes a key as a worker's store.set(key, value) would: workers read it with store.get(key). For the agent's
  // own entries of an attempt, after clear().
  void set(const std::string& key, std::string value);
  std::uint64_t keys() const;

 private:
  std::unique_ptr<store::Server> server_;
};

// Where the workers' store lives for a launch config (torchrun's rules), and the store when this node serves it.
struct WorkerStoreSite {
  std::unique_ptr<WorkerStore> store;  // null on static nodes other than rank 0 (node rank 0 serves every node)
  std::string host;                    // the address workers reach it at (MASTER_ADDR)
  bool static_multi_node = false;      // the store also holds the static rendezvous: it is never cleared
  std::unique_ptr<NodeStoreRelay> relay;  // this node's workers' way to it with several nodes (store_relay.hpp)
};

// Single node: the local address (127.0.0.1 with --standalone), MASTER_PORT 29500 by default for a static job, a
// free port if that is taken. Static multi-node: node rank 0 binds the master endpoint. c10d: an ephemeral port
// on this node's address. Throws std::runtime_error naming the address when the store cannot be bound.
WorkerStoreSite open_worker_store(const LaunchConfig& config, WorkerStore::FailureHandler on_failure);

// The address this node's store binds for a config, by the rules above (on every node, whether or not it serves
// the store); --metrics-port binds there too.
std::string worker_store_bind_host(const LaunchConfig& config);

}  // namespace ctrun::agent
