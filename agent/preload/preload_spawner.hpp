#pragma once
// `ctrun --preload MODULE[,MODULE...]` on the worker group's spawner seam (agent/process/worker_spawner.hpp): each
// worker is forked from the node's warm process (agent/preload/warm_process.hpp), which imported the modules once,
// or started cold (fork + exec, ForkExecSpawner) when it cannot be: the warm process refused (a thread or an
// accelerator after the imports) or died, or the rank's interpreter or a job-wide variable differs from its
// (agent/preload/preload_plan.hpp). Every such fallback is a warning, never an error: the job runs either way.
//
// The warm process starts when the spawner is made (with the agent, before the first rendezvous) and lives across
// restarts: every attempt forks fresh workers from it. Exits of forked workers are relayed by it (report_exits);
// this spawner reaps its cold workers itself. The warm process is ctrun's child but not a worker: helpers() names
// it so that the group neither reaps nor kills it as an adopted orphan and the escapee sweep spares it; the
// guardian kills it with the workers when ctrun dies.

#include <sys/types.h>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "agent/base/launch_config.hpp"
#include "agent/config/cli.hpp"
#include "agent/process/worker_spawner.hpp"

namespace boost::asio {
class io_context;
}

namespace ctrun::agent::preload {

class WarmProcess;

class PreloadSpawner final : public WorkerSpawner {
 public:
  // Starts the warm process for config.workers.preload at once (it imports in the background); when it cannot be
  // started, says why, and every worker starts cold.
  PreloadSpawner(boost::asio::io_context& io, const LaunchConfig& config, const EnvLookup& env);
  ~PreloadSpawner() override;

  StartedWorker start(const SpawnRequest& request) override;
  void confirm(StartedWorker& worker) override;
  bool report_exits(ExitSink sink) override;
  void when_ready(std::function<void()> ready) override;
  std::vector<pid_t> helpers() const override;

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

// The spawner of a job: fork/exec, or PreloadSpawner (its warm process starting now) with --preload.
std::unique_ptr<WorkerSpawner> make_worker_spawner(boost::asio::io_context& io, const LaunchConfig& config,
                                                   EnvLookup env);

}  // namespace ctrun::agent::preload
