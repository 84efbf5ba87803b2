#include "agent/agent.hpp"

#include <chrono>
#include <cmath>
#include <csignal>
#include <deque>
#include <map>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>
#include "agent/base/event_log.hpp"
#include "agent/base/helper_lane.hpp"
#include "agent/base/signal_names.hpp"
#include "agent/checkpoint/keeper.hpp"
#include "agent/checkpoint/summary_view.hpp"
#include "agent/exit_sequence.hpp"
#include "agent/hang/supervisor.hpp"
#include "agent/launch/reachable_address.hpp"
#include "agent/launch/rendezvous_factory.hpp"
#include "agent/launch/store_relay.hpp"
#include "agent/launch/worker_python.hpp"
#include "agent/launch/worker_store.hpp"
#include "agent/logs/console_sink.hpp"
#include "agent/logs/log_layout.hpp"
#include "agent/metrics/agent_metrics.hpp"
#include "agent/metrics/liveness.hpp"
#include "agent/policy/agent_policy.hpp"
#include "agent/preload/preload_spawner.hpp"
#include "agent/process/escapees.hpp"
#include "agent/process/file_timer.hpp"
#include "agent/process/health_check.hpp"
#include "agent/process/node_checks.hpp"
#include "common/text.hpp"
#include "agent/process/worker_group.hpp"
#include "agent/report/failure_report.hpp"
#include "common/log.hpp"
#include "rendezvous/factory.hpp"
#include "rendezvous/membership.hpp"
#include "rendezvous/round_agreement.hpp"

namespace ctrun::agent {
using SteadyClock = std::chrono::steady_clock;

class Agent::Impl {
 public:
  Impl(LaunchConfig config, EnvLookup env)
      : config_(std::move(config)),
        env_(std::move(env)),
        log_(ctrun::log::get("agent")),
        death_signals_(io_),
        forwarded_signals_(io_),
        drain_timer_(io_),
        membership_timer_(io_),
        leave_timer_(io_),
        rejoin_timer_(io_),
        waiting_timer_(io_),
        health_timer_(io_),
        claim_timer_(io_),
        cooldown_timer_(io_),
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
    make_group();
    try {
      file_timer_ = attach_file_timer(io_, env_, *group_, events_);
    } catch (const std::exception& e) {
      log_->error("{}", e.what());
      return 1;
    }
    wait_for_death_signal();
    wait_for_forwarded_signal();
    make_handler();
    io_.run();

    end_output_or_exit(console_, events_, lane_, death_signal_ != 0, exit_code_,
                       std::chrono::duration_cast<std::chrono::milliseconds>(kLeaveBudget));
    store_.reset();  // only now: every worker has exited (NCCL watchdogs poll the store until the end)
    return exit_code_;
  }

 private:
  // ---- the state machine (agent_policy.hpp decides; this file only acts) ----

  AgentFacts facts() const {
    const int most = config_.stop_without_progress;
    return AgentFacts{failure_seen_,
                      membership_changed_,
                      remaining_restarts_ > 0,
                      death_signal_ != 0,
                      most > 0 && failed_without_progress_ > most,
                      node_failing(),
                      max_node_failures() > 0 && claim_ && claim_->others_go_on};
  }

