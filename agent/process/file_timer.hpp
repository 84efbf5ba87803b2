#pragma once
// torchrun's worker watchdog (torch.distributed.elastic.timer.FileTimerServer), served by the agent: with
// TORCHELASTIC_ENABLE_FILE_TIMER=1 the agent creates a FIFO before it starts workers and names it in
// TORCHELASTIC_TIMER_FILE; a worker's FileTimerClient writes one JSON line per request (`expires(after=N)` acquires
// a scope with an absolute wall-clock deadline, leaving the scope releases it with expiration_time -1). A worker
// that overstays a deadline gets the request's signal (SIGKILL by default), as torch does, and the agent's usual
// failure handling follows. Only the agent's own workers are ever signalled: a request naming any other pid is
// dropped. Same protocol in torch 1.13 and 2.x (version 1).

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace boost::asio {
class io_context;
}

namespace ctrun::agent {

class EventLog;
class WorkerGroup;

struct FileTimerRequest {
  pid_t pid = 0;
  std::string scope_id;
  double expiration_time = 0;  // seconds since the epoch (the worker's time.time()); < 0 releases the scope
  int signal = 0;              // <= 0: report, never signal
};

// One line of the FIFO; nullopt (with `why`) for anything that is not a version-1 request.
std::optional<FileTimerRequest> parse_file_timer_request(const std::string& line, std::string* why);

struct ExpiredTimer {
  pid_t pid = 0;
  std::string scope_id;  // the earliest expired scope with a signal
  int signal = 0;        // 0: no scope asked for a signal (reported only)
  double overdue = 0;    // seconds past its deadline
};

// The timers, pure: what torch's FileTimerServer keeps in `_timers`, keyed by (pid, scope).
class FileTimerTable {
 public:
  void apply(const FileTimerRequest& request);
  // Timers past `now`, one entry per pid (its earliest expired scope that carries a signal, as torch picks), and
  // those pids' timers are cleared, as torch clears a reaped worker's.
  std::vector<ExpiredTimer> expire(double now);
  // The earliest deadline held, if any (the server sleeps until then, bounded).
  std::optional<double> next_deadline() const;
  void forget(pid_t pid);
  void clear() { timers_.clear(); }
  std::size_t size() const { return timers_.size(); }

 private:
  std::map<std::pair<pid_t, std::string>, FileTimerRequest> timers_;
};

// The FIFO and its watchdog on the agent's event loop (non-blocking reads, a timer; never a blocking call).
class FileTimerServer {
 public:
  struct Callbacks {
    // A worker overstayed: called after it was signalled (signal > 0) or when it could only be reported.
    std::function<void(const ExpiredTimer&)> expired;
    std::function<void(const std::string&)> warn;  // a malformed or foreign request, a read error
  };
  // Creates the FIFO at `path` (an existing file there is replaced, as torch does) and starts serving it.
  FileTimerServer(boost::asio::io_context& io, std::string path, Callbacks callbacks);
  ~FileTimerServer();  // stops and removes the FIFO
  FileTimerServer(const FileTimerServer&) = delete;
  FileTimerServer& operator=(const FileTimerServer&) = delete;

  const std::string& path() const;
  // The pids whose requests count: the current attempt's workers. Timers of other pids are dropped.
  void set_workers(std::set<pid_t> pids);
  void set_expired(std::function<void(const ExpiredTimer&)> expired);

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// The FIFO path torch uses when TORCHELASTIC_TIMER_FILE is unset: /tmp/watchdog_timer_<uuid>.
std::string default_file_timer_path();

// torchrun's _setup_local_watchdog for `group`: with TORCHELASTIC_ENABLE_FILE_TIMER=1 (in `env`, ctrun's own
// environment) a server on TORCHELASTIC_TIMER_FILE (default: default_file_timer_path()), whose path every worker
// gets; each attempt's workers are the pids it acts for; an overstaying worker is logged as an error and in the
// event log (`file_timer_expired`). Without the flag nothing is served, but a TORCHELASTIC_TIMER_FILE the user set
// still reaches the workers, as torch passes it on. Returns the server (null when none), which must outlive nothing
// but the loop: destroy it before the loop.
std::unique_ptr<FileTimerServer> attach_file_timer(
    boost::asio::io_context& io, const std::function<std::optional<std::string>(const std::string&)>& env,
    WorkerGroup& group, EventLog& events);

}  // namespace ctrun::agent
