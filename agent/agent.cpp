#include "agent/agent.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <future>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <nlohmann/json.hpp>

#include <spdlog/spdlog.h>
#include "agent/agent_policy.hpp"
#include "agent/console_sink.hpp"
#include "agent/cpu_bind.hpp"
#include "agent/error_file.hpp"
#include "agent/escapees.hpp"
#include "agent/event_log.hpp"
#include "agent/failure.hpp"
#include "agent/guardian.hpp"
#include "agent/line_splitter.hpp"
#include "agent/log_layout.hpp"
#include "agent/log_sink.hpp"
#include "agent/rendezvous_factory.hpp"
#include "agent/round_agreement.hpp"
#include "agent/signal_names.hpp"
#include "agent/stream_plan.hpp"
#include "agent/tee_stream.hpp"
#include "agent/worker_env.hpp"
#include "agent/worker_process.hpp"
#include "agent/worker_store.hpp"
#include "common/log.hpp"
#include "rendezvous/factory.hpp"

extern char** environ;

namespace ctrun::agent {
namespace {

using SteadyClock = std::chrono::steady_clock;

std::int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now().time_since_epoch()).count();
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

bool is_numeric_address(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return ::inet_pton(AF_INET, host.c_str(), buf) == 1 || ::inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

int open_for_child(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw SpawnError("cannot open " + path + ": " + std::strerror(errno));
  return fd;
}

struct Worker {
  int local_rank = 0;
  int global_rank = 0;
  pid_t pid = -1;
  bool running = false;
  int exitcode = 0;
  std::int64_t exited_ns = 0;
  std::int64_t exited_epoch = 0;
  bool stopped_by_us = false;  // exited after ctrun signalled it
  std::string error_file;
  std::string spawn_error;  // why it could not be started, for the summary's traceback field
};

}  // namespace

class Agent::Impl {
 public:
  Impl(LaunchConfig config, EnvLookup env)
      : config_(std::move(config)),
        env_(std::move(env)),
        log_(ctrun::log::get("agent")),
        children_(io_, SIGCHLD),
        death_signals_(io_),
        forwarded_signals_(io_),
        kill_timer_(io_),
        drain_timer_(io_),
        membership_timer_(io_),
        leave_timer_(io_),
        rejoin_timer_(io_),
        waiting_timer_(io_),
        events_(config_.event_log) {}

  ~Impl() {
    // Reached only with the helper idle (run() does not return while a blocking call is still in flight).
    lane_.join();
  }

  void use_handler(std::unique_ptr<rdzv::Handler> handler) { rdzv_ = std::move(handler); }

