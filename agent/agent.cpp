#include "agent/agent.hpp"

#include <chrono>
#include <csignal>
#include <memory>
#include <optional>

#include <spdlog/spdlog.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>
#include "agent/base/event_log.hpp"
#include "agent/base/helper_lane.hpp"
#include "agent/base/signal_names.hpp"
#include "agent/checkpoint/keeper.hpp"
#include "agent/checkpoint/status_section.hpp"
#include "agent/exit_sequence.hpp"
#include "agent/hang/supervisor.hpp"
#include "agent/launch/worker_store.hpp"
#include "agent/logs/console_sink.hpp"
#include "agent/logs/log_layout.hpp"
#include "agent/metrics/agent_metrics.hpp"
#include "agent/metrics/liveness.hpp"
#include "agent/policy/agent_policy.hpp"
#include "agent/policy/progress_policy.hpp"
#include "agent/preload/preload_spawner.hpp"
#include "agent/process/escapees.hpp"
#include "agent/process/file_timer.hpp"
#include "agent/process/signal_watch.hpp"
#include "agent/process/worker_group.hpp"
#include "agent/report/agent_words.hpp"
#include "agent/report/failure_report.hpp"
#include "agent/round/rounds.hpp"
#include "agent/status/job_status.hpp"
#include "common/log.hpp"
#include "rendezvous/membership.hpp"

namespace ctrun::agent {

class Agent::Impl {
 public:
  Impl(LaunchConfig config, EnvLookup env)
      : config_(std::move(config)),
        env_(std::move(env)),
        log_(ctrun::log::get("agent")),
        events_(config_.logs.event_log) {}

  ~Impl() { lane_.join(); }  // reached only with the helper idle (run() does not return while a call is in flight)

  void use_handler(std::unique_ptr<rdzv::Handler> handler) { rdzv_ = std::move(handler); }

  int run() {
    std::signal(SIGPIPE, SIG_IGN);  // ctrun writes to pipes and consoles that may close under it
    signals_ =
        std::make_unique<SignalWatch>(io_, config_.shutdown.signal_numbers, config_.shutdown.forwarded_signal_numbers);
    // Slurm requeues start from SLURM_RESTART_COUNT.
    restarts_ = {config_.restarts.initial_restart_count, config_.restarts.max_restarts};
    if (!open_worker_store()) return outcome_.exit_code;
    if (!make_rooms()) return 1;
    signals_->start([this](int sig) { on_death_signal(sig); }, [this](int sig) { group_->forward(sig); });
    connect();
    io_.run();
    end_output_or_exit(console_, events_, lane_, outcome_.death_signal != 0, outcome_.exit_code,
                       std::chrono::duration_cast<std::chrono::milliseconds>(kLeaveBudget));
    site_.store.reset();  // only now: every worker has exited (NCCL watchdogs poll the store until the end)
    return outcome_.exit_code;
  }

  // A failure of the agent itself (e.g. the workers' store's server died), from any thread: handled as a death
  // signal in whatever state the agent is, exit 1, loudly.
  void fail_agent(std::string why) {
    boost::asio::post(io_, [this, why = std::move(why)]() {
      if (state_ == AgentState::kDone || outcome_.agent_failed) return;
      outcome_.agent_failed = true;
      log_->error("the agent itself failed: {}; stopping the job", why);
      events_.emit(Event::kAgentFailure, {{"error", why}});
      if (outcome_.death_signal != 0) return;  // already stopping for a signal
      outcome_.death_signal = SIGTERM;
      deliver(AgentEvent::kSignal);
      check_group_exited();
    });
  }

 private:
  // ---- the state machine (agent_policy.hpp decides; this file only acts) ----

