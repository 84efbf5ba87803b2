#pragma once
// Where a worker group's processes come from: the seam between the group (agent/process/worker_group.hpp) and the
// way a worker is started. Today every worker is forked and exec'd by the agent (ForkExecSpawner): it is the agent's
// child, so its exit comes as SIGCHLD and is collected with waitpid. A spawner whose workers are not the agent's
// children (a warm, preloaded process that forks them) reports their exits itself instead: report_exits().

#include <sys/types.h>

#include <functional>
#include <vector>

#include "agent/process/worker_process.hpp"

namespace ctrun::agent {

class WorkerSpawner {
 public:
  // A worker started by this spawner exited: its pid and wait status (as waitpid fills it; WIFEXITED/WIFSIGNALED).
  using ExitSink = std::function<void(pid_t pid, int wait_status)>;

  virtual ~WorkerSpawner() = default;

  // Starts one worker (its own session and process group) and may return before it runs the program.
  // Throws SpawnError. Called on the agent's loop thread.
  virtual StartedWorker start(const SpawnRequest& request) = 0;

  // Returns once the worker runs its program; throws SpawnError when it could not (the worker is then gone, and
  // reaped if it was the caller's child).
  virtual void confirm(StartedWorker& worker) = 0;

  // Called once by the group before any start(). Returns false when the workers are the caller's children, whose
  // exits the group collects itself (SIGCHLD + waitpid). Returns true when the spawner reports every exit of its
  // workers through `sink` instead (e.g. relayed by the process that forked them); it must call `sink` on the
  // agent's loop thread (post to the io_context), once per worker.
  virtual bool report_exits(ExitSink sink) {
    (void)sink;
    return false;
  }

  // Sends sig to the worker's process group (workers lead their own). A group that is gone is not an error.
  virtual void signal(pid_t pid, int sig) { signal_group(pid, sig); }

  // Calls `ready` (on the loop) once start() can be called without waiting: at once, unless the spawner is still
  // preparing (a warm process importing its modules). The agent starts an attempt's workers from `ready`, so its
  // loop stays responsive meanwhile.
  virtual void when_ready(std::function<void()> ready) { ready(); }

  // The spawner's own processes that are the agent's children but not workers (a warm process): the group neither
  // reaps nor kills them as adopted orphans, and its escapee sweep spares them.
  virtual std::vector<pid_t> helpers() const { return {}; }
};

// fork + exec by the agent itself (agent/process/worker_process.hpp): the workers are its children.
class ForkExecSpawner final : public WorkerSpawner {
 public:
  StartedWorker start(const SpawnRequest& request) override { return start_worker(request); }
  void confirm(StartedWorker& worker) override { confirm_exec(worker); }
};

}  // namespace ctrun::agent
