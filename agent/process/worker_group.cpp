#include "agent/process/worker_group.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <fstream>
#include <utility>

#include <spdlog/spdlog.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "agent/base/event_log.hpp"
#include "agent/base/signal_names.hpp"
#include "agent/launch/worker_invocation.hpp"
#include "agent/logs/log_layout.hpp"
#include "agent/logs/worker_streams.hpp"
#include "agent/process/cpu_bind.hpp"
#include "agent/process/escapees.hpp"
#include "agent/process/guardian.hpp"
#include "agent/process/worker_spawner.hpp"
#include "agent/teardown/teardown_watch.hpp"
#include "common/log.hpp"

extern char** environ;

namespace ctrun::agent {
namespace {

std::int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::int64_t epoch_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// torchrun's exit code convention: -N for death by signal N.
int exitcode_of(int status) {
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 1;
}

}  // namespace

std::string process_state_words(char state) {
  switch (state) {
    case 'D':
      return "D (uninterruptible sleep: stuck in the kernel, e.g. a hung file system or device)";
    case 'Z':
      return "Z (zombie: exited, not yet reaped)";
    case 'T':
    case 't':
      return std::string(1, state) + " (stopped)";
    default:
      return std::string(1, state);
  }
}

char process_state(pid_t pid, const std::string& proc_root) {
  std::ifstream in(proc_root + "/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return 0;
  // "pid (comm) S ...": comm may hold spaces and parentheses, so the state follows the last ')'.
  const auto close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return 0;
  return stat[close + 2];
}

class WorkerGroup::Impl {
 public:
  Impl(boost::asio::io_context& io, const LaunchConfig& config, EnvLookup env, ConsoleSink& console, EventLog& events,
       std::unique_ptr<WorkerSpawner> spawner, bool subreaper, Callbacks callbacks)
      : config_(config),
        env_(std::move(env)),
        events_(events),
        spawner_(std::move(spawner)),
        subreaper_(subreaper),
        cb_(std::move(callbacks)),
        log_(ctrun::log::get("agent")),
        children_(io, SIGCHLD),
        kill_timer_(io),
        stuck_timer_(io),
        teardown_(io, !config.workers.fail_on_teardown_crash, config.shutdown.timeout,
                  env_(teardown::kRootVariable).value_or("/dev/shm")),
        streams_(io, config, console,
                 config.logs.line_prefix_template ? config.logs.line_prefix_template
                                                  : env_("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"),
                 [this] { on_stream_ended(); }),
        drain_timer_(io) {
    if (config_.workers.cpu_bind != CpuBind::kNone || config_.workers.numa_binding != NumaBinding::kNone) {
      cpus_.allowed = allowed_cpus();
      cpus_.nodes = numa_nodes(cpus_.allowed);
    }
    relayed_exits_ = spawner_->report_exits([this](pid_t pid, int status) { on_reported_exit(pid, status); });
    wait_for_children();
  }

  void add_hooks(WorkerHooks hooks) { hooks_.push_back(std::move(hooks)); }
  void keep_children(std::function<std::vector<pid_t>()> pids) { also_kept_.push_back(std::move(pids)); }

  void when_ready(std::function<void()> ready) { spawner_->when_ready(std::move(ready)); }

  void start(const AttemptSpec& attempt, const LogLayout& layout, const std::function<bool()>& keep_going) {
    ++attempt_seq_;
    stopping_ = false;
    attempt_ = attempt;
    layout.prepare_attempt(attempt.restart_count, config_.workers.nproc_per_node);
    workers_.assign(static_cast<std::size_t>(config_.workers.nproc_per_node), Worker{});
    for (int r = 0; r < config_.workers.nproc_per_node; ++r) {
      Worker& w = workers_[static_cast<std::size_t>(r)];
      w.local_rank = r;
      w.global_rank = attempt.round.base_global_rank + r;
      w.error_file = layout.error_file(attempt.restart_count, r);
      if (layout.enabled()) w.stderr_log = layout.stderr_file(attempt.restart_count, r);
    }
    streams_.begin_attempt(layout, attempt.restart_count);
    teardown_.begin_attempt(attempt_seq_, config_.workers.nproc_per_node);
    for (int r = 0; r < config_.workers.nproc_per_node && keep_going(); ++r) {
      Worker& w = workers_[static_cast<std::size_t>(r)];
      try {
        StartedWorker started = spawn(w);
        try {
          spawner_->confirm(started);
        } catch (const std::exception&) {
          w.running = false;  // the spawner reaped it
          throw;
        }
      } catch (const std::exception& e) {
        spawn_failed(w, e.what());
      }
    }
    for (const auto& h : hooks_) {
      if (h.after_start) h.after_start(workers_);
    }
    teardown_.watch([this] { return running_workers(); },
                    [this](const auto& worker, const auto& record, double ended_s) {
                      teardown_overdue(worker.pid, record, ended_s);
                    });
  }

  void stop(int sig, bool again) {
    if (stopping_attempt_ == attempt_seq_ && !again) return;
    stopping_attempt_ = attempt_seq_;
    stopping_ = true;
    stop_signal_ = sig;
    for (auto& w : workers_) {
      if (w.pid > 0) spawner_->signal(w.pid, sig);  // exited leaders too: their process group may hold children
    }
    kill_timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(config_.shutdown.timeout)));
    // The attempt is part of the check: a deadline that expired just as the group ended must not SIGKILL the
    // next attempt's workers.
    kill_timer_.async_wait([this, attempt = attempt_seq_](const boost::system::error_code& ec) {
      if (ec || attempt != attempt_seq_ || closed_) return;
      for (auto& w : workers_) {
        if (w.running) {
          log_->warn("local_rank {} (pid {}) still running {} s after the stop signal; sending SIGKILL", w.local_rank,
                     w.pid, config_.shutdown.timeout);
          spawner_->signal(w.pid, SIGKILL);
        }
      }
      if (any_running()) give_up_on_stuck_after_grace();
    });
  }