  AgentFacts facts() const {
    return AgentFacts{attempt_.failure_seen,
                      attempt_.membership_changed,
                      restarts_.remaining > 0,
                      outcome_.death_signal != 0,
                      progress_.stalled(config_.restarts.stop_without_progress),
                      rounds_->step_out.failing(attempt_.failure_seen),
                      rounds_->step_out.others_go_on()};
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
        count_restart();
        return join_round();
      case AgentAction::kSpawnWorkers:
        return spawn_group();
      case AgentAction::kStopWorkers:
        return group_->stop(SIGTERM, false);
      case AgentAction::kForwardSignal:
        return group_->stop(outcome_.death_signal, true);
      case AgentAction::kKillWorkers:
        return group_->kill();
      case AgentAction::kWaitExitBarrier:
        return rounds_->end.exit_barrier(rdzv_, [this] { deliver(AgentEvent::kBarrierDone); });
      case AgentAction::kCloseSucceeded:
        outcome_.exit_code = 0;
        return rounds_->end.close(rdzv_, [this] { deliver(AgentEvent::kClosed); });
      case AgentAction::kCloseFailed:
      case AgentAction::kCloseNoProgress:
        report_failure(action == AgentAction::kCloseNoProgress);
        return rounds_->end.close(rdzv_, [this] { deliver(AgentEvent::kClosed); });
      case AgentAction::kLeave:
        outcome_.exit_code = signal_exit_code();
        return rounds_->end.leave(rdzv_, kLeaveBudget, [this] { deliver(AgentEvent::kClosed); });
      case AgentAction::kStepOut:
        return rounds_->step_out.step_out(
            rdzv_, attempt_.round.round, [this] { return state_ == AgentState::kSteppedOut; },
            [this] { deliver(AgentEvent::kCooldownOver); });
      case AgentAction::kExitNow:
        outcome_.exit_code = signal_exit_code();
        log_->warn("leaving at once: the {} in progress is abandoned", blocking_call_name(lane_.last()));
        lane_.abandon(rdzv_, kLeaveBudget);  // the round being joined or held is left first
        return finish();
      case AgentAction::kExit:
        return finish();
    }
  }

  int signal_exit_code() const {
    return config_.propagate_exit_code && !outcome_.agent_failed ? 128 + outcome_.death_signal : 1;
  }

  // Whether an asynchronous answer is still for the attempt it was started for (and, given a state, whether the agent
  // is still in it): every callback of the rooms asks this before it acts.
  bool current(std::uint64_t attempt) const { return attempt == attempt_.seq; }
  bool current(std::uint64_t attempt, AgentState state) const { return current(attempt) && state_ == state; }

  // The rendezvous failed for good: said already; the policy ends the run with `code`.
  void round_failed(int code) {
    outcome_.exit_code = code;
    deliver(AgentEvent::kRendezvousFailed);
  }

  // ---- the workers' store and the rendezvous handler ----

  // The workers' store (a local bind: never blocks). An embedded store whose loop failed answers nothing: the job
  // fails loudly instead of leaving workers hanging.
  bool open_worker_store() {
    try {
      site_ = agent::open_worker_store(
          config_, [this](const std::string& what) { fail_agent("the workers' store failed (" + what + ")"); });
      return true;
    } catch (const std::exception& e) {
      log_->error("{}", e.what());
      outcome_.exit_code = 1;
      return false;
    }
  }

  // On the helper lane, so that a signal that arrives while the endpoint does not answer is honoured at once.
  void connect() {
    const auto port = site_.store ? std::optional<std::uint16_t>(site_.store->port()) : std::nullopt;
    rounds_->end.connect(std::move(rdzv_), port, site_.host, events_, [this](Connected c) {
      site_.host = c.published.host;
      if (c.code != 0) return round_failed(c.code);
      rdzv_ = std::move(c.handler);
      on_handler_ready();
    });
  }

  void on_handler_ready() {
    layout_ = std::make_unique<LogLayout>(config_.logs.dir, rdzv_->run_id());
    if (layout_->enabled()) log_->info("log directory set to: {}", layout_->run_dir());
    status_->start(*layout_);
    say_start(config_, env_, events_, *rdzv_, site_.host, site_.store ? site_.store->port() : 0);
    deliver(AgentEvent::kHandlerReady);
  }

  // ---- rounds ----
  void count_restart() {
    say_restart(config_, events_, restarts_.remaining--, ++restarts_.count, progress_, hang_->collectives_completed(),
                checkpoints_->resume_line(false));
  }