  void deliver(AgentEvent event) {
    const AgentState from = state_;
    const AgentStep step = decide(from, event, facts());
    if (step.action == AgentAction::kNone && step.next == from) return;
    log_->debug("{} + {} -> {} ({})", state_name(from), event_name(event), state_name(step.next),
                action_name(step.action));
    state_ = step.next;
    metrics_->on_step(from, event, step);
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
        // As torchrun: the count before this restart uses one ("2/2 attempts left" on the first failure).
        log_->warn("[{}] Worker group FAILED. {}/{} attempts left; will restart worker group", config_.role,
                   remaining_restarts_, config_.max_restarts);
        --remaining_restarts_;
        ++restart_count_;
        events_.emit(Event::kRestart, {{"restart_count", restart_count_},
                                       {"remaining_restarts", remaining_restarts_},
                                       {"attempts_without_progress", failed_without_progress_}});
        if (config_.stop_without_progress > 0 && failed_without_progress_ > 0)
          log_->warn(
              "[{}] the attempt made no progress ({}): {} failed attempt(s) in a row without progress; the "
              "job stops after {} (--stop-without-progress {})",
              config_.role, progress_baseline(), failed_without_progress_, config_.stop_without_progress + 1,
              config_.stop_without_progress);
        if (auto line = checkpoints_->resume_line(false)) log_->warn("[{}] {}", config_.role, *line);
        return join_round();
      case AgentAction::kSpawnWorkers:
        return spawn_group();
      case AgentAction::kStopWorkers:
        return group_->stop(SIGTERM, false);
      case AgentAction::kForwardSignal:
        return group_->stop(death_signal_, true);
      case AgentAction::kKillWorkers:
        return group_->kill();
      case AgentAction::kWaitExitBarrier:
        return wait_exit_barrier();
      case AgentAction::kCloseSucceeded:
        exit_code_ = 0;
        return close_run();
      case AgentAction::kCloseFailed:
        report_failure();
        return close_run();
      case AgentAction::kCloseNoProgress:
        report_failure();
        report_no_progress();
        return close_run();
      case AgentAction::kLeave:
        exit_code_ = signal_exit_code();
        return leave_run();
      case AgentAction::kStepOut:
        return step_out();
      case AgentAction::kExitNow:
        exit_code_ = signal_exit_code();
        log_->warn("leaving at once: the {} in progress is abandoned", blocking_call_name(lane_.last()));
        lane_.abandon(rdzv_, kLeaveBudget);  // the round being joined or held is left first
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
      events_.emit(Event::kAgentFailure, {{"error", why}});
      if (death_signal_ != 0) return;  // already stopping for a signal
      death_signal_ = SIGTERM;
      deliver(AgentEvent::kSignal);
      check_group_exited();
    });
  }

 private:
  // ---- the workers' store and the rendezvous handler ----

  // An embedded store whose loop failed answers nothing: fail the job loudly instead of leaving workers hanging.
  WorkerStore::FailureHandler store_failure_handler() {
    return [this](const std::string& what) { fail_agent("the workers' store failed (" + what + ")"); };
  }

  // The workers' store (a local bind: never blocks). Returns false with exit_code_ set when it cannot start.
  bool open_worker_store() {
    try {
      WorkerStoreSite site = agent::open_worker_store(config_, store_failure_handler());
      store_ = std::move(site.store);
      store_host_ = std::move(site.host);
      static_multi_node_ = site.static_multi_node;
      return true;
    } catch (const std::exception& e) {
      log_->error("{}", e.what());
      exit_code_ = 1;
      return false;
    }
  }

  // The rendezvous handler connects to (or hosts) the rendezvous store: on the helper thread, so a signal that
  // arrives while the endpoint does not answer is honoured at once.
  void make_handler() {
    std::shared_ptr<rdzv::Handler> given = std::move(rdzv_);
    lane_.run(BlockingCall::kConnect, [this, given = std::move(given), store_host = store_host_]() mutable {
      int code = 0;
      std::string error;
      PublishedAddress published{store_host, ""};
      try {
        if (!given)
          given =
              make_rendezvous_handler(config_, store_ ? std::optional<std::uint16_t>(store_->port()) : std::nullopt);
        // A host name that resolves to loopback here would send the other nodes' workers to their own loopback.
        if (store_) published = publishable_store_host(config_, store_host);
        if (store_) given->set_worker_store_address(published.host, store_->port());
      } catch (const std::invalid_argument& e) {
        code = 2;
        error = e.what();
      } catch (const std::exception& e) {
        code = 1;
        error = std::string("rendezvous failed: ") + e.what();
      }
      return [this, h = std::move(given), code, error, published]() mutable {
        if (!published.why.empty()) {
          log_->warn("{}", published.why);
          store_host_ = published.host;
        }
        if (code != 0) {
          log_->error("{}", error);
          events_.emit(Event::kRendezvousFailed, {{"error", error}});
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
    hang_->start_status_server(*layout_);
    log_->info("Starting ctrun agent: run_id={} nproc_per_node={} max_restarts={} nnodes={}:{} rdzv={} store={}",
               rdzv_->run_id(), config_.nproc_per_node, config_.max_restarts, config_.min_nodes, config_.max_nodes,
               rdzv_->backend(), store_ ? store_host_ + ":" + std::to_string(store_->port()) : "(node rank 0's)");
    if (!config_.no_python || config_.run_path) log_->info("workers' python: {}", describe(worker_python(env_)));
    events_.emit(Event::kAgentStart, {{"run_id", rdzv_->run_id()},
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
    claim_.reset();
    claim_pending_ = false;
    claim_timer_.cancel();
    membership_timer_.cancel();
    group_->forget_ended_groups();  // the previous attempt's: their ids may be recycled
    // A fresh keyspace: no key of a previous attempt survives into this one. Cleared before joining, never after:
    // once the round completes, other nodes' workers may write here at once. The previous round is over for every
    // node by now. Not with the static backend, whose one store also holds the rendezvous (as torchrun; torch
    // <= 2.0 workers scope their keys by attempt there).
    if (store_ && !static_multi_node_) store_->clear();
    if (store_lost_) watch_rejoin_after_store_loss();
    check_health_then_join(attempt_seq_, SteadyClock::now(), 0);
  }

  // Health before each round: --health-check's command (beside the loop), then the built-in checks
  // (agent/process/node_checks.hpp, on the helper lane with the rendezvous call itself, so they cost no extra hop).
  // The node joins only once both pass. A failure keeps it out (the others form the round without it, a spare in its
  // place), logged with what failed; it retries after 1, 2, 4, ... s (at most kHealthBackoffCap), and gives up when
  // it has been kept out for the rendezvous' join_timeout: exit kHealthCheckExitCode. A death signal ends it at once.
  void check_health_then_join(std::uint64_t attempt, SteadyClock::time_point since, int failures) {
    if (!health_check_) return request_round(since, failures);
    health_check_->run([this, attempt, since, failures](const HealthResult& r) {
      if (attempt != attempt_seq_ || state_ != AgentState::kRendezvous) return;
      if (!r.passed) return kept_out(attempt, since, failures, *config_.health_check, r);
      request_round(since, failures);
    });
  }

  // `what` failed (the command, or "built-in check NAME"): log it, then retry or give up.
  void kept_out(std::uint64_t attempt, SteadyClock::time_point since, int failures, const std::string& what,
                const HealthResult& r) {
    const auto out_for = SteadyClock::now() - since;
    const auto limit = join_timeout();
    const bool give_up = out_for >= limit;
    // The last try falls on the join timeout itself, not a backoff past it.
    const auto backoff = std::min<SteadyClock::duration>(
        {kHealthBackoffCap, std::chrono::seconds(1 << std::min(failures, 5)), limit - out_for});
    const double retry_s = std::chrono::duration<double>(backoff).count();
    log_->warn("health check failed ({}, {:.1f} s): this node stays out of the round; {}. `{}` printed:\n{}", r.why,
               r.seconds, give_up ? std::string("giving up") : fmt::format("retrying in {:.0f} s", retry_s), what,
               r.output.empty() ? std::string("(nothing)") : r.output);
    events_.emit(Event::kHealthCheckFailed, {{"command", what},
                                             {"result", r.why},
                                             {"output", r.output},
                                             {"seconds", r.seconds},
                                             {"failures", failures + 1},
                                             {"retry_in_s", give_up ? nlohmann::json() : nlohmann::json(retry_s)}});
    if (give_up) {
      const std::string error = fmt::format(
          "the health check ({}) kept this node out of the job for {:.0f} s (the rendezvous' join_timeout): last "
          "result {}. Fix the node (or the check) and start ctrun again; the other nodes go on without it",
          what, std::chrono::duration<double>(out_for).count(), r.why);
      log_->error("{}", error);
      events_.emit(Event::kRendezvousFailed, {{"error", error}});
      exit_code_ = kHealthCheckExitCode;
      return deliver(AgentEvent::kRendezvousFailed);
    }
    health_timer_.expires_after(backoff);
    health_timer_.async_wait([this, attempt, since, failures](const boost::system::error_code& ec) {
      if (ec || attempt != attempt_seq_ || state_ != AgentState::kRendezvous) return;
      check_health_then_join(attempt, since, failures + 1);
    });
  }

  // What the built-in checks look at, taken on the loop (the keeper's figures are the loop's).
  std::optional<NodeCheckContext> node_check_context() const {
    if (config_.no_builtin_health_checks) return std::nullopt;
    NodeCheckContext c;
    if (layout_ && layout_->enabled()) c.log_dir = layout_->run_dir();
    c.min_free_bytes = config_.health_min_free;
    if (config_.checkpoint_memory && *config_.checkpoint_memory > 0) {
      c.checkpoint_limit = *config_.checkpoint_memory;
      c.checkpoint_held = checkpoints_ ? checkpoints_->summary().bytes : 0;
    }
    c.cuda_visible_devices = env_("CUDA_VISIBLE_DEVICES");
    if (config_.nproc_per_node_spec == "gpu") {
      c.gpus_expected = config_.nproc_per_node;
    } else if (c.cuda_visible_devices && !text::trim(*c.cuda_visible_devices).empty()) {
      c.gpus_expected = static_cast<int>(text::split(*c.cuda_visible_devices, ',').size());
    }
    return c;
  }

  store::Duration join_timeout() const {
    store::Duration timeout = std::chrono::seconds(600);
    try {
      if (auto v = rendezvous_parameters(config_).get_as_seconds("join_timeout")) timeout = *v;
    } catch (const std::exception&) {
    }
    return timeout;
  }

  // The built-in health checks, then next_rendezvous() and the restart-count agreement, on the helper thread.
  void request_round(SteadyClock::time_point since, int failures) {
    report_waiting(attempt_seq_, SteadyClock::now(), std::chrono::seconds(1));  // not while a health check keeps it out
    lane_.run(BlockingCall::kRendezvous, [this, attempt = attempt_seq_, restart_count = restart_count_, since,
                                          failures, checks = node_check_context()]() -> HelperLane::Continuation {
      if (checks) {
        const auto started = SteadyClock::now();
        if (auto failed = run_node_checks(*checks)) {
          HealthResult r{false, failed->problem, "", std::chrono::duration<double>(SteadyClock::now() - started).count()};
          return [this, attempt, since, failures, name = failed->name, r]() {
            if (attempt != attempt_seq_ || state_ != AgentState::kRendezvous) return;
            waiting_timer_.cancel();
            kept_out(attempt, since, failures, "built-in check " + name, r);
          };
        }
      }
      rdzv::AgreedRound agreed;
      std::string error;
      std::string unreachable;
      try {
        agreed = rdzv::next_agreed_round(*rdzv_, restart_count, kAgreementTimeout, kMaxBrokenRounds);
        unreachable = check_master_reachable(agreed.round);
      } catch (const rdzv::RendezvousError& e) {
        error = e.what();
      } catch (const std::exception& e) {
        error = e.what();
      }
      return [this, attempt, agreed = std::move(agreed), error, unreachable]() mutable {
        if (!unreachable.empty()) log_->error("{}", unreachable);
        if (attempt != attempt_seq_) return;
        rejoin_timer_.cancel();
        waiting_timer_.cancel();
        store_lost_ = false;
        if (!error.empty()) {
          // Name who is missing: the rendezvous knows who joined, the last round's end says who left or died.
          if (!last_round_end_.empty()) error += " (the previous round ended: " + last_round_end_ + ")";
          if (step_outs_ > 0)
            error += fmt::format("; this node had stepped out of the job {} time(s) for failing", step_outs_);
          log_->error("rendezvous failed: {}", error);
          events_.emit(Event::kRendezvousFailed, {{"error", error}});
          exit_code_ = 1;
          return deliver(AgentEvent::kRendezvousFailed);
        }
        if (agreed.restart_count != restart_count_)
          log_->info("restart count of this round: {} (this node had {})", agreed.restart_count, restart_count_);
        restart_count_ = agreed.restart_count;
        round_ = std::move(agreed.round);
        deliver(AgentEvent::kRoundFormed);
      };
    });
  }

  // On the helper lane, once a round formed: a node other than group rank 0's dials the workers' store once (at most
  // 2 s) and says so before starting workers that would hang in init_process_group. Empty when reached.
  std::string check_master_reachable(const rdzv::RoundInfo& round) const {
    if (is_single_node(config_) || round.group_rank == 0 || round.master_port == 0 || static_multi_node_) return {};
    const std::string why = unreachable_reason(round.master_addr, round.master_port, std::chrono::seconds(2));
    return why.empty() ? why : unreachable_store_message(round.master_addr, round.master_port, why);
  }

  // Says what the agent waits for: once after a second without a round (a round that forms at once says nothing),
  // then every 30 s. The handler does not tell who joined; the round, when it forms, is one line too (spawn_group).
  void report_waiting(std::uint64_t attempt, SteadyClock::time_point since, SteadyClock::duration after) {
    if (is_single_node(config_)) return;
    waiting_timer_.expires_after(after);
    waiting_timer_.async_wait([this, attempt, since](const boost::system::error_code& ec) {
      if (ec || attempt != attempt_seq_ || state_ != AgentState::kRendezvous) return;
      const auto waited = std::chrono::duration_cast<std::chrono::seconds>(SteadyClock::now() - since).count();
      log_->warn("{}", waiting_for_nodes_message(config_, rdzv_->run_id(), std::string(rdzv_->backend()), waited));
      report_waiting(attempt, since, std::chrono::seconds(30));
    });
  }

  // After the rendezvous store was lost, the next round is joined on a store that may be gone or back empty; the
  // handler's calls may then wait on keys nobody will write. The agent does not wait past join_timeout (+ a grace
  // for the restart-count agreement): it fails with a message that says what happened.
  void watch_rejoin_after_store_loss() {
    rejoin_timer_.expires_after(join_timeout() + kRejoinGrace);
    rejoin_timer_.async_wait(
        [this, attempt = attempt_seq_, timeout = join_timeout()](const boost::system::error_code& ec) {
          if (ec || attempt != attempt_seq_ || state_ != AgentState::kRendezvous) return;
          std::string error = fmt::format(
              "no new round within join_timeout ({} s) after the rendezvous store was lost ({}). If the store was "
              "restarted, restart the job with a new --rdzv-id; otherwise check the --rdzv-endpoint host",
              std::chrono::duration_cast<std::chrono::seconds>(timeout).count(), last_round_end_);
          log_->error("rendezvous failed: {}", error);
          events_.emit(Event::kRendezvousFailed, {{"error", error}});
          exit_code_ = 1;
          deliver(AgentEvent::kRendezvousFailed);
        });
  }

  void spawn_group() {
    if (!is_single_node(config_)) {
      log_->warn(
          "round {} of rendezvous '{}' formed: {} node(s), world size {}; this node is group rank {} with "
          "ranks {}..{}",
          round_.round, rdzv_->run_id(), round_.group_world_size, round_.global_world_size, round_.group_rank,
          round_.base_global_rank, round_.base_global_rank + config_.nproc_per_node - 1);
    }
    events_.emit(Event::kRendezvous, {{"round", round_.round},
                                      {"group_rank", round_.group_rank},
                                      {"group_world_size", round_.group_world_size},
                                      {"world_size", round_.global_world_size}});
    // --preload: the warm process may still be importing; the loop goes on (signals honoured) until it is ready.
    awaiting_start_ = attempt_seq_;
    group_->when_ready([this, attempt = attempt_seq_] {
      if (attempt != attempt_seq_ || awaiting_start_ != attempt) return;
      // awaiting_start_ stays set until start_attempt: while the agents agree on checkpoints (the helper lane) no
      // worker of this attempt runs yet, and a late reap of the previous attempt's must not read as its success.
      if (state_ != AgentState::kRunning) return;
      if (!CheckpointKeeper::needs_gather(round_)) return start_attempt(nullptr);
      // Several nodes: the agents agree on the checkpoints every node holds (the round's store, blocking: the
      // helper lane) before any worker starts.
      lane_.run(BlockingCall::kCheckpointExchange,
                [this, attempt, restart_count = restart_count_, round = round_, store_host = store_host_,
                 static_multi_node = static_multi_node_]() {
                  const std::string host = node_listen_host(config_, store_host, static_multi_node);
                  auto gathered = checkpoints_->gather(restart_count, round, host);
                  return [this, attempt, gathered]() {
                    if (attempt != attempt_seq_ || state_ != AgentState::kRunning) return;
                    start_attempt(gathered);
                  };
                });
    });
  }

  void start_attempt(const std::shared_ptr<const CheckpointKeeper::Gathered>& gathered) {
    awaiting_start_ = 0;
    AttemptSpec spec{restart_count_, round_, rdzv_->run_id(), rdzv_->use_agent_store()};
    hang_->begin_attempt(attempt_seq_, restart_count_);
    checkpoint_nodes_.clear();  // the other nodes publish again for this attempt
    checkpoints_->begin_attempt(restart_count_, round_, checkpoint_store(), gathered);
    attempt_start_step_ = checkpoints_->resume_step();
    group_->start(spec, *layout_, [this] { return state_ == AgentState::kRunning; });
    hang_->attempt_started(round_);
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
      lane_.run(BlockingCall::kMembershipCheck, [this, attempt]() {
        rdzv::MembershipCheck check = rdzv::check_membership(*rdzv_);
        return [this, attempt, check]() {
          if (attempt != attempt_seq_ || state_ != AgentState::kRunning) return;
          if (!check.changed()) return watch_membership();
          log_->warn("Membership changed ({}); restarting worker group into a new round",
                     check.reason.empty() ? std::to_string(check.waiting) + " node(s) waiting" : check.reason);
          events_.emit(Event::kMembershipChange, {{"nodes_waiting", check.waiting}, {"reason", check.reason}});
          membership_changed_ = true;
          store_lost_ = check.store_lost;
          last_round_end_ = check.reason;
          if (rdzv::over_kind(check.reason) == rdzv::kOverSteppedOut) stepped_out_nodes_.push_back(check.reason);
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
    lane_.run(BlockingCall::kExitBarrier, [this, timeout]() {
      bool passed = false;
      std::string failure;
      try {
        passed = rdzv_->exit_barrier(timeout);
      } catch (const std::exception& e) {
        failure = e.what();
      }
      return [this, passed, failure]() {
        if (!failure.empty())
          log_->warn("exit barrier failed: {} (a node that finished first may have ended the store)", failure);
        else if (!passed)
          log_->warn("exit barrier timed out after {} s (--exit-barrier-timeout)", config_.exit_barrier_timeout);
        deliver(AgentEvent::kBarrierDone);
      };
    });
  }

  // shutdown(): closes the run id for every node (success, or failure with no restarts left, as torchrun).
  void close_run() {
    lane_.run(BlockingCall::kShutdown, [this]() {
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
    lane_.run(BlockingCall::kLeave, [this]() {
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

  // The worker group of every attempt; its exits come back here.
  void make_group() {
    WorkerGroup::Callbacks cb;
    cb.exited = [this](const Worker& w) {
      if (w.exitcode == 0 || w.stopped_by_us) return;
      // An error, as torch logs it: shown by default, before the restart or the summary.
      log_->error("failed (exitcode: {}) local_rank: {} (pid: {}) of binary: {}", w.exitcode, w.local_rank, w.pid,
                  config_.script);
      on_worker_failed();
    };
    cb.start_failed = [this](const Worker&) { on_worker_failed(); };
    cb.exits_done = [this] { check_group_exited(); };
    cb.stream_ended = [this] { on_tee_eof(); };
    // --preload: the warm process starts now, so that it imports while the first round forms.
    group_ = std::make_unique<WorkerGroup>(io_, config_, env_, console_, events_,
                                           preload::make_worker_spawner(io_, config_, env_), subreaper_, std::move(cb));
    // Several nodes: the workers reach the job's store through this node's relay (agent/launch/store_relay.hpp).
    if ((store_relay_ = NodeStoreRelay::open(config_)))
      group_->add_hooks(
          {.before_start = [r = store_relay_.get()](const Worker& w, std::map<std::string, std::string>& env) {
            r->before_start(w.local_rank, env);
          }});
    hang_ = std::make_unique<HangSupervisor>(io_, config_, *group_, events_, lane_,
                                             [this] { return state_ == AgentState::kRunning; });
    open_liveness();
    std::function<double()> loop_age;
    if (beat_) loop_age = [beat = beat_.get()] { return beat->age_s(); };
    metrics_ = std::make_unique<AgentMetrics>(config_, *group_, *hang_, events_, loop_age);  // --metrics-port
    // CTRUN_CHECKPOINT_ROOT: where the job's snapshot directory is made instead of /dev/shm (a tmpfs of its own, a
    // container's or a chroot's view of one; the torch 2.6 tests use a folder the chroot sees).
    const auto root = env_("CTRUN_CHECKPOINT_ROOT");
    checkpoints_ = std::make_unique<CheckpointKeeper>(io_, config_, *group_, events_,
                                                      root && !root->empty() ? *root : std::string("/dev/shm"));
    // What the node holds, for /metrics and `ctrun --status`: read on the loop at each tick of the hang watch.
    metrics_->watch_checkpoints([this] { return checkpoints_->summary(); });
    // Several nodes: each agent publishes its summary with the hang exchange, and group rank 0's live view adds
    // a line per other node (what it published last in this attempt, or that it has not yet). Only once the node
    // holds something: a job that saves no checkpoints pays no store op for it.
    hang_->share_node_record([this] {
                               const auto held = checkpoints_->summary();
                               return checkpoint::holds_something(held) ? checkpoint::node_record(held) : "";
                             },
                             [this](std::map<int, std::string> records) { checkpoint_nodes_ = std::move(records); });
    hang_->on_status([this](std::string& text, nlohmann::json& json) {
      const auto held = checkpoints_->summary();
      text += checkpoint::summary_text(held);
      auto j = checkpoint::summary_json(held);
      if (j.is_null()) return;
      if (round_.group_rank == 0 && round_.group_world_size > 1) {
        text += checkpoint::nodes_text(checkpoint_nodes_, 0, round_.group_world_size);
        j["nodes"] = checkpoint::nodes_json(checkpoint_nodes_, 0, round_.group_world_size);
      }
      json["checkpoints"] = std::move(j);
    });
    if (config_.health_check) {
      health_check_ = std::make_unique<HealthCheck>(io_, *config_.health_check, config_.health_check_timeout);
      group_->keep_children(
          [this] { return health_check_ && health_check_->pid() > 0 ? std::vector<pid_t>{health_check_->pid()}
                                                                   : std::vector<pid_t>{}; });
    }
  }

  // Liveness for schedulers (agent/metrics/liveness.hpp): the loop beats only when /healthz (--metrics-port) or
  // TORCHELASTIC_HEALTH_CHECK_PORT asks for it. A bad port is torch's: said, and nothing started.
  void open_liveness() {
    int port = -1;  // none asked for (a plain int: GCC 12 warns falsely of an optional's value here)
    try {
      if (auto p = health_check_port(env_)) port = *p;
    } catch (const std::invalid_argument& e) {
      log_->warn("{}", e.what());
    }
    if (port < 0 && !config_.metrics_port) return;
    beat_ = std::make_unique<LoopBeat>(io_);
    if (port < 0) return;
    try {
      health_ = std::make_unique<HealthCheckServer>(static_cast<std::uint16_t>(port), *beat_);
      log_->info("health check server ({}={}): http://0.0.0.0:{}/healthz", kHealthCheckPortVariable, port,
                 health_->port());
    } catch (const std::exception& e) {
      log_->warn("no health check server ({}={}): {}", kHealthCheckPortVariable, port, e.what());
    }
  }

  // Where the attempt's ranks list their held checkpoint steps: the workers' store. With several nodes it is group
  // rank 0's, which that node's agent writes every rank's list into (the others write nothing there).
  std::optional<CheckpointKeeper::StoreSite> checkpoint_store() {
    if (round_.group_world_size > 1) {
      if (round_.master_addr.empty() || round_.master_port == 0) return std::nullopt;
      CheckpointKeeper::StoreSite site{round_.master_addr + ":" + std::to_string(round_.master_port), nullptr};
      if (store_ && round_.group_rank == 0)
        site.set = [this](const std::string& key, const std::string& value) { store_->set(key, value); };
      return site;
    }
    if (!store_) return std::nullopt;
    return CheckpointKeeper::StoreSite{
        store_host_ + ":" + std::to_string(store_->port()),
        [this](const std::string& key, const std::string& value) { store_->set(key, value); }};
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
      group_->forward(sig);
      wait_for_forwarded_signal();
    });
  }

  // All-or-nothing, as torchrun: one failure stops the whole local group.
  void on_worker_failed() {
    if (state_ != AgentState::kRunning) return;
    failure_seen_ = true;
    claim_failure();
    deliver(AgentEvent::kWorkerFailed);
  }

  void check_group_exited() {
    if (state_ != AgentState::kRunning && state_ != AgentState::kStopping) return;
    if (awaiting_start_ == attempt_seq_ && state_ == AgentState::kRunning) return;  // not started yet
    if (group_->any_running()) return;
    if (claim_pending_ && death_signal_ == 0) return;  // the claim's answer (or its bound) calls again
    membership_timer_.cancel();
    hang_->end_attempt();   // the attempt's region goes: its workers are gone
    group_->end_attempt();  // the SIGKILL deadline off; what escaped the process groups killed
    count_progress();
    count_node_failure();
    deliver(AgentEvent::kGroupExited);
  }

  void on_death_signal(int sig) {
    if (death_signal_ != 0) {
      // A second signal: the user insists; do not wait out the shutdown timeout.
      log_->warn("Received {} again, killing workers now", signal_name(sig));
      events_.emit(Event::kSignal, {{"signal", signal_name(sig)}, {"again", true}});
      return deliver(AgentEvent::kSignalAgain);
    }
    death_signal_ = sig;
    log_->warn("Received {} death signal, shutting down workers (agent state: {})", signal_name(sig),
               state_name(state_));
    events_.emit(Event::kSignal, {{"signal", signal_name(sig)}, {"state", state_name(state_)}});
    deliver(AgentEvent::kSignal);
    check_group_exited();
  }

  // Progress is a newer checkpoint step committed by every local rank than the one the attempt started from (what
  // the keeper lists for the next attempt). An attempt that made some resets the count; a failed one that made
  // none adds one restart without progress (a new round of a membership change is not a restart: it counts
  // nothing unless it made progress).
  // A job without ctrun's checkpoints (none committed so far) makes progress in an attempt whose ranks got past the
  // start-up: kCollectivesForProgress collectives of one group on one local rank (ctrun's progress records, backend
  // "ctrun"; the same warm-up --hang-timeout auto waits for: the first ones are init's and the parameter
  // broadcasts). A job with neither shows no progress.
  void count_progress() {
    const auto now = checkpoints_->resume_step();
    const bool progressed = now || attempt_start_step_
                                ? now && (!attempt_start_step_ || *now > *attempt_start_step_)
                                : hang_->collectives_completed() >= kCollectivesForProgress;
    if (progressed)
      failed_without_progress_ = 0;
    else if (failure_seen_)
      ++failed_without_progress_;
  }

  std::string progress_baseline() const {
    return attempt_start_step_
               ? fmt::format("no checkpoint step newer than {}", *attempt_start_step_)
               : fmt::format("no checkpoint step committed by every local rank, {} collective(s) completed where "
                             "{} would count",
                             hang_->collectives_completed(), kCollectivesForProgress);
  }

  // ---- failing nodes stepped out ----

  int max_node_failures() const {
    if (is_single_node(config_) || static_multi_node_) return 0;
    return config_.max_node_failures.value_or(config_.max_restarts);
  }

  // A worker of this attempt failed: whose failure was first in the round? The others' workers fail after it (a
  // closed connection, a collective that timed out), and only the node it started on is counted as failing. One
  // store CAS on the helper lane; the group's end waits for its answer, at most kClaimBudget.
  void claim_failure() {
    if (claim_ || claim_pending_) return;
    if (max_node_failures() <= 0 || round_.group_world_size <= 1) {
      claim_ = rdzv::FailureClaim{};  // alone in its round: first, and nobody to go on without it
      return;
    }
    claim_pending_ = true;
    lane_.run(BlockingCall::kFailureClaim, [this, attempt = attempt_seq_]() {
      rdzv::FailureClaim claim;
      std::string error;
      try {
        claim = rdzv_->claim_failure();
      } catch (const std::exception& e) {
        error = e.what();
      }
      return [this, attempt, claim, error]() {
        if (attempt != attempt_seq_ || !claim_pending_) return;
        claim_timer_.cancel();
        settle_claim(error.empty() ? claim : rdzv::FailureClaim{false, false, ""}, error);
      };
    });
    claim_timer_.expires_after(kClaimBudget);
    claim_timer_.async_wait([this, attempt = attempt_seq_](const boost::system::error_code& ec) {
      if (ec || attempt != attempt_seq_ || !claim_pending_) return;
      settle_claim(rdzv::FailureClaim{false, false, ""}, "no answer from the rendezvous store within 2 s");
    });
  }

  // Unknown (an error, no answer) counts as not first: a node is stepped out only on what the store said.
  void settle_claim(const rdzv::FailureClaim& claim, const std::string& error) {
    claim_pending_ = false;
    claim_ = claim;
    if (!error.empty())
      log_->warn("could not tell which node failed first in round {} ({}); this failure does not count against "
                 "this node",
                 round_.round, error);
    else if (!claim.first)
      log_->info("this node's workers failed after {}'s (the round's first failure): not counted against this node",
                 claim.first_node);
    check_group_exited();
  }

  void count_node_failure() {
    if (!failure_seen_ || !claim_ || !claim_->first || max_node_failures() <= 0) return;
    const auto now = SteadyClock::now();
    first_failures_.push_back(now);
    while (!first_failures_.empty() && now - first_failures_.front() > failure_window()) first_failures_.pop_front();
  }

  // Failed first --max-node-failures times within the window; or, back from a cooldown less than a window ago,
  // once (Horovod's blacklist: a host that fails again after its cooldown goes out again, for twice as long).
  bool node_failing() const {
    const int most = max_node_failures();
    if (most <= 0 || !failure_seen_ || !claim_ || !claim_->first) return false;
    if (step_outs_ > 0 && SteadyClock::now() < probation_until_) return true;
    return static_cast<int>(first_failures_.size()) >= most;
  }

  SteadyClock::duration failure_window() const {
    return std::chrono::duration_cast<SteadyClock::duration>(
        std::chrono::duration<double>(config_.node_failure_window_s));
  }

  // Leaves the job for a cooldown (MIN, doubled each time, at most MAX): the others go on without this node at
  // once (a step-out ends their round as a leave does, costing them no restart), and it joins again as a spare.
  void step_out() {
    ++step_outs_;
    const double cooldown = std::min(config_.node_cooldown_max_s,
                                     config_.node_cooldown_min_s * std::pow(2.0, std::min(step_outs_ - 1, 30)));
    const auto failures = first_failures_.size();
    const std::string why =
        step_outs_ > 1 && failures < static_cast<std::size_t>(max_node_failures())
            ? fmt::format("node {} stepped out again: its workers failed first in round {} within {:.0f} s of its "
                          "return (step-out {}); it stays out for {:.0f} s",
                          node_address(config_), round_.round, config_.node_failure_window_s, step_outs_, cooldown)
            : fmt::format("node {} stepped out: its workers failed first in their round {} time(s) within {:.0f} s "
                          "(--max-node-failures {}); it stays out for {:.0f} s, then joins again as a spare",
                          node_address(config_), failures, config_.node_failure_window_s, max_node_failures(),
                          cooldown);
    log_->error("[{}] {}; the other nodes go on without it", config_.role, why);
    events_.emit(Event::kNodeSteppedOut, {{"failures", failures},
                                          {"window_s", config_.node_failure_window_s},
                                          {"cooldown_s", cooldown},
                                          {"step_outs", step_outs_}});
    first_failures_.clear();
    const auto until = SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(
                                                std::chrono::duration<double>(cooldown));
    lane_.run(BlockingCall::kStepOut, [this, why, until]() {
      try {
        rdzv_->step_out(why);
      } catch (const std::exception& e) {
        log_->warn("could not step out of the rendezvous: {}", e.what());
      }
      return [this, until]() { cool_down(until); };
    });
  }

  // Waits out the cooldown in slices, asking between them whether the job ended meanwhile (then there is nothing
  // to come back to: the rejoin says so at once instead of after the whole cooldown).
  void cool_down(SteadyClock::time_point until) {
    if (state_ != AgentState::kSteppedOut) return;
    const auto now = SteadyClock::now();
    if (now >= until) return come_back();
    cooldown_timer_.expires_after(std::min<SteadyClock::duration>(until - now, kClosedCheckEvery));
    cooldown_timer_.async_wait([this, until](const boost::system::error_code& ec) {
      if (ec || state_ != AgentState::kSteppedOut) return;
      if (SteadyClock::now() >= until) return come_back();
      lane_.run(BlockingCall::kClosedCheck, [this, until]() {
        bool closed = false;
        try {
          closed = rdzv_->is_closed();
        } catch (const std::exception&) {
          // the store is away: the rejoin after the cooldown will say what became of it
        }
        return [this, until, closed]() {
          if (state_ != AgentState::kSteppedOut) return;
          if (closed) return come_back();
          cool_down(until);
        };
      });
    });
  }

  void come_back() {
    probation_until_ = SteadyClock::now() + failure_window();
    log_->warn("[{}] the cooldown is over: this node joins again (as a spare when the round is full); one more "
               "failure of its own within {:.0f} s steps it out again",
               config_.role, config_.node_failure_window_s);
    events_.emit(Event::kNodeReturned, {{"step_outs", step_outs_}});
    deliver(AgentEvent::kCooldownOver);
  }

  // The job stops although it could restart: say why (after the summary, as its last words) and exit with the code
  // a requeue script tests.
  void report_no_progress() {
    exit_code_ = kNoProgressExitCode;
    const int restarts = failed_without_progress_ - 1;  // the attempts after the first that made no progress
    log_->error(
        "[{}] stopping instead of restarting: {} failed attempt(s) in a row ({} restart(s)) made no progress ({}; "
        "--stop-without-progress {}); exit code {}",
        config_.role, failed_without_progress_, restarts, progress_baseline(), config_.stop_without_progress,
        kNoProgressExitCode);
    const auto step = checkpoints_->resume_step();
    events_.emit(Event::kNoProgress, {{"restarts_without_progress", restarts},
                                      {"resume_step", step ? nlohmann::json(*step) : nlohmann::json()},
                                      {"exit_code", kNoProgressExitCode}});
  }

  // No restarts left: torchrun's summary, ctrun's own error file, and the exit code of the root cause.
  void report_failure() {
    auto code = report_worker_failures(group_->workers(), config_, env_, events_, hang_->stragglers(),
                                       checkpoints_->resume_line(true), stepped_out_nodes_);
    if (code) exit_code_ = *code;
  }

  void finish() {
    finished_ = true;
    group_->close();
    membership_timer_.cancel();
    leave_timer_.cancel();
    rejoin_timer_.cancel();
    waiting_timer_.cancel();
    health_timer_.cancel();
    claim_timer_.cancel();
    cooldown_timer_.cancel();
    if (health_check_) health_check_->cancel();
    hang_->stop();
    death_signals_.cancel();
    forwarded_signals_.cancel();
    drain_or_stop();
  }

  // Tee'd output still in flight is written before ctrun exits, but a grandchild that keeps a pipe open
  // cannot hold ctrun forever.
  void drain_or_stop() {
    if (group_->streams_done()) return io_.stop();
    drain_timer_.expires_after(std::chrono::seconds(2));
    drain_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) io_.stop();
    });
  }

  void on_tee_eof() {
    if (finished_ && group_->streams_done()) {
      drain_timer_.cancel();
      io_.stop();
    }
  }

  LaunchConfig config_;
  EnvLookup env_;
  std::shared_ptr<spdlog::logger> log_;
  boost::asio::io_context io_;
  boost::asio::signal_set death_signals_;
  boost::asio::signal_set forwarded_signals_;
  boost::asio::steady_timer drain_timer_;
  boost::asio::steady_timer membership_timer_;
  boost::asio::steady_timer leave_timer_;
  boost::asio::steady_timer rejoin_timer_;
  boost::asio::steady_timer waiting_timer_;
  boost::asio::steady_timer health_timer_;
  boost::asio::steady_timer claim_timer_;
  boost::asio::steady_timer cooldown_timer_;
  EventLog events_;
  ConsoleSink console_;  // before group_: its tee streams write into it

  static constexpr store::Duration kAgreementTimeout = std::chrono::seconds(60);
  static constexpr int kMaxBrokenRounds = 100;
  static constexpr std::chrono::milliseconds kLeaveBudget{500};
  bool subreaper_ = false;  // orphans of the job are our children: kill and reap them with the group
  static constexpr std::chrono::seconds kRejoinGrace{10};
  static constexpr std::chrono::seconds kHealthBackoffCap{30};
  static constexpr std::chrono::seconds kClaimBudget{2};
  static constexpr std::uint64_t kCollectivesForProgress = 10;
  static constexpr std::chrono::seconds kClosedCheckEvery{5};

  std::unique_ptr<WorkerStore> store_;  // null on static nodes other than rank 0
  std::string store_host_;
  bool static_multi_node_ = false;
  std::string last_round_end_;           // why the previous round ended (membership change), for error messages
  std::shared_ptr<rdzv::Handler> rdzv_;  // called on the helper thread only (run_id/backend are constant)
  std::unique_ptr<LogLayout> layout_;
  rdzv::RoundInfo round_;
  std::unique_ptr<WorkerGroup> group_;           // made in run(), once the store is open
  std::unique_ptr<NodeStoreRelay> store_relay_;  // made with group_ when the job has several nodes
  std::unique_ptr<FileTimerServer> file_timer_;  // torchrun's worker watchdog, when asked for (uses group_)
  std::unique_ptr<HangSupervisor> hang_;         // made with group_
  std::unique_ptr<LoopBeat> beat_;                // liveness: only with /healthz or a health check port
  std::unique_ptr<HealthCheckServer> health_;
  std::unique_ptr<AgentMetrics> metrics_;        // made with group_ (watches it and hang_): before any deliver()

  std::unique_ptr<CheckpointKeeper> checkpoints_;  // made with group_; the job's snapshots go with it
  std::map<int, std::string> checkpoint_nodes_;   // group rank 0: the other nodes' checkpoint records (live view)
  std::unique_ptr<HealthCheck> health_check_;      // --health-check; made with group_, which must not reap it

  int restart_count_ = 0;
  int remaining_restarts_ = 0;
  // Failing nodes stepped out: this attempt's claim of its round's first failure, the times this node failed first
  // (within --node-failure-window), how often it stepped out, and until when a return is on probation.
  std::optional<rdzv::FailureClaim> claim_;
  bool claim_pending_ = false;
  std::deque<SteadyClock::time_point> first_failures_;
  int step_outs_ = 0;
  SteadyClock::time_point probation_until_{};
  std::vector<std::string> stepped_out_nodes_;  // round ends that were another node's step-out (failure summary)
  // Failed attempts in a row without progress (the first attempt included: N restarts without progress make N+1).
  int failed_without_progress_ = 0;
  std::optional<std::int64_t> attempt_start_step_;  // the newest common checkpoint step when the attempt started
  std::uint64_t attempt_seq_ = 0;                   // every start_attempt, restarts and new rounds alike
  std::uint64_t awaiting_start_ = 0;  // the attempt whose round formed and whose workers are not started yet
  AgentState state_ = AgentState::kInitialising;
  bool membership_changed_ = false;
  bool failure_seen_ = false;
  bool store_lost_ = false;  // the last round ended because the rendezvous store failed
  bool finished_ = false;
  int death_signal_ = 0;
  bool agent_failed_ = false;  // fail_agent() was called
  int exit_code_ = 1;

  // The helper thread for blocking calls, and how many of its tasks are queued or running. Last member: destroyed
  // (joined) first, while everything its tasks use still exists.
  HelperLane lane_{io_};
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
