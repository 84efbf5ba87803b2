#pragma once
// This node's store relay (issue 44; the relay itself: store/relay.hpp). With several nodes, every agent runs one on
// loopback and its workers reach the job's store through it: the store on group rank 0's node then holds one
// connection per node instead of one or two per rank, and identical requests of a node's ranks go up once.
//
// How workers find it: CTRUN_STORE_RELAY=host:port (common/worker_env.hpp) next to MASTER_ADDR/MASTER_PORT, which
// keep naming the job's store for the programs that read them. torch's env:// and tcp:// rendezvous in agent-store
// mode are pointed at the relay by ctrun_store_relay.py (imported by ctrun's sitecustomize, first on every worker's
// PYTHONPATH); comm's env:// reads the variable itself (comm/init).

#include <map>
#include <memory>
#include <string>

#include "agent/base/launch_config.hpp"

namespace ctrun::store {
class Relay;
}

namespace ctrun::agent {

// True when a job of this config gets a relay on each node: several nodes (--nnodes MAX > 1), --store-relay on.
bool wants_store_relay(const LaunchConfig& config);
// True when the workers' store takes only connections that prove the job's secret: a job with a secret whose every
// node has a relay (each proves the secret upstream; c10d and etcd). A program that dials MASTER_ADDR:MASTER_PORT
// itself, not through torch's env:// rendezvous, is then refused (docs/security.md).
bool workers_store_needs_secret(const LaunchConfig& config);

class NodeStoreRelay {
 public:
  // The relay for a config, serving on 127.0.0.1 on a thread of its own; null when the job needs none or it cannot
  // bind (said in the log: the workers then connect to the store themselves; with a secret that is an error, as the
  // store would refuse them).
  static std::unique_ptr<NodeStoreRelay> open(const LaunchConfig& config);
  ~NodeStoreRelay();

  // Before each worker starts, with the variables it gets (worker_env_overrides'): before an attempt's first local
  // rank the relay is pointed at the attempt's store (MASTER_ADDR:MASTER_PORT; the previous attempt's connections,
  // whose workers are gone, are closed); a worker in agent-store mode is told where the relay is.
  void before_start(int local_rank, std::map<std::string, std::string>& env);

  // "127.0.0.1:PORT"
  std::string endpoint() const;

 private:
  explicit NodeStoreRelay(std::unique_ptr<store::Relay> relay);
  std::unique_ptr<store::Relay> relay_;
  std::string upstream_;  // "host:port" of the store it was last pointed at
};

}  // namespace ctrun::agent
