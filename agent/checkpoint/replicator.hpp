#pragma once
// Copies this node's newest committed step to the agents of other nodes, on a thread of its own (the agent's loop
// only hands it a task). Only the newest task waits: a step committed while the previous one is still being sent
// replaces any step not started yet, so a slow link costs replication lag, never memory. When every file of a
// step reached every target, each rank's `.replicated` file (layout.hpp) says so, which ck.wait() reads.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ctrun::auth {
class Secret;
}

namespace ctrun::agent::checkpoint {

struct ReplicationTask {
  std::int64_t step = 0;
  std::vector<std::pair<int, std::string>> files;  // (global rank, its snapshot file of `step`)
  std::vector<std::string> targets;                // endpoints
};

struct ReplicationOutcome {
  std::int64_t step = 0;
  std::uint64_t bytes = 0;  // sent, over every target
  double seconds = 0;
  std::vector<std::string> to;
  std::string error;  // "" when every target took every file
};

class Replicator {
 public:
  // `done` is called on the replication thread after each task. With `secret`, every push proves it first.
  Replicator(std::string job_dir, std::function<void(const ReplicationOutcome&)> done,
             std::shared_ptr<const auth::Secret> secret = nullptr);
  ~Replicator();  // stops a transfer within 100 ms
  Replicator(const Replicator&) = delete;
  Replicator& operator=(const Replicator&) = delete;

  void submit(ReplicationTask task);
  // The newest step copied to every target (-1: none yet), and bytes sent since start.
  std::int64_t replicated_step() const { return replicated_.load(); }
  std::uint64_t bytes_sent() const { return sent_.load(); }

 private:
  void run();
  std::string dir_;
  std::function<void(const ReplicationOutcome&)> done_;
  std::shared_ptr<const auth::Secret> secret_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<ReplicationTask> pending_;
  std::atomic<bool> stop_{false};
  std::atomic<std::int64_t> replicated_{-1};
  std::atomic<std::uint64_t> sent_{0};
  std::thread thread_;
};

}  // namespace ctrun::agent::checkpoint
