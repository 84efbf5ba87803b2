#pragma once
// One attempt's local workers, apart from the agent's loop (agent/agent.cpp keeps the loop and the policy's
// effects): starting them through a WorkerSpawner (agent/process/worker_spawner.hpp) with torchrun's environment,
// wiring their streams (agent/logs/worker_streams.hpp), learning of their exits (SIGCHLD + waitpid for the agent's
// own children, or the spawner's reports), signalling them, and ending what escaped their process groups.
// Everything runs on the agent's event loop, callbacks included.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/base/command_line.hpp"
#include "agent/base/launch_config.hpp"
#include "rendezvous/handler.hpp"

namespace boost::asio {
class io_context;
}

namespace ctrun::agent {

class ConsoleSink;
class EventLog;
class LogLayout;
class WorkerSpawner;

// One worker of the current attempt, as the group knows it.
struct Worker {
  int local_rank = 0;
  int global_rank = 0;
  pid_t pid = -1;  // -1: not started (yet, or it could not be)
  bool running = false;
  int exitcode = 0;               // torchrun's convention: -N for death by signal N; 127 when it could not be started
  std::int64_t exited_ns = 0;     // steady clock, to order failures observed in one wake-up
  std::int64_t exited_epoch = 0;  // wall clock seconds, for the summary
  bool stopped_by_us = false;     // it died of the signal the group's stop sent (collateral, not a failure)
  std::string error_file;         // its TORCHELASTIC_ERROR_FILE ("" without log files)
  std::string stderr_log;         // its stderr.log, written only with --redirects/--tee ("" without log files)
  // Why ctrun counts it as failed where its exit status does not say (it could not be started, it hung in native
  // teardown): the summary's traceback field.
  std::string failure_note;
  // It survived SIGKILL for kUnkillableGrace (stuck in the kernel): its /proc state letter ('D': uninterruptible
  // sleep) when ctrun stopped waiting for it; 0 otherwise.
  char stuck_state = 0;
  // Its program ended with exit status 0 (its exit record, agent/teardown/) and it then died in native teardown: it
  // counts as exit 0 (exitcode is 0) and this is what it really exited with (torchrun's convention).
  std::optional<int> teardown_exitcode;
  // ctrun killed it: it still ran --shutdown-timeout after its program ended (hung in native teardown).
  bool teardown_hung = false;
};

// How long ctrun waits for a worker to die after SIGKILL before it stops waiting: a process in uninterruptible
// sleep (a hung file system, a wedged device) cannot be killed until the kernel lets it go, which may be never.
inline constexpr std::chrono::seconds kUnkillableGrace{5};
// "D (uninterruptible sleep: stuck in the kernel, e.g. a hung file system or device)" for a /proc state letter.
std::string process_state_words(char state);
// The state letter of /proc/<pid>/stat (0 when it cannot be read: the process is gone).
char process_state(pid_t pid, const std::string& proc_root = "/proc");

// The attempt the agent asks for: the round it runs in and its restart count.
struct AttemptSpec {
  int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT and the log layout's attempt_<N>/
  rdzv::RoundInfo round;
  std::string run_id;
  bool use_agent_store = false;
};

// Hooks for features that watch or shape each attempt beside the loop (a hang watchdog, a timer server ...). Every
// hook is optional and runs on the loop.
struct WorkerHooks {
  // Before a worker is started: may add or change the variables it gets on top of torchrun's.
  std::function<void(const Worker& worker, std::map<std::string, std::string>& env)> before_start;
  // Every local rank of the attempt was started (or failed to start): pids and ranks are in `workers`.
  std::function<void(const std::vector<Worker>& workers)> after_start;
  // A worker's exit was recorded.
  std::function<void(const Worker& worker)> on_exit;
  // ctrun's own processes that are not workers and outlive an attempt (the checkpoint spill process): spared when
  // the group's leftover processes are killed.
  std::function<std::vector<pid_t>()> helpers;
};

class WorkerGroup {
 public:
  struct Callbacks {
    std::function<void(const Worker&)> exited;        // a worker exited (its record is updated)
    std::function<void(const Worker&)> start_failed;  // a worker could not be started (exitcode 127)
    std::function<void()> exits_done;                 // after the exits of one notification (several may coalesce)
  };

  // subreaper: ctrun is the child subreaper of its workers (agent/process/escapees.hpp): orphans of the job are its
  // children, reaped with each notification and killed when the group ends.
  WorkerGroup(boost::asio::io_context& io, const LaunchConfig& config, EnvLookup env, ConsoleSink& console,
              EventLog& events, std::unique_ptr<WorkerSpawner> spawner, bool subreaper, Callbacks callbacks);
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  void add_hooks(WorkerHooks hooks);
  // Children of the agent that are not workers but must not be reaped or killed as adopted orphans (a health check
  // running between attempts): `pids` is asked at each reap.
  void keep_children(std::function<std::vector<pid_t>()> pids);

  // Calls `ready` on the loop once start() will not wait for the spawner (WorkerSpawner::when_ready: --preload's
  // warm process may still be importing when a round forms).
  void when_ready(std::function<void()> ready);

  // Starts every local rank of the attempt in order (each exec confirmed before the next fork: measured faster on a
  // busy machine than forking them all first), while keep_going() holds. Files go under layout's attempt_<N>/,
  // which this wipes and creates.
  void start(const AttemptSpec& attempt, const LogLayout& layout, const std::function<bool()>& keep_going);

  // Sends sig to every worker's process group (exited leaders' too: the group may still hold their children), then
  // SIGKILL to those still running after --shutdown-timeout. Once per attempt unless `again` (a death signal
  // overtaking a stop for a failure). Workers that die of it afterwards are marked stopped_by_us.
  void stop(int sig, bool again);
  // SIGKILL to every running worker's process group now.
  void kill();
  // Passes sig on to every running worker's process group (SIGUSR1/2: the job goes on); logged and recorded.
  void forward(int sig);
  // The process groups of the previous attempt that are empty now: the guardian forgets them (ids get recycled).
  void forget_ended_groups();
  // Every worker of the attempt exited: the SIGKILL deadline is off, and the group's processes that left their
  // process group (setsid, double fork) or were orphaned to ctrun are killed.
  void end_attempt();
  // No more exits are awaited (the agent is finishing). `drained` is called on the loop once every tee'd stream
  // ended and was written (at once when none is open), or after `drain` if some stream is still open then: a
  // grandchild that keeps a pipe open cannot hold ctrun forever.
  void close(std::chrono::milliseconds drain, std::function<void()> drained);

  bool any_running() const;
  const std::vector<Worker>& workers() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ctrun::agent
