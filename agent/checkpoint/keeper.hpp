#pragma once
// In-memory checkpoints, the agent's side (docs/checkpoint.md): the job's snapshot directory in /dev/shm, which
// outlives every worker of the job and goes with the agent; the node's memory limit; before each attempt, torn
// saves removed and every local rank's held steps listed in the attempt's store keyspace (agreement.hpp), so that
// ck.load() finds the newest step every rank holds; workers' notices turned into event-log lines; and the step the
// next attempt can resume from, for the restart and failure messages. Workers learn where all this is from their
// environment (common/worker_env.hpp, kCheckpoint*), set by a WorkerGroup hook.
//
// On several nodes (docs/checkpoint.md, "Several nodes") the agents also agree through the round's rendezvous store
// (gather.hpp, on the helper lane, before begin_attempt: prepare_attempt() does both), bring each local rank's resume
// step from the node that holds it when this node lacks it, and copy each newest committed step to the next nodes of
// the ring (replicator.hpp), receiving theirs (replica_transfer.hpp). Everything of the keeper's is the loop's: the
// helper lane works on copies and hands its result back as the lane's continuations do.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "agent/base/command_line.hpp"
#include "agent/base/launch_config.hpp"
#include "rendezvous/handler.hpp"

namespace boost::asio {
class io_context;
}

namespace ctrun::agent {

class EventLog;
class HelperLane;
class WorkerGroup;
class WorkerStore;
namespace checkpoint {
struct Gathered;
}

class CheckpointKeeper {
 public:
  // The store an attempt's workers reach (their "host:port") and how the agent writes a key into it.
  struct StoreSite {
    std::string address;
    std::function<void(const std::string& key, const std::string& value)> set;
  };

  // Sweeps directories of killed ctruns, then makes this job's (unless --checkpoint-memory 0). Never throws: a
  // directory that cannot be made turns checkpoints off with a warning, and workers' ck.save() says why.
  // `env`: the agent's environment (the spill process's python and PYTHONPATH come from it).
  CheckpointKeeper(boost::asio::io_context& io, const LaunchConfig& config, const EnvLookup& env, WorkerGroup& group,
                   EventLog& events, const std::string& root = "/dev/shm");
  ~CheckpointKeeper();  // the job's snapshots go
  CheckpointKeeper(const CheckpointKeeper&) = delete;
  CheckpointKeeper& operator=(const CheckpointKeeper&) = delete;

  // An attempt about to start, as the keeper needs to know it.
  struct Attempt {
    int restart_count = 0;
    rdzv::RoundInfo round;
    std::string store_host;          // where this node's workers' store is published
    bool static_multi_node = false;  // the static backend on several nodes (node rank 0 serves the one store)
    WorkerStore* store = nullptr;    // the store this agent hosts (null on static nodes other than rank 0)
  };
  // Before an attempt's workers start (none of the job's is alive). One node: begin_attempt() at once. Several nodes:
  // first, on `lane`, the nodes' agreement (gather.hpp: this node's holdings and replication endpoint written into
  // the round's store, every node's read, bounded, and each local rank's resume step brought here when another node
  // holds it); then, back on the loop and only while `wanted()`, begin_attempt() with what they agreed. `ready` is
  // called on the loop once the workers may start: at once for one node (from inside this call, no hop).
  void prepare_attempt(HelperLane& lane, const Attempt& attempt, std::function<bool()> wanted,
                       std::function<void()> ready);

  // Before an attempt's workers start: torn saves removed, ranks pruned, each local rank's held steps listed in the
  // attempt's keyspace of `store` (nullopt: this node serves no store; checkpoints are off for the attempt). With
  // several nodes, `gathered` says what every node holds, and `store.set` is given only to the agent that hosts the
  // workers' store (it lists every rank).
  void begin_attempt(int restart_count, const rdzv::RoundInfo& round, const std::optional<StoreSite>& store,
                     checkpoint::Gathered* gathered = nullptr);

  // For `ctrun --status` and /metrics: what this node holds and how far replication is behind.
  struct Summary {
    bool on = false;
    std::int64_t newest_step = -1;      // the newest step every local rank holds (-1: none)
    std::int64_t oldest_step = -1;      // the oldest step some local rank holds (-1: none)
    std::int64_t replicated_step = -1;  // the newest step copied to the ring's targets (-1: none)
    double replicated_age_s = -1;       // seconds since that copy completed (-1: none yet)
    std::int64_t spilled_step = -1;     // the newest step this run wrote to --checkpoint-dir (-1: none yet)
    bool spilling = false;              // --checkpoint-dir is given
    std::uint64_t bytes = 0;            // the job directory (own snapshots and replicas)
    std::uint64_t limit = 0;
    std::uint64_t bytes_sent = 0, bytes_received = 0;
    int replicas = 0;  // targets of this attempt
  };
  // Reads the job directory (tmpfs, a few entries per rank) and what the loop recorded: for the loop, twice a
  // second at most.
  Summary summary() const;

  // The newest step every local rank of the last attempt holds, and a sentence saying so for the restart and
  // failure messages; nullopt when none (or checkpoints are off).
  std::optional<std::int64_t> resume_step() const;
  std::optional<std::string> resume_line(bool job_ends) const;

  // The job's directory ("" when checkpoints are off).
  std::string directory() const;

 private:
  static std::optional<StoreSite> store_site(const Attempt& attempt);

  struct Impl;
  std::unique_ptr<Impl> impl_;
  LaunchConfig config_;  // the listen address of the replication endpoint is worked out from it
};

}  // namespace ctrun::agent
