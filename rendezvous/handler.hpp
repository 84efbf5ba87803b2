#pragma once
// The rendezvous handler interface (namespace ctrun::rdzv): the ONE place that defines what the agent asks of a
// backend. Backends: static (fixed node rank, no elasticity) and c10d (dynamic, elastic, on a TCPStore).
// Protocol and state machine: docs/rendezvous.md.
//
// Agent contract (torchrun's SimpleElasticAgent loop, plus failure detection torchrun lacks):
//   auto h = rdzv::create_handler(params, node);          // params from flags (parameters.hpp)
//   h->set_worker_store_address(host, port);               // the worker TCPStore this agent hosts (c10d)
//   RoundInfo info = h->next_rendezvous();                 // blocks; throws RendezvousError subclasses
//   start workers with env from `info` ...
//   loop: if (h->num_nodes_waiting() > 0 || h->round_broken()) -> stop workers, next_rendezvous() again
//         (a membership change: does NOT consume --max-restarts). Both calls are O(1) store ops.
//   worker failure -> stop workers -> next_rendezvous() (consumes a restart; the others see
//         num_nodes_waiting() > 0 and follow).
//   all workers succeeded -> h->exit_barrier(timeout) -> h->shutdown() (closes the run id for good).
//   final failure (no restarts left) -> h->shutdown() as torchrun, so the other nodes stop too.
//   a signal -> h->leave() (not shutdown(): a signal must not close the run; survivors restart at once).
// Call a handler from one thread (the agent's); its heartbeats run on a thread of their own.

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "store/store.hpp"

namespace ctrun::rdzv {

// What this node contributes to every round.
struct NodeSpec {
  std::string addr;          // --local-addr, else the host name: the rank sort key and this node's identity
  int local_world_size = 1;  // --nproc-per-node (may differ between nodes)
  std::string role = "default";
};

// One completed round: everything the agent needs for torchrun's worker env formulas, O(1) in size.
//   RANK = base_global_rank + LOCAL_RANK, ROLE_RANK = base_role_rank + LOCAL_RANK,
//   GROUP_RANK = group_rank, GROUP_WORLD_SIZE = group_world_size, WORLD_SIZE = global_world_size.
struct RoundInfo {
  std::uint64_t round = 0;  // increases with every new round of this run id
  int group_rank = 0;
  int group_world_size = 1;
  int base_global_rank = 0;   // sum of local world sizes of the lower group ranks
  int global_world_size = 1;  // sum of all local world sizes
  int base_role_rank = 0;     // same, counting only nodes with this node's role
  int role_world_size = 1;
  std::string master_addr;  // MASTER_ADDR: where group rank 0's worker store listens
  std::uint16_t master_port = 0;
  // A store scoped to this round (agent-level barriers); shared by every agent of the round.
  std::shared_ptr<store::Store> store;
};

// A failure of this node's workers, as the rendezvous sees it (Handler::claim_failure()).
struct FailureClaim {
  bool first = true;          // this node's failure was the round's first: the others' followed from it
  bool others_go_on = false;  // the round has >= MIN other members, or a spare waits: it can go on without this node
  std::string first_node;     // who failed first, when another node did
};

class RendezvousError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// The run id was closed (the job finished or failed for good): reusing it needs a new --rdzv-id.
class RendezvousClosedError : public RendezvousError {
 public:
  using RendezvousError::RendezvousError;
};
// A round did not complete in time; what() says how many nodes joined and who was missing.
class RendezvousTimeoutError : public RendezvousError {
 public:
  using RendezvousError::RendezvousError;
};
// The rendezvous store could not be reached or failed.
class RendezvousConnectionError : public RendezvousError {
 public:
  using RendezvousError::RendezvousError;
};

class Handler {
 public:
  virtual ~Handler() = default;

  // Where this agent's worker store listens. Published with every join; the group-rank-0 node's address becomes
  // the round's MASTER_ADDR/MASTER_PORT (no extra store round trip). c10d requires it before next_rendezvous();
  // static ignores it: workers use the static store at --master-addr:--master-port, as torchrun. Node rank 0's
  // handler serves that store, or, if the agent already serves its worker store on that port, uses the agent's.
  virtual void set_worker_store_address(const std::string& host, std::uint16_t port) = 0;

  // Leaves the previous round (if any) and blocks until the next one completes. Throws RendezvousClosedError,
  // RendezvousTimeoutError (join_timeout; message names who was missing) or RendezvousConnectionError.
  virtual RoundInfo next_rendezvous() = 0;

  // > 0 when nodes wait to join (a new node, or a member that re-rendezvoused after its workers failed): every
  // agent should restart its workers into a new round. One store CHECK per call (cached once set).
  virtual int num_nodes_waiting() = 0;
  // True once a member of the current round was declared dead (heartbeats stopped) or left on a signal: the
  // survivors should restart into a new round. One store CHECK per call (cached once set).
  virtual bool round_broken() = 0;
  // Why the current round ends (for logs): e.g. "node 127.0.0.3 (pid 42) lost heartbeat". Empty if it does not.
  virtual std::string restart_reason() = 0;

  // After local success: waits (up to timeout) until every member of the round succeeded, so that early finishers
  // do not look like a scale-down and the store host stays up. Returns false on timeout (log, not fatal).
  virtual bool exit_barrier(store::Duration timeout) = 0;

  virtual bool is_closed() = 0;
  // Marks the run id closed: every later next_rendezvous() of any node fails with RendezvousClosedError.
  virtual void set_closed() = 0;
  // Orderly end (success, or failure with no restarts left): closes the run id, stops heartbeats. Returns false if
  // the store could not be reached. Do not call on a signal (torchrun #67742): use leave().
  virtual bool shutdown() = 0;
  // Leaves the current round without closing the run (the agent got a signal): the other members restart into a
  // new round right away instead of after the heartbeat timeout. Stops heartbeats.
  virtual void leave() = 0;
  // This node's workers failed in the current round: claims the round's first failure (one CAS; whoever claims
  // first is the node the failure started on, the others' workers failed after it, e.g. on a closed connection) and
  // says whether the round could go on without this node. Default (one node, or a fixed set of nodes): first,
  // and the job cannot go on without it.
  virtual FailureClaim claim_failure() { return {}; }
  // Leaves the current round for a while (this node kept failing; the agent steps it out): the other members
  // restart into a new round at once, as on leave(), but the handler stays usable: a later next_rendezvous() joins
  // again (as a spare when the round is full). `why` is the round's end reason the others log. Default: nothing.
  virtual void step_out(const std::string& why) { (void)why; }
  // The one call that is safe from ANOTHER thread while next_rendezvous() or exit_barrier() blocks (the agent got
  // a death signal and will not wait for them): leaves the round being joined or held, on a store connection of
  // its own, so the other nodes see "left" at once instead of a heartbeat timeout. Blocks at most one store round
  // trip per key; the caller bounds it. Default: nothing (the others notice through heartbeats).
  virtual void abandon() {}

  virtual std::string run_id() const = 0;
  virtual std::string backend() const = 0;
  // TORCHELASTIC_USE_AGENT_STORE: workers connect to an agent-hosted store (always true in ctrun).
  virtual bool use_agent_store() const = 0;
  // host:port of the rendezvous store this handler serves (its real port: an endpoint with port 0 lets the kernel
  // pick it); empty when another process serves it. The agent reports it in its event log.
  virtual std::string served_store() const { return {}; }
};

}  // namespace ctrun::rdzv