  int run() {
    // ctrun writes to pipes and consoles that may close under it; an error return is enough.
    std::signal(SIGPIPE, SIG_IGN);
    for (int s : config_.signal_numbers) death_signals_.add(s);
    for (int s : config_.forwarded_signal_numbers) forwarded_signals_.add(s);
    remaining_restarts_ = config_.max_restarts;
    subreaper_ = is_subreaper();  // ctrun's main makes itself one; an embedding process decides for itself
    restart_count_ = config_.initial_restart_count;  // Slurm requeues: SLURM_RESTART_COUNT (agent/cluster/)

    if (!open_worker_store()) return exit_code_;
    if (config_.cpu_bind != CpuBind::kNone || config_.numa_binding) {
      allowed_cpus_ = allowed_cpus();
      numa_nodes_ = numa_nodes(allowed_cpus_);
    }
    wait_for_children();
    wait_for_death_signal();
    wait_for_forwarded_signal();
    make_handler();
    io_.run();

    // Tee'd lines still queued for a slow console get a moment; a console that does not read gets none.
    const std::chrono::milliseconds budget(lane_busy_.load() > 0 || death_signal_ != 0 ? 200 : 2000);
    console_.flush(budget);
    flush_queued_stderr(budget);  // ctrun's own lines (agent/log_sink.hpp), same budget
    if (auto dropped = console_.dropped_lines()) {
      log_->warn(
          "{} line(s) of worker output were not shown on the console (it did not keep up); the log files "
          "have every line",
          dropped);
      events_.emit("console_dropped", {{"lines", dropped}});
    }
    events_.emit("shutdown", {{"exit_code", exit_code_}});
    // The round the helper was joining or held when a signal came is left first, within the leave budget.
    const bool abandon_pending =
        abandoned_.valid() && abandoned_.wait_until(abandon_deadline_) != std::future_status::ready;
    if (abandon_pending)
      log_->warn("the rendezvous did not answer within {} ms; leaving without it",
                 std::chrono::duration_cast<std::chrono::milliseconds>(kLeaveBudget).count());
    if (lane_busy_.load() > 0 || abandon_pending) {
      // A rendezvous, barrier or store call is still blocked on the helper thread and the agent was told to go:
      // it does not wait for it (the kernel closes its sockets). The workers are gone already.
      spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& l) { l->flush(); });
      flush_queued_stderr(std::chrono::milliseconds(200));
      std::fflush(nullptr);
      ::_exit(exit_code_);
    }
    store_.reset();  // only now: every worker has exited (NCCL watchdogs poll the store until the end)
    return exit_code_;
  }

 private:
  // ---- the state machine (agent_policy.hpp decides; this file only acts) ----

  AgentFacts facts() const {
    return AgentFacts{failure_seen_, membership_changed_, remaining_restarts_ > 0, death_signal_ != 0};
  }

  void deliver(AgentEvent event) {
    const AgentState from = state_;
    const AgentStep step = decide(from, event, facts());
    if (step.action == AgentAction::kNone && step.next == from) return;
    log_->debug("{} + {} -> {} ({})", state_name(from), event_name(event), state_name(step.next),
                action_name(step.action));
    state_ = step.next;
    act(step.action);
  }

  void act(AgentAction action) {
    switch (action) {
      case AgentAction::kNone:
        return;
      case AgentAction::kJoinRound:
      case AgentAction::kRejoin:
        return join_round();
      case AgentAction::kRestartGroup:
        --remaining_restarts_;
        ++restart_count_;
        log_->warn("Worker group FAILED. {}/{} attempts left; will restart worker group", remaining_restarts_,
                   config_.max_restarts);
        events_.emit("restart", {{"restart_count", restart_count_}, {"remaining_restarts", remaining_restarts_}});
        return join_round();
      case AgentAction::kSpawnWorkers:
        return spawn_group();
      case AgentAction::kStopWorkers:
        return stop_workers(SIGTERM, false);
      case AgentAction::kForwardSignal:
        return stop_workers(death_signal_, true);
      case AgentAction::kKillWorkers:
        for (auto& w : workers_) {
          if (w.running) signal_group(w.pid, SIGKILL);
        }
        return;
      case AgentAction::kWaitExitBarrier:
        return wait_exit_barrier();
      case AgentAction::kCloseSucceeded:
        exit_code_ = 0;
        return close_run();
      case AgentAction::kCloseFailed:
        report_failure();
        return close_run();
      case AgentAction::kLeave:
        exit_code_ = signal_exit_code();
        return leave_run();
      case AgentAction::kExitNow:
        exit_code_ = signal_exit_code();
        log_->warn("leaving at once: the {} in progress is abandoned", last_blocking_call_);
        abandon_round();
        return finish();
      case AgentAction::kExit:
        return finish();
    }
  }

  int signal_exit_code() const { return config_.propagate_exit_code && !agent_failed_ ? 128 + death_signal_ : 1; }

 public:
  // HOOK for failures of the agent itself, e.g. the embedded worker store's server died (store/ reports it; wire
  // its error callback here). Callable from any thread. The agent then acts as on a death signal, in whatever state
  // it is: workers stopped (SIGTERM, SIGKILL after --shutdown-timeout), the round left, exit 1, loudly.
  void fail_agent(std::string why) {
    boost::asio::post(io_, [this, why = std::move(why)]() {
      if (state_ == AgentState::kDone || agent_failed_) return;
      agent_failed_ = true;
      log_->error("the agent itself failed: {}; stopping the job", why);
      events_.emit("agent_failure", {{"error", why}});
      if (death_signal_ != 0) return;  // already stopping for a signal
      death_signal_ = SIGTERM;
      deliver(AgentEvent::kSignal);
      check_group_exited();
    });
  }

 private:
  // Runs work on the helper thread (every call that may block: the rendezvous handler is only ever called there,
  // one thread as handler.hpp asks), then done on the event loop. The loop never waits for it.
  template <class Work>
  void off_loop(std::string what, Work work) {
    last_blocking_call_ = std::move(what);
    ++lane_busy_;
    boost::asio::post(lane_, [this, work = std::move(work)]() mutable {
      auto done = work();  // returns the continuation to run on the loop
      --lane_busy_;        // before the post: once the loop runs `done`, the helper is idle
      boost::asio::post(io_, std::move(done));
    });
  }

  // ---- the workers' store and the rendezvous handler ----

  // An embedded store whose loop failed answers nothing: fail the job loudly instead of leaving workers hanging.
  WorkerStore::FailureHandler store_failure_handler() {
    return [this](const std::string& what) { fail_agent("the workers' store failed (" + what + ")"); };
  }

  // The workers' store (a local bind: never blocks). Returns false with exit_code_ set when it cannot start.
  bool open_worker_store() {
    const bool single = is_single_node(config_);
    static_multi_node_ = !single && config_.rdzv_backend == "static";
    std::string bind_host;
    std::uint16_t port = 0;
    // torchrun's static backend serves its store at --rdzv-endpoint when one is given, for one node too.
    const bool at_endpoint = config_.rdzv_backend == "static" && !config_.standalone && !config_.rdzv_endpoint.empty();
    if (single && !at_endpoint) {
      store_host_ = config_.local_addr.value_or(config_.standalone ? "127.0.0.1" : config_.master_addr);
      bind_host = store_host_;
      if (config_.rdzv_backend == "static" && config_.master_port)
        port = static_cast<std::uint16_t>(*config_.master_port);
    } else if (static_multi_node_ || at_endpoint) {
      // As torchrun's static backend: node rank 0 serves one store at the master address (or the endpoint) for
      // the rendezvous and every worker of every node; the other nodes bind nothing.
      const auto ep = rdzv::static_endpoint(rendezvous_parameters(config_));
      store_host_ = ep.host;
      // A numeric address of this machine is bound as given (several "nodes" of one machine on 127.0.0.x); a host
      // name may resolve to another address here (127.0.1.1) than for the other nodes: bind every interface.
      bind_host = is_numeric_address(ep.host) && rdzv::is_local_host(ep.host) ? ep.host : "0.0.0.0";
      port = ep.port;
    } else {
      // c10d: an ephemeral port on this node's address; the round's group rank 0 publishes it as MASTER_ADDR:PORT.
      store_host_ = node_address(config_);
      bind_host = config_.local_addr && !config_.local_addr->empty() ? *config_.local_addr : "0.0.0.0";
    }
    if (single && !at_endpoint && !config_.standalone && !config_.master_port && config_.rdzv_backend == "static") {
      // torchrun's default: one node without --standalone serves the store on MASTER_PORT 29500, so a script that
      // sets MASTER_PORT=29500 itself finds it there. Taken (another job of this machine): a free port, said so.
      try {
        store_ = std::make_unique<WorkerStore>(bind_host, kTorchrunMasterPort, store_failure_handler());
        return true;
      } catch (const std::exception& e) {
        log_->warn(
            "port {} (torchrun's default MASTER_PORT) is taken on {} ({}); the workers' store takes a free port "
            "instead: pass --master-port or --standalone to choose",
            kTorchrunMasterPort, bind_host, e.what());
      }
    }
    if (!static_multi_node_ || config_.node_rank == 0) {
      try {
        store_ = std::make_unique<WorkerStore>(bind_host, port, store_failure_handler());
      } catch (const std::exception& e) {
        // Static node rank 0: the port is the job's MASTER_PORT; never share it with whoever else holds it.
        log_->error(
            "cannot start the workers' store on {}:{}: {}. If another process holds that port, stop it or "
            "choose a free one with --master-port (the same on every node)",
            bind_host, port, e.what());
        exit_code_ = 1;
        return false;
      }
    }
    return true;
  }

  // The rendezvous handler connects to (or hosts) the rendezvous store: on the helper thread, so a signal that
  // arrives while the endpoint does not answer is honoured at once.
  void make_handler() {
    std::shared_ptr<rdzv::Handler> given = std::move(rdzv_);
    off_loop("connection to the rendezvous store", [this, given = std::move(given)]() mutable {
      int code = 0;
      std::string error;
      try {
        if (!given)
          given =
              make_rendezvous_handler(config_, store_ ? std::optional<std::uint16_t>(store_->port()) : std::nullopt);
        if (store_) given->set_worker_store_address(store_host_, store_->port());
      } catch (const std::invalid_argument& e) {
        code = 2;
        error = e.what();
      } catch (const std::exception& e) {
        code = 1;
        error = std::string("rendezvous failed: ") + e.what();
      }
      return [this, h = std::move(given), code, error]() mutable {
        if (code != 0) {
          log_->error("{}", error);
          events_.emit("rendezvous_failed", {{"error", error}});
          exit_code_ = code;
          return deliver(AgentEvent::kRendezvousFailed);
        }
        rdzv_ = std::move(h);
        on_handler_ready();
      };
    });
  }

  void on_handler_ready() {
    layout_ = std::make_unique<LogLayout>(config_.log_dir, rdzv_->run_id());
    if (layout_->enabled()) log_->info("log directory set to: {}", layout_->run_dir());
    log_->info("Starting ctrun agent: run_id={} nproc_per_node={} max_restarts={} nnodes={}:{} rdzv={} store={}",
               rdzv_->run_id(), config_.nproc_per_node, config_.max_restarts, config_.min_nodes, config_.max_nodes,
               rdzv_->backend(), store_ ? store_host_ + ":" + std::to_string(store_->port()) : "(node rank 0's)");
    events_.emit("agent_start", {{"run_id", rdzv_->run_id()},
                                 {"nproc_per_node", config_.nproc_per_node},
                                 {"max_restarts", config_.max_restarts},
                                 {"master_addr", store_host_},
                                 {"master_port", store_ ? store_->port() : 0},
                                 {"rdzv_store", rdzv_->served_store()}});
    deliver(AgentEvent::kHandlerReady);
  }

  // ---- rounds ----

  void join_round() {
    ++attempt_seq_;
    failure_seen_ = false;
    membership_changed_ = false;
    membership_timer_.cancel();
    // The previous attempt's groups that are empty now: their ids may be recycled, so the guardian must forget them.
    // A group a worker's child still holds stays watched.
    for (const auto& w : workers_) {
      if (w.pid > 0 && ::kill(-w.pid, 0) != 0 && errno == ESRCH) guardian_forget(w.pid);
    }
    // A fresh keyspace: no key of a previous attempt survives into this one. Cleared before joining, never after:
    // once the round completes, other nodes' workers may write here at once. The previous round is over for every
    // node by now. Not with the static backend, whose one store also holds the rendezvous (as torchrun; torch
    // <= 2.0 workers scope their keys by attempt there).
    if (store_ && !static_multi_node_) store_->clear();
    if (store_lost_) watch_rejoin_after_store_loss();
    report_waiting(attempt_seq_, SteadyClock::now(), std::chrono::seconds(1));
    off_loop("rendezvous", [this, attempt = attempt_seq_, restart_count = restart_count_]() {
      rdzv::RoundInfo round;
      int agreed = restart_count;
      std::string error;
      try {
        // A round that breaks before every member arrived is left at once; each try waits at most join_timeout.
        for (int tries = 0;; ++tries) {
          round = rdzv_->next_rendezvous();
          if (auto a = agree_on_restart_count(round, restart_count)) {
            agreed = *a;
            break;
          }
          if (tries >= kMaxBrokenRounds) throw rdzv::RendezvousError("rounds kept breaking before they started");
        }
      } catch (const rdzv::RendezvousError& e) {
        error = e.what();
      } catch (const std::exception& e) {
        error = e.what();
      }
      return [this, attempt, round = std::move(round), agreed, error]() mutable {
        if (attempt != attempt_seq_) return;
        rejoin_timer_.cancel();
        waiting_timer_.cancel();
        store_lost_ = false;
        if (!error.empty()) {
          // Name who is missing: the rendezvous knows who joined, the last round's end says who left or died.
          if (!last_round_end_.empty()) error += " (the previous round ended: " + last_round_end_ + ")";
          log_->error("rendezvous failed: {}", error);
          events_.emit("rendezvous_failed", {{"error", error}});
          exit_code_ = 1;
          return deliver(AgentEvent::kRendezvousFailed);
        }
        if (agreed != restart_count_)
          log_->info("restart count of this round: {} (this node had {})", agreed, restart_count_);
        restart_count_ = agreed;
        round_ = std::move(round);
        deliver(AgentEvent::kRoundFormed);
      };
    });
  }

  // Says what the agent waits for: once after a second without a round (a round that forms at once says nothing),
  // then every 30 s. The handler does not tell who joined; the round, when it forms, is one line too (spawn_group).
  void report_waiting(std::uint64_t attempt, SteadyClock::time_point since, SteadyClock::duration after) {
    if (is_single_node(config_)) return;
    waiting_timer_.expires_after(after);
    waiting_timer_.async_wait([this, attempt, since](const boost::system::error_code& ec) {
      if (ec || attempt != attempt_seq_ || state_ != AgentState::kRendezvous) return;
      const auto waited = std::chrono::duration_cast<std::chrono::seconds>(SteadyClock::now() - since).count();
      std::string nodes = config_.min_nodes == config_.max_nodes
                              ? std::to_string(config_.min_nodes)
                              : fmt::format("{} to {}", config_.min_nodes, config_.max_nodes);
      log_->warn("waiting for the other nodes of rendezvous '{}' ({} nodes, {} backend, endpoint {}): {} s so far",
                 rdzv_->run_id(), nodes, rdzv_->backend(),
                 config_.rdzv_endpoint.empty()
                     ? config_.master_addr + ":" + (config_.master_port ? std::to_string(*config_.master_port) : "?")
                     : config_.rdzv_endpoint,
                 waited);
      report_waiting(attempt, since, std::chrono::seconds(30));
    });
  }

  // After the rendezvous store was lost, the next round is joined on a store that may be gone or back empty; the
  // handler's calls may then wait on keys nobody will write. The agent does not wait past join_timeout (+ a grace
  // for the restart-count agreement): it fails with a message that says what happened.
  void watch_rejoin_after_store_loss() {
    store::Duration join_timeout = std::chrono::seconds(600);
    try {
      if (auto v = rendezvous_parameters(config_).get_as_seconds("join_timeout")) join_timeout = *v;
    } catch (const std::exception&) {
    }
    rejoin_timer_.expires_after(join_timeout + kRejoinGrace);
    rejoin_timer_.async_wait([this, attempt = attempt_seq_, join_timeout](const boost::system::error_code& ec) {
      if (ec || attempt != attempt_seq_ || state_ != AgentState::kRendezvous) return;
      std::string error = fmt::format(
          "no new round within join_timeout ({} s) after the rendezvous store was lost ({}). If the store was "
          "restarted, restart the job with a new --rdzv-id; otherwise check the --rdzv-endpoint host",
          std::chrono::duration_cast<std::chrono::seconds>(join_timeout).count(), last_round_end_);
      log_->error("rendezvous failed: {}", error);
      events_.emit("rendezvous_failed", {{"error", error}});
      exit_code_ = 1;
      deliver(AgentEvent::kRendezvousFailed);
    });
  }

  // c10d rounds: every member's workers get the round's TORCHELASTIC_RESTART_COUNT (round_agreement.hpp). Nullopt
  // when the round broke before every member arrived: the caller joins the next round. Helper thread.
  std::optional<int> agree_on_restart_count(const rdzv::RoundInfo& round, int restart_count) {
    if (round.group_world_size <= 1 || !round.store || rdzv_->backend() == "static") return restart_count;
    try {
      auto agreed = agree_restart_count(*round.store, restart_count, round.group_world_size, kAgreementTimeout,
                                        [this] { return rdzv_->num_nodes_waiting() > 0 || rdzv_->round_broken(); });
      if (!agreed) {
        log_->warn("round {} ended before it started ({}); joining the next round", round.round,
                   rdzv_->restart_reason());
        return std::nullopt;
      }
      return *agreed;
    } catch (const store::StoreError& e) {
      throw rdzv::RendezvousError(std::string("the members of the round did not all agree on a restart count: ") +
                                  e.what());
    }
  }

  void spawn_group() {
    if (!is_single_node(config_)) {
      log_->warn(
          "round {} of rendezvous '{}' formed: {} node(s), world size {}; this node is group rank {} with "
          "ranks {}..{}",
          round_.round, rdzv_->run_id(), round_.group_world_size, round_.global_world_size, round_.group_rank,
          round_.base_global_rank, round_.base_global_rank + config_.nproc_per_node - 1);
    }
    events_.emit("rendezvous", {{"round", round_.round},
                                {"group_rank", round_.group_rank},
                                {"group_world_size", round_.group_world_size},
                                {"world_size", round_.global_world_size}});
    layout_->prepare_attempt(restart_count_, config_.nproc_per_node);
    workers_.assign(static_cast<std::size_t>(config_.nproc_per_node), Worker{});
    open_filtered_files();
    // Each exec is awaited before the next fork: the parent sleeps in read() and the child gets its CPU at once,
    // which measured faster restarts on a busy machine than forking the whole group first.
    for (int r = 0; r < config_.nproc_per_node && state_ == AgentState::kRunning; ++r) {
      try {
        StartedWorker started = spawn(r);
        try {
          confirm_exec(started);
        } catch (const std::exception&) {
          workers_[static_cast<std::size_t>(r)].running = false;  // confirm_exec reaped it
          throw;
        }
      } catch (const std::exception& e) {
        spawn_failed(r, e.what());
      }
    }
    watch_membership();
    check_group_exited();
  }

  // Multi-node rounds end when a node waits to join or a member is lost. The rendezvous answers that only when
  // asked (a store read, on the helper thread), so it is asked every --monitor-interval; a single-node job never
  // asks.
  void watch_membership() {
    if (round_.group_world_size <= 1 && config_.max_nodes <= 1) return;
    membership_timer_.expires_after(
        std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(config_.monitor_interval)));
    membership_timer_.async_wait([this, attempt = attempt_seq_](const boost::system::error_code& ec) {
      if (ec || attempt != attempt_seq_ || state_ != AgentState::kRunning) return;
      off_loop("membership check", [this, attempt]() {
        int waiting = 0;
        bool broken = false;
        std::string reason;
        bool store_lost = false;
        try {
          waiting = rdzv_->num_nodes_waiting();
          broken = waiting == 0 && rdzv_->round_broken();
          if (waiting > 0 || broken) reason = rdzv_->restart_reason();
        } catch (const std::exception& e) {
          // The rendezvous store is gone (its host died, or it restarted empty): end the round; joining the next
          // one says what failed.
          broken = true;
          store_lost = true;
          reason = std::string("the rendezvous store failed: ") + e.what();
        }
        return [this, attempt, waiting, broken, reason, store_lost]() {
          if (attempt != attempt_seq_ || state_ != AgentState::kRunning) return;
          if (waiting == 0 && !broken) return watch_membership();
          log_->warn("Membership changed ({}); restarting worker group into a new round",
                     reason.empty() ? std::to_string(waiting) + " node(s) waiting" : reason);
          events_.emit("membership_change", {{"nodes_waiting", waiting}, {"reason", reason}});
          membership_changed_ = true;
          store_lost_ = store_lost;
          last_round_end_ = reason;
          deliver(AgentEvent::kMembershipChanged);
        };
      });
    });
  }

  // ---- the end of the run ----

  void wait_exit_barrier() {
    log_->info("worker group succeeded");
    // Wait for the other nodes so an early finisher does not look like a scale-down (torchrun: 300 s).
    const auto timeout =
        std::chrono::duration_cast<store::Duration>(std::chrono::duration<double>(config_.exit_barrier_timeout));
    off_loop("exit barrier", [this, timeout]() {
      bool passed = false;
      try {
        passed = rdzv_->exit_barrier(timeout);
      } catch (const std::exception& e) {
        log_->warn("exit barrier failed: {}", e.what());
      }
      return [this, passed]() {
        if (!passed)
          log_->warn("exit barrier timed out after {} s (--exit-barrier-timeout)", config_.exit_barrier_timeout);
        deliver(AgentEvent::kBarrierDone);
      };
    });
  }

  // shutdown(): closes the run id for every node (success, or failure with no restarts left, as torchrun).
  void close_run() {
    off_loop("rendezvous shutdown", [this]() {
      try {
        rdzv_->shutdown();
      } catch (const std::exception& e) {
        log_->warn("could not close the rendezvous: {}", e.what());
      }
      return [this]() { deliver(AgentEvent::kClosed); };
    });
  }

  // A death signal: leave the round without closing the run, so the other nodes restart at once (torchrun
  // #67742). Bounded: a rendezvous store that does not answer cannot hold the agent past the signal's second.
  void leave_run() {
    off_loop("rendezvous leave", [this]() {
      try {
        rdzv_->leave();
      } catch (const std::exception& e) {
        log_->warn("could not leave the rendezvous: {}", e.what());
      }
      return [this]() { deliver(AgentEvent::kClosed); };
    });
    leave_timer_.expires_after(kLeaveBudget);
    leave_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      log_->warn("the rendezvous did not answer within {} ms; leaving without it",
                 std::chrono::duration_cast<std::chrono::milliseconds>(kLeaveBudget).count());
      deliver(AgentEvent::kClosed);
    });
  }

  // A death signal while the helper is blocked in the handler (joining a round, or in the exit barrier): leave
  // that round from a thread of its own (Handler::abandon(), on a connection of its own), so the others see
  // "left" now rather than a heartbeat timeout. run() waits for it up to kLeaveBudget before it exits.
  void abandon_round() {
    if (!rdzv_ || lane_busy_.load() == 0) return;
    if (last_blocking_call_ != "rendezvous" && last_blocking_call_ != "exit barrier") return;
    auto done = std::make_shared<std::promise<void>>();
    abandoned_ = done->get_future();
    abandon_deadline_ = SteadyClock::now() + kLeaveBudget;
    std::thread([handler = rdzv_, done]() mutable {
      try {
        handler->abandon();
      } catch (...) {  // logged by the handler; the agent exits anyway
      }
      handler.reset();  // before set_value: the agent's own reference is the last one
      done->set_value();
    }).detach();  // run() waits for it, or ends the process with _exit
  }

  // A worker that cannot even start fails the attempt like one that exits at once.
  void spawn_failed(int local_rank, const std::string& why) {
    log_->error("local_rank {}: {}", local_rank, why);
    Worker& w = workers_[static_cast<std::size_t>(local_rank)];
    w.exitcode = 127;
    w.spawn_error = why;
    w.exited_ns = monotonic_ns();
    w.exited_epoch = epoch_seconds();
    on_worker_failed();
  }

  StartedWorker spawn(int local_rank) {
    Worker& w = workers_[static_cast<std::size_t>(local_rank)];
    w.local_rank = local_rank;
    w.global_rank = round_.base_global_rank + local_rank;
    w.error_file = layout_->error_file(restart_count_, local_rank);

    WorkerEnvInput in;
    in.config = &config_;
    in.round = &round_;
    in.run_id = rdzv_->run_id();
    in.use_agent_store = rdzv_->use_agent_store();
    in.local_rank = local_rank;
    in.restart_count = restart_count_;
    in.error_file = w.error_file;
    SpawnRequest req;
    req.argv = worker_argv(config_, local_rank, env_);
    req.env = merge_environment(environ, worker_env_overrides(in, env_));
    if (config_.cpu_bind != CpuBind::kNone) {
      req.cpus = cpu_slice(config_.cpu_bind, local_rank, config_.nproc_per_node, allowed_cpus_, numa_nodes_);
    } else if (config_.numa_binding) {
      CpuBind mode =
          *config_.numa_binding == "node" || *config_.numa_binding == "socket" ? CpuBind::kNuma : CpuBind::kCore;
      req.cpus = cpu_slice(mode, local_rank, config_.nproc_per_node, allowed_cpus_, numa_nodes_);
    }

    std::vector<int> child_fds;  // closed in ctrun once the child has them
    auto stream_fd = [&](int stream) -> int {
      StreamPlan plan = plan_stream(config_, local_rank, stream);
      std::string path = stream == 1 ? layout_->stdout_file(restart_count_, local_rank)
                                     : layout_->stderr_file(restart_count_, local_rank);
      switch (plan.mode) {
        case StreamMode::kInherit:
          return -1;
        case StreamMode::kNull:
        case StreamMode::kFile: {
          int fd = open_for_child(plan.mode == StreamMode::kFile && layout_->enabled() ? path : "/dev/null");
          child_fds.push_back(fd);
          return fd;
        }
        case StreamMode::kTee: {
          int p[2];
          if (::pipe2(p, O_CLOEXEC) != 0) throw SpawnError(std::string("pipe2: ") + std::strerror(errno));
          child_fds.push_back(p[1]);
          TeeTarget target;
          target.console_fd = plan.to_console ? stream : -1;
          target.console = &console_;
          target.file_fd = layout_->enabled() ? open_for_child(path) : -1;
          target.file_path = path;
          target.filtered_fd = stream == 1 ? filtered_out_fd_ : filtered_err_fd_;
          target.filters = stream == 1 ? config_.duplicate_stdout_filters : config_.duplicate_stderr_filters;
          const std::string* tmpl = prefix_template_ ? &*prefix_template_ : nullptr;
          target.prefix = log_line_prefix(tmpl, config_.role, local_rank, w.global_rank, short_hostname());
          tees_.push_back(std::make_unique<TeeStream>(io_, p[0], std::move(target), [this] { on_tee_eof(); }));
          tees_.back()->start();
          return p[1];
        }
      }
      return -1;
    };
    StartedWorker started;
    try {
      req.stdout_fd = stream_fd(1);
      req.stderr_fd = stream_fd(2);
      started = start_worker(req);
      w.pid = started.pid;
      guardian_watch(w.pid);
    } catch (...) {
      for (int fd : child_fds) ::close(fd);
      throw;
    }
    for (int fd : child_fds) ::close(fd);
    w.running = true;
    events_.emit(
        "worker_start",
        {{"local_rank", local_rank}, {"rank", w.global_rank}, {"pid", w.pid}, {"restart_count", restart_count_}});
    return started;
  }

  void open_filtered_files() {
    for (int* fd : {&filtered_out_fd_, &filtered_err_fd_}) {
      if (*fd >= 0) ::close(*fd);
      *fd = -1;
    }
    if (!layout_->enabled()) return;
    std::string dir = layout_->attempt_dir(restart_count_);
    if (!config_.duplicate_stdout_filters.empty()) filtered_out_fd_ = open_for_child(dir + "/filtered_stdout.log");
    if (!config_.duplicate_stderr_filters.empty()) filtered_err_fd_ = open_for_child(dir + "/filtered_stderr.log");
  }

  void wait_for_children() {
    children_.async_wait([this](const boost::system::error_code& ec, int) {
      if (ec) return;
      reap();
      wait_for_children();
    });
  }

  void wait_for_death_signal() {
    death_signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
      if (ec) return;
      on_death_signal(sig);
      wait_for_death_signal();
    });
  }

  // SIGUSR1/SIGUSR2 (unless --signals-to-handle makes them death signals): passed on to every worker's process
  // group, the job goes on. Workers use them for checkpoint-on-preemption (Slurm's --signal) and stack dumps.
  void wait_for_forwarded_signal() {
    forwarded_signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
      if (ec) return;
      nlohmann::json pids = nlohmann::json::array();
      for (auto& w : workers_) {
        if (!w.running) continue;
        signal_group(w.pid, sig);
        pids.push_back(w.pid);
      }
      log_->info("Received {}: forwarded to {} worker(s)", signal_name(sig), pids.size());
      events_.emit("signal_forwarded", {{"signal", signal_name(sig)}, {"pids", pids}});
      wait_for_forwarded_signal();
    });
  }

  // SIGCHLD: collect every worker that exited (several may have, signals coalesce).
  void reap() {
    for (auto& w : workers_) {
      if (!w.running) continue;
      int status = 0;
      pid_t r = ::waitpid(w.pid, &status, WNOHANG);
      if (r != w.pid) continue;
      w.running = false;
      w.exitcode = exitcode_of(status);
      w.exited_ns = monotonic_ns();
      w.exited_epoch = epoch_seconds();
      // Collateral of a stop: it died of the signal ctrun sent (or its shell's 128+N). A rank that exits with a code
      // of its own while the group is being stopped failed by itself and is named in the summary (as torchrun).
      w.stopped_by_us = state_ != AgentState::kRunning && died_of_stop_signal(w.exitcode);
      nlohmann::json ev = {{"local_rank", w.local_rank},
                           {"rank", w.global_rank},
                           {"pid", w.pid},
                           {"exitcode", w.exitcode},
                           {"restart_count", restart_count_}};
      if (w.exitcode < 0) ev["signal"] = signal_name(-w.exitcode);
      events_.emit("worker_exit", ev);
      if (w.exitcode != 0 && !w.stopped_by_us) {
        log_->info("failed (exitcode: {}) local_rank: {} (pid: {}) of binary: {}", w.exitcode, w.local_rank, w.pid,
                   config_.script);
        on_worker_failed();
      }
    }
    if (subreaper_) reap_adopted(kept_children());
    check_group_exited();
  }

  // Children of ctrun that are not adopted orphans: the guardian and the workers still running.
  std::vector<pid_t> kept_children() const {
    std::vector<pid_t> keep{guardian_pid()};
    for (const auto& w : workers_) {
      if (w.running) keep.push_back(w.pid);
    }
    return keep;
  }

  // All-or-nothing, as torchrun: one failure stops the whole local group.
  void on_worker_failed() {
    if (state_ != AgentState::kRunning) return;
    failure_seen_ = true;
    deliver(AgentEvent::kWorkerFailed);
  }

  void check_group_exited() {
    if (state_ != AgentState::kRunning && state_ != AgentState::kStopping) return;
    for (const auto& w : workers_) {
      if (w.running) return;
    }
    kill_timer_.cancel();
    membership_timer_.cancel();
    sweep_escapees();
    deliver(AgentEvent::kGroupExited);
  }

  // The group has ended: processes of it that left its process group (setsid, double fork) end too.
  void sweep_escapees() {
    // Orphaned descendants that ctrun adopted as their subreaper (found even with a cleared environment).
    int n = subreaper_ ? kill_adopted(kept_children()) : 0;
    auto token = env_(kJobTokenVariable);
    if (token && !token->empty()) n += signal_marked_processes(*token, SIGKILL);
    if (n > 0) {
      log_->warn("killed {} process(es) of the worker group that had left its process group (setsid or daemon)", n);
      events_.emit("escapees_killed", {{"count", n}});
    }
  }

  void on_death_signal(int sig) {
    if (death_signal_ != 0) {
      // A second signal: the user insists; do not wait out the shutdown timeout.
      log_->warn("Received {} again, killing workers now", signal_name(sig));
      events_.emit("signal", {{"signal", signal_name(sig)}, {"again", true}});
      return deliver(AgentEvent::kSignalAgain);
    }
    death_signal_ = sig;
    log_->warn("Received {} death signal, shutting down workers (agent state: {})", signal_name(sig),
               state_name(state_));
    events_.emit("signal", {{"signal", signal_name(sig)}, {"state", state_name(state_)}});
    deliver(AgentEvent::kSignal);
    check_group_exited();
  }

  bool died_of_stop_signal(int exitcode) const {
    for (int sig : {stop_signal_, SIGKILL}) {
      if (sig != 0 && (exitcode == -sig || exitcode == 128 + sig)) return true;
    }
    return false;
  }

  // Sends sig to every worker's process group, then SIGKILL after --shutdown-timeout. again: a stop already
  // under way (for a failure) is overtaken by a death signal, which is sent too.
  void stop_workers(int sig, bool again) {
    if (stopping_attempt_ == attempt_seq_ && !again) return;
    stopping_attempt_ = attempt_seq_;
    stop_signal_ = sig;
    for (auto& w : workers_) {
      // Exited leaders too: their process group may still hold the worker's own children.
      if (w.pid > 0) signal_group(w.pid, sig);
    }
    kill_timer_.expires_after(
        std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(config_.shutdown_timeout)));
    // The attempt is part of the check: a deadline that expired just as the group ended must not SIGKILL the
    // next attempt's workers.
    kill_timer_.async_wait([this, attempt = attempt_seq_](const boost::system::error_code& ec) {
      if (ec || attempt != attempt_seq_ || finished_) return;
      for (auto& w : workers_) {
        if (w.running) {
          log_->warn("local_rank {} (pid {}) still running {} s after the stop signal; sending SIGKILL", w.local_rank,
                     w.pid, config_.shutdown_timeout);
          signal_group(w.pid, SIGKILL);
        }
      }
    });
  }

  void report_failure() {
    std::vector<WorkerFailure> failures;
    for (const auto& w : workers_) {
      if (w.exitcode == 0) continue;
      // Workers that exited after ctrun began stopping the group are collateral, not failures (torchrun
      // lists only those that had failed when it noticed the first) - unless they recorded an error.
      if (w.stopped_by_us && !read_worker_error_file(w.error_file)) continue;
      failures.push_back(
          make_failure(w.local_rank, w.global_rank, w.pid, w.exitcode, w.error_file, w.exited_epoch, w.exited_ns));
      if (!w.spawn_error.empty()) failures.back().message = w.spawn_error;
    }
    if (failures.empty()) return;
    std::string summary = format_failure_summary(entrypoint_name(config_), failures, fqdn());
    std::string text = "ctrun: error: ChildFailedError: " + summary + "\n";
    write_all(STDERR_FILENO, text.data(), text.size());
    // A write error is the one cause ctrun can see from outside: SIGPIPE (or a shell's 141) means the worker
    // wrote to a pipe or socket whose reader had gone (EPIPE). EIO/ENOSPC surface as the worker's own exception
    // (its error file, with @record) - ctrun cannot tell them from other failures.
    for (const auto& f : failures) {
      if (f.exitcode == -SIGPIPE || f.exitcode == 128 + SIGPIPE)
        log_->error(
            "local_rank {} (rank {}) died on a write error: SIGPIPE, it wrote to a pipe or socket whose reader had "
            "gone (EPIPE)",
            f.local_rank, f.global_rank);
    }
    const WorkerFailure& root = failures[root_cause_index(failures)];
    if (root.error_file == "<N/A>") {
      log_->info(
          "local_rank {} FAILED with no error file. Decorate your entrypoint fn with @record for traceback "
          "info. See: https://pytorch.org/docs/stable/elastic/errors.html",
          root.local_rank);
    }
    if (auto own = env_("TORCHELASTIC_ERROR_FILE"); own && !own->empty()) {
      write_agent_error_file(*own, root.error_file, root.exitcode, summary);
    }
    exit_code_ = 1;
    if (config_.propagate_exit_code) exit_code_ = root.exitcode < 0 ? 128 - root.exitcode : root.exitcode;
    events_.emit("failed", {{"rank", root.global_rank}, {"exitcode", root.exitcode}});
  }

  void finish() {
    finished_ = true;
    children_.cancel();
    membership_timer_.cancel();
    leave_timer_.cancel();
    rejoin_timer_.cancel();
    waiting_timer_.cancel();
    kill_timer_.cancel();
    death_signals_.cancel();
    forwarded_signals_.cancel();
    drain_or_stop();
  }

  // Tee'd output still in flight is written before ctrun exits, but a grandchild that keeps a pipe open
  // cannot hold ctrun forever.
  void drain_or_stop() {
    if (all_tees_done()) return io_.stop();
    drain_timer_.expires_after(std::chrono::seconds(2));
    drain_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) io_.stop();
    });
  }

  void on_tee_eof() {
    if (finished_ && all_tees_done()) {
      drain_timer_.cancel();
      io_.stop();
    }
  }

  bool all_tees_done() const {
    for (const auto& t : tees_) {
      if (!t->finished()) return false;
    }
    return true;
  }

  const std::string& short_hostname() {
    if (hostname_.empty()) {
      char name[256] = {};
      ::gethostname(name, sizeof name - 1);
      hostname_ = name;
      hostname_ = hostname_.substr(0, hostname_.find('.'));
    }
    return hostname_;
  }

  LaunchConfig config_;
  EnvLookup env_;
  std::shared_ptr<spdlog::logger> log_;
  boost::asio::io_context io_;
  boost::asio::signal_set children_;
  boost::asio::signal_set death_signals_;
  boost::asio::signal_set forwarded_signals_;
  boost::asio::steady_timer kill_timer_;
  boost::asio::steady_timer drain_timer_;
  boost::asio::steady_timer membership_timer_;
  boost::asio::steady_timer leave_timer_;
  boost::asio::steady_timer rejoin_timer_;
  boost::asio::steady_timer waiting_timer_;
  EventLog events_;
  ConsoleSink console_;  // before tees_: the tee streams write into it
  std::optional<std::string> prefix_template_ = env_("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE");

  static constexpr store::Duration kAgreementTimeout = std::chrono::seconds(60);
  static constexpr int kMaxBrokenRounds = 100;
  static constexpr std::chrono::milliseconds kLeaveBudget{500};
  bool subreaper_ = false;       // orphans of the job are our children: kill and reap them with the group
  std::future<void> abandoned_;  // abandon_round()'s thread
  SteadyClock::time_point abandon_deadline_{};
  static constexpr std::chrono::seconds kRejoinGrace{10};
  static constexpr std::uint16_t kTorchrunMasterPort = 29500;  // of the one second a signal is honoured in

  std::unique_ptr<WorkerStore> store_;  // null on static nodes other than rank 0
  std::string store_host_;
  bool static_multi_node_ = false;
  std::string last_round_end_;           // why the previous round ended (membership change), for error messages
  std::shared_ptr<rdzv::Handler> rdzv_;  // called on the helper thread only (run_id/backend are constant)
  std::unique_ptr<LogLayout> layout_;
  rdzv::RoundInfo round_;
  std::vector<Worker> workers_;
  std::vector<std::unique_ptr<TeeStream>> tees_;
  std::vector<int> allowed_cpus_;
  std::vector<std::vector<int>> numa_nodes_;
  int filtered_out_fd_ = -1;
  int filtered_err_fd_ = -1;
  std::string hostname_;

  int restart_count_ = 0;
  int remaining_restarts_ = 0;
  std::uint64_t attempt_seq_ = 0;  // every start_attempt, restarts and new rounds alike
  AgentState state_ = AgentState::kInitialising;
  bool membership_changed_ = false;
  bool failure_seen_ = false;
  bool store_lost_ = false;  // the last round ended because the rendezvous store failed
  std::uint64_t stopping_attempt_ = 0;
  int stop_signal_ = 0;  // the signal the current stop sent  // the attempt whose workers were already signalled
  bool finished_ = false;
  int death_signal_ = 0;
  bool agent_failed_ = false;  // fail_agent() was called
  int exit_code_ = 1;
  std::string last_blocking_call_;

  // The helper thread for blocking calls, and how many of its tasks are queued or running. Last member: destroyed
  // (joined) first, while everything its tasks use still exists.
  std::atomic<int> lane_busy_{0};
  boost::asio::thread_pool lane_{1};
};

Agent::Agent(LaunchConfig config, EnvLookup env) : impl_(std::make_unique<Impl>(std::move(config), std::move(env))) {}
Agent::Agent(LaunchConfig config, EnvLookup env, std::unique_ptr<rdzv::Handler> handler)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(env))) {
  impl_->use_handler(std::move(handler));
}
Agent::~Agent() = default;
int Agent::run() { return impl_->run(); }
void Agent::fail(std::string why) { impl_->fail_agent(std::move(why)); }

}  // namespace ctrun::agent
