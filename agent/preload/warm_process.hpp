#pragma once
// The warm process of `ctrun --preload` (docs/preload.md): one Python interpreter per node, the workers' own
// (agent/launch/worker_python.hpp), that imports the preloaded modules once and then forks each worker, so a worker
// starts with its imports done (tens of milliseconds instead of seconds, and copy-on-write pages shared between ranks).
// The Python side is agent/preload/ctrun_warm.py (shipped next to ctrun_torch: <build>/python, or the installed
// Python directory); its docstring says why workers are reaped by the warm process and reported here rather than
// adopted by ctrun, and what a forked worker can tell apart from a cold one.
//
// The protocol, on a SOCK_SEQPACKET socketpair (one datagram per message, fields separated by NUL bytes):
//   ctrun -> warm   fork ID CWD CPUS ARGC ARGV... ENV...   + SCM_RIGHTS stdin, stdout, stderr (CPUS: "0,2,4" or "")
//                   reap PID                               the exit of PID was seen: the zombie may go
//   warm -> ctrun   ready PID | refused WHY                once, when the imports are done or cannot be used
//                   started ID PID | failed ID WHY         the answer to one fork (PID leads its own session)
//                   exited PID STATUS                      a worker's wait status (as waitpid gives it)
// The warm process exits when ctrun closes its end; its workers (PR_SET_PDEATHSIG) die with it.
//
// Everything runs on the agent's event loop: start() only forks and execs (the imports run in the background
// while the rendezvous forms), replies are read as they arrive, and fork_worker() waits for one pid, bounded, as a
// cold spawn waits for its exec.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace boost::asio {
class io_context;
}

namespace ctrun::agent::preload {

class PreloadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct WarmOptions {
  std::vector<std::string> modules;      // imported in this order
  std::vector<std::string> worker_argv;  // a worker's command, [PYTHON, -u, SCRIPT|-m MOD|-c CODE, args...]
  std::vector<std::string> env;          // "K=V": the job's common environment, the warm process's own
  std::string program;                   // ctrun_warm.py; empty: warm_program_path()
};

struct ForkRequest {
  std::vector<std::string> argv;  // the worker's command; argv[0] must be the warm process's interpreter
  std::vector<std::string> env;   // "K=V": its whole environment
  std::string cwd;                // empty: ctrun's working directory now
  int stdin_fd = -1;              // -1: ctrun's own stdin/stdout/stderr
  int stdout_fd = -1;
  int stderr_fd = -1;
  std::vector<int> cpus;  // non-empty: its CPU affinity
};

struct WarmEvents {
  std::function<void()> ready;                             // the modules are imported: fork_worker may be used
  std::function<void(const std::string& why)> lost;        // refused, or died: launch cold from now on
  std::function<void(pid_t pid, int wait_status)> exited;  // a worker forked by fork_worker() ended
};

class WarmProcess {
 public:
  enum class State { kStarting, kReady, kLost };

  // Forks and execs the warm process (its own session; SIGKILL when the calling thread ends, which must be the
  // thread that lives as long as the workers) and returns at once. Throws PreloadError when it cannot be
  // started (no interpreter, no ctrun_warm.py). Events run on `io`, never inside a call to this object.
  WarmProcess(boost::asio::io_context& io, WarmOptions options, WarmEvents events);
  // Closes the socket and kills the warm process; workers still running die with it.
  ~WarmProcess();
  WarmProcess(const WarmProcess&) = delete;
  WarmProcess& operator=(const WarmProcess&) = delete;

  State state() const;
  const std::string& lost_reason() const;       // "refused: ...", "died (...)", ...; "" while not lost
  pid_t pid() const;                            // the warm process (a child of ctrun; not a worker)
  bool reaped() const;                          // its exit status was collected here: pid() is free for reuse
  const std::vector<std::string>& env() const;  // its environment, for job_wide_difference()
  const std::string& interpreter() const;       // argv[0] of the workers it can fork

  // Forks one worker; returns its pid once it leads its own process group. Blocks the calling (loop) thread for
  // at most `timeout`; a warm process that does not answer by then is killed and lost. Throws PreloadError when
  // the state is not kReady, the request cannot be sent, or the fork failed.
  pid_t fork_worker(const ForkRequest& request, std::chrono::milliseconds timeout = std::chrono::seconds(2));
  // The agent has recorded the worker's exit (events.exited): its zombie may be reaped and its pid recycled.
  void release(pid_t worker);

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

// Where ctrun_warm.py is: <exe>/../python (a build tree), the installed Python directory beside <exe>/../, or
// <exe>/../share/ctrun/python (pip install .).
// Throws PreloadError when none has it.
std::string warm_program_path();

}  // namespace ctrun::agent::preload