  // A worker still there kUnkillableGrace after SIGKILL is stuck in the kernel: ctrun says which and in what state,
  // marks this node unhealthy, counts the worker as killed and goes on, rather than waiting without bound.
  void give_up_on_stuck_after_grace() {
    stuck_timer_.expires_after(kUnkillableGrace);
    stuck_timer_.async_wait([this, attempt = attempt_seq_](const boost::system::error_code& ec) {
      if (ec || attempt != attempt_seq_ || closed_) return;
      bool any = false;
      for (auto& w : workers_) {
        if (!w.running) continue;
        char state = process_state(w.pid);
        if (state == 0) continue;  // gone just now: its SIGCHLD is on its way
        any = true;
        log_->error(
            "local_rank {} (rank {}, pid {}) survived SIGKILL for {} s, state {}; ctrun stops waiting for it and "
            "marks this node unhealthy",
            w.local_rank, w.global_rank, w.pid, kUnkillableGrace.count(), process_state_words(state));
        events_.emit(
            Event::kWorkerUnkillable,
            {{"local_rank", w.local_rank}, {"rank", w.global_rank}, {"pid", w.pid}, {"state", std::string(1, state)}});
        record_exit(w, SIGKILL);  // as if SIGKILL had ended it (wait status: killed by signal 9)
        w.stuck_state = state;
      }
      if (!any) return;
      events_.emit(Event::kNodeUnhealthy, {{"reason", "a worker survived SIGKILL (stuck in the kernel)"}});
      if (cb_.exits_done) cb_.exits_done();
    });
  }

  void kill() {
    for (auto& w : workers_) {
      if (w.running) spawner_->signal(w.pid, SIGKILL);
    }
  }

  void forward(int sig) {
    nlohmann::json pids = nlohmann::json::array();
    for (auto& w : workers_) {
      if (!w.running) continue;
      spawner_->signal(w.pid, sig);
      pids.push_back(w.pid);
    }
    log_->info("Received {}: forwarded to {} worker(s)", signal_name(sig), pids.size());
    events_.emit(Event::kSignalForwarded, {{"signal", signal_name(sig)}, {"pids", pids}});
  }

  void forget_ended_groups() {
    // A group a worker's child still holds stays watched.
    for (const auto& w : workers_) {
      if (w.pid > 0 && ::kill(-w.pid, 0) != 0 && errno == ESRCH) guardian_forget(w.pid);
    }
  }

