#pragma once
// The rendezvous handler interface (namespace ctrun::rdzv): what the agent asks of any backend.
// Backends: static (fixed node rank) and c10d (dynamic, elastic, on a store). See docs/rendezvous.md.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ctrun::store {
class Store;
}

namespace ctrun::rdzv {

// One completed round, as the agent needs it to compute worker env (torchrun's formulas).
struct RoundInfo {
  std::uint64_t round = 0;            // monotonically increasing round number
  int node_rank = 0;                  // this node's GROUP_RANK
  int num_nodes = 1;                  // GROUP_WORLD_SIZE
  std::vector<int> local_world_sizes; // per node rank
  std::vector<std::string> roles;     // per node rank
  std::string master_addr;            // the worker store's host (group rank 0's agent)
  std::uint16_t master_port = 0;      // the worker store's port
  std::shared_ptr<store::Store> round_store;  // store scoped to this round (for agent barriers)
};

class RendezvousError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
class RendezvousClosedError : public RendezvousError {
 public:
  using RendezvousError::RendezvousError;
};
class RendezvousTimeoutError : public RendezvousError {
 public:
  using RendezvousError::RendezvousError;
};

class Handler {
 public:
  virtual ~Handler() = default;
  // Blocks until the next round completes (or throws). The agent passes how it will host the worker store
  // if it becomes group rank 0 via the callback the concrete handler was built with.
  virtual RoundInfo next_rendezvous() = 0;
  // Nodes waiting to join (non-zero makes every agent restart its workers into a new round).
  virtual int num_nodes_waiting() = 0;
  // True once a participant of the current round was declared dead (heartbeat loss) - torchrun lacks this.
  virtual bool round_broken() = 0;
  virtual bool is_closed() = 0;
  virtual void set_closed() = 0;
  virtual void shutdown() = 0;
  virtual std::string run_id() const = 0;
  virtual bool use_agent_store() const = 0;
};

}  // namespace ctrun::rdzv