  void join_round() {
    attempt_ = AttemptFacts{attempt_.seq + 1, 0, false, false, attempt_.round};
    rounds_->step_out.new_attempt();
    rounds_->membership.cancel();
    group_->forget_ended_groups();  // the previous attempt's: their ids may be recycled
    // A fresh keyspace: no key of a previous attempt survives into this one. Cleared before joining, never after:
    // once the round completes, other nodes' workers may write here at once. The previous round is over for every
    // node by now. Not with the static backend, whose one store also holds the rendezvous (as torchrun; torch
    // <= 2.0 workers scope their keys by attempt there).
    if (site_.store && !site_.static_multi_node) site_.store->clear();
    rounds_->joiner.join(rdzv_, RoundJoiner::Join{attempt_.seq, restarts_.count, ends_.store_lost, ends_.last,
                                                  rounds_->step_out.step_outs(), site_.static_multi_node,
                                                  layout_ && layout_->enabled() ? layout_->run_dir() : "",
                                                  [this] { return checkpoints_->summary().bytes; }});
  }

  void round_formed(rdzv::AgreedRound agreed) {
    ends_.store_lost = false;
    if (agreed.restart_count != restarts_.count)
      log_->info("restart count of this round: {} (this node had {})", agreed.restart_count, restarts_.count);
    restarts_.count = agreed.restart_count;
    attempt_.round = std::move(agreed.round);
    deliver(AgentEvent::kRoundFormed);
  }

  void spawn_group() {
    say_round(config_, events_, rdzv_->run_id(), attempt_.round);
    // --preload: the warm process may still be importing; the loop goes on (signals honoured) until it is ready.
    // awaiting_start stays set until start_attempt: while the agents agree on checkpoints (the helper lane) no
    // worker of this attempt runs yet, and a late reap of the previous attempt's must not read as its success.
    attempt_.awaiting_start = attempt_.seq;
    group_->when_ready([this, attempt = attempt_.seq] {
      if (!current(attempt, AgentState::kRunning) || attempt_.awaiting_start != attempt) return;
      checkpoints_->prepare_attempt(
          lane_, {restarts_.count, attempt_.round, site_.host, site_.static_multi_node, site_.store.get()},
          [this, attempt] { return current(attempt, AgentState::kRunning); }, [this] { start_attempt(); });
    });
  }

  void start_attempt() {
    attempt_.awaiting_start = 0;
    const rdzv::RoundInfo& round = attempt_.round;
    hang_->begin_attempt(attempt_.seq, restarts_.count);
    status_->begin_attempt(attempt_.seq, restarts_.count, round);
    progress_.attempt_started(checkpoints_->resume_step());
    group_->start(AttemptSpec{restarts_.count, round, rdzv_->run_id(), rdzv_->use_agent_store()}, *layout_,
                  [this] { return state_ == AgentState::kRunning; });
    hang_->attempt_started(round);
    if (round.group_world_size > 1 || config_.rdzv.max_nodes > 1)
      rounds_->membership.start(
          attempt_.seq, rdzv_, [this](std::uint64_t a) { return current(a, AgentState::kRunning); },
          [this](const rdzv::MembershipCheck& check) { membership_changed(check); });
    check_group_exited();
  }

  void membership_changed(const rdzv::MembershipCheck& check) {
    log_->warn("Membership changed ({}); restarting worker group into a new round",
               check.reason.empty() ? std::to_string(check.waiting) + " node(s) waiting" : check.reason);
    events_.emit(Event::kMembershipChange, {{"nodes_waiting", check.waiting}, {"reason", check.reason}});
    attempt_.membership_changed = true;
    ends_.store_lost = check.store_lost;
    ends_.last = check.reason;
    if (rdzv::over_kind(check.reason) == rdzv::kOverSteppedOut) ends_.stepped_out_nodes.push_back(check.reason);
    deliver(AgentEvent::kMembershipChanged);
  }