  void end_attempt() {
    kill_timer_.cancel();
    stuck_timer_.cancel();
    teardown_.end_attempt();
    // Orphaned descendants that ctrun adopted as their subreaper (found even with a cleared environment).
    int n = subreaper_ ? kill_adopted(kept_children()) : 0;
    auto token = env_(kJobTokenVariable);
    if (token && !token->empty()) n += signal_marked_processes(*token, SIGKILL, helpers());
    if (n > 0) {
      log_->warn("killed {} process(es) of the worker group that had left its process group (setsid or daemon)", n);
      events_.emit(Event::kEscapeesKilled, {{"count", n}});
    }
  }

  void close(std::chrono::milliseconds drain, std::function<void()> drained) {
    closed_ = true;
    children_.cancel();
    kill_timer_.cancel();
    stuck_timer_.cancel();
    teardown_.end_attempt();
    drained_ = std::move(drained);
    if (streams_.done()) return drained_done();
    drain_timer_.expires_after(drain);
    drain_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) drained_done();
    });
  }

  void on_stream_ended() {
    if (closed_ && streams_.done()) {
      drain_timer_.cancel();
      drained_done();
    }
  }

  void drained_done() {
    streams_.answer_waiting();  // a teardown crash's last stderr line: what was read by now
    if (auto done = std::exchange(drained_, nullptr)) done();
  }

  bool any_running() const {
    for (const auto& w : workers_) {
      if (w.running) return true;
    }
    return false;
  }

  const std::vector<Worker>& workers() const { return workers_; }

 private:
  StartedWorker spawn(Worker& w) {
    WorkerEnvInput in;
    in.config = &config_;
    in.round = &attempt_.round;
    in.run_id = attempt_.run_id;
    in.use_agent_store = attempt_.use_agent_store;
    in.local_rank = w.local_rank;
    in.restart_count = attempt_.restart_count;
    in.error_file = w.error_file;
    auto overrides = worker_env_overrides(in, env_);
    teardown_.add_env(w.local_rank, overrides);
    for (const auto& h : hooks_) {
      if (h.before_start) h.before_start(w, overrides);
    }
    SpawnRequest req;
    req.argv = worker_argv(config_, w.local_rank, env_);
    req.env = merge_environment(environ, overrides);
    req.own_session = own_session_for_workers();
    if (config_.workers.cpu_bind != CpuBind::kNone) {
      req.cpus =
          cpu_slice(config_.workers.cpu_bind, w.local_rank, config_.workers.nproc_per_node, cpus_.allowed, cpus_.nodes);
    } else if (config_.workers.numa_binding == NumaBinding::kNode) {
      req.cpus = cpu_slice(CpuBind::kNuma, w.local_rank, config_.workers.nproc_per_node, cpus_.allowed, cpus_.nodes);
    }
    WorkerStreams::Fds fds = streams_.open(w.local_rank, w.global_rank);  // closed here once the child has them
    StartedWorker started;
    try {
      req.stdout_fd = fds.out;
      req.stderr_fd = fds.err;
      started = spawner_->start(req);
      w.pid = started.pid;
      guardian_watch(w.pid);
    } catch (...) {
      for (int fd : fds.to_close) ::close(fd);
      throw;
    }
    for (int fd : fds.to_close) ::close(fd);
    w.running = true;
    events_.emit(Event::kWorkerStart, {{"local_rank", w.local_rank},
                                       {"rank", w.global_rank},
                                       {"pid", w.pid},
                                       {"restart_count", attempt_.restart_count}});
    return started;
  }

  // A worker that cannot even start fails the attempt like one that exits at once.
  void spawn_failed(Worker& w, const std::string& why) {
    log_->error("local_rank {}: {}", w.local_rank, why);
    w.exitcode = 127;
    w.failure_note = why;
    w.exited_ns = monotonic_ns();
    w.exited_epoch = epoch_seconds();
    if (cb_.start_failed) cb_.start_failed(w);
  }

  void wait_for_children() {
    children_.async_wait([this](const boost::system::error_code& ec, int) {
      if (ec) return;
      reap();
      if (!closed_) wait_for_children();
    });
  }

  // SIGCHLD: collect every worker that exited (several may have, signals coalesce), then adopted orphans.
  void reap() {
    if (!relayed_exits_) {
      for (auto& w : workers_) {
        if (!w.running) continue;
        int status = 0;
        if (::waitpid(w.pid, &status, WNOHANG) == w.pid) record_exit(w, status);
      }
    }
    if (subreaper_) reap_adopted(kept_children());
    if (cb_.exits_done) cb_.exits_done();
  }

  void on_reported_exit(pid_t pid, int status) {
    for (auto& w : workers_) {
      if (w.running && w.pid == pid) {
        record_exit(w, status);
        if (cb_.exits_done) cb_.exits_done();
        return;
      }
    }
  }

  void record_exit(Worker& w, int status) {
    w.running = false;
    w.exitcode = exitcode_of(status);
    w.exited_ns = monotonic_ns();
    w.exited_epoch = epoch_seconds();
    // Collateral of a stop: it died of the signal ctrun sent (or its shell's 128+N). A rank that exits with a code
    // of its own while the group is being stopped failed by itself and is named in the summary (as torchrun).
    w.stopped_by_us = stopping_ && died_of_stop_signal(w.exitcode);
    if (w.exitcode != 0 && !w.stopped_by_us && !w.teardown_hung) count_teardown_crash(w);
    nlohmann::json ev = {{"local_rank", w.local_rank},
                         {"rank", w.global_rank},
                         {"pid", w.pid},
                         {"exitcode", w.exitcode},
                         {"restart_count", attempt_.restart_count}};
    const int died_of = w.teardown_exitcode.value_or(w.exitcode);
    if (died_of < 0) ev["signal"] = signal_name(-died_of);
    if (w.teardown_exitcode) ev["teardown_exitcode"] = *w.teardown_exitcode;
    events_.emit(Event::kWorkerExit, ev);
    for (const auto& h : hooks_) {
      if (h.on_exit) h.on_exit(w);
    }
    if (cb_.exited) cb_.exited(w);
  }

  // Its program ended with exit status 0 and it died in native teardown: it counts as exit 0, said with its stderr's
  // last line once the stream has given it (agent/teardown/).
  void count_teardown_crash(Worker& w) {
    const teardown::ExitJudgement j = teardown_.judge(w.local_rank, w.pid, w.exitcode);
    if (!j.teardown_crash) {
      if (!j.why_not.empty())
        log_->debug("local_rank {}: exit code {} counts as it is: {}", w.local_rank, w.exitcode, j.why_not);
      return;
    }
    w.teardown_exitcode = w.exitcode;
    w.exitcode = 0;
    streams_.last_stderr_line(
        w.local_rank, [this, rank = w.global_rank, local_rank = w.local_rank, pid = w.pid, died = *w.teardown_exitcode,
                       j, restarts = attempt_.restart_count](const std::string& line, bool seen) {
          log_->warn("{}", teardown::teardown_crash_words(rank, local_rank, pid, died, line, seen));
          nlohmann::json ev = {{"local_rank", local_rank},
                               {"rank", rank},
                               {"pid", pid},
                               {"exitcode", died},
                               {"program_status", j.program_status},
                               {"exit_called", j.exit_called},
                               {"restart_count", restarts}};
          if (died < 0) ev["signal"] = signal_name(-died);
          if (seen) ev["stderr_last_line"] = line;
          events_.emit(Event::kTeardownCrash, ev);
        });
  }

  // Still running --shutdown-timeout after its program ended: hung in native teardown. Killed, counted as failed.
  void teardown_overdue(pid_t pid, const teardown::ExitRecord& record, double ended_s) {
    for (auto& w : workers_) {
      if (!w.running || w.pid != pid) continue;
      const int status = record.exit_called ? record.exit_status & 0xFF : record.status;
      const std::string words =
          teardown::teardown_hang_words(w.global_rank, w.local_rank, w.pid, status, ended_s, config_.shutdown.timeout);
      log_->error("{}", words);
      events_.emit(Event::kTeardownHang, {{"local_rank", w.local_rank},
                                          {"rank", w.global_rank},
                                          {"pid", w.pid},
                                          {"program_status", status},
                                          {"ended_s", ended_s},
                                          {"restart_count", attempt_.restart_count}});
      w.teardown_hung = true;
      w.failure_note = words;
      spawner_->signal(w.pid, SIGKILL);
    }
  }

  std::vector<teardown::TeardownWatch::Running> running_workers() const {
    std::vector<teardown::TeardownWatch::Running> out;
    for (const auto& w : workers_) {
      if (w.running) out.push_back({w.local_rank, static_cast<int>(w.pid)});
    }
    return out;
  }

  bool died_of_stop_signal(int exitcode) const {
    for (int sig : {stop_signal_, SIGKILL}) {
      if (sig != 0 && (exitcode == -sig || exitcode == 128 + sig)) return true;
    }
    return false;
  }

  // Children of ctrun that are not adopted orphans: the guardian, the spawner's helpers, the workers still running.
  // The spawner's helpers and the hooks': ctrun's processes that outlive an attempt.
  std::vector<pid_t> helpers() const {
    std::vector<pid_t> out = spawner_->helpers();
    for (const auto& h : hooks_) {
      if (!h.helpers) continue;
      for (pid_t pid : h.helpers()) out.push_back(pid);
    }
    return out;
  }

  std::vector<pid_t> kept_children() const {
    std::vector<pid_t> keep = helpers();
    keep.push_back(guardian_pid());
    for (const auto& more : also_kept_) {
      for (pid_t pid : more()) keep.push_back(pid);
    }
    for (const auto& w : workers_) {
      if (w.running) keep.push_back(w.pid);
    }
    return keep;
  }

  const LaunchConfig& config_;
  EnvLookup env_;
  EventLog& events_;
  std::unique_ptr<WorkerSpawner> spawner_;
  bool subreaper_;
  Callbacks cb_;
  std::shared_ptr<spdlog::logger> log_;
  boost::asio::signal_set children_;
  std::vector<std::function<std::vector<pid_t>()>> also_kept_;
  boost::asio::steady_timer kill_timer_;
  boost::asio::steady_timer stuck_timer_;  // kUnkillableGrace after SIGKILL
  teardown::TeardownWatch teardown_;       // the attempt's exit records: a finished program is a finished job
  WorkerStreams streams_;
  boost::asio::steady_timer drain_timer_;  // close(): the bound on the tee'd output still in flight
  std::function<void()> drained_;
  std::vector<WorkerHooks> hooks_;
  CpuTopology cpus_;            // read only when a binding is on
  bool relayed_exits_ = false;  // the spawner reports exits; waitpid is only for adopted orphans

  AttemptSpec attempt_;
  std::vector<Worker> workers_;
  std::uint64_t attempt_seq_ = 0;       // every start()
  std::uint64_t stopping_attempt_ = 0;  // the attempt whose workers were already signalled
  bool stopping_ = false;               // stop() was called in this attempt
  int stop_signal_ = 0;                 // the signal the current stop sent
  bool closed_ = false;
};

