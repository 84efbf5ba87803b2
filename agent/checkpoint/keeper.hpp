#pragma once
// In-memory checkpoints, the agent's side (docs/checkpoint.md): the job's snapshot directory in /dev/shm, which
// outlives every worker of the job and goes with the agent; the node's memory limit; before each attempt, torn
// saves removed and every local rank's held steps listed in the attempt's store keyspace (agreement.hpp), so that
// ck.load() finds the newest step every rank holds; workers' notices turned into event-log lines; and the step the
// next attempt can resume from, for the restart and failure messages. Workers learn where all this is from their
// environment (common/worker_env.hpp, kCheckpoint*), set by a WorkerGroup hook.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "agent/base/launch_config.hpp"
#include "rendezvous/handler.hpp"

namespace boost::asio {
class io_context;
}

namespace ctrun::agent {

class EventLog;
class WorkerGroup;

class CheckpointKeeper {
 public:
  // The store an attempt's workers reach (their "host:port") and how the agent writes a key into it.
  struct StoreSite {
    std::string address;
    std::function<void(const std::string& key, const std::string& value)> set;
  };

  // Sweeps directories of killed ctruns, then makes this job's (unless --checkpoint-memory 0). Never throws: a
  // directory that cannot be made turns checkpoints off with a warning, and workers' ck.save() says why.
  CheckpointKeeper(boost::asio::io_context& io, const LaunchConfig& config, WorkerGroup& group, EventLog& events,
                   const std::string& root = "/dev/shm");
  ~CheckpointKeeper();  // the job's snapshots go
  CheckpointKeeper(const CheckpointKeeper&) = delete;
  CheckpointKeeper& operator=(const CheckpointKeeper&) = delete;

  // Before an attempt's workers start (none of the job's is alive): torn saves removed, ranks pruned, each local
  // rank's held steps listed in the attempt's keyspace of `store` (nullopt: this node serves no store; checkpoints
  // are off for the attempt).
  void begin_attempt(int restart_count, const rdzv::RoundInfo& round, const std::optional<StoreSite>& store);

  // The newest step every local rank of the last attempt holds, and a sentence saying so for the restart and
  // failure messages; nullopt when none (or checkpoints are off).
  std::optional<std::int64_t> resume_step() const;
  std::optional<std::string> resume_line(bool job_ends) const;

  // The job's directory ("" when checkpoints are off).
  std::string directory() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ctrun::agent