  // ---- the workers ----
  // Every attempt's rooms: the worker group (its exits come back here) and its watchers; false (said) if one fails.
  bool make_rooms() {
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
    // --preload: the warm process starts now, so that it imports while the first round forms.
    group_ =
        std::make_unique<WorkerGroup>(io_, config_, env_, console_, events_,
                                      preload::make_worker_spawner(io_, config_, env_), is_subreaper(), std::move(cb));
    if ((site_.relay = NodeStoreRelay::open(config_)))  // several nodes: the workers reach the store through it
      group_->add_hooks({.before_start = [r = site_.relay.get()](const Worker& w, auto& env) {
        r->before_start(w.local_rank, env);
      }});
    hang_ = std::make_unique<HangSupervisor>(io_, config_, *group_, events_, lane_,
                                             [this] { return state_ == AgentState::kRunning; });
    liveness_ = open_liveness(io_, env_, config_.metrics_port.has_value());
    metrics_ = std::make_unique<AgentMetrics>(config_, *group_, *hang_, events_, liveness_.loop_age());
    status_ = std::make_unique<JobStatus>(io_, *hang_, lane_, events_);
    // CTRUN_CHECKPOINT_ROOT: where the job's snapshot directory is made instead of /dev/shm (a tmpfs of its own, a
    // container's or a chroot's view of one; the torch 2.6 tests use a folder the chroot sees).
    const auto root = env_("CTRUN_CHECKPOINT_ROOT");
    checkpoints_ = std::make_unique<CheckpointKeeper>(io_, config_, env_, *group_, events_,
                                                      root && !root->empty() ? *root : std::string("/dev/shm"));
    metrics_->watch_checkpoints([this] { return checkpoints_->summary(); });
    show_checkpoints(*status_, *checkpoints_, [this]() -> const rdzv::RoundInfo& { return attempt_.round; });
    rounds_ = std::make_unique<Rounds>(
        io_, config_, env_, lane_, events_, site_.static_multi_node,
        RoundJoiner::Callbacks{[this](std::uint64_t a) { return current(a, AgentState::kRendezvous); },
                               [this](std::uint64_t a) { return current(a); },
                               [this](rdzv::AgreedRound r) { round_formed(std::move(r)); },
                               [this](const std::string&, int code) { round_failed(code); }});
    if (rounds_->health.has_command())
      group_->keep_children([this] {
        const pid_t pid = rounds_->health.command_pid();
        return pid > 0 ? std::vector<pid_t>{pid} : std::vector<pid_t>{};
      });
    try {
      file_timer_ = attach_file_timer(io_, env_, *group_, events_);
    } catch (const std::exception& e) {
      log_->error("{}", e.what());
      return false;
    }
    return true;
  }

  // All-or-nothing, as torchrun: one failure stops the whole local group.
  void on_worker_failed() {
    if (state_ != AgentState::kRunning) return;
    attempt_.failure_seen = true;
    rounds_->step_out.claim(
        attempt_.seq, rdzv_, attempt_.round, [this](std::uint64_t a) { return current(a); },
        [this] { check_group_exited(); });
    deliver(AgentEvent::kWorkerFailed);
  }

  void check_group_exited() {
    if (state_ != AgentState::kRunning && state_ != AgentState::kStopping) return;
    if (attempt_.awaiting_start == attempt_.seq && state_ == AgentState::kRunning) return;  // not started yet
    if (group_->any_running()) return;
    if (rounds_->step_out.claim_pending() && outcome_.death_signal == 0) return;  // the claim's answer calls again
    rounds_->membership.cancel();
    hang_->end_attempt();  // the attempt's region goes: its workers are gone
    status_->end_attempt();
    group_->end_attempt();  // the SIGKILL deadline off; what escaped the process groups killed
    progress_.attempt_ended(checkpoints_->resume_step(), hang_->collectives_completed(), attempt_.failure_seen);
    rounds_->step_out.attempt_ended(attempt_.failure_seen);
    deliver(AgentEvent::kGroupExited);
  }

  void on_death_signal(int sig) {
    if (outcome_.death_signal != 0) {
      // A second signal: the user insists; do not wait out the shutdown timeout.
      log_->warn("Received {} again, killing workers now", signal_name(sig));
      events_.emit(Event::kSignal, {{"signal", signal_name(sig)}, {"again", true}});
      return deliver(AgentEvent::kSignalAgain);
    }
    outcome_.death_signal = sig;
    log_->warn("Received {} death signal, shutting down workers (agent state: {})", signal_name(sig),
               state_name(state_));
    events_.emit(Event::kSignal, {{"signal", signal_name(sig)}, {"state", state_name(state_)}});
    deliver(AgentEvent::kSignal);
    check_group_exited();
  }