WorkerGroup::WorkerGroup(boost::asio::io_context& io, const LaunchConfig& config, EnvLookup env, ConsoleSink& console,
                         EventLog& events, std::unique_ptr<WorkerSpawner> spawner, bool subreaper, Callbacks callbacks)
    : impl_(std::make_unique<Impl>(io, config, std::move(env), console, events, std::move(spawner), subreaper,
                                   std::move(callbacks))) {}
WorkerGroup::~WorkerGroup() = default;
void WorkerGroup::add_hooks(WorkerHooks hooks) { impl_->add_hooks(std::move(hooks)); }
void WorkerGroup::keep_children(std::function<std::vector<pid_t>()> pids) { impl_->keep_children(std::move(pids)); }
void WorkerGroup::when_ready(std::function<void()> ready) { impl_->when_ready(std::move(ready)); }
void WorkerGroup::start(const AttemptSpec& attempt, const LogLayout& layout, const std::function<bool()>& keep_going) {
  impl_->start(attempt, layout, keep_going);
}
void WorkerGroup::stop(int sig, bool again) { impl_->stop(sig, again); }
void WorkerGroup::kill() { impl_->kill(); }
void WorkerGroup::forward(int sig) { impl_->forward(sig); }
void WorkerGroup::forget_ended_groups() { impl_->forget_ended_groups(); }
void WorkerGroup::end_attempt() { impl_->end_attempt(); }
void WorkerGroup::close(std::chrono::milliseconds drain, std::function<void()> drained) {
  impl_->close(drain, std::move(drained));
}
bool WorkerGroup::any_running() const { return impl_->any_running(); }
const std::vector<Worker>& WorkerGroup::workers() const { return impl_->workers(); }

}  // namespace ctrun::agent
