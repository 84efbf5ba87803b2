#pragma once
// Starting and signalling one worker process. Each worker leads its own process group (so a signal reaches its
// children too, and a terminal's Ctrl-C reaches only ctrun, which forwards it) in ctrun's session, or in a session
// of its own when ctrun's stdin is a terminal (worker_session_policy below), and gets
// PR_SET_PDEATHSIG=SIGKILL so that `kill -9 ctrun` leaves no worker behind. A worker gets descriptors 0, 1 and 2
// only (as torchrun's, through Python's close_fds): everything else ctrun holds or inherited ends at exec.

#include <sys/types.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace ctrun::agent {

struct SpawnRequest {
  std::vector<std::string> argv;  // argv[0] is looked up on PATH (from env) unless it contains '/'
  std::vector<std::string> env;   // "K=V"
  int stdout_fd = -1;             // -1: inherit ctrun's
  int stderr_fd = -1;
  std::vector<int> cpus;     // non-empty: sched_setaffinity to these CPUs
  int channel_fd = -1;       // >= 0: the program gets it as descriptor 3, open across exec (a helper's channel, e.g.
                             // --preload's warm process's socket: agent/preload/warm_process.hpp)
  bool own_session = false;  // setsid() rather than setpgid(0, 0): see own_session_for_workers()
};

// Whether workers lead sessions of their own: only when ctrun's stdin is a terminal. In a session of its own a
// worker can read that terminal (a breakpoint() in a worker, as under torch 2.x's torchrun, which starts workers
// with start_new_session=True); in ctrun's background process group it would be stopped by SIGTTIN. Otherwise
// (batch jobs, CI, Slurm) workers stay in ctrun's session as under torch 1.13's torchrun, and so in its CPU
// autogroup (kernel.sched_autogroup_enabled): a session per worker gives each rank a scheduling group of its own,
// which on a loaded machine made a torch 1.13 race at interpreter exit (gloo + DDP comm hook: `terminate called
// without an active exception`) 7x likelier than under torchrun (docs/cli.md, "Worker processes").
bool own_session_for_workers();

class SpawnError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Starts the program in a child (vfork semantics: the child shares ctrun's memory until it execs) and returns once
// the program was exec'd, so a missing program is an error here rather than a mysterious exit 127. Must be called from the thread that
// lives as long as the workers: the parent-death signal fires when the forking thread exits.
pid_t spawn_worker(const SpawnRequest& request);

// The same in two steps, so that a spawner whose workers start elsewhere (--preload's warm process) has the same
// interface: start_worker returns once the child exec'd or failed; confirm_exec throws SpawnError (after reaping
// the child) when it failed.
struct StartedWorker {
  pid_t pid = -1;
  int exec_errno = 0;  // why the child could not become the program; 0: it runs the program
  std::string program;
};
StartedWorker start_worker(const SpawnRequest& request);
void confirm_exec(StartedWorker& worker);

// Finds a program the way execvp would, using the PATH of `env`.
std::string resolve_program(const std::string& name, const std::vector<std::string>& env);

// Signals the worker's whole process group; a group that is already gone is not an error.
void signal_group(pid_t leader, int signum);

}  // namespace ctrun::agent