  // ---- the end of the run ----

  // No restarts left (or no progress): torchrun's summary, ctrun's own error file, and the root cause's exit code; a
  // job stopped for making no progress says why (its last words) and exits with the code a requeue script tests.
  void report_failure(bool no_progress) {
    auto code = report_worker_failures(group_->workers(), config_, env_, events_, hang_->stragglers(),
                                       checkpoints_->resume_line(true), ends_.stepped_out_nodes);
    if (code) outcome_.exit_code = *code;
    if (no_progress)
      outcome_.exit_code =
          say_no_progress(config_, events_, progress_, hang_->collectives_completed(), checkpoints_->resume_step());
  }

  // Tee'd output still in flight is written before ctrun exits (bounded: a grandchild may hold a pipe open).
  void finish() {
    rounds_->cancel();
    hang_->stop();
    signals_->cancel();
    group_->close(std::chrono::seconds(2), [this] { io_.stop(); });
  }

  // What the loop knows of the attempt in progress (a restart or a new round is a new attempt).
  struct AttemptFacts {
    std::uint64_t seq = 0;             // every join, restarts and new rounds alike
    std::uint64_t awaiting_start = 0;  // the attempt whose round formed and whose workers are not started yet
    bool failure_seen = false;         // a worker of it failed (not one stopped by ctrun)
    bool membership_changed = false;   // its round ended under it
    rdzv::RoundInfo round;             // its round, once formed
  };
  // What the ends of the previous rounds said, for the next join and the failure summary.
  struct RoundEnds {
    std::string last;                            // why the previous round ended (membership change)
    bool store_lost = false;                     // ... because the rendezvous store failed
    std::vector<std::string> stepped_out_nodes;  // round ends that were another node's step-out
  };
  struct Restarts {
    int count = 0;      // TORCHELASTIC_RESTART_COUNT of the next attempt
    int remaining = 0;  // of --max-restarts
  };
  struct Outcome {
    int exit_code = 1;
    int death_signal = 0;       // the first death signal (0: none)
    bool agent_failed = false;  // fail_agent() was called
  };
  static constexpr std::chrono::milliseconds kLeaveBudget{500};

  LaunchConfig config_;
  EnvLookup env_;
  std::shared_ptr<spdlog::logger> log_;
  boost::asio::io_context io_;
  std::unique_ptr<SignalWatch> signals_;  // made in run(): handlers are installed from then on
  EventLog events_;
  ConsoleSink console_;   // before group_: its tee streams write into it
  WorkerStoreSite site_;  // the workers' store, where it is published, and whether it is the static rendezvous'
  std::shared_ptr<rdzv::Handler> rdzv_;  // called on the helper thread only (run_id/backend are constant)
  std::unique_ptr<LogLayout> layout_;
  std::unique_ptr<WorkerGroup> group_;           // made in run(), once the store is open
  std::unique_ptr<FileTimerServer> file_timer_;  // torchrun's worker watchdog, when asked for (uses group_)
  std::unique_ptr<HangSupervisor> hang_;
  Liveness liveness_;                              // only with /healthz or a health check port
  std::unique_ptr<AgentMetrics> metrics_;          // watches group_ and hang_: before any deliver()
  std::unique_ptr<JobStatus> status_;              // after hang_: its routes call into it
  std::unique_ptr<CheckpointKeeper> checkpoints_;  // the job's snapshots go with it
  std::unique_ptr<Rounds> rounds_;
  ProgressCount progress_;  // --stop-without-progress
  Restarts restarts_;
  AttemptFacts attempt_;
  RoundEnds ends_;
  Outcome outcome_;
  AgentState state_ = AgentState::kInitialising;
  // The helper thread for blocking calls. Last member: destroyed (joined) first, while everything its tasks use
  // still exists.
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
